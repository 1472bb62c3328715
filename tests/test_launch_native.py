"""tkreg.launch.native: recorded launches made again in C++.

A native replay must pass each kernel exactly the parameters triton's own launcher passes (the
types come from triton's real binder: on the fake GPU its compile gets triton's signature), the
call's addresses in the tensors' places, and must launch nothing where a guard of the fast path
fails. On a GPU the replayed kernels' results are checked against the launcher's."""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from triton import knobs
from triton.runtime.jit import JITFunction

from tests.fake_gpu import add_source, axpy_source, fake_gpu, tensors
from tkreg.launch import fastlaunch, native, recording
from tkreg.launch.fastlaunch import Launcher

pytestmark = pytest.mark.skipif(native._load()[0] is None, reason=f"the C++ replay is not in use here: {native.status()}")


add_kernel = JITFunction(add_source)
axpy_kernel = JITFunction(axpy_source)
ADD = Launcher(add_kernel, BLOCK=128, num_warps=4)
AXPY = Launcher(axpy_kernel, BLOCK=32, num_warps=1)


def two_launches(a: Any, b: Any, c: Any, add: Launcher = ADD, axpy: Launcher = AXPY) -> None:
    """c = a + b, then b = 0.5 * c on a 2-D grid: a float, an int and the call's tensors."""
    n = a.numel()
    add(((n + 127) // 128,), a, b, c, n)
    axpy(((n + 31) // 32, 1), c, b, 0.5, n)


@pytest.fixture
def gpu(monkeypatch):
    for launcher in (ADD, AXPY):
        launcher._devices.clear()
    fake = fake_gpu(monkeypatch, (add_kernel, axpy_kernel))
    fake.__name__ = "__triton_launcher"  # its launches stand for triton's compiled C launcher's
    return fake


def _recorded(call: Any, tensors_: tuple[Any, ...]) -> recording.Recording:
    call()  # first launches: compiled, the Launchers' caches filled
    seen = recording.record(call, tensors_)
    assert seen.recording is not None, seen.reason
    return seen.recording


def _as_launched(kind: str, arg: Any) -> bytes:
    """What triton's launcher passes for one parameter, from the argument it was given."""
    if kind.startswith("*"):
        return struct.pack("<Q", arg.data_ptr() if isinstance(arg, torch.Tensor) else arg or 0)
    if kind == "fp32":
        return torch.tensor(arg, dtype=torch.float32).numpy().tobytes().ljust(8, b"\0")
    return struct.pack({"i32": "<i", "i64": "<q"}[kind], arg).ljust(8, b"\0")


def test_a_native_replay_passes_what_tritons_launcher_is_given(gpu):
    a, b, c = tensors(1000)
    got = _recorded(lambda: two_launches(a, b, c), (a, b, c))
    assert got.native
    x, y, z = tensors(1000)
    gpu.launches.clear()
    two_launches(x, y, z)  # what the launcher passes with the new tensors
    packed = native.parameters(got.replay, (x, y, z))
    assert len(packed) == len(gpu.launches) == 2
    for words, launched, recorded_launch in zip(packed, gpu.launches, got.launches):
        kinds = recorded_launch.entry.types
        expected = b"".join(_as_launched(k, arg) for k, arg in zip(kinds, launched[13:]) if k != "constexpr")
        assert words == expected + bytes(16)  # then the two scratch pointers, null
    assert struct.unpack("<f", packed[1][16:20])[0] == 0.5 and "fp32" in got.launches[1].entry.types


def test_the_python_replay_serves_where_a_launch_cannot_be_packed(gpu, monkeypatch):
    a, b, c = tensors(100)
    got = _recorded(lambda: two_launches(a, b, c), (a, b, c))
    launch = got.launches[0]
    assert native.replayer(got.launches) is not None

    def changed(**fields: Any) -> SimpleNamespace:
        return SimpleNamespace(**{**_fields(launch), **fields})

    refusals = {
        "another launcher": changed(entry=_entry(launch, launcher=print)),
        "a cluster": changed(entry=_entry(launch, head=_head(launch, ctas=2))),
        "descriptors": changed(entry=_entry(launch, descs=((0, None, None),))),
        "an unknown type": changed(entry=_entry(launch, types=("*fp32", "*fp32", "*fp32", "q7", "constexpr"))),
        "a tuple": changed(entry=_entry(launch, types=(("*fp32",), "*fp32", "*fp32", "i32", "constexpr"))),
        "a float where an int goes": changed(args=(None, None, None, 0.5, 128)),
        "globals read": changed(fn=SimpleNamespace(used_global_vals={"x": 1})),
    }
    for what, bad in refusals.items():
        assert native.replayer([bad]) is None, what
    assert native.replayer([launch, changed(device=1)]) is None


def test_each_scalar_type_is_packed_as_triton_packs_it(gpu):
    a, b, c = tensors(100)
    got = _recorded(lambda: two_launches(a, b, c), (a, b, c))
    launch = got.launches[0]
    kinds = ("*fp32", "i1", "i8", "u16", "i32", "i64", "u64", "fp16", "bf16", "fp32", "fp64", "constexpr", "*fp16")
    values = (None, True, -3, 65535, -5, -(2**40), 2**63, 1.5, 1.00390625 + 2**-12, 0.1, 0.1, 7, None)
    made = native.replayer([SimpleNamespace(**{**_fields(launch), "entry": _entry(launch, types=kinds), "args": values,
                                              "slots": ((12, 1),)})])  # fmt: skip
    (words,) = native.parameters(made, (a, b))
    expected = [
        bytes(8), b"\x01", b"\xfd", b"\xff\xff", struct.pack("<i", -5), struct.pack("<q", -(2**40)),
        struct.pack("<Q", 2**63), b"\x00\x3e",
        b"\x80\x3f",  # bf16: triton keeps the float32's high half (1.0039...+2^-12 truncates to 0x3F80)
        struct.pack("<f", 0.1), struct.pack("<d", 0.1), struct.pack("<Q", b.data_ptr()),
    ]  # fmt: skip
    assert words == b"".join(e.ljust(8, b"\0") for e in expected) + bytes(16)


def test_a_replay_launches_nothing_where_a_guard_fails(gpu, monkeypatch):
    """Each guard alone closes the replay (it then returns False before it reads the driver, and
    the launcher runs the call, hooks and all)."""
    a, b, c = tensors(100)
    got = _recorded(lambda: two_launches(a, b, c), (a, b, c))
    assert got.native and native.guards_pass(got.replay)
    closing = [
        (fastlaunch, "_enabled", False),
        (fastlaunch, "_current_device", lambda: 1),
        (knobs.runtime, "launch_enter_hook", lambda metadata: None),
        (knobs.runtime, "launch_exit_hook", lambda metadata: None),
        (knobs.runtime, "debug", True),
        (knobs.compilation, "instrumentation_mode", "consan"),
        (add_kernel, "pre_run_hooks", [lambda *args, **kwargs: None]),
    ]
    for owner, name, value in closing:
        with monkeypatch.context() as m:
            m.setattr(owner, name, value)
            assert not native.guards_pass(got.replay), name
            assert not got.replay(tuple(tensors(100))), name

    def hook(metadata: Any) -> None:
        pass

    knobs.runtime.launch_enter_hook.add(hook)  # a hook added to triton's own chain
    try:
        assert not native.guards_pass(got.replay)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert native.guards_pass(got.replay)
    assert not got.replay(tuple(tensors(100))[:2])  # fewer tensors than the launches take


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="a GPU runs the replayed kernels")


@needs_cuda
def test_native_replays_compute_what_the_launcher_computes_on_the_gpu(monkeypatch):
    # kernels of their own: the fake GPU's tests leave their binder on the module's kernels
    add = Launcher(JITFunction(add_source), BLOCK=128, num_warps=4)
    axpy = Launcher(JITFunction(axpy_source), BLOCK=32, num_warps=1)
    a, b, c = (torch.randn(3000, device="cuda") for _ in range(3))
    got = _recorded(lambda: two_launches(a, b, c, add, axpy), (a, b, c))
    assert got.native
    for _ in range(3):
        x, y = torch.randn(3000, device="cuda"), torch.randn(3000, device="cuda")
        z = torch.full_like(x, float("nan"))
        expected_z, expected_y = x + y, 0.5 * (x + y)
        assert got.replay((x, y, z))
        torch.cuda.synchronize()
        assert torch.equal(z, expected_z) and torch.equal(y, expected_y)
    seen = []
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda metadata: seen.append(metadata))
    x, y, z = (torch.zeros(3000, device="cuda") for _ in range(3))
    assert not got.replay((x, y, z))
    torch.cuda.synchronize()
    assert torch.count_nonzero(z) == 0 and seen == []


def _fields(launch: Any) -> dict[str, Any]:
    return {name: getattr(launch, name) for name in ("fn", "entry", "grid", "args", "slots", "device")}


def _entry(launch: Any, **changed: Any) -> SimpleNamespace:
    entry = launch.entry
    fields = {name: getattr(entry, name) for name in ("descs", "function", "head", "launcher", "types")}
    return SimpleNamespace(**{**fields, **changed})


def _head(launch: Any, ctas: int) -> tuple[Any, ...]:
    head = list(launch.entry.head)
    warps, _, shared = head[4]
    head[4] = (warps, ctas, shared)
    return tuple(head)
