"""The device timer's method, on a simulated GPU (no GPU here): one in-order stream whose work
starts when both the GPU is free and the host has queued it, events that read the GPU's time, a
host clock that launchers advance. What it checks is the scheduling: whether a launcher's host
time lands inside the events, whether a CUDA graph of the call is used, and the fallbacks.
The GPU cross-check against do_bench and CUPTI is `tkreg bench timer` (tkreg/bench)."""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import types
from collections.abc import Iterator

import pytest

from tkreg.testing import cupti, timing
from tkreg.testing.cupti import Activity, TraceError

US = 1e-6
FILL = "vectorized_elementwise_kernel<FillFunctor<int>>"  # what zeroing the flush buffer runs
FLUSH_US = 85.0  # an H100 zeroing 256 MiB
API_US = {"flush": 5.0, "event": 2.0, "sleep": 3.0, "replay": 6.0}
GRAPH_LAUNCH_US = 4.0  # the GPU's own latency from reaching a graph launch to its first node
EVENT_US = 1.0  # GPU time a recorded event costs the work behind it (inside a bracket that starts with it)


class Gpu:
    """Host and GPU clocks (seconds) of one process and one stream."""

    def __init__(self) -> None:
        self.host = 0.0
        self.free = 0.0  # when the GPU finishes what is queued
        self.capturing: list | None = None  # the nodes of a graph being captured: (seconds, name) of work, or events
        self.events: list = []  # every CUDA event created, in order
        self.launch_gap_us = 0.0  # a kernel starts this long after the kernel before it ends
        self.traced_slowdown_us = 0.0  # what tracing adds to each kernel (CUPTI slows a few)
        self.tracing: list[Activity] | None = None  # the kernels run while a simulated CUPTI trace is on

    def api(self, what: str) -> None:
        self.host += API_US[what] * US

    def enqueue(self, seconds: float, name: str = "") -> float:
        """Queue work visible to the GPU now (a kernel where it has a name); return when it starts."""
        if self.capturing is not None:
            self.capturing.append((seconds, name))
            return self.host
        start = max(self.free + (self.launch_gap_us * US if name else 0.0), self.host)
        if name and self.tracing is not None:
            seconds += self.traced_slowdown_us * US
        self.free = start + seconds
        if name and self.tracing is not None:
            self.tracing.append(Activity(name, round(start * 1e9), round(self.free * 1e9)))
        return start

    def wait(self, until: float) -> None:
        self.host = max(self.host, until)

    def trace(self) -> SimulatedTrace:
        return SimulatedTrace(self)


class SimulatedTrace:
    """CUPTI on the simulated GPU: every kernel's start and end while it is on."""

    def __init__(self, gpu: Gpu) -> None:
        self.gpu = gpu

    def start(self) -> None:
        if self.gpu.tracing is not None:
            raise TraceError("CUPTI trace could not start: a profiler is already running")
        self.gpu.tracing = []

    def stop(self) -> list[Activity]:
        found, self.gpu.tracing = self.gpu.tracing or [], None
        return sorted(found, key=lambda a: a.start_ns)


def fake_torch(gpu: Gpu) -> types.ModuleType:
    class Event:
        def __init__(self, enable_timing: bool = False, external: bool = False) -> None:
            self.at = 0.0
            self.external = external
            gpu.events.append(self)

        def record(self) -> None:
            gpu.api("event")
            if gpu.capturing is not None:
                if not self.external:  # CUDA makes such a record a fork point, not a timestamp
                    raise RuntimeError("a timing event recorded in a capture must be external")
                gpu.capturing.append(self)
                return
            self.at = gpu.enqueue(0.0)
            gpu.free += EVENT_US * US

        def synchronize(self) -> None:
            gpu.wait(self.at)

        def elapsed_time(self, end: Event) -> float:
            return (end.at - self.at) * 1e3

    class Buffer:
        def zero_(self) -> None:
            gpu.api("flush")
            gpu.enqueue(FLUSH_US * US, FILL)

    class CUDAGraph:
        def __init__(self) -> None:
            self.nodes: list[float] = []

        def replay(self) -> None:
            gpu.api("replay")
            gpu.enqueue(GRAPH_LAUNCH_US * US)
            for node in self.nodes:
                if isinstance(node, Event):
                    node.at = gpu.enqueue(0.0)
                    gpu.free += EVENT_US * US
                else:
                    gpu.enqueue(*node)

    class Stream:
        def wait_stream(self, other: object) -> None:
            pass

        def synchronize(self) -> None:
            gpu.wait(gpu.free)

    @contextlib.contextmanager
    def graph(g: CUDAGraph, stream: object = None, capture_error_mode: str = "global") -> Iterator[None]:
        gpu.wait(gpu.free)
        gpu.capturing = g.nodes
        try:
            yield
        finally:
            gpu.capturing = None

    def sleep(cycles: int) -> None:
        gpu.api("sleep")
        gpu.enqueue(cycles / timing.HOLD_CLOCK_HZ, "spin_kernel")

    cuda = types.SimpleNamespace(
        Event=Event,
        CUDAGraph=CUDAGraph,
        Stream=Stream,
        graph=graph,
        stream=lambda s: contextlib.nullcontext(),
        current_stream=Stream,
        synchronize=lambda: gpu.wait(gpu.free),
        _sleep=sleep,
    )
    return types.SimpleNamespace(cuda=cuda, empty=lambda *a, **k: Buffer(), int32="int32")  # type: ignore[return-value]


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> Gpu:
    sim = Gpu()
    monkeypatch.setitem(sys.modules, "torch", fake_torch(sim))
    monkeypatch.setattr(timing.time, "perf_counter", lambda: sim.host)
    return sim


def launcher(gpu: Gpu, host_us: float, kernel_us: float, capturable: bool = True, kernels: tuple[str, ...] = ("kernel",)):
    """A launcher that spends host_us of Python, then launches its kernels, kernel_us each."""

    def call() -> None:
        if gpu.capturing is not None and not capturable:
            raise RuntimeError("operation not permitted when stream is capturing")
        gpu.host += host_us * US
        for name in kernels:
            gpu.enqueue(kernel_us * US, name)

    return call


def test_batch_holds_cover_the_hosts_deficit_and_only_the_first_batch_when_the_host_keeps_up() -> None:
    fast = timing.batch_holds(120, host_ms=0.02, device_ms=0.9)
    assert len(fast) == 3 and fast[1:] == [0.0, 0.0] and 0 < fast[0] < 0.1
    slow = timing.batch_holds(120, host_ms=0.10, device_ms=0.095)
    assert len(slow) == 3 and all(h > 0 for h in slow)
    # batch of 50: the host finishes queueing repetition 49 at 50 x 0.10 ms; the GPU reaches it 49 x 0.095 after the hold
    assert slow[0] >= 50 * 0.10 - 49 * 0.095
    assert slow[2] < slow[0]  # the last batch has 20 repetitions
    assert timing.batch_holds(0, 1.0, 1.0) == []


def test_a_slow_launcher_s_host_time_stays_out_of_the_events_without_graphs(gpu: Gpu) -> None:
    timer = timing.DeviceTimer(graphs=False, cupti=False)
    call = launcher(gpu, host_us=100.0, kernel_us=10.0)
    times = timer.measure(call)
    assert timer.method == "eager" and len(times) == timing.MAX_REPS
    assert max(times) == pytest.approx(0.010 + EVENT_US / 1e3, abs=1e-9), max(times)
    assert timer.describe().startswith("the call itself (not captured") and timer.capture_error == "graphs turned off"


def test_without_the_batch_holds_the_same_launcher_reads_its_host_time(gpu: Gpu, monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulation can tell: with no holds, the GPU waits for the host inside the events."""
    monkeypatch.setattr(timing, "batch_holds", lambda reps, host_ms, device_ms: [0.0] * (reps // timing.BATCH_REPS + 1))
    timer = timing.DeviceTimer(graphs=False, cupti=False)
    times = timer.measure(launcher(gpu, host_us=100.0, kernel_us=10.0))
    assert statistics.median(times) > 0.015


def test_a_capturable_call_runs_from_one_graph_of_all_repetitions_and_reads_the_kernel_alone(gpu: Gpu) -> None:
    timer = timing.DeviceTimer(cupti=False)
    call = launcher(gpu, host_us=300.0, kernel_us=700.0)  # a compute-bound kernel behind a slow launcher
    reps = timer.reps_for(timer.warmup(call))
    read = timer.queue(call, reps)
    times = read()
    assert timer.method == "graph of repetitions" and timer.describe().startswith("every repetition")
    # neither the launcher, nor the graph launch's latency, nor the events' own cost is in the figure
    assert times == [pytest.approx(0.7, abs=1e-9)] * reps
    assert timer.bracket_flush_ms == pytest.approx((FLUSH_US + EVENT_US) / 1e3, abs=1e-9)


def test_events_around_the_call_alone_read_the_start_event_s_cost(gpu: Gpu) -> None:
    timer = timing.DeviceTimer(flush_in_bracket=False, cupti=False)
    call = launcher(gpu, host_us=300.0, kernel_us=700.0)
    times = timer.queue(call, timer.reps_for(timer.warmup(call)))()
    assert timer.method == "graph of repetitions"
    assert times == [pytest.approx(0.7 + EVENT_US / 1e3, abs=1e-9)] * len(times)


def test_replaying_a_graph_per_repetition_reads_the_graph_launch_latency_too(gpu: Gpu) -> None:
    """The method before 2026-11-23 (and the fallback): events on the stream around each replay."""
    timer = timing.DeviceTimer(graph_of_reps=False, cupti=False)
    call = launcher(gpu, host_us=300.0, kernel_us=700.0)
    reps = timer.reps_for(timer.warmup(call))
    times = timer.queue(call, reps)()
    assert timer.method == "graph" and timer.describe().startswith("CUDA graph of the call")
    assert max(times) == pytest.approx(0.7 + (GRAPH_LAUNCH_US + EVENT_US) / 1e3, abs=1e-9) and len(times) == reps
    # after the first batch's short head start, the GPU never waits for the host between repetitions
    assert timer.last_holds[0] < 0.1 and not any(timer.last_holds[1:])


def test_where_timing_events_cannot_be_captured_each_repetition_replays_a_graph_of_the_call(
    gpu: Gpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = sys.modules["torch"]
    plain_event = torch.cuda.Event

    def older_event(enable_timing: bool = False, **kwargs: object) -> object:  # torch before external events
        if kwargs:
            raise TypeError(f"unexpected keyword arguments {sorted(kwargs)}")
        return plain_event(enable_timing)

    monkeypatch.setattr(torch.cuda, "Event", older_event)
    timer = timing.DeviceTimer(cupti=False)
    times = timer.measure(launcher(gpu, host_us=30.0, kernel_us=200.0))
    assert timer.method == "graph" and "graph of repetitions: TypeError" in timer.capture_error
    assert statistics.median(times) == pytest.approx(0.2 + (GRAPH_LAUNCH_US + EVENT_US) / 1e3, abs=1e-9)


def test_a_call_that_cannot_be_captured_is_timed_eagerly_and_says_why(gpu: Gpu) -> None:
    timer = timing.DeviceTimer(cupti=False)
    call = launcher(gpu, host_us=50.0, kernel_us=20.0, capturable=False)
    times = timer.measure(call)
    assert timer.method == "eager" and "not permitted when stream is capturing" in timer.capture_error
    assert max(times) == pytest.approx(0.020 + EVENT_US / 1e3, abs=1e-9)


def test_a_graph_that_did_not_capture_the_work_is_not_used(gpu: Gpu) -> None:
    """A launcher that launches on another stream leaves the graph empty: its replay is nearly
    free, and timing it would report nothing."""
    timer = timing.DeviceTimer(cupti=False)

    def elsewhere() -> None:
        gpu.host += 20 * US
        if gpu.capturing is None:  # captured graphs see nothing of it
            gpu.enqueue(40 * US, "kernel")

    times = timer.measure(elsewhere)
    assert timer.method == "eager" and "replayed in" in timer.capture_error
    assert statistics.median(times) == pytest.approx(0.040 + EVENT_US / 1e3, abs=1e-9)


def test_wall_time_includes_a_launcher_slower_than_flush_plus_kernel(gpu: Gpu) -> None:
    timer = timing.DeviceTimer(cupti=False)
    call = launcher(gpu, host_us=200.0, kernel_us=10.0)
    device = statistics.median(timer.measure(call))
    wall = statistics.median(timer.wall(call))
    assert device == pytest.approx(0.010, abs=1e-9)
    # each call waits for the host: 200 us of launcher less the 85 us flush it overlaps, plus the kernel and API work
    assert 0.12 < wall < 0.14, wall


def test_cupti_reads_the_kernel_alone_where_the_events_read_its_launch_behind_the_flush(gpu: Gpu) -> None:
    gpu.launch_gap_us = 4.0  # an H100 kernel starts 2-6 us after the one before it ends
    timer = timing.DeviceTimer(trace=gpu.trace)
    call = launcher(gpu, host_us=300.0, kernel_us=170.0)
    reps = timer.reps_for(timer.warmup(call))
    times = timer.queue(call, reps)()
    assert timer.method == "graph of repetitions" and timer.source == "CUPTI" and timer.cupti_error == ""
    assert times == [pytest.approx(0.170, abs=1e-9)] * reps
    # the events (kept beside it, around the call alone) read the kernel's launch behind the flush
    # and their own cost; no flush-alone brackets are queued when CUPTI is read
    assert timer.stream_ms == [pytest.approx(0.170 + 0.004 + EVENT_US / 1e3, abs=1e-9)] * reps
    assert "CUPTI's span of the call's GPU work" in timer.describe()


def test_cupti_span_of_a_call_of_several_kernels_includes_the_gaps_between_them_and_its_own_fills(gpu: Gpu) -> None:
    """A split-K launcher, say: it zeroes its output with the same fill kernel the flush runs, then
    two kernels. Its span runs from the fill's start to the last kernel's end."""
    gpu.launch_gap_us = 3.0
    timer = timing.DeviceTimer(trace=gpu.trace)
    call = launcher(gpu, host_us=40.0, kernel_us=50.0, kernels=(FILL, "partial_sums", "reduce"))
    times = timer.measure(call)
    assert timer.source == "CUPTI", timer.cupti_error
    assert statistics.median(times) == pytest.approx(3 * 0.050 + 2 * 0.003, abs=1e-9)


def test_cupti_leaves_the_holds_of_the_eager_method_out(gpu: Gpu) -> None:
    gpu.launch_gap_us = 2.0
    timer = timing.DeviceTimer(graphs=False, trace=gpu.trace)
    call = launcher(gpu, host_us=100.0, kernel_us=10.0, kernels=("first", "second"))  # host slower than the GPU: holds
    times = timer.measure(call)
    assert timer.method == "eager" and timer.source == "CUPTI" and any(timer.last_holds), timer.cupti_error
    assert max(times) == pytest.approx(0.022, abs=1e-9), max(times)


def test_a_trace_that_does_not_split_into_the_repetitions_falls_back_to_the_events_and_says_why(gpu: Gpu) -> None:
    """A call whose kernel count changes from call to call (eagerly: a graph fixes it) cannot be
    told apart from the flush."""
    timer = timing.DeviceTimer(graphs=False, trace=gpu.trace)
    calls = iter(range(10**6))

    def uneven() -> None:
        gpu.host += 10 * US
        for _ in range(1 + next(calls) % 2):
            gpu.enqueue(30 * US, "kernel")

    times = timer.measure(uneven)
    assert timer.source == "events" and "do not split into" in timer.cupti_error and "kernel" in timer.cupti_error
    assert times == timer.stream_ms
    timer.measure(launcher(gpu, host_us=10.0, kernel_us=30.0))
    assert timer.source == "CUPTI" and timer.cupti_error == ""  # the next call is traced again


def test_where_cupti_cannot_trace_the_events_are_the_device_time_and_it_is_not_tried_again(gpu: Gpu) -> None:
    gpu.tracing = []  # another profiler is running in this process
    timer = timing.DeviceTimer(trace=gpu.trace)
    call = launcher(gpu, host_us=30.0, kernel_us=200.0)
    times = timer.measure(call)
    assert timer.source == "events" and not timer.cupti and "already running" in timer.cupti_error
    assert statistics.median(times) == pytest.approx(0.2, abs=1e-9)
    timer.measure(call)
    assert "already running" in timer.cupti_error  # later measurements still say why


def test_without_a_profiler_the_real_trace_says_why_and_the_events_time_the_work(
    gpu: Gpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(cupti.TEARDOWN_ENV, raising=False)
    timer = timing.DeviceTimer()  # tkreg.testing.cupti.KernelTrace on the simulated torch, which has no profiler
    timer.measure(launcher(gpu, host_us=30.0, kernel_us=200.0))
    assert timer.source == "events" and timer.cupti_error.startswith("CUPTI trace could not start")
    # before any trace, Kineto is told to detach CUPTI when a trace stops (left attached, it slows every launch)
    assert os.environ[cupti.TEARDOWN_ENV] == "1"


def test_repetitions_skip_what_was_queued_before_them_and_name_what_they_saw_when_they_do_not_fit() -> None:
    def acts(*names: str) -> list[Activity]:
        return [Activity(n, 10 * i, 10 * i + 5) for i, n in enumerate(names)]

    trace = acts("warm", "flush", "k1", "k2", "spin", "flush", "k1", "k2")
    calls = cupti.repetitions(trace, 2, before=("flush",), ignore=frozenset({"spin"}))
    assert [[a.name for a in call] for call in calls] == [["k1", "k2"], ["k1", "k2"]]
    assert cupti.span_ms(calls[0]) == pytest.approx(15e-6)  # k1's start (20 ns) to k2's end (35 ns)
    with pytest.raises(TraceError, match=r"7 activities.*2 repetitions.*names: warm, flush, k1, k2"):
        cupti.repetitions(trace, 2, before=("flush",), after=("flush",), ignore=frozenset({"spin"}))


def test_kernel_trace_keeps_the_gpu_activities_of_kinetos_events_in_start_order(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    gpu, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU

    class Event:  # the methods tkreg.testing.cupti reads of torch's _KinetoEvent
        def __init__(self, name: str, start: int, end: int, device: object) -> None:
            self._values = (name, start, end, device)

        def name(self) -> str:
            return self._values[0]

        def start_ns(self) -> int:
            return self._values[1]

        def end_ns(self) -> int:
            return self._values[2]

        def device_type(self) -> object:
            return self._values[3]

    events = [Event("kernel_b", 300, 400, gpu), Event("cudaGraphLaunch", 0, 50, cpu), Event("Memset (Device)", 100, 120, gpu)]
    session = types.SimpleNamespace(stop=lambda: None, profiler=types.SimpleNamespace(
        kineto_results=types.SimpleNamespace(events=lambda: events)))  # fmt: skip
    monkeypatch.setattr(cupti, "start_profile", lambda: session)
    trace = cupti.KernelTrace()
    trace.start()
    assert trace.stop() == [Activity("Memset (Device)", 100, 120), Activity("kernel_b", 300, 400)]
    with pytest.raises(TraceError, match="not started"):
        trace.stop()


def test_settings_changed_for_a_block_come_back_even_when_it_fails(gpu: Gpu) -> None:
    timer = timing.DeviceTimer(cupti=False)
    with pytest.raises(RuntimeError), timer.using(graphs=False, cupti=True):
        assert not timer.graphs and timer.cupti
        raise RuntimeError("a measurement failed")
    assert timer.graphs and not timer.cupti
