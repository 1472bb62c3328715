"""GluonLaunch on the CPU, with stand-ins for tkreg.launch.fastlaunch's Launcher and tkreg.launch.tma's descriptor
cache: one launcher per compiled variant, one bound launch per set of tensors (address, shape,
strides), descriptors of B as stored, and a bounded cache. (fastlaunch itself is tested against
triton's real launch path in tests/test_fastlaunch.py.)"""

from __future__ import annotations

import gc
import weakref

import pytest
import tkreg_matmul.gluon_common as gluon_common
import torch
from tkreg_matmul.gluon_common import GluonLaunch, operands
from tkreg_matmul.layouts import KN, NK

import tkreg.launch.fastlaunch
import tkreg.launch.tma
from tkreg.launch.fastlaunch import TensorAddress


class FakeLauncher:
    made: list[FakeLauncher] = []

    def __init__(self, kernel, **fixed) -> None:
        self.kernel, self.fixed, self.bound = kernel, fixed, []
        FakeLauncher.made.append(self)

    def bind(self, *descs):
        launches = []
        self.bound.append((descs, launches))
        return launches.append  # bound(grid) records the grid


@pytest.fixture
def fakes(monkeypatch):
    FakeLauncher.made = []
    described = []

    def descriptor(t, block, name, layout, checked=False):
        described.append((name, t.data_ptr(), tuple(t.shape), t.stride(), tuple(block), checked))
        return ("desc", name, t.data_ptr(), tuple(t.shape), t.stride())

    monkeypatch.setattr(tkreg.launch.fastlaunch, "Launcher", FakeLauncher)
    monkeypatch.setattr(tkreg.launch.tma, "descriptor", descriptor)
    monkeypatch.setattr(gluon_common, "_layout", lambda block, dtype: ("layout", block))
    return described


BLOCKS = {"a": [128, 64], "b": [64, 256], "c": [128, 256]}


def test_one_launcher_per_variant_and_one_bound_launch_per_tensor_set(fakes) -> None:
    launch = GluonLaunch("kernel")
    a, b, c = torch.empty(256, 64), torch.empty(64, 512), torch.empty(256, 512)
    for _ in range(3):
        launch((132,), operands(a, b, c, KN), BLOCKS, {"BLOCK_M": 128}, {"num_warps": 4}, variant="v1")
    (only,) = FakeLauncher.made
    assert only.fixed == {"BLOCK_M": 128, "num_warps": 4}
    (bound,) = only.bound
    assert bound[1] == [(132,), (132,), (132,)]  # bound once, launched three times
    assert [d[0] for d in fakes] == ["a", "b", "c"] and all(d[-1] for d in fakes)  # checked by the caller
    # Another output tensor: a new bound launch of the same launcher; another variant: a new launcher.
    launch((132,), operands(a, b, torch.empty(256, 512), KN), BLOCKS, {"BLOCK_M": 128}, {}, variant="v1")
    assert len(FakeLauncher.made) == 1 and len(only.bound) == 2
    launch((132,), operands(a, b, c, KN), BLOCKS, {"BLOCK_M": 64}, {}, variant="v2")
    assert len(FakeLauncher.made) == 2


def test_a_transposed_weight_is_described_as_stored(fakes) -> None:
    w = torch.empty(512, 64)  # (N, K) row-major; the matmul's B is w.t()
    a, c = torch.empty(256, 64), torch.empty(256, 512)
    GluonLaunch("kernel")((1,), operands(a, w.t(), c, NK), BLOCKS, {}, {}, variant="v")
    b_desc = next(d for d in fakes if d[0] == "b")
    assert b_desc[2:4] == ((512, 64), (64, 1))


def test_the_bound_launches_are_bounded(fakes) -> None:
    launch = GluonLaunch("kernel", max_bound=2)
    a, b = torch.empty(8, 8), torch.empty(8, 8)
    outs = [torch.empty(8, 8) for _ in range(3)]
    for c in outs:
        launch((1,), (a, b, c), BLOCKS, {}, {}, variant="v")
    assert len(launch._bound) == 2
    first_key = ("v", *((t.data_ptr(), t.shape, t.stride()) for t in (a, b, outs[0])))
    assert first_key not in launch._bound  # the oldest went first


# -- a plain argument (a bias) after the descriptors --------------------------------------------


def fp16(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).half()


def test_gluon_launch_binds_a_bias_by_address_and_keys_on_it(fakes) -> None:
    gluon = GluonLaunch("kernel")
    a, b, c = torch.empty(256, 64), torch.empty(64, 512), torch.empty(256, 512)
    bias = fp16(512)
    for _ in range(2):
        gluon((132,), (a, b, c), BLOCKS, {}, {}, "v", (bias,))
    (only,) = FakeLauncher.made
    ((args, launches),) = only.bound
    assert launches == [(132,), (132,)]  # bound once, launched twice
    assert [x[0] for x in args[:3]] == ["desc"] * 3
    assert type(args[3]) is TensorAddress and args[3].data_ptr() == bias.data_ptr() and args[3].dtype == torch.float16
    # None (no bias): its own bound launch, passing None (a constexpr to triton).
    gluon((132,), (a, b, c), BLOCKS, {}, {}, "v", (None,))
    assert len(only.bound) == 2 and only.bound[1][0][3] is None
    # Another bias, or the same memory read as another dtype: each a new bound launch.
    gluon((132,), (a, b, c), BLOCKS, {}, {}, "v", (fp16(512),))
    gluon((132,), (a, b, c), BLOCKS, {}, {}, "v", (bias.view(torch.bfloat16),))
    assert len(only.bound) == 4 and only.bound[3][0][3].dtype == torch.bfloat16
    # No plain arguments (the Blackwell kernel): the three descriptors alone, as before.
    gluon((132,), (a, b, c), BLOCKS, {}, {}, "v")
    assert len(only.bound) == 5 and len(only.bound[4][0]) == 3
    assert len(FakeLauncher.made) == 1  # one compiled variant throughout


def test_gluon_launch_keeps_no_bias_alive(fakes) -> None:
    gluon = GluonLaunch("kernel")
    a, b, c = torch.empty(8, 8), torch.empty(8, 8), torch.empty(8, 8)
    bias = fp16(8)
    alive = weakref.ref(bias)
    gluon((1,), (a, b, c), BLOCKS, {}, {}, "v", (bias,))
    del bias
    gc.collect()
    assert alive() is None
