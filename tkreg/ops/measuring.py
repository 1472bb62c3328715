"""How tuning times its candidates: per-call time as a model pays it.

Timing is what a model pays per call: back-to-back calls between two CUDA events, launch
included, so a launch-bound call counts its host time. Rounds interleave the candidates, so a
clock change hits them alike, and the median round counts. The leaders (those near the front,
and the peer wherever a kernel leads) then sit again, and each keeps the faster of its two
sittings: a busy host or a clock dip only ever slows a sitting, so a lead must hold twice.
Candidates that tie on that time are then timed on the GPU alone (calls queued behind a sleeping
kernel, so no launch waits for the host), and the tie goes to the least host and GPU time
together: where every candidate is launch-bound, wall time cannot tell their kernels apart.

A call captured in a CUDA graph costs what its replay costs the GPU: a replay launches no Python.
Where a candidate is launch-bound (its host time near its wall time, so its kernel's time is
hidden), every candidate is also captured in a CUDA graph and its replays timed, and the fastest
replayed is the bucket's choice for captured calls (``Choice.graphed``) where it is not the eager
choice by more than the tie. A candidate that cannot be captured is never that choice.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

PEER = "peer"  # the candidate name of the op's peer (the peer sits again wherever a kernel leads)
TARGET_ROUND_MS = 2.0  # device time each candidate spends per round, so short calls repeat enough
ROUNDS = 7
MAX_CALLS_PER_ROUND = 400
# Calls a round's size is worked out from, after the first two (the load, the recording). Sized
# from the recording call instead, a replayed kernel's rounds held too few calls for their
# synchronize and first launch not to count: an H100 read a 15 us call at 33-41 us (2026-11-27).
ESTIMATE_CALLS = 4
# Calls whose median is within this of the fastest sit again (as many rounds): the dispatch suite
# found choices 3-8% off the fastest where the tuner's rounds had read them within its tie. Where a
# kernel leads, the peer sits again too, however far behind it read: in one H100 run (2026-11-28)
# the first sitting read torch.matmul 10 us slower than its usual self at 16x4096x14336 (its host
# queued each call in 38 us, not the usual 20), the kernel took the bucket, and a 16-token MLP
# block then ran at 0.93x torch eagerly and 0.85x compiled.
CONTESTED = 0.10
TIE = 0.03  # wall times within 3% of the fastest tie; host and GPU time together break the tie (fastest)
# Rounds of the GPU-alone timing of tied candidates (see fastest).
DEVICE_ROUNDS = 3
# A candidate whose host time per call is at least this share of its wall time is launch-bound:
# its kernel may take far less than the wall time, which is what a CUDA graph's replay pays. On
# an H200 (2026-11-29) tuning read matmul 37x640x7680 at 22.2 us through torch.matmul (host 21.7,
# GPU 7.5) and 22.3 through matmul_triton (host 8.4, GPU 22.1): tied eagerly, 3x apart replayed.
HOST_BOUND = 0.75
# Replays of each candidate's graph timed for the choice of captured calls (the median counts).
REPLAYS = 3


def measure(calls: Mapping[str, Callable[[], Any]], budget: float, clock: Any = None, round_ms: float = TARGET_ROUND_MS,
            rounds: int = ROUNDS, host: dict[str, float] | None = None,
            sits_again: Collection[str] = (), device: dict[str, float] | None = None,
            replayed: dict[str, float | str] | None = None,
            per_round: dict[str, list[float]] | None = None) -> dict[str, float | str]:
    """Per-call time (us) of each call as a model pays it, or why it was not timed. ``clock``
    (tests swap it) times ``n`` back-to-back calls in ms; by default CUDA events on the current
    stream, and then also the host's own time to queue them, which goes into ``host`` (us per
    call). Each call is made twice untimed (a first call loads, a replayable kernel's second is
    recorded), then ``ESTIMATE_CALLS`` times to size its rounds. Each round runs a call for about
    ``round_ms``, in an order that reverses from round to round; a sitting is ``rounds`` rounds,
    and its median round counts. The leaders (:func:`_leaders`) then sit again (budget
    permitting), and each keeps the faster of its two sittings, with that sitting's host time.
    ``sits_again``: calls that sit again with the leaders however far behind they read (a
    benchmark's subject, judged against the fastest: each then keeps its better sitting alike).
    ``device``: where given and the clock can time a call on the GPU alone (``clock.alone``, as
    the default clock can: :meth:`CudaClock.alone`), the GPU time per call (us) of the calls that
    then tie within TIE, budget permitting. ``replayed``: where given, the clock can capture a
    call in a CUDA graph (``clock.capture``, as :meth:`CudaClock.capture`) and one call is
    launch-bound (host time at least HOST_BOUND of its wall time), each call's time per call
    replayed from a graph (us; a string: why it could not be captured), budget permitting
    (:func:`fastest_replayed`). ``per_round``: where given, each call's per-call wall time (us) in
    each round of the first sitting, in round order: entry ``i`` of every call comes from the same
    round, so two calls' ratios round by round show how far the host's noise moves them."""
    clock = clock or _cuda_clock
    device_clock = getattr(clock, "alone", None)
    started = time.monotonic()
    times: dict[str, float | str] = {}
    plans: dict[str, int] = {}
    for name, call in calls.items():
        if time.monotonic() - started > budget:
            times[name] = f"not timed: the tuning budget of {budget:g} s ran out"
            continue
        try:
            clock(call, 1)  # compiles, loads, plans: not part of any later call
            clock(call, 1)  # a replayable kernel's second call is recorded: slower than any later one
            single_ms = _wall_ms(clock(call, ESTIMATE_CALLS)) / ESTIMATE_CALLS
        except Exception as e:  # a candidate that fails here is not a candidate
            times[name] = f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            continue
        plans[name] = max(1, min(MAX_CALLS_PER_ROUND, int(round_ms / max(single_ms, 1e-4))))
    wall, queue = _sitting(calls, list(plans.items()), rounds, clock, per_round)
    leaders = _leaders(wall)
    leaders += [name for name in sits_again if name in wall and name not in leaders]
    if len(leaders) > 1 and time.monotonic() - started <= budget:
        again, again_queue = _sitting(calls, [(name, plans[name]) for name in leaders], rounds, clock)
        for name, value in again.items():
            if value < wall[name]:  # the faster sitting is the one nothing held back
                wall[name] = value
                if name in again_queue:
                    queue[name] = again_queue[name]
    times.update(wall)
    if host is not None:
        host.update(queue)
    tied = _tied(wall, queue)
    if device is not None and device_clock is not None and len(tied) > 1 and time.monotonic() - started <= budget:
        device.update(_gpu_times(calls, [(name, plans[name], wall[name]) for name in tied], device_clock))
    capture = getattr(clock, "capture", None)
    launch_bound = any(queue.get(name, 0.0) >= HOST_BOUND * value for name, value in wall.items())
    if replayed is not None and capture is not None and launch_bound and time.monotonic() - started <= budget:
        replayed.update(replay_times(calls, [(name, plans[name]) for name in sorted(wall, key=wall.__getitem__)], capture))
    return times


def replay_times(calls: Mapping[str, Callable[[], Any]], order: list[tuple[str, int]],
                 capture: Callable[[Callable[[], Any], int], Callable[[], float]],
                 replays: int = REPLAYS) -> dict[str, float | str]:
    """Time per call (us) of each of ``order`` ((name, calls per graph)) replayed from a CUDA graph
    it was captured in (``capture``: :meth:`CudaClock.capture`): the median of ``replays``
    replays, in an order that reverses from round to round; or why it could not be captured."""
    got: dict[str, float | str] = {}
    graphs: list[tuple[str, int, Callable[[], float]]] = []
    for name, n in order:
        try:
            graphs.append((name, n, capture(calls[name], n)))
        except Exception as e:  # not capturable: never the choice for captured calls
            got[name] = f"not captured: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    taken: dict[str, list[float]] = {name: [] for name, _, _ in graphs}
    for _ in range(replays):
        for name, n, replay in graphs:
            taken[name].append(replay() / n * 1e3)
        graphs.reverse()
    got.update({name: statistics.median(values) for name, values in taken.items()})
    return got


def _gpu_times(calls: Mapping[str, Callable[[], Any]], order: list[tuple[str, int, float]],
               device_clock: Any) -> dict[str, float]:
    """The GPU time per call (us) of each of ``order`` ((name, calls per reading, wall time per
    call in us)): the median of DEVICE_ROUNDS readings in an order that reverses from round to
    round; left out where a reading failed (the clock gave None: the host could not queue the
    calls ahead of the GPU)."""
    taken: dict[str, list[float]] = {name: [] for name, _, _ in order}
    for _ in range(DEVICE_ROUNDS):
        for name, n, wall_us in order:
            got = device_clock(calls[name], n, 1.3e-3 * wall_us * n + 0.1)  # the host queues them in less than their wall time
            if got is not None:
                taken[name].append(got / n * 1e3)
        order.reverse()
    return {name: statistics.median(values) for name, values in taken.items() if len(values) == DEVICE_ROUNDS}


def _leaders(medians: Mapping[str, float]) -> list[str]:
    """Who sits again: the calls within CONTESTED of the fastest, and the peer where a kernel is
    the fastest, in the order given. A lone leader with no peer behind it sits once."""
    leaders = _within(medians, CONTESTED)
    if PEER in medians and PEER not in leaders:
        leaders.append(PEER)
    return leaders


def _sitting(calls: Mapping[str, Callable[[], Any]], order: list[tuple[str, int]], rounds: int,
             clock: Any, per_round: dict[str, list[float]] | None = None) -> tuple[dict[str, float], dict[str, float]]:
    """``rounds`` rounds of ``order`` ((name, calls per round)), in an order that reverses from
    round to round: each call's median per-call wall time, and its median host time where the
    clock gives one (us). ``per_round`` (where given) gets each call's time in every round."""
    taken: dict[str, list[float]] = {name: [] for name, _ in order}
    queued: dict[str, list[float]] = {name: [] for name, _ in order}
    for _ in range(rounds):
        for name, n in order:
            got = clock(calls[name], n)
            taken[name].append(_wall_ms(got) / n * 1e3)
            if isinstance(got, tuple):
                queued[name].append(got[1] / n * 1e3)
        order.reverse()  # each call goes first as often as last: what a round's start costs hits them alike
    if per_round is not None:
        per_round.update(taken)
    return ({name: statistics.median(values) for name, values in taken.items()},
            {name: statistics.median(values) for name, values in queued.items() if values})


def _tied(wall: Mapping[str, float], host: Mapping[str, float] | None = None,
          device: Mapping[str, float] | None = None) -> list[str]:
    """The candidates that tie: wall times within TIE of the fastest's; and where the fastest is
    launch-bound (host time at least HOST_BOUND of its wall time), every launch-bound candidate
    within CONTESTED of it whose host time is within TIE of the least such host time (with
    ``device``, only those it gives a GPU time). Such calls' wall times are their host's, and
    differ by the host's noise: on an H200 (2026-11-30) tuning read four row sums of 4922x356 at
    9.3-9.7 us, host 9.2-9.4; the tie took `sum_row` (9.3 us, GPU 5.4) over `sum_row_tiled` (9.7,
    4.3% behind), which the dispatch suite, its host queueing calls faster, then read at 6.51 us
    against `sum_row`'s 8.11."""
    tied = _within(wall, TIE)
    if not host or not wall:
        return tied
    best = min(wall, key=wall.__getitem__)
    if host.get(best, 0.0) < HOST_BOUND * wall[best]:
        return tied
    bound = {k: host[k] for k in _within(wall, CONTESTED) if host.get(k, 0.0) >= HOST_BOUND * wall[k]}
    return tied + [k for k in _within(bound, TIE) if k not in tied and (device is None or k in device)]


def _within(times: Mapping[str, float], band: float) -> list[str]:
    """The names whose time is within ``band`` (a fraction) of the least, in the order given."""
    if not times:
        return []
    best = min(times.values())
    return [name for name, value in times.items() if value <= best * (1 + band)]


def _wall_ms(got: float | tuple[float, float]) -> float:
    return got[0] if isinstance(got, tuple) else got


# One capture at a time in a process: torch keeps a capture's bookkeeping (the CUDA generators'
# capture state, the caching allocator's) per process, and two threads capturing at once fail
# ("operation not permitted when stream is capturing", "Offset increment outside graph capture").
# Reentrant, though a capture never tunes (tkreg.ops.capturing).
_CAPTURING = threading.RLock()


class CudaClock:
    """The default clock of :func:`measure`, on CUDA events of the current stream."""

    sleep_cycles_per_ms = 2.0e6  # a first guess (a 2 GHz SM clock), corrected by every reading

    def __init__(self) -> None:
        self._sleep_loaded: set[int] = set()  # the devices whose sleep kernel has run
        # per device, the stream calls are captured on; used only under _CAPTURING, so no thread
        # enqueues on (or waits on) it while another captures there
        self._streams: dict[int, Any] = {}

    def __call__(self, call: Callable[[], Any], n: int) -> tuple[float, float]:
        """(ms from the first call's start to the last one's end on the GPU, ms the host took to
        queue them)."""
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        queued_ms = _queue(call, n, start)
        end.record()
        end.synchronize()
        return start.elapsed_time(end), queued_ms

    def alone(self, call: Callable[[], Any], n: int, hold_ms: float, attempts: int = 3) -> float | None:
        """ms the GPU takes for ``n`` back-to-back calls with none waiting for the host: a
        sleeping kernel holds the stream (``hold_ms`` at first) while the host queues them, and
        CUDA events time them from the sleep's end. A reading counts only where the sleep still
        held the stream once the host had queued every call (the event after it not reached);
        else (a call waits for the host: a synchronize, a host read) it holds for twice the
        host's queueing time and tries again, ``attempts`` times in all, then gives None."""
        import torch

        sleep = getattr(torch.cuda, "_sleep", None)
        if sleep is None:
            return None
        slept, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        device = torch.cuda.current_device()
        if device not in self._sleep_loaded:
            # the sleep kernel's first launch on a device loads it: the host pauses between
            # ``slept`` and the sleep, which would read as sleeping time
            sleep(1)
            self._sleep_loaded.add(device)
        for _ in range(attempts):
            cycles = int(self.sleep_cycles_per_ms * hold_ms)
            torch.cuda.synchronize()
            slept.record()
            sleep(cycles)
            queued_ms = _queue(call, n, start)
            held = not start.query()  # the sleep still runs: every call is queued behind it
            end.record()
            end.synchronize()
            held_ms = slept.elapsed_time(start)
            if held_ms > 0:
                self.sleep_cycles_per_ms = cycles / held_ms
            if held:
                return start.elapsed_time(end)
            hold_ms = 2.0 * queued_ms + 0.1
        return None

    def capture(self, call: Callable[[], Any], n: int, own: bool = True) -> Callable[[], float]:
        """``n`` calls captured in a CUDA graph (on a stream of the clock's own, after a call there,
        as torch asks before a capture; an error stops only this thread's work); returns a
        replay, which gives the ms from its start to its end on the GPU. Raises where the calls
        cannot be captured. ``own``: the capture is tkreg's own, and switches no plan
        (:func:`tkreg.ops.capturing.quiet`); else tkreg.ops' calls in it run as in a model's."""
        import torch

        from .capturing import quiet

        device = torch.cuda.current_device()
        graph = torch.cuda.CUDAGraph()
        switches = quiet() if own else contextlib.nullcontext()
        with _CAPTURING:
            stream = self._streams.get(device)
            if stream is None:
                stream = self._streams[device] = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                call()
            torch.cuda.current_stream().wait_stream(stream)
            with switches, torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
                for _ in range(n):
                    call()

        def replay() -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)

        return replay


def _queue(call: Callable[[], Any], n: int, start: Any) -> float:
    """Record ``start``, then make ``n`` calls; returns the ms the host took to queue them."""
    start.record()
    began = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - began) * 1e3


_cuda_clock = CudaClock()


def fastest(times: Mapping[str, float | str], host: Mapping[str, float] | None = None,
            device: Mapping[str, float] | None = None) -> str | None:
    """The candidate with the least wall time per call, the acceptance measure of a choice. Those
    within TIE of it tie. Where ``host`` gives each one's own time to queue a call and ``device``
    its GPU time, the one with the least of the two together wins the tie, else the one that
    keeps the host least busy, else the least wall time:

    - a launcher that queues for as long as its kernel runs wins back-to-back timing by a hair,
      then starves the GPU between a model's other calls (on an H100, 2026-11-25, a Gluon matmul
      whose launch queued in 48 us won a 16-token Llama MLP block's products by noise; the block
      then ran at 0.80x torch eagerly and 0.54x compiled);
    - where every candidate is launch-bound, their wall times are their host's and tie, and the
      GPU time tells their kernels apart: on an H200 (2026-11-29) tuning read four row sums of
      2319x3611 at 9.2-9.5 us with 8.9-9.1 us of host time, the host tie-break took one whose
      kernel runs 9.3 us against the others' 6.7, and the dispatch suite, whose host queued the
      calls in 6.8 us, then read it at 0.73 of the fastest;
    - for the same reason, where GPU times are given, a launch-bound candidate whose host time ties
      joins the tie though its wall time reads up to CONTESTED slower (:func:`_tied`).

    A lead beyond TIE is otherwise kept whatever the host time: the wall time of calls queued back
    to back already counts the host where it is what holds a call back."""
    timed = {k: v for k, v in times.items() if isinstance(v, float)}
    if not timed:
        return None
    if host and device:
        both = _tied(timed, host, device)
        if all(k in host and k in device for k in both):
            return min(both, key=lambda k: (host[k] + device[k], timed[k]))
    tied = _within(timed, TIE)
    if host and all(k in host for k in tied):
        return min(tied, key=lambda k: (host[k], timed[k]))
    return min(tied, key=lambda k: timed[k])


def fastest_replayed(replayed: Mapping[str, float | str], winner: str) -> str | None:
    """What a call captured in a CUDA graph should run: the fastest replayed (:func:`measure` with
    ``replayed``); the winner wherever it is within TIE of that (a replay gains nothing by running
    another). None where nothing was replayed."""
    timed = {k: v for k, v in replayed.items() if isinstance(v, float)}
    if not timed:
        return None
    tied = _within(timed, TIE)
    return winner if winner in tied else min(tied, key=timed.__getitem__)
