"""Device time of GPU work, and the ceilings throughput is measured against.

Each repetition: the L2 cache is flushed (a buffer several times the L2 size is zeroed), then
CUDA events bracket the work alone. The repetitions are queued back to back and read after one
synchronization, as triton.testing.do_bench does, so the host's launch work for the next
repetition overlaps the GPU's current one instead of showing up as idle time inside the events.
The figure reported is the median over the repetitions, after warm-up runs that keep
compilation and first-launch costs out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# H100's L2 is 50 MB; flushing 256 MiB evicts everything a previous repetition left there.
L2_FLUSH_BYTES = 256 * 1024 * 1024
WARMUP_MIN_CALLS = 3
WARMUP_MIN_MS = 25.0
TARGET_MEASURE_MS = 400.0  # device time spent on repetitions per measurement
MIN_REPS = 20
MAX_REPS = 500
COPY_CEILING_BYTES = 2 * 1024**3  # 2 GiB source, as in the peer notes
MATMUL_CEILING_SIZE = 8192


class DeviceClock:
    """A clock that advances only by measured device time: pytest-benchmark's timer for tkreg
    items, so its statistics are device-time statistics."""

    __name__ = "tkreg.timing.DeviceClock"

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> float:
        return self.seconds

    def advance(self, ms: float) -> None:
        self.seconds += ms / 1e3


class DeviceTimer:
    def __init__(self) -> None:
        import torch

        self._torch = torch
        self._flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def flush(self) -> None:
        self._flush.zero_()

    def once(self, fn: Callable[[], Any]) -> float:
        """Milliseconds of device time for one call of ``fn`` after an L2 flush."""
        torch = self._torch
        self.flush()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def warmup(self, fn: Callable[[], Any]) -> float:
        """Run until compilation and first-launch costs are behind us; return an estimate (ms)."""
        fn()
        self._torch.cuda.synchronize()
        times: list[float] = []
        while len(times) < WARMUP_MIN_CALLS or sum(times) < WARMUP_MIN_MS:
            times.append(self.once(fn))
            if len(times) >= MAX_REPS:
                break
        return statistics.median(times)

    @staticmethod
    def reps_for(estimate_ms: float) -> int:
        return max(MIN_REPS, min(MAX_REPS, math.ceil(TARGET_MEASURE_MS / max(estimate_ms, 1e-3))))

    def queue(self, fn: Callable[[], Any], reps: int) -> Callable[[], list[float]]:
        """Queue ``reps`` flushed, event-bracketed repetitions without waiting; the returned
        function reads their device times (ms) once the GPU has finished them."""
        torch = self._torch
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for start, end in zip(starts, ends):
            self.flush()
            start.record()
            fn()
            end.record()
        return lambda: [start.elapsed_time(end) for start, end in zip(starts, ends)]

    def measure(self, fn: Callable[[], Any]) -> list[float]:
        """Per-repetition device times (ms), warm-up excluded."""
        read = self.queue(fn, self.reps_for(self.warmup(fn)))
        self._torch.cuda.synchronize()
        return read()


@dataclass(frozen=True)
class Ceilings:
    """Measured on this device in this session."""

    copy_bytes_per_s: float
    matmul_flops_per_s: float
    device: str

    def for_bound(self, bound: str) -> float:
        return self.copy_bytes_per_s if bound == "memory" else self.matmul_flops_per_s


def measure_ceilings(timer: DeviceTimer) -> Ceilings:
    """Copy ceiling: a 2 GiB device-to-device copy, bytes read plus written. Compute ceiling:
    cuBLAS bf16 8192^3 on random data (the best a library reaches here, not the datasheet)."""
    import torch

    n = MATMUL_CEILING_SIZE
    name = torch.cuda.get_device_name()
    return Ceilings(2 * COPY_CEILING_BYTES / (_copy_ms(timer) / 1e3), 2 * n**3 / (_matmul_ms(timer, n) / 1e3), name)


def _copy_ms(timer: DeviceTimer) -> float:
    """Median device time of a COPY_CEILING_BYTES copy (buffers freed on return)."""
    import torch

    src = torch.empty(COPY_CEILING_BYTES // 4, device="cuda").normal_()
    dst = torch.empty_like(src)
    return statistics.median(timer.measure(lambda: dst.copy_(src)))


def _matmul_ms(timer: DeviceTimer, n: int) -> float:
    """Median device time of a bf16 n^3 cuBLAS matmul on random data."""
    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    return statistics.median(timer.measure(lambda: torch.matmul(a, b, out=c)))
