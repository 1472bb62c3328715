"""Device time and wall time of GPU work, and the ceilings throughput is measured against.

Device time (:meth:`DeviceTimer.queue`, :meth:`DeviceTimer.measure`). Each repetition: the L2 cache
is flushed (a buffer several times the L2 size is zeroed), then the call. Repetitions run back to
back and are read after one synchronization, as triton.testing.do_bench does, after warm-up runs
that keep compilation and first-launch costs out; the figure is their median. Where the call can
be captured, every repetition is captured into one CUDA graph, replayed once: the host is out of
the loop, and every workload, a kernel and its peer alike, runs back to back as in production
loops, in do_bench and under CUPTI.

What is read per repetition is CUPTI's span of the call's GPU work, from its first kernel's start
to its last kernel's end (tkreg.testing.cupti, through torch.profiler): the kernel durations Nsight Systems
shows, with the gaps between a call's own kernels included. CUDA events around the work read the
stream instead, which adds the kernel's launch behind the previous kernel (2-6 us on an H100:
cuBLAS bf16 4096^3, 0.17 ms, +3.4%; a 0.35 ms row sum +0.8%; H100, 2026-11-23), whatever their
placement. Tracing is not free either: it slows a few kernels (torch's row sum of 1048576 x 32
fp32: 0.2354 ms under CUPTI, 0.2282 ms by untraced events that include its launch, H100,
2026-11-23; 3.2-3.7% over four runs), which ``tkreg bench timer`` shows beside the others. Events still bracket every
call (their times are ``stream_ms``): they are the device time where CUPTI cannot trace (no
Kineto, another profiler running in the process; ``cupti_error`` says why). Without CUPTI, in the
graph of repetitions, one pair goes around the flush and the call and one around a flush alone,
and the call's time is the first less the median of the second, which cancels the events' own
cost (1.6 us on an H100). Where timing events cannot be captured, a graph of the call is replayed per
repetition (the method until 2026-11-23). Where the call cannot be captured, it is queued itself;
if its launcher is slower than the GPU's share of a repetition, a hold (a spin kernel) before
each batch of repetitions gives the host the head start it needs to queue the whole batch before
the GPU reaches it, so host time lands neither inside the events nor between a call's kernels.

Why not a hold before every repetition (the method of 2026-11-23's earlier runs): it kept the GPU almost idle for 250 us before
each repetition, and compute-bound kernels then read 11-16% faster than do_bench and CUPTI's
kernel durations (cuBLAS bf16 8192x8192x4096: 0.718 ms against 0.807 and 0.851). An idle GPU stays
under its power cap and keeps its top clocks; a GPU working back to back does not.
``tkreg bench timer`` checks this timer against do_bench and CUPTI (notes/tuning.md, "The device
timer", has the clock and power measurements).

Wall time (:meth:`DeviceTimer.queue_wall`, :meth:`DeviceTimer.wall`): the call itself, launcher
included, L2 flushed and CUDA events around each call, calls queued back to back from Python with
no hold: what do_bench reports. A launcher slower than the flush plus its kernel shows up in it.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .cupti import Activity, KernelTrace, TraceError, names, repetitions, span_ms

# H100's L2 is 50 MB; flushing 256 MiB evicts everything a previous repetition left there.
L2_FLUSH_BYTES = 256 * 1024 * 1024
WARMUP_MIN_CALLS = 3
WARMUP_MIN_MS = 25.0
TARGET_MEASURE_MS = 400.0  # device time spent on repetitions per measurement
MIN_REPS = 20
MAX_REPS = 500
COPY_CEILING_BYTES = 2 * 1024**3  # 2 GiB source, as in the peer notes
MATMUL_CEILING_SIZE = 8192
# Warm-up repetitions (estimates only) are held this long, or HOLD_FACTOR x the launcher's host
# time, so a slow launcher's host time stays out of the estimate. Holds are counted in GPU cycles
# at HOLD_CLOCK_HZ, at or above an H100's top SM clock, so a hold is never shorter than meant.
HOLD_MS = 0.25
HOLD_FACTOR = 2.0
HOLD_CLOCK_HZ = 2.0e9
# Measured repetitions are queued in batches; a batch's hold covers the host's deficit over the
# batch with this margin. 50 repetitions are about 200 queue entries (flush, two events, the
# call), well within what the driver queues without blocking the host.
BATCH_REPS = 50
HOLD_SAFETY = 1.5
HOLD_MARGIN_MS = 0.02
# A captured graph that replays in less than this fraction of the call's eager time did not
# capture the work (a launcher that launches on another stream, say): time the call instead.
GRAPH_MIN_FRACTION = 0.5


def batch_holds(reps: int, host_ms: float, device_ms: float, batch: int = BATCH_REPS) -> list[float]:
    """Hold (ms) before each batch of ``reps`` repetitions that each cost the host ``host_ms`` to
    queue and the GPU ``device_ms`` to run, so the host has queued every repetition's work before
    the GPU reaches that repetition's start event.

    The GPU reaches repetition i of a batch hold + i x device after the host starts queueing the
    batch; the host has queued it after (i + 1) x host. So the hold must cover
    max over i of ((i + 1) x host - i x device). A host faster than the GPU stays ahead once ahead:
    only the first batch needs a head start, of one repetition's host time.
    """
    if reps <= 0:
        return []
    batches = math.ceil(reps / batch)
    sizes = [min(batch, reps - b * batch) for b in range(batches)]

    def needed(size: int) -> float:
        deficit = max(host_ms, size * host_ms - (size - 1) * device_ms)
        return HOLD_SAFETY * deficit + HOLD_MARGIN_MS

    if host_ms <= device_ms:
        return [needed(1)] + [0.0] * (batches - 1)
    return [needed(size) for size in sizes]


class DeviceClock:
    """A clock that advances only by measured device time: pytest-benchmark's timer for tkreg
    items, so its statistics are device-time statistics."""

    __name__ = "tkreg.testing.timing.DeviceClock"

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> float:
        return self.seconds

    def advance(self, ms: float) -> None:
        self.seconds += ms / 1e3


class DeviceTimer:
    """Times GPU work on the current CUDA device; see the module docstring for the method.

    Typical use (what tkreg.testing.runners does)::

        estimate = timer.warmup(call)                  # also sets timer.host_ms
        read = timer.queue(call, timer.reps_for(estimate))
        ...                                            # wait for the GPU (with a deadline)
        device_ms = statistics.median(read())
        read_wall = timer.queue_wall(call, timer.reps_for(estimate))
        ...
        wall_ms = statistics.median(read_wall())
        timer.describe()                               # how the device time was measured
    """

    def __init__(
        self,
        *,
        graphs: bool = True,
        graph_of_reps: bool = True,
        flush_in_bracket: bool = True,
        target_ms: float = TARGET_MEASURE_MS,
        warmup_ms: float = WARMUP_MIN_MS,
        cupti: bool = True,
        trace: Callable[[], KernelTrace] = KernelTrace,
    ) -> None:
        import torch

        self._torch = torch
        self._flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        self.graphs = graphs  # capture calls in CUDA graphs where they can be captured
        self.graph_of_reps = graph_of_reps  # all repetitions, events included, in one graph
        self.flush_in_bracket = flush_in_bracket  # (graph of repetitions) less a bracket of the flush alone
        self.bracket_flush_ms = 0.0  # the flush-alone brackets' median in the last graph of repetitions
        self.target_ms = target_ms
        self.warmup_ms = warmup_ms  # device time warm-up runs at least (after WARMUP_MIN_CALLS)
        self.host_ms = 0.0  # the launcher's host time per call, measured in warmup()
        self.estimate_ms = 0.0  # the call's device time as warmup() estimated it
        self.method = ""  # how the last queue() ran the work: "graph of repetitions", "graph" or "eager"
        self.capture_error = ""  # why the last call could not be captured, if it could not
        self.last_holds: list[float] = []  # the holds (ms) the last queue() put before its batches
        self.cupti = cupti  # device time from CUPTI's kernel spans where it traces; else the events
        self._new_trace = trace
        self._signatures: tuple[tuple[str, ...], frozenset[str]] | None = None  # (the flush's, holds') activity names
        self.source = ""  # what the last queue()'s device times came from: "CUPTI" or "events"
        self.cupti_error = ""  # why they did not come from CUPTI, where cupti was asked for
        self.stream_ms: list[float] = []  # the events' times of the last queue()'s repetitions
        self._bracket_flush = False  # the last graph of repetitions had flush-alone brackets
        self.flush_ms = self._time_flush()

    @contextlib.contextmanager
    def using(self, **settings: bool) -> Iterator[DeviceTimer]:
        """The timer with some settings (``graphs``, ``cupti``, ...) changed for the block."""
        saved = {name: getattr(self, name) for name in settings}
        for name, value in settings.items():
            setattr(self, name, value)
        try:
            yield self
        finally:
            for name, value in saved.items():
                setattr(self, name, value)

    def flush(self) -> None:
        self._flush.zero_()

    def hold(self, ms: float) -> None:
        """Keep the GPU busy for at least ``ms`` (torch.cuda._sleep, a spin kernel; it is private,
        and where it is missing short kernels behind slow launchers read long)."""
        cycles = int(ms * 1e-3 * HOLD_CLOCK_HZ)
        sleep = getattr(self._torch.cuda, "_sleep", None)
        if cycles > 0 and sleep is not None:
            sleep(cycles)

    def _time_flush(self) -> float:
        """The flush's own device time (ms): part of every repetition's time on the GPU."""
        torch = self._torch
        self.flush()
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(3)]
        for start, end in pairs:
            start.record()
            self.flush()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(start.elapsed_time(end) for start, end in pairs)

    def once(self, fn: Callable[[], Any]) -> tuple[float, float]:
        """(ms of device time, ms of host time) for one held call of ``fn`` after an L2 flush: an
        estimate for warm-up; the held GPU may run compute-bound work at a higher clock."""
        torch = self._torch
        self.flush()
        self.hold(max(HOLD_MS, HOLD_FACTOR * self.host_ms))
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
        and remember the launcher's host time (``host_ms``)."""
        fn()
        self._torch.cuda.synchronize()
        times: list[float] = []
        hosts: list[float] = []
        while len(times) < WARMUP_MIN_CALLS or sum(times) < self.warmup_ms:
            device_ms, host_ms = self.once(fn)
            times.append(device_ms)
            hosts.append(host_ms)
            self.host_ms = statistics.median(hosts)
            if len(times) >= MAX_REPS:
                break
        self.estimate_ms = statistics.median(times)
        return self.estimate_ms

    def reps_for(self, estimate_ms: float) -> int:
        return max(MIN_REPS, min(MAX_REPS, math.ceil(self.target_ms / max(estimate_ms, 1e-3))))

    def replayable(self, fn: Callable[[], Any]) -> tuple[Callable[[], Any], str]:
        """(what to queue per repetition, "graph" or "eager"): a CUDA graph of ``fn`` where it can
        be captured and the graph does the call's work, else ``fn`` itself (the reason in
        ``capture_error``)."""
        self.capture_error = ""
        if not self.graphs:
            self.capture_error = "graphs turned off"
            return fn, "eager"
        graph = self._capture(fn)
        if graph is None:
            return fn, "eager"
        replay_ms = self._time_replay(graph.replay)
        if self.estimate_ms and replay_ms < GRAPH_MIN_FRACTION * self.estimate_ms:
            self.capture_error = f"the graph replayed in {replay_ms:.4f} ms against {self.estimate_ms:.4f} ms for the call"
            return fn, "eager"
        return graph.replay, "graph"

    def _capture(self, fn: Callable[[], Any], *, warm: bool = True, what: str = "") -> Any:
        """A CUDA graph of ``fn``, or None (the reason in ``capture_error``, after ``what``).
        ``warm``: run ``fn`` once on the capture stream first."""
        torch = self._torch
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        try:
            stream.wait_stream(torch.cuda.current_stream())
            if warm:
                with torch.cuda.stream(stream):
                    fn()  # per-stream state (cuBLAS workspaces, ...) is set up before the capture
                stream.synchronize()
            # thread_local: another thread's CUDA calls (a watchdog polling events) do not void it
            with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
                fn()
        except Exception as e:  # not capturable (a sync, a host read, an allocation it may not make)
            torch.cuda.synchronize()
            self._note_capture_error(what, e)
            return None
        return graph

    def _note_capture_error(self, what: str, e: Exception) -> None:
        self.capture_error = f"{what}{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]

    def _time_replay(self, replay: Callable[[], Any]) -> float:
        """One held, flushed replay's device time (ms), after two that upload the graph."""
        torch = self._torch
        replay()
        replay()
        self.flush()
        self.hold(HOLD_MS)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def _host_per_rep(self, run: Callable[[], Any], start: Any, end: Any) -> float:
        """Host time (ms) to queue one repetition (flush, two events, the work): median of three."""
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            self.flush()
            start.record()
            run()
            end.record()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    def queue(self, fn: Callable[[], Any], reps: int) -> Callable[[], list[float]]:
        """Queue ``reps`` flushed, event-bracketed repetitions of ``fn`` (replayed from a CUDA graph
        where it can be captured) without waiting; the returned function reads their device times
        (ms) once the GPU has finished them: CUPTI's span of each repetition's call where CUPTI
        traces, else the events' times (``source`` says which, ``cupti_error`` why not CUPTI; the
        events' times are in ``stream_ms`` either way). Call warmup(fn) first."""
        torch = self._torch
        self._check_cupti()
        run, self.method = self.replayable(fn)
        if self.method == "graph" and self.graph_of_reps:
            read_graph = self._queue_graph_of_reps(fn, reps)
            if read_graph is not None:
                self.method, self.last_holds = "graph of repetitions", []
                return read_graph
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        host_ms = self._host_per_rep(run, starts[0], ends[0])  # these events are recorded again below
        self.last_holds = batch_holds(reps, host_ms, self.flush_ms + self.estimate_ms)
        trace = self._start_trace()
        for i, (start, end) in enumerate(zip(starts, ends)):
            if i % BATCH_REPS == 0:
                self.hold(self.last_holds[i // BATCH_REPS])
            self.flush()
            start.record()
            run()
            end.record()

        def read(_keep: Any = run) -> list[float]:  # _keep: the graph and its memory outlive the replays
            return self._read(trace, reps, [start.elapsed_time(end) for start, end in zip(starts, ends)], bare=False)

        return read

    def _queue_graph_of_reps(self, fn: Callable[[], Any], reps: int) -> Callable[[], list[float]] | None:
        """Capture ``reps`` repetitions into one CUDA graph and replay it; None where timing events
        cannot be captured (the reason in ``capture_error``; torch before external events, say).

        Each repetition is an L2 flush, then the call between events. Where CUPTI is not to be
        read and ``flush_in_bracket`` is set, the events go around the flush and the call, and a
        second pair around a flush alone follows: the call's time is the first less the median of
        the second, so the events' own cost cancels."""
        torch = self._torch
        bracket_flush = self.flush_in_bracket and not self.cupti

        def pairs() -> list[tuple[Any, Any]]:
            # external: the events become record nodes of the graph, timed when the graph runs
            return [(torch.cuda.Event(enable_timing=True, external=True),
                     torch.cuda.Event(enable_timing=True, external=True)) for _ in range(reps)]  # fmt: skip

        def bracket(start: Any, end: Any, *work: Callable[[], Any]) -> None:
            start.record()
            for step in work:
                step()
            end.record()

        def repetitions() -> None:
            for (start, end), flush_alone in zip(work, bare or [None] * reps):
                if flush_alone is None:
                    self.flush()
                    bracket(start, end, fn)
                else:
                    bracket(start, end, self.flush, fn)
                    bracket(*flush_alone, self.flush)

        try:
            work, bare = pairs(), pairs() if bracket_flush else []
        except Exception as e:  # this torch's events cannot be graph nodes
            self._note_capture_error("graph of repetitions: ", e)
            return None
        graph = self._capture(repetitions, warm=False, what="graph of repetitions: ")
        if graph is None:
            return None
        self._bracket_flush = bracket_flush
        trace = self._start_trace()
        graph.replay()

        def read(_keep: Any = graph) -> list[float]:  # _keep: the graph and its memory outlive the replay
            times = [start.elapsed_time(end) for start, end in work]
            if bare:
                self.bracket_flush_ms = statistics.median(start.elapsed_time(end) for start, end in bare)
                times = [t - self.bracket_flush_ms for t in times]
            return self._read(trace, reps, times, bare=bool(bare))

        return read

    def _read(self, trace: KernelTrace | None, reps: int, events_ms: list[float], *, bare: bool) -> list[float]:
        """The repetitions' device times: CUPTI's span of each call where ``trace`` ran and reads
        as ``reps`` repetitions (each a flush, the call, and a second flush where ``bare``), else
        the events' times. The GPU has finished the repetitions."""
        self.stream_ms, self.source = events_ms, "events"
        if trace is None:
            return events_ms
        try:
            activities = trace.stop()
            flush, holds = self._signatures or ((), frozenset())
            calls = repetitions(activities, reps, before=flush, after=flush if bare else (), ignore=holds)
        except TraceError as e:
            self.cupti_error = str(e)[:500]
            return events_ms
        self.source = "CUPTI"
        return [span_ms(call) for call in calls]

    def _check_cupti(self) -> None:
        """Before a measurement: whether CUPTI traces here (learning the names of the timer's own
        activities the first time); if it cannot, ``cupti`` goes off with the reason in
        ``cupti_error`` (it would fail the same way for every later measurement)."""
        if not self.cupti:
            return  # cupti_error keeps why it was turned off, where a failure did
        self.cupti_error = ""
        if self._signatures is None:
            try:
                self._signatures = self._learn_signatures()
            except TraceError as e:
                self.cupti_error, self.cupti = str(e)[:500], False

    def _start_trace(self) -> KernelTrace | None:
        """A running CUPTI trace, once the GPU is idle (so only what is queued next is in it); None
        where CUPTI is off or cannot trace (the reason in ``cupti_error``)."""
        if not self.cupti:
            return None
        try:
            self._torch.cuda.synchronize()
            trace = self._new_trace()
            trace.start()
        except TraceError as e:
            self.cupti_error, self.cupti = str(e)[:500], False
            return None
        return trace

    def _learn_signatures(self) -> tuple[tuple[str, ...], frozenset[str]]:
        """The activity names of the timer's own GPU work, as CUPTI reports them: an L2 flush (what
        starts every repetition) and a hold (which the eager method puts between repetitions)."""

        def traced(work: Callable[[], Any]) -> list[Activity]:
            self._torch.cuda.synchronize()
            trace = self._new_trace()
            trace.start()
            work()
            self._torch.cuda.synchronize()
            return trace.stop()

        flush = names(traced(self.flush))
        if not flush:
            raise TraceError("CUPTI saw no activity for an L2 flush (a torch without CUPTI?)")
        holds = frozenset(names(traced(lambda: self.hold(HOLD_MARGIN_MS))))
        return flush, holds

    def measure(self, fn: Callable[[], Any]) -> list[float]:
        """Per-repetition device times (ms), warm-up excluded."""
        read = self.queue(fn, self.reps_for(self.warmup(fn)))
        self._torch.cuda.synchronize()
        return read()

    def queue_wall(self, fn: Callable[[], Any], reps: int) -> Callable[[], list[float]]:
        """Queue ``reps`` calls of ``fn`` itself, launcher included, each after an L2 flush and
        between CUDA events, back to back with no hold (do_bench's method); the returned function
        reads each call's time (ms) once the GPU has finished them."""
        torch = self._torch
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for start, end in zip(starts, ends):
            self.flush()
            start.record()
            fn()
            end.record()
        return lambda: [start.elapsed_time(end) for start, end in zip(starts, ends)]

    def wall(self, fn: Callable[[], Any], reps: int | None = None) -> list[float]:
        """Per-call wall times (ms), launcher included; warm-up first if it has not run."""
        if not self.estimate_ms:
            self.warmup(fn)
        read = self.queue_wall(fn, reps or self.reps_for(self.estimate_ms))
        self._torch.cuda.synchronize()
        return read()

    def describe(self) -> str:
        """How the last queue() measured device time, in words that are the same for every item
        measured the same way (why a call could not be captured is in ``capture_error``, why
        CUPTI did not trace in ``cupti_error``)."""
        if self.method == "graph of repetitions":
            queued = "every repetition (an L2 flush, then the call) captured into one CUDA graph, replayed once"
        elif self.method == "graph":
            queued = "CUDA graph of the call, captured once and replayed after an L2 flush per repetition, back to back"
        else:
            queued = (f"the call itself (not captured in a CUDA graph) after an L2 flush per repetition, back to back; "
                      f"before each batch of {BATCH_REPS}, a hold as long as the launcher's host time needs")
        if self.source == "CUPTI":
            return f"{queued}; device time: CUPTI's span of the call's GPU work (first start to last end); median"
        if self.method == "graph of repetitions" and self._bracket_flush:
            return f"{queued}; CUDA events around the flush and the call, less the median of events around a flush alone; median"
        return f"{queued}; CUDA events around the call; median"


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
    return Ceilings(2 * COPY_CEILING_BYTES / (copy_ms(timer) / 1e3), 2 * n**3 / (_matmul_ms(timer, n) / 1e3), name)


def copy_ms(timer: DeviceTimer, *, graphs: bool = False) -> float:
    """Median device time of a COPY_CEILING_BYTES copy (buffers freed on return), queued by the
    caller; ``graphs``: from a CUDA graph where it can be captured, as other work is timed.

    The ceiling is the first: a captured copy_ becomes a graph memcpy node, which ran at 2288 GB/s
    where the same copy queued by a caller ran at 3027 (H100, 2026-11-23), so kernels
    read up to 136% of that "ceiling"."""
    import torch

    src = torch.empty(COPY_CEILING_BYTES // 4, device="cuda").normal_()
    dst = torch.empty_like(src)
    with timer.using(graphs=graphs):
        return statistics.median(timer.measure(lambda: dst.copy_(src)))


def _matmul_ms(timer: DeviceTimer, n: int) -> float:
    """Median device time of a bf16 n^3 cuBLAS matmul on random data."""
    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    return statistics.median(timer.measure(lambda: torch.matmul(a, b, out=c)))
