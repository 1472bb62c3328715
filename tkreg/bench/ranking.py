"""The ``ranking`` suite: what tkreg.ops' wall-time ranking (tkreg.ops.walltime) reads, measured on
this GPU: per input signature, every registered kernel that takes the inputs and the op's peer.

Signatures: every op's benchmark cases (no layout variant) in its benchmark dtypes, plus the
cases it puts in the "ranking" set (in their layouts): the shapes between and below the benchmarks
that calls from a model meet. Each candidate is called as tkreg.ops calls it (a kernel's launches
replayed where it declares replay, the peer as torch code calls it), allocating its outputs, so
the host time is what a call through tkreg.ops pays. Per candidate:

- ``wall_us``: triton.testing.do_bench's median, L2 flushed, launcher included;
- ``device_us``: tkreg.testing.timing.DeviceTimer.queue (L2 flushed, CUPTI's span of the call),
  median of DEVICE_REPS, with the warm-up replaced by three held single calls;
- ``host_us``: the median per-call time of HOST_CALLS back-to-back calls queued behind a GPU hold.

The file is a tkreg.report.records envelope of kind "ops_ranking" whose ``meta["calls"]`` says how
the candidates were called (tkreg.ops.walltime ranks by the cost per queued call where it is
CALLS). An op's plugin ships that op's rows, one file per GPU, in the folder ``Op.measured`` names
(``<device name, lower case, dashes>.json``). A candidate that cannot be timed is named in ``meta``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.loading import default_registry
from ..core.registry import Registry
from ..ops.walltime import CALLS_AS_TKREG as CALLS  # host times are what tkreg.ops pays
from ..ops.walltime import KIND, PEER
from .calls import Signature, kernel_call, make_inputs, peer_call, planned_kernels, say
from .suites import Deadline, Measured

DO_BENCH_WARMUP_MS, DO_BENCH_REP_MS = 5, 25
DEVICE_REPS = 10
HOST_CALLS = 20
HOLD_CYCLES = int(2e6)  # about a millisecond of GPU spin: the timed calls below only queue work


def signatures(registry: Registry) -> list[Signature]:
    """Every covered signature, benchmark cases first, per op."""
    found: list[Signature] = []
    for op in registry.ops():
        cases = [c for c in op.cases_in("bench") if not c.variant]
        cases += [c for c in op.cases_in("ranking") if c not in cases]
        found += [Signature.of(op.name, c.dims, dtype, c.variant) for c in cases for dtype in op.bench_dtypes_of(c)]
    return found


def candidates(registry: Registry, sig: Signature, inputs: tuple[Any, ...]) -> dict[str, Callable[[], Any]]:
    """Each kernel that takes these inputs here, and the peer, called as tkreg.ops calls them:
    a kernel at its launcher's own choice, its launches replayed where it declares replay; the
    peer as torch code calls it. Each call allocates its outputs. Kernels that overwrite an input
    are left out (:func:`planned_kernels`)."""
    op = registry.op(sig.op)
    calls: dict[str, Callable[[], Any]] = {
        kernel.name: kernel_call(op, kernel, kernel.load(), inputs) for kernel in planned_kernels(registry, op, inputs)
    }
    peer = peer_call(op, inputs, None)
    if peer is not None:
        calls[PEER] = peer
    return calls


@dataclass
class Timing:
    wall_us: float
    device_us: float
    host_us: float


def host_us(fn: Callable[[], Any]) -> float:
    """Median host time per call of back-to-back calls, queued behind a hold so the launch queue
    never fills and blocks a call."""
    import torch

    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(HOLD_CYCLES)
    times = []
    for _ in range(HOST_CALLS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def time_call(fn: Callable[[], Any], timer: Any) -> Timing:
    """Wall, device and host time of ``fn`` (already run once). The timer's warm-up is replaced by
    the host time just measured and a device-time estimate from three held single calls."""
    import torch
    import triton.testing

    wall_ms = triton.testing.do_bench(fn, warmup=DO_BENCH_WARMUP_MS, rep=DO_BENCH_REP_MS, return_mode="median")
    host = host_us(fn)
    timer.host_ms = host / 1e3
    timer.estimate_ms = statistics.median(timer.once(fn)[0] for _ in range(3))
    read = timer.queue(fn, DEVICE_REPS)
    torch.cuda.synchronize()
    return Timing(wall_ms * 1e3, statistics.median(read()) * 1e3, host)


def layout_of(registry: Registry, sig: Signature, inputs: tuple[Any, ...]) -> str:
    """The layout class the ranking keys points by (tkreg.ops.forms)."""
    from ..ops.forms import form_for

    return form_for(registry.op(sig.op)).layout(inputs)


def measure(deadline: Deadline) -> Measured:
    import torch

    from ..testing.timing import DeviceTimer

    registry = default_registry()
    timer = DeviceTimer()
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    sigs = signatures(registry)
    say(f"  {len(sigs)} signatures")
    for sig in sigs:
        deadline.check(sig.label)
        inputs = make_inputs(registry, sig)
        layout = layout_of(registry, sig, inputs)
        for name, call in candidates(registry, sig, inputs).items():
            try:
                call()
                torch.cuda.synchronize()
                timing = time_call(call, timer)
            except torch.OutOfMemoryError:
                raise
            except Exception as e:  # recorded: the ranking then has no point for this candidate
                failures.append(f"{sig.label} {name}: {type(e).__name__}: {str(e)[:200]}")
                say(f"  could not time {failures[-1]}")
                continue
            rows.append({"op": sig.op, "impl": name, "dtype": sig.dtype, "dims": dict(sig.dims), "layout": layout,
                         "wall_us": round(timing.wall_us, 3), "device_us": round(timing.device_us, 3),
                         "host_us": round(timing.host_us, 3)})  # fmt: skip
        del inputs
    notes = ("wall: triton.testing.do_bench median (L2 flushed, launcher included); device: "
             "tkreg.testing.timing.DeviceTimer.queue (L2 flushed; CUPTI's span of the call where it traces); host: median "
             "perf_counter per call of back-to-back calls. Each candidate is called as tkreg.ops calls it (a kernel's "
             "launches replayed where it declares replay, the peer as torch code calls it), allocating its outputs.")  # fmt: skip
    say(f"  {len(rows)} candidate-signatures measured, {len(failures)} could not be timed")
    return Measured(kind=KIND, rows=rows, notes=notes, meta={"not_timed": failures, "calls": CALLS})
