"""GluonLaunch on the CPU, against stand-ins for the JIT function, its compiled kernel and triton's
driver: the first launch of a variant takes the JIT path, later ones call the compiled kernel's
launcher with exactly the arguments the JIT passes it; hooks and new variants take the JIT path."""

from __future__ import annotations

import pytest
from tkreg_matmul.gluon_common import GluonLaunch
from triton import knobs
from triton.runtime import driver


class Compiled:
    function = "function-handle"
    packed_metadata = "packed-metadata"

    def __init__(self) -> None:
        self.runs: list[tuple] = []

    def run(self, *args):
        self.runs.append(args)


class Kernel:
    """A JIT function's surface as GluonLaunch uses it: arg_names and kernel[grid](*args, **kwargs)."""

    arg_names = ["a_desc", "b_desc", "c_desc", "SchedulerImpl", "BLOCK_M", "B_NK"]

    def __init__(self) -> None:
        self.jit_calls: list[tuple] = []
        self.compiled: list[Compiled] = []

    def __getitem__(self, grid):
        def call(*args, **kwargs):
            self.jit_calls.append((grid, args, kwargs))
            self.compiled.append(Compiled())
            return self.compiled[-1]

        return call


class Driver:
    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int) -> str:
        return f"stream-{device}"


@pytest.fixture
def fake_driver(monkeypatch):
    stand_in = Driver()
    monkeypatch.setattr(type(driver), "active", property(lambda self: stand_in))


class Desc:
    def __init__(self, name: str) -> None:
        self.name = name


CONSTEXPRS = {"SchedulerImpl": "sched", "BLOCK_M": 128, "B_NK": True}


def test_first_launch_jit_then_the_compiled_kernels_launcher(fake_driver):
    kernel = Kernel()
    launch = GluonLaunch(kernel)
    descs = [Desc("a"), Desc("b"), Desc("c")]
    launch((132,), descs, CONSTEXPRS, {"num_warps": 4}, variant="v1")
    assert kernel.jit_calls == [((132,), tuple(descs), {**CONSTEXPRS, "num_warps": 4})]
    launch((100,), descs, CONSTEXPRS, {"num_warps": 4}, variant="v1")
    assert len(kernel.jit_calls) == 1
    # What JITFunction.run passes after its look-up: grid, stream, function, metadata, no launch
    # metadata and no hooks (none registered), then every parameter in order, constexprs included.
    assert kernel.compiled[0].runs == [
        (100, 1, 1, "stream-0", "function-handle", "packed-metadata", None, None, None, *descs, "sched", 128, True)
    ]
    # Another variant compiles (JIT path) again.
    launch((100,), descs, CONSTEXPRS, {"num_warps": 4}, variant="v2")
    assert len(kernel.jit_calls) == 2


def test_registered_launch_hooks_always_get_the_jit_path(fake_driver):
    kernel = Kernel()
    launch = GluonLaunch(kernel)
    descs = [Desc("a"), Desc("b"), Desc("c")]
    launch((1,), descs, CONSTEXPRS, {}, variant="v")

    def hook(*args, **kwargs):
        return None

    knobs.runtime.launch_enter_hook.add(hook)
    try:
        launch((1,), descs, CONSTEXPRS, {}, variant="v")
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert len(kernel.jit_calls) == 2 and kernel.compiled[0].runs == []
    launch((1,), descs, CONSTEXPRS, {}, variant="v")
    assert len(kernel.compiled[0].runs) == 1
