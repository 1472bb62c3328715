"""matmul_blackwell_ws's requirements and checks: where lookup accepts and refuses it (with a
reason), bad inputs and bad parameters rejected before any launch."""

from __future__ import annotations

import pytest
import torch
from tkreg_blackwell_matmul.launcher import DEFAULTS, config_reasons, matmul_blackwell_ws

from tkreg import InputError
from tkreg.core.loading import build_registry


@pytest.fixture(scope="module")
def registry():
    return build_registry(env={"TKREG_PLUGINS": "matmul,schedulers,blackwell_matmul"})


def verdict(registry, capability, inputs=None):
    return next(v for v in registry.explain("matmul", capability, inputs) if v.kernel.name == "matmul_blackwell_ws")


def test_runs_on_sm100_only(registry):
    assert verdict(registry, "10.0").runs
    assert verdict(registry, "10.3").runs
    for cap in ("9.0", "12.0", "8.0"):
        v = verdict(registry, cap)
        assert not v.runs and "sm_100a" in v.reasons[0], v.reasons
    assert not verdict(registry, "interpreter").runs


def test_ranked_above_portable_on_blackwell(registry):
    names = [k.name for k in registry.lookup("matmul", "10.0")]
    assert names.index("matmul_blackwell_ws") < names.index("matmul_triton")


def test_lookup_refuses_tma_illegal_inputs(registry):
    class FakeDevice:
        type = "cuda"

    class Fake:
        """Duck-typed CUDA tensor: lookup inspects, never touches data."""

        def __init__(self, t):
            self.t, self.device, self.dtype, self.shape = t, FakeDevice(), t.dtype, t.shape

        def __getattr__(self, name):
            return getattr(self.t, name)

    odd = [Fake(torch.randn(33, 33).half()), Fake(torch.randn(33, 33).half())]
    v = verdict(registry, "10.0", odd)
    assert not v.runs and any("16 bytes" in r for r in v.reasons), v.reasons
    legal = [Fake(torch.randn(208, 304).half()), Fake(torch.randn(304, 416).half())]
    assert verdict(registry, "10.0", legal).runs


def test_bad_inputs_raise_before_launch():
    a, b = torch.randn(64, 32).half(), torch.randn(32, 64).half()
    with pytest.raises(InputError, match="needs CUDA tensors"):
        matmul_blackwell_ws(a, b)
    with pytest.raises(InputError, match="inner dimensions differ"):
        matmul_blackwell_ws(a, torch.randn(31, 64).half())
    with pytest.raises(InputError, match="b has dtype float32"):
        matmul_blackwell_ws(a, torch.randn(32, 64))


def test_bad_parameters_raise():
    assert config_reasons(DEFAULTS) == []
    assert config_reasons({**DEFAULTS, "BLOCK_N": 512})  # two accumulators exceed tensor memory
    assert config_reasons({**DEFAULTS, "num_buffers": 6})  # exceeds shared memory
    assert config_reasons({**DEFAULTS, "SUBTILE_FACTOR": 3})
    with pytest.raises(ValueError, match="unknown parameters"):
        matmul_blackwell_ws(torch.randn(8, 8).half(), torch.randn(8, 8).half(), BLOCKM=64)


def test_takes_a_weight_as_stored_and_refuses_what_tma_cannot_read(registry):
    x = torch.randn(64, 4096).bfloat16()
    w = torch.randn(1024, 4096).bfloat16()
    assert verdict(registry, "10.0", (x, w.t())).runs
    assert verdict(registry, "10.0", (x, torch.randn(4096, 1024).bfloat16())).runs
    refused = verdict(registry, "10.0", (x, torch.randn(4096, 2048).bfloat16()[:, ::2]))
    assert not refused.runs and "no dimension has stride 1" in refused.reasons[0]
