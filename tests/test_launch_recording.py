"""tkreg.launch.recording, and tkreg.ops replaying a kernel's recorded launches, on a fake GPU.

The fake GPU (tests.fake_gpu) hands every C launch to a recorder, so a test compares what a
replay launches with what the launcher itself launched. A replay must launch exactly what the
launcher would, with the new call's tensors, and a call whose work a replay would not repeat
(a temporary, a torch operation, a launch outside a Launcher) must not be recorded at all.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import triton.language as tl
from triton import knobs
from triton.runtime.jit import JITFunction

import tkreg
from tests.fake_gpu import add_source, axpy_source, fake_gpu, tensors, without_hooks
from tests.ops_support import ToyPlugin, choice_by_priority, registry_with, same_alignment_as, toy_kernel
from tkreg.launch import fastlaunch, recording
from tkreg.launch.fastlaunch import Launcher

FACTOR = 2  # a global the scaled kernel reads


def _scaled(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * FACTOR, mask=offs < n)


add_kernel = JITFunction(add_source)
scaled_kernel = JITFunction(_scaled)
axpy_kernel = JITFunction(axpy_source)
ADD = Launcher(add_kernel, BLOCK=128, num_warps=4)
SCALED = Launcher(scaled_kernel, BLOCK=64, num_warps=2)
AXPY = Launcher(axpy_kernel, BLOCK=32, num_warps=1)


@pytest.fixture
def gpu(monkeypatch):
    for launcher in (ADD, SCALED):
        launcher._devices.clear()
    return fake_gpu(monkeypatch, (add_kernel, scaled_kernel))


def two_launches(a: Any, b: Any, c: Any) -> None:
    """c = a + b, then c scaled into b's place: two kernels, the call's tensors only."""
    n = a.numel()
    ADD(((n + 127) // 128,), a, b, c, n)
    SCALED(((n + 63) // 64,), c, b, n)


def test_a_replay_launches_what_the_launcher_did_with_the_new_tensors(gpu):
    a, b, c = tensors(1000)
    two_launches(a, b, c)  # first launches: compiled, the Launchers' caches filled
    gpu.launches.clear()
    seen = recording.record(lambda: two_launches(a, b, c), (a, b, c))
    got = seen.recording
    assert seen.reason == "" and got is not None and len(got) == 2
    recorded = list(gpu.launches)
    x, y, z = tensors(1000)
    two_launches(x, y, z)
    by_launcher = gpu.launches[2:]
    gpu.launches.clear()
    assert got.replay((x, y, z))
    assert [addresses(without_hooks(r)) for r in gpu.launches] == [addresses(without_hooks(r)) for r in by_launcher]
    assert gpu.launches[0][13:16] == addresses((x, y, z)) and gpu.launches[1][13:15] == addresses((z, y))
    assert recorded[0][13:16] == (a, b, c)  # what was recorded launched the recorded tensors
    assert not any(isinstance(arg, torch.Tensor) for launch in got.launches for arg in launch.args)  # none kept alive


def test_a_replay_keeps_a_2d_grid_and_a_float_and_takes_only_the_tensors_launched(monkeypatch):
    """A launch on a 2-D grid with a float argument, where the call has a tensor no launch takes:
    the replay launches what the launcher does with the new tensors (grid, float and all)."""
    AXPY._devices.clear()
    gpu = fake_gpu(monkeypatch, (axpy_kernel,))
    x, unused, y = tensors(500)

    def call(x: Any, y: Any) -> None:
        AXPY((4, 3), x, y, 0.5, x.numel())

    call(x, y)  # the first launch compiles
    seen = recording.record(lambda: call(x, y), (x, unused, y))
    got = seen.recording
    assert seen.reason == "" and got is not None and got.launches[0].slots == ((0, 0), (1, 2))
    x2, unused2, y2 = tensors(500)
    gpu.launches.clear()
    call(x2, y2)
    by_launcher = gpu.launches[-1]
    gpu.launches.clear()
    assert got.replay((x2, unused2, y2))
    (replayed,) = gpu.launches
    assert addresses(without_hooks(replayed)) == addresses(without_hooks(by_launcher))
    assert replayed[:3] == (4, 3, 1) and 0.5 in replayed and unused2.data_ptr() not in replayed


def test_tkreg_ops_records_a_later_call_where_tensors_shared_an_address(gpu, monkeypatch, tmp_path):
    kernels_on_cpu_tensors(monkeypatch, tmp_path)
    ops = tkreg.ops
    ops.install(registry_with(ToyPlugin(toy_kernel("toy_mul_replayed", toy_mul_fake_gpu, priority=50, replay=True))))
    try:
        x = torch.randn(4, 8)
        y = same_alignment_as(x, seed=3)
        ops.toy_mul(x, x)
        ops.toy_mul(x, x)  # x twice: which launch argument is which input cannot be told
        assert "not recorded yet" in ops.explain("toy_mul", x, y)
        ops.toy_mul(x, y)
        assert "replayed" in ops.explain("toy_mul", x, y)
    finally:
        ops.uninstall()


def addresses(args: Any) -> tuple[Any, ...]:
    """Launch arguments with tensors as their addresses (a replay passes addresses)."""
    return tuple(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args)


def test_a_view_at_the_same_address_counts_as_the_call_tensor(gpu):
    a, b, c = tensors(64)
    two_launches(a.view(8, 8).view(64), b, c)
    seen = recording.record(lambda: two_launches(a.view(8, 8).view(64), b, c), (a, b, c))
    assert seen.reason == "" and seen.recording is not None


def refused(call: Any, tensors_: Any, again: bool = False) -> str:
    seen = recording.record(call, tensors_)
    assert seen.recording is None and seen.again == again
    return seen.reason


def test_a_first_launch_is_not_recorded(gpu):
    a, b, c = tensors(100)
    assert "ordinary path" in refused(lambda: two_launches(a, b, c), (a, b, c))


def test_a_temporary_tensor_is_refused(gpu):
    a, b, c = tensors(100)
    scratch = torch.zeros(100)
    two_launches(a, b, scratch)
    assert "not one of the call's" in refused(lambda: two_launches(a, b, scratch), (a, b, c))


def test_torch_operations_are_refused(gpu):
    a, b, c = tensors(100)
    two_launches(a, b, c)

    def zeroes_first() -> None:
        c.zero_()
        two_launches(a, b, c)

    assert "aten.zero_" in refused(zeroes_first, (a, b, c))


def test_an_address_passed_as_an_integer_is_refused(gpu):
    a, b, c = tensors(100)
    ADD((1,), a, b, c, 100)
    ADD((1,), a, b, c, c.data_ptr())  # a first launch of that specialization
    assert "addresses as an integer" in refused(lambda: ADD((1,), a, b, c, c.data_ptr()), (a, b, c))


def test_a_launch_outside_a_launcher_is_refused(gpu):
    a, b, c = tensors(100)
    two_launches(a, b, c)
    add_kernel[(1,)](a, b, c, 100, BLOCK=128)

    def also_directly() -> None:
        two_launches(a, b, c)
        add_kernel[(1,)](a, b, c, 100, BLOCK=128)

    assert "ordinary path" in refused(also_directly, (a, b, c))
    assert JITFunction.run is not None and not getattr(JITFunction.run, "__name__", "").startswith("counted")


def test_tensors_sharing_an_address_are_refused(gpu):
    a, b, _ = tensors(100)
    two_launches(a, a, b)
    assert "share an address" in refused(lambda: two_launches(a, a, b), (a, a, b), again=True)


def test_a_call_made_while_another_thread_records_may_be_recorded_later(gpu):
    a, b, c = tensors(100)
    two_launches(a, b, c)
    with recording._RECORDING:  # another thread's recording holds it
        assert "another thread" in refused(lambda: two_launches(a, b, c), (a, b, c), again=True)
    assert recording.record(lambda: two_launches(a, b, c), (a, b, c)).recording is not None


def test_a_call_that_launches_nothing_is_refused(gpu):
    a, b, c = tensors(100)
    assert "launched nothing" in refused(lambda: None, (a, b, c))


def recorded(gpu: Any) -> tuple[recording.Recording, list[torch.Tensor]]:
    a, b, c = tensors(100)
    two_launches(a, b, c)
    seen = recording.record(lambda: two_launches(a, b, c), (a, b, c))
    assert seen.recording is not None, seen.reason
    gpu.launches.clear()
    return seen.recording, tensors(100)


def test_no_replay_while_a_launch_hook_is_registered(gpu, monkeypatch):
    got, new = recorded(gpu)
    seen = []
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda metadata: seen.append(metadata))
    assert not got.replay(new) and gpu.launches == []


def test_no_replay_on_another_current_device_or_with_fast_launches_off(gpu, monkeypatch):
    got, new = recorded(gpu)
    with fastlaunch.disabled():
        assert not got.replay(new)
    monkeypatch.setattr(fastlaunch, "_current_device", lambda: 1)
    assert not got.replay(new) and gpu.launches == []


def test_no_replay_once_a_global_the_kernel_read_changed(gpu, monkeypatch):
    assert scaled_kernel.cache_key  # records the globals the kernel reads
    got, new = recorded(gpu)
    monkeypatch.setitem(globals(), "FACTOR", 3)
    assert not got.replay(new) and gpu.launches == []


# -- tkreg.ops: a kernel declared replay=True --------------------------------------------------------
LAUNCHER_CALLS: list[int] = []


def toy_mul_fake_gpu(x: Any, y: Any, out: Any = None) -> Any:
    """A launcher of two fake-GPU kernels (the fake computes nothing: the test reads launches)."""
    LAUNCHER_CALLS.append(1)
    n = x.numel()
    ADD(((n + 127) // 128,), x, y, out, n)
    SCALED(((n + 63) // 64,), out, out, n)
    return out


def kernels_on_cpu_tensors(monkeypatch: Any, cache: Any) -> None:
    """The toy kernels take CPU tensors (the fake GPU launches), on any machine: the registry
    runs kernels on CPU tensors only with the interpreter on, and nothing is timed."""
    if torch.cuda.is_available():
        pytest.skip("with a GPU the registry gives kernels CUDA tensors only, so the fake GPU's CPU tensors go to "
                    "the peer; tests/test_ops.py checks tkreg.ops' real replays there")
    choice_by_priority(monkeypatch, cache)
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def test_tkreg_ops_replays_a_declared_kernels_launches_from_the_third_call(gpu, monkeypatch, tmp_path):
    kernels_on_cpu_tensors(monkeypatch, tmp_path)
    ops = tkreg.ops
    ops.install(registry_with(ToyPlugin(toy_kernel("toy_mul_replayed", toy_mul_fake_gpu, priority=50, replay=True))))
    try:
        x, y = torch.randn(4, 8), torch.randn(4, 8)
        LAUNCHER_CALLS.clear()
        ops.toy_mul(x, y)
        assert "not recorded yet: the launcher runs the first call" in ops.explain("toy_mul", x, y)
        ops.toy_mul(x, y)
        assert "2 recorded launch(es) are replayed" in ops.explain("toy_mul", x, y)
        gpu.launches.clear()
        u, v = same_alignment_as(x, seed=1), same_alignment_as(y, seed=2)  # the same signature
        got = ops.toy_mul(u, v)
        assert LAUNCHER_CALLS == [1, 1]  # the third call ran no launcher code
        (first, second) = gpu.launches
        assert first[13:16] == addresses((u, v, got)) and second[13:15] == addresses((got, got))  # the call's own
        assert got is not ops.toy_mul(u, v)  # a new output per call
    finally:
        ops.uninstall()


def test_tkreg_ops_runs_the_launcher_where_the_recording_is_refused(gpu, monkeypatch, tmp_path):
    kernels_on_cpu_tensors(monkeypatch, tmp_path)

    def with_scratch(x: Any, y: Any, out: Any = None) -> Any:
        LAUNCHER_CALLS.append(1)
        scratch = torch.empty_like(out)
        ADD((1,), x, y, scratch, x.numel())
        return out

    ops = tkreg.ops
    ops.install(registry_with(ToyPlugin(toy_kernel("toy_mul_scratch", with_scratch, priority=50, replay=True))))
    try:
        x, y = torch.randn(4, 8), torch.randn(4, 8)
        LAUNCHER_CALLS.clear()
        for _ in range(4):
            ops.toy_mul(x, y)
        assert LAUNCHER_CALLS == [1] * 4
        assert "cannot be replayed" in ops.explain("toy_mul", x, y)
    finally:
        ops.uninstall()


def test_replay_must_be_a_bool():
    with pytest.raises(tkreg.SpecError, match="replay"):
        toy_kernel("toy_bad", toy_mul_fake_gpu, replay="yes")


def test_tuning_times_a_declared_kernel_as_its_plan_calls_it(gpu):
    """The tuner's kernel calls record their second call and replay it after, so a kernel is
    timed at what a caller pays for it."""
    from tkreg.ops.choosing import kernel_call
    from tkreg.ops.forms import OutputLayout

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    layout = OutputLayout((4, 8), None, torch.float32, x.device)
    call = kernel_call(toy_mul_fake_gpu, (x, y), (layout,), {}, replayable=True)
    LAUNCHER_CALLS.clear()
    outs = [call() for _ in range(4)]
    assert LAUNCHER_CALLS == [1, 1] and call.recording is not None
    assert [addresses(launch[13:16]) for launch in gpu.launches[::2]] == [addresses((x, y, out)) for out in outs]
    plain = kernel_call(toy_mul_fake_gpu, (x, y), (layout,), {}, replayable=False)
    LAUNCHER_CALLS.clear()
    for _ in range(3):
        plain()
    assert LAUNCHER_CALLS == [1, 1, 1] and plain.recording is None


class FakeReplay:
    """A recording's replay, simulated: while ``ready``, ``effect(tensors)`` is what it launches;
    ``seen`` (where given) gets the tensors of every call, ready or not."""

    native = False

    def __init__(self, effect: Any, seen: list[Any] | None = None) -> None:
        self.ready, self.effect, self.seen = True, effect, seen

    def __len__(self) -> int:
        return 1

    def replay(self, tensors: Any) -> bool:
        if self.seen is not None:
            self.seen.append(tensors)
        if self.ready:
            self.effect(tensors)
        return self.ready


@pytest.mark.parametrize("gathered", [True, False], ids=["tensors_of given", "inputs then outputs"])
@pytest.mark.parametrize("indices", [None, (0,), (1, 0)])
def test_a_replayed_plan_hands_tkreg_ops_the_outputs_it_returns(monkeypatch, indices, gathered):
    """Where callers get fewer outputs than the op makes, the replaying run hands them back
    itself (one function a call, not the run and a picker); a replay that is not ready takes the
    launcher, and the same outputs come back. The same where the replayer gathers the launch's
    tensors itself (no ``tensors_of``)."""
    from tkreg.ops.replaying import Replayer

    installed: dict[str, Any] = {}
    made: list[Any] = []

    def install(run: Any, returned: Any = None) -> None:
        installed.update(run=run, returned=returned)

    def allocate() -> Any:
        made.append((torch.zeros(2), torch.zeros(3)))
        return made[-1]

    def launched(*inputs: Any) -> Any:
        return (torch.full((2,), 5.0), torch.full((3,), 6.0))

    def fill(tensors: Any) -> None:
        tensors[-2].fill_(7.0)
        tensors[-1].fill_(8.0)

    replay = FakeReplay(fill)
    monkeypatch.setattr(recording, "record", lambda call, tensors: recording.Outcome(call(), replay))  # type: ignore[arg-type]
    seen: list[Any] = []

    def tensors_of(inputs: Any, outs: Any) -> Any:
        seen.append(len(inputs) + len(outs))
        return (*inputs, *outs)

    replayer = Replayer("op", "k", install, launched, allocate, lambda inputs, outs: None, tensors_of if gathered else None,
                        several=True, returned=indices)  # fmt: skip
    x = torch.randn(4)
    replayer.first(x)  # the launcher; the next call is recorded
    installed["run"](x)  # recorded: from now on replayed
    assert "replayed" in replayer.state
    every = installed["run"](x)  # every output, replayed into new ones
    assert every is made[-1] and [float(t[0]) for t in every] == [7.0, 8.0]
    assert seen == ([3, 3] if gathered else [])
    if indices is None:
        assert installed["returned"] is None  # tkreg.ops calls the run itself
        return
    got = installed["returned"](x)
    want = {0: 7.0, 1: 8.0}
    if len(indices) == 1:
        assert got is made[-1][0] and torch.equal(got, torch.full((2,), 7.0))
    else:
        assert [t is made[-1][i] for t, i in zip(got, indices)] == [True, True]
        assert [float(t[0]) for t in got] == [want[i] for i in indices]
    replay.ready = False  # a launch hook, another device: the launcher runs, the same outputs come back
    got = installed["returned"](x)
    assert (float(got[0]) if len(indices) == 1 else [float(t[0]) for t in got]) == (5.0 if len(indices) == 1 else [6.0, 5.0])


@pytest.mark.parametrize("gathered", [True, False], ids=["tensors_of given", "inputs then outputs"])
def test_a_replayed_plan_of_one_output_returns_it(monkeypatch, gathered):
    """An op with one output (add, matmul): the replaying run launches on the inputs then the new
    output and returns that output; not ready, the launcher's own output comes back."""
    from tkreg.ops.replaying import Replayer

    installed: dict[str, Any] = {}
    made: list[Any] = []
    launches: list[Any] = []

    def allocate() -> Any:
        made.append((torch.zeros(3),))
        return made[-1]

    replay = FakeReplay(lambda tensors: tensors[-1].copy_(tensors[0] + tensors[1]), launches)
    monkeypatch.setattr(recording, "record", lambda call, tensors: recording.Outcome(call(), replay))  # type: ignore[arg-type]
    replayer = Replayer("add", "k", lambda run, returned=None: installed.update(run=run, returned=returned),
                        lambda a, b: a - b, allocate, lambda inputs, outs: None,
                        (lambda inputs, outs: (*inputs, *outs)) if gathered else None, several=False)  # fmt: skip
    a, b = torch.randn(3), torch.randn(3)
    replayer.first(a, b)
    installed["run"](a, b)  # recorded
    got = installed["run"](a, b)
    assert installed["returned"] is None
    assert got is made[-1][0] and torch.equal(got, a + b)
    assert launches[-1][:2] == (a, b) and launches[-1][2] is got
    replay.ready = False
    assert torch.equal(installed["run"](a, b), a - b)  # the launcher's output


def test_a_replay_that_declines_runs_the_fallback_given_and_the_first_call_the_launcher(monkeypatch):
    """On a host of several GPUs a declined replay has a fallback of its own (it switches to the
    inputs' GPU and replays there, tkreg.ops.choosing.replayed_on_device_of); the plan's first
    call, and a recording the launcher refuses, still run the launcher."""
    from tkreg.ops.replaying import Replayer

    installed: dict[str, Any] = {}
    ran: list[str] = []

    replay = FakeReplay(lambda tensors: ran.append("replay"))
    monkeypatch.setattr(recording, "record", lambda call, tensors: recording.Outcome(call(), replay))  # type: ignore[arg-type]
    replayer = Replayer("add", "k", lambda run, returned=None: installed.update(run=run, returned=returned),
                        lambda a, b: ran.append("launcher") or a - b, lambda: (torch.zeros(3),),
                        lambda inputs, outs: None, None, several=False,
                        declined=lambda a, b: ran.append("declined") or a * b)  # fmt: skip
    a, b = torch.randn(3), torch.randn(3)
    assert torch.equal(replayer.first(a, b), a - b) and ran == ["launcher"]
    installed["run"](a, b)  # recorded
    installed["run"](a, b)
    assert ran == ["launcher", "replay"]
    replay.ready = False
    assert torch.equal(installed["run"](a, b), a * b) and ran[-1] == "declined"
