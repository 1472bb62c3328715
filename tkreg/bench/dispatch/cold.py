"""A cold process with a warm cache: the tuned signatures called in a new process, which must make
no timing call; each one's first call against a warm call of the same shape, and the same for
torch's own calls of it, and against torch's own call made at the same point of the sequence."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ...core.loading import default_registry
from ...report.dispatch_record import misses_torch_also_over_2x
from ..calls import Signature, make_inputs, peer_call, say
from .picks import TimingCalls, chosen_labels

WARM_CALLS = 10  # per shape, after its first call: their median is the warm call
MODEL_WORK_CALLS = 3  # calls of the previous shape right before each first call (_model_work)


# The cold processes, in order: (warmed, torch_here, torch_after_tkreg); see cold_calls
COLD_PROCESSES = ((False, False, False), (True, False, False), (False, True, False), (False, True, True))


def cold_process(signatures: Sequence[Signature], timeout_s: float) -> list[dict[str, Any]]:
    """Four new processes over this one's cache: one calls each signature as a model would, one
    calls tkreg.ops.warm() first, as a server would at start-up, and two make the first one's
    calls with torch's own call of each shape right before tkreg's first call, timed, which the
    first one's rows are given (:func:`same_point`): after torch's own calls of the previous
    shape, as a model of torch's alone makes them, and after tkreg.ops' calls of it, the work
    tkreg's first call comes after."""
    if not signatures:
        return []
    if timeout_s <= 0:  # said, not left out: a record without the cold processes says why
        late = "not run: the suite's time budget had too little left for it"
        return [{"check": "cold", "warmed": warmed, "error": late} for warmed in (False, True)]
    from ...ops import remembered

    remembered.flush()  # what this process remembers, written now as its exit would
    payload = json.dumps([[s.op, list(s.dims), s.dtype, s.variant] for s in signatures])
    rows: list[dict[str, Any]] = []
    plain: list[dict[str, Any]] = []
    each_s = timeout_s / len(COLD_PROCESSES)
    for warmed, torch_here, after_tkreg in COLD_PROCESSES:
        code = ("import sys, json; from tkreg.bench.dispatch.cold import cold_calls; print(json.dumps(cold_calls("
                f"sys.argv[1], warmed={warmed}, torch_here={torch_here}, torch_after_tkreg={after_tkreg})))")  # fmt: skip
        try:
            done = subprocess.run([sys.executable, "-c", code, payload], capture_output=True, text=True, timeout=each_s)
            failed = done.stderr.strip()[-500:] if done.returncode != 0 else None
        except subprocess.TimeoutExpired:
            failed = f"the cold process did not finish within {each_s:.0f} s"
        if failed is not None:
            if torch_here:  # its rows only add to the first process's: said, and those rows go without
                say(f"  cold, torch's calls at the same points gave nothing: {failed}")
            else:
                rows.append({"check": "cold", "warmed": warmed, "error": failed})
            continue
        got = json.loads(done.stdout.strip().splitlines()[-1])
        if torch_here:
            same_point(plain, got, after_tkreg)
            continue
        for r in got:
            say(f"  cold{' after warm()' if warmed else ''} {r.get('op')} {r.get('shape')}: first {r.get('first_us')} us, "
                f"warm {r.get('warm_us')} us, timing calls {r.get('timing_calls')}")  # fmt: skip
        if not warmed:
            plain = got
        rows += got
    return rows


@dataclasses.dataclass
class _Shape:
    """One signature of a cold process: its row, its op and inputs, and the calls made of it
    (torch's own, as torch code calls it, and tkreg.ops')."""

    row: dict[str, Any]
    op: str
    inputs: tuple[Any, ...]
    call: Callable[[], Any]  # tkreg.ops.<op> on the inputs
    peer: Callable[[], Any] | None = None  # the peer on them, as torch code calls it (None: the op has none)


def same_point(rows: list[dict[str, Any]], here: Sequence[dict[str, Any]], after_tkreg: bool = False) -> None:
    """Give each row of the process calling shapes as a model would torch's own call of its shape
    made at the same point of the same sequence in a process of its own (``here``, from
    ``cold_calls(torch_here=True)``), as ``torch_at_same_point_us`` (its host part too), and that
    process's tkreg first call right after it and warm call; with ``after_tkreg`` (``here`` made
    torch's call after tkreg.ops' calls of the previous shape), as
    ``torch_after_tkreg_at_same_point_us`` alone. Rows of another shape than the one at their
    position get none."""

    def signature(row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(row.get(name) for name in ("op", "shape", "dtype", "variant"))

    for row, other in zip(rows, here):
        if signature(row) != signature(other) or "torch_here_us" not in other:
            continue
        if after_tkreg:
            row["torch_after_tkreg_at_same_point_us"] = other["torch_here_us"]
            row["torch_after_tkreg_at_same_point_host_us"] = other.get("torch_here_host_us")
        else:
            row["torch_at_same_point_us"] = other["torch_here_us"]
            row["torch_at_same_point_host_us"] = other.get("torch_here_host_us")
            row["torch_at_same_point_after"] = other.get("torch_here_after")  # "peer": after torch's calls
            # that process's tkreg first call, right after torch's: the same point, the same process
            row["first_after_torch_at_same_point_us"] = other.get("first_us")
            row["warm_in_same_point_process_us"] = other.get("warm_us")


def cold_calls(payload: str, warmed: bool = False, torch_here: bool = False,
               torch_after_tkreg: bool = False) -> list[dict[str, Any]]:
    """In a new process: each signature's first call and a warm call (each synchronized), and how
    many times tuning timed anything. Every signature's inputs are made first, as a model's
    weights are (made instead just before each shape's calls, they changed no first call's
    allocations from the driver in a probe, on an H200, 2026-12-02), and each first call counts
    those (``device_allocs``). Then, in a pass of its own, the peer's own first and warm calls of
    every signature: what torch itself pays the first time it sees a shape (cuBLAS picks
    its algorithm, a kernel loads) is then paid, and measured, apart from tkreg's own first-call
    work. Then tkreg's, each first call right after calls of the previous signature
    (:func:`_model_work`; in both passes), as a model's calls follow each other, and not right
    after torch's first call of the same shape,
    whose milliseconds of loading leave the host slow for whatever is called next (a probe on an
    H200, 2026-12-02: a warm torch.add of 8 elements took 2-3x its time in a run of calls right
    after torch's first call of a matmul or a row sum, and tkreg's first call after it was no
    faster). What explain says of each is asked after all the timed calls: its work between two
    shapes' calls slowed the next first call more than torch's first call had.
    With ``warmed``, tkreg.ops.warm() runs first (its seconds go in each row, apart from installing
    tkreg.ops, ``install_s``); without, the first row says what the process's first call
    preloaded. With ``torch_here``, the same sequence, but right before each tkreg first call one
    call of torch's own of the shape, timed (``torch_here_us``), made after torch's own calls of
    the previous shape where it has them (``torch_here_after``): what torch code pays at that
    point, its first call of the shape since the first pass, after the same work (a probe on an
    H200, 2026-12-02: a product the peer runs, 431x3072x4352, took torch.matmul itself 150-172 us
    of host time there, against 15-29 for a warm call, and tkreg's first call after it 24-31; without it,
    tkreg's first call took the 124-172). With ``torch_after_tkreg`` too, torch's call follows
    tkreg.ops' calls of the previous shape instead (``torch_here_after`` "tkreg"): the work
    tkreg's own first call follows. Nothing else is timed in that process."""
    from ... import ops

    counted = TimingCalls().start()  # for the process's life: it ends when its calls do
    registry = default_registry()
    signatures = json.loads(payload)
    started = time.perf_counter()
    if signatures:  # installs tkreg.ops (plugins, torch operators): apart from warm(), which would pay it
        ops.get(signatures[0][0])
    install_s = round(time.perf_counter() - started, 3)
    warm_s = None
    warmed_counts = None
    if warmed:
        started = time.perf_counter()
        warmed_counts = ops.warm()
        warm_s = round(time.perf_counter() - started, 3)
    shapes = []
    for op_name, dims, dtype, variant in signatures:  # every shape's inputs, as a model's weights, made first
        sig = Signature.of(op_name, dict(dims), dtype, variant)
        row: dict[str, Any] = {"check": "cold", "warmed": warmed, "op": op_name, "shape": sig.shape, "dtype": dtype,
                               "variant": variant, "install_s": install_s, "peers_first": True, "inputs_first": True,
                               "model_work_calls": MODEL_WORK_CALLS}  # fmt: skip
        if warm_s is not None:
            row.update(warm_s=warm_s, warmed_signatures=(warmed_counts or {}).get(op_name, 0))
        inputs = make_inputs(registry, sig, seed=2)
        shapes.append(_Shape(row, op_name, inputs, functools.partial(ops.get(op_name), *inputs)))
    previous_peer = None
    for shape in shapes:  # torch's own first calls, every shape's
        shape.peer = peer_call(registry.op(shape.op), shape.inputs, None)  # as torch code calls it
        if shape.peer is not None:
            allocs = _device_allocs()
            if previous_peer is not None:
                _model_work(previous_peer)
            timed = _first_and_warm(shape.peer)
            previous_peer = shape.peer
            shape.row.update(torch_first_us=round(timed.first, 1), torch_warm_us=round(timed.warm, 1),
                             torch_first_host_us=round(timed.first_host, 1), torch_warm_host_us=round(timed.warm_host, 1),
                             torch_device_allocs=_device_allocs() - allocs)  # fmt: skip
    for previous, shape in zip([None, *shapes], shapes):  # then tkreg's, one shape after another
        plans = ops._installed["dispatchers"][shape.op]._plans
        before, planned_before, allocs = counted.n, len(plans), _device_allocs()
        here = torch_here and shape.peer is not None
        # torch's own call follows torch's calls of the previous shape, as in a model of torch's
        # alone: after tkreg.ops' calls, whose C++ path leaves torch's own code unrun, a warm
        # torch call cost 1.5-8 us more host time (a probe on an H200, 2026-12-04); or, with
        # torch_after_tkreg, tkreg.ops' calls of it: the work tkreg's own first call follows
        after_peer = here and previous is not None and previous.peer is not None and not torch_after_tkreg
        if previous is not None:
            _model_work(previous.peer if after_peer else previous.call)
        if here:
            total, host = _split(shape.peer)
            shape.row.update(torch_here_us=round(total, 1), torch_here_host_us=round(host, 1),
                             torch_here_after="peer" if after_peer else "tkreg" if previous is not None else None)
        timed = _first_and_warm(shape.call)
        shape.row.update(first_us=round(timed.first, 1), warm_us=round(timed.warm, 1), warm_over_2x=timed.warm_over_2x,
                         warm_calls=WARM_CALLS, first_host_us=round(timed.first_host, 1),
                         warm_host_us=round(timed.warm_host, 1), timing_calls=counted.n - before,
                         planned=len(plans) > planned_before, device_allocs=_device_allocs() - allocs)  # fmt: skip
    rows = [shape.row for shape in shapes]
    if torch_here:
        return rows
    for previous, shape in itertools.pairwise(shapes):  # warm calls made after the work each first call came after
        shape.row["warm_after_same_work_us"] = round(_timed_after(shape.call, previous.call), 1)
        if shape.peer is not None and previous.peer is not None:
            shape.row["torch_warm_after_same_work_us"] = round(_timed_after(shape.peer, previous.peer), 1)
    for shape in shapes:  # explain's work last: none of it between timed calls
        shape.row.update(source=_source(shape.op, shape.inputs), runs=chosen_labels(shape.op, shape.inputs)[0])
    if rows and not warmed:
        from ...ops import warming

        rows[0]["preload"] = warming.preloads.get(0)  # paid by this first call of the process
    return rows


def _timed_after(timed: Callable[[], Any], before: Callable[[], Any], calls_before: int = 10, rounds: int = 3) -> float:
    """A warm call made after the same work as a first call: a call made right after other work
    costs more than one of a run of calls (the host's caches and clock; a probe read a warm call
    at 2-3x its back-to-back time right after other calls, on an H100). The median over
    ``rounds`` (us) of one synchronized call of ``timed``, right after ``calls_before`` of
    ``before``'s, as each first call came right after the previous shape's warm calls."""
    times = []
    for _ in range(rounds):
        for _ in range(calls_before):
            before()
        times.append(_once(timed))
    return statistics.median(times)


def _model_work(previous: Callable[[], Any], calls: int = MODEL_WORK_CALLS) -> None:
    """What each first call comes right after: ``calls`` calls of the previous shape, as a model's
    calls follow each other, made after the allocator's counts are read (:func:`_device_allocs`
    builds hundreds of Python objects: right before a first call it slowed it, a probe on an H200,
    2026-12-04: the suite's cold first calls read within 2x of a warm call on 50-52 of 57 shapes
    with the counts read right before, 52-55 without). Those calls allocate nothing new: their
    outputs' blocks are the pool's since their own warm calls."""
    for _ in range(calls):
        previous()


def _device_allocs() -> int:
    """How many blocks torch's caching allocator has taken from the driver in this process: a
    call that grows the pool also pays the driver's allocation, whoever makes it."""
    import torch

    return int(torch.cuda.memory_stats().get("num_device_alloc", 0))


class _Timed(NamedTuple):
    """A call's first time and its warm calls' (us): the whole call, synchronized, and the host's
    part of it, to the call's return (the rest is the GPU's, or the host waiting on it)."""

    first: float
    warm: float  # the median of the warm calls
    warm_over_2x: int  # warm calls that took over twice the median
    first_host: float
    warm_host: float  # the median of the warm calls' host parts


def _first_and_warm(call: Callable[[], Any], warm_calls: int = WARM_CALLS) -> _Timed:
    """A call's first time and the median of ``warm_calls`` more, each synchronized, with their
    host parts, and how many of those warm calls took over twice their median: the first call is
    one sample, and a warm call sampled once misses 2x at some rate too, which says how much of
    the first calls' misses the host's jitter alone accounts for."""
    times = [_split(call) for _ in range(warm_calls + 1)]
    warm = statistics.median(total for total, _ in times[1:])
    warm_host = statistics.median(host for _, host in times[1:])
    return _Timed(times[0][0], warm, sum(total > 2 * warm for total, _ in times[1:]), times[0][1], warm_host)


def _once(call: Callable[[], Any]) -> float:
    """One call, synchronized before and after (us)."""
    return _split(call)[0]


def _split(call: Callable[[], Any]) -> tuple[float, float]:
    """One call, synchronized before and after, and the host's part of it, to its return (us)."""
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    call()
    returned = time.perf_counter()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e6, (returned - start) * 1e6


def _source(op: str, inputs: tuple[Any, ...]) -> str:
    from ... import ops

    text = ops.explain(op, *inputs)
    for source in ("from the tuning cache", "timed in this process", "prior"):
        if source in text:
            return source
    return "nothing to choose"


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The cold processes' first calls against warm calls (prefix ``cold``, and ``cold_warmed``
    after tkreg.ops.warm()): within 2x of a call back to back and of one after the same work,
    timing calls made, what the first call preloaded, and torch's own first calls alike."""
    got: dict[str, Any] = {}
    for warmed in (False, True):
        cold = [r for r in rows if r.get("check") == "cold" and r.get("warmed") is warmed and "first_us" in r]
        if cold:
            ratios = sorted(r["first_us"] / r["warm_us"] for r in cold)
            prefix = "cold_warmed" if warmed else "cold"
            got[f"{prefix}_first_over_warm_median"] = round(statistics.median(ratios), 2)
            got[f"{prefix}_within_2x"] = sum(x <= 2.0 for x in ratios)
            got[f"{prefix}_calls"] = len(ratios)
            got[f"{prefix}_timing_calls"] = sum(r.get("timing_calls", 0) for r in cold)
            sampled = [r for r in cold if "warm_over_2x" in r]
            if sampled:  # the base rate: warm calls, each one sample, over 2x their own median
                got[f"{prefix}_warm_samples_over_2x"] = sum(r["warm_over_2x"] for r in sampled)
                got[f"{prefix}_warm_samples"] = sum(r["warm_calls"] for r in sampled)
            preloaded = [r["preload"] for r in cold if r.get("preload")]
            if preloaded:  # what the process's first call loaded ahead (tkreg.ops.warming.preload)
                got[f"{prefix}_preload"] = preloaded[0]
            # the same test of torch's own first call of each shape, in the pass before tkreg's
            peer_ratios = [r["torch_first_us"] / r["torch_warm_us"] for r in cold if r.get("torch_warm_us")]
            if peer_ratios:
                got[f"{prefix}_torch_within_2x"] = sum(x <= 2.0 for x in peer_ratios)
                got[f"{prefix}_torch_calls"] = len(peer_ratios)
            # against a warm call made after the same work as the first call (see _timed_after)
            after = [r["first_us"] / r["warm_after_same_work_us"] for r in cold if r.get("warm_after_same_work_us")]
            if after:
                got[f"{prefix}_within_2x_after_same_work"] = sum(x <= 2.0 for x in after)
                got[f"{prefix}_calls_after_same_work"] = len(after)
            torch_after = [r["torch_first_us"] / r["torch_warm_after_same_work_us"] for r in cold
                           if r.get("torch_warm_after_same_work_us")]  # fmt: skip
            if torch_after:
                got[f"{prefix}_torch_within_2x_after_same_work"] = sum(x <= 2.0 for x in torch_after)
            got.update(_at_same_point(prefix, cold))
            allocating = [r for r in cold if "device_allocs" in r]
            if allocating:  # first calls that grew the caching allocator's pool (cudaMalloc)
                got[f"{prefix}_first_calls_allocating"] = sum(r["device_allocs"] > 0 for r in allocating)
    return got


def _at_same_point(prefix: str, cold: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """torch's own call of each shape at the point of the sequence where tkreg's first call came
    (see :func:`same_point`), after torch's own calls of the previous shape and after tkreg.ops'
    (``after_tkreg``): within 2x of torch's warm call on how many, and of the first calls over 2x
    a warm call, on how many torch's own call there was over 2x its warm call too."""
    here = [r for r in cold if r.get("torch_warm_us")]
    got: dict[str, Any] = {}
    for key, name in (("torch_at_same_point_us", "at_same_point"),
                      ("torch_after_tkreg_at_same_point_us", "after_tkreg_at_same_point")):  # fmt: skip
        timed = [r for r in here if r.get(key)]
        if not timed:
            continue
        missed, also = misses_torch_also_over_2x(timed, key)
        got.update({f"{prefix}_torch_{name}_calls": len(timed),
                    f"{prefix}_torch_{name}_within_2x": sum(r[key] <= 2 * r["torch_warm_us"] for r in timed),
                    f"{prefix}_misses_torch_{name}_also_over_2x": also, f"{prefix}_misses_{name}": missed})  # fmt: skip
    return got
