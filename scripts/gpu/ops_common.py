"""What ops_measure.py and ops_check.py share: the input signatures they cover, how they build
inputs, and how they time a call (GPU only).

Signatures: every op's benchmark cases in its benchmark dtypes, plus the shapes issue #12 names
(sum_row 100000x300, 1x65536, 32x1048576, 2048x2048; add 1024^2, 4096^2; matmul 128x4096x4096,
1000^3) and 256x256 (256^3 for matmul), the size of the host-overhead table; the extra matmul
shapes also with B the transposed view of a row-major (N, K) weight, as F.linear passes it.

Timing a call ``fn`` (which allocates its output, as a user's call does):
- wall: ``triton.testing.do_bench(fn)`` median, L2 flushed before each call, launcher included;
- device: CUDA events around the call after an L2 flush and a GPU hold long enough for the
  launcher (tkreg.testing.timing.DeviceTimer.queue), so the launch is queued before the GPU gets there;
- host: the median of per-call perf_counter times over back-to-back calls.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

EXTRA_SHAPES: dict[str, list[dict[str, int]]] = {
    "sum_row": [{"M": 100000, "N": 300}, {"M": 1, "N": 65536}, {"M": 32, "N": 1048576}, {"M": 2048, "N": 2048},
                {"M": 256, "N": 256}],
    "add": [{"M": 1024, "N": 1024}, {"M": 4096, "N": 4096}, {"M": 256, "N": 256}],
    "matmul": [{"M": 128, "N": 4096, "K": 4096}, {"M": 1000, "N": 1000, "K": 1000}, {"M": 256, "N": 256, "K": 256}],
}
WEIGHT_LAYOUT_OPS = ("matmul",)  # extra shapes also measured with B = W.t(), W (N, K) row-major
DO_BENCH_WARMUP_MS = 5
DO_BENCH_REP_MS = 25
DEVICE_REPS = 10
HOST_CALLS = 20


@dataclass(frozen=True)
class Signature:
    """One op, input dims, dtype and layout ("" or "weight": B = W.t())."""

    op: str
    dims: tuple[tuple[str, int], ...]
    dtype: str
    layout: str = ""

    @property
    def label(self) -> str:
        shape = "x".join(str(v) for _, v in self.dims)
        return f"{self.op} {shape} {self.dtype}" + (" B=W.t()" if self.layout else "")

    @property
    def size(self) -> int:
        n = 1
        for _, v in self.dims:
            n *= v
        return n


def signatures(registry: Any, ops: list[str] | None = None) -> list[Signature]:
    """Every covered signature, benchmark cases first (the acceptance shapes), per op."""
    found: list[Signature] = []
    for op in registry.ops():
        if ops and op.name not in ops:
            continue
        shapes = [dict(c.dims) for c in op.cases_in("bench") if not c.variant]
        shapes += [s for s in EXTRA_SHAPES.get(op.name, []) if s not in shapes]
        for dims in shapes:
            for dtype in op.bench_dtypes:
                found.append(Signature(op.name, tuple(dims.items()), dtype))
        if op.name in WEIGHT_LAYOUT_OPS:
            for dims in EXTRA_SHAPES.get(op.name, []):
                for dtype in op.bench_dtypes:
                    found.append(Signature(op.name, tuple(dims.items()), dtype, "weight"))
    return found


def make_inputs(registry: Any, sig: Signature, seed: int = 0) -> tuple[Any, ...]:
    """The op's own input factory on the GPU; for the "weight" layout B is re-laid out as the
    transposed view of a row-major (N, K) weight, with the same values."""
    import torch

    import tkreg

    op = registry.op(sig.op)
    generator = torch.Generator(device="cuda").manual_seed(seed)
    inputs = tkreg.core.refs.resolve(op.make_inputs)(tkreg.case(**dict(sig.dims)), getattr(torch, sig.dtype), generator, "cuda")
    if sig.layout == "weight":
        a, b = inputs
        inputs = (a, b.t().contiguous().t())
    return tuple(inputs)


def candidates(registry: Any, sig: Signature, inputs: tuple[Any, ...]) -> dict[str, Callable[[], Any]]:
    """Each kernel that takes these inputs on this GPU, and the peer, as a call with no
    arguments that allocates its output."""
    import tkreg

    op = registry.op(sig.op)
    calls: dict[str, Callable[[], Any]] = {}
    for kernel in registry.lookup(sig.op, inputs=inputs):
        launcher = kernel.load()
        calls[kernel.name] = _bind(launcher, inputs)
    if op.peer is not None:
        peer, make_output = tkreg.core.refs.resolve(op.peer), tkreg.core.refs.resolve(op.make_output)
        calls["peer"] = lambda: peer(*inputs, out=make_output(*inputs))
    return calls


def _bind(launcher: Callable[..., Any], inputs: tuple[Any, ...]) -> Callable[[], Any]:
    return lambda: launcher(*inputs)


@dataclass
class Timing:
    wall_us: float
    device_us: float | None = None
    host_us: float | None = None
    wall_quantiles_us: list[float] = field(default_factory=list)
    device_method: str = ""  # how DeviceTimer ran the call: "graph" (replayed) or "eager"


def wall_us(fn: Callable[[], Any]) -> tuple[float, list[float]]:
    """do_bench median (us), and its 20th/80th percentiles."""
    import triton.testing

    q20, median, q80 = triton.testing.do_bench(fn, warmup=DO_BENCH_WARMUP_MS, rep=DO_BENCH_REP_MS, quantiles=[0.2, 0.5, 0.8])
    return median * 1e3, [q20 * 1e3, q80 * 1e3]


def host_us(fn: Callable[[], Any], calls: int = HOST_CALLS) -> float:
    """Median host time per call of back-to-back calls (the GPU held first, so the launch queue
    never fills and blocks a call)."""
    import torch

    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(int(2e6))  # about a millisecond: the calls below only queue work
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def time_call(fn: Callable[[], Any], timer: Any) -> Timing:
    """wall, device and host time of ``fn`` (already warmed up: compiled and run once).

    Device time comes from tkreg.testing.timing.DeviceTimer.queue (a CUDA graph of the call where it can be
    captured); instead of its warm-up (25 ms of calls) it gets the launcher's host time and a
    device-time estimate from three held single calls (DeviceTimer.once)."""
    import torch

    wall, quantiles = wall_us(fn)
    host = host_us(fn)
    timer.host_ms = host / 1e3
    timer.estimate_ms = statistics.median(timer.once(fn)[0] for _ in range(3))
    read = timer.queue(fn, DEVICE_REPS)
    torch.cuda.synchronize()
    return Timing(wall, statistics.median(read()) * 1e3, host, quantiles, timer.method)


class Deadline:
    """The time left of a script's budget."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def passed(self) -> bool:
        return self.left() <= 0


def say(text: str) -> None:
    print(text, flush=True)


# -- compiling in parallel --------------------------------------------------------------------------
def _warm(sig: Signature) -> list[str]:
    """(worker) Run every candidate once on ``sig``'s inputs, so its compiles land in Triton's
    on-disk cache for the measuring process. Returns the failures, in words."""
    import torch

    import tkreg

    failures = []
    try:
        registry = tkreg.default_registry()
        inputs = make_inputs(registry, sig)
        for name, call in candidates(registry, sig, inputs).items():
            try:
                call()
            except Exception as e:  # reported; the measuring process tries again and records it
                failures.append(f"{sig.label} {name}: {_first_line(e)}")
        torch.cuda.synchronize()
    except Exception as e:  # out of memory, a broken plugin: the measuring process reports it
        failures.append(f"{sig.label}: {_first_line(e)}")
    return failures


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


def warm_up(sigs: list[Signature], workers: int, seconds: float) -> list[str]:
    """Compile what every signature's candidates need in ``workers`` processes (compiling is
    CPU-bound; the GPU machine has cores to spare), largest inputs first so that they are not
    all in memory together; returns the failures. After ``seconds`` the workers are ended (so
    none competes with the measurements for the GPU); the rest compiles while measuring."""
    if workers < 1 or not sigs:
        return []
    import multiprocessing

    failures: list[str] = []
    end = time.monotonic() + seconds
    pool = multiprocessing.get_context("spawn").Pool(workers)
    try:
        results = pool.imap_unordered(_warm, sorted(sigs, key=lambda s: -s.size))
        for _ in sigs:
            try:
                failures.extend(results.next(timeout=max(0.1, end - time.monotonic())))
            except multiprocessing.TimeoutError:
                failures.append(f"warm-up stopped after {seconds:.0f} s; the rest compiles while measuring")
                break
    finally:
        pool.terminate()
        pool.join()
    return failures
