"""Device time of GPU work, and the ceilings throughput is measured against.

Each repetition: the L2 cache is flushed (a buffer several times the L2 size is zeroed), the
GPU is held for HOLD_MS (a spin kernel), then CUDA events bracket the work alone. The
repetitions are queued back to back and read after one synchronization, as
triton.testing.do_bench does. The hold matters for short kernels behind slow launchers: without
it, a launcher whose Python work outlasts the flush (about 85 us on an H100) makes the GPU wait
between the start event and the kernel, and that wait was counted as kernel time (notes/tuning.md,
run 9: 77 us of host work per Gluon add launch). The hold is the same for every workload, so a
kernel and its peer start from the same idle time whatever their launchers cost (a hold scaled to
each launcher gave slow launchers a longer rest before compute-bound kernels: run 10); only a
launcher slower than HOLD_MS / 2 gets a longer one. The figure reported is the median over the
repetitions, after warm-up runs that keep compilation and first-launch costs out.
"""

from __future__ import annotations

import math
import statistics
import time
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
# The hold before each repetition, at least HOLD_FACTOR x the launcher's host time; in GPU cycles
# at HOLD_CLOCK_HZ (at or above an H100's top SM clock, so the hold is never shorter than meant).
HOLD_MS = 0.25
HOLD_FACTOR = 2.0
HOLD_CLOCK_HZ = 2.0e9


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
        self.host_ms = 0.0  # the launcher's host time per call, measured in warmup()

    def flush(self) -> None:
        self._flush.zero_()

    def hold(self) -> None:
        """Keep the GPU busy for HOLD_MS (longer for a launcher slower than HOLD_MS / 2), so the
        next launch is queued before the GPU reaches its start event. (torch.cuda._sleep, a spin
        kernel, is private; where it is missing, short kernels behind slow launchers read long.)"""
        cycles = int(max(HOLD_MS, HOLD_FACTOR * self.host_ms) * 1e-3 * HOLD_CLOCK_HZ)
        sleep = getattr(self._torch.cuda, "_sleep", None)
        if cycles > 0 and sleep is not None:
            sleep(cycles)

    def once(self, fn: Callable[[], Any]) -> tuple[float, float]:
        """(ms of device time, ms of host time) for one call of ``fn`` after an L2 flush."""
        torch = self._torch
        self.flush()
        self.hold()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        fn()
        host = time.perf_counter() - t0
        end.record()
        end.synchronize()
        return start.elapsed_time(end), host * 1e3

    def warmup(self, fn: Callable[[], Any]) -> float:
        """Run until compilation and first-launch costs are behind us; return an estimate (ms)
        and remember the launcher's host time for hold()."""
        fn()
        self._torch.cuda.synchronize()
        times: list[float] = []
        hosts: list[float] = []
        while len(times) < WARMUP_MIN_CALLS or sum(times) < WARMUP_MIN_MS:
            device_ms, host_ms = self.once(fn)
            times.append(device_ms)
            hosts.append(host_ms)
            self.host_ms = statistics.median(hosts)
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
            self.hold()
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
