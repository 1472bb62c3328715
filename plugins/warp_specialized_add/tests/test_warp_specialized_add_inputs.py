"""add_warp_specialized refuses bad inputs and configs before touching CUDA, and lookup ranks it
first where TMA can take the inputs and drops it, saying why, where it cannot."""

from __future__ import annotations

import re

import pytest
import torch
from tkreg_elementwise.testing import bad_calls, explain_add, heavy_imports
from tkreg_warp_specialized_add.add_ws import KERNEL, add_warp_specialized

from tkreg import InputError

PLUGINS = "elementwise,tma_elementwise,warp_specialized_add"


def test_plugin_module_imports_neither_torch_nor_triton():
    assert heavy_imports("tkreg_warp_specialized_add.plugin") == []


@pytest.mark.parametrize("call", bad_calls(tma=True), ids=lambda c: c.id)
def test_bad_inputs_raise_input_error_before_any_launch(call):
    with pytest.raises(InputError, match=re.escape(call.expect)):
        add_warp_specialized(*call.args, **call.kwargs)


@pytest.mark.parametrize(
    ("params", "expect"),
    [
        ({"num_warps": 2}, "num_warps must be one of (4, 8)"),
        ({"num_load_buffers": 14, "tiles_per_program": 16}, "bytes of shared memory; a block has 232448"),  # 30 tiles of 16 KiB
        ({"num_store_buffers": 0}, "num_store_buffers must be an integer >= 1"),
        ({"num_buffers": 2}, "unknown parameters ['num_buffers']"),
    ],
)
def test_bad_configs_raise_value_error(params, expect):
    with pytest.raises(ValueError, match=re.escape(expect)):
        KERNEL.resolve("float32", params)


def test_lookup_ranks_by_measured_priority_for_tma_legal_inputs():
    a, b = torch.randn(257, 136), torch.randn(257, 136)
    assert [v.kernel.name for v in explain_add(PLUGINS, a, b) if v.runs] == ["add_tma", "add_warp_specialized", "add_triton"]


@pytest.mark.parametrize(
    ("capability", "runs"),
    [
        ("9.0", ["add_tma", "add_warp_specialized", "add_triton"]),  # Hopper: the Gluon kernels first
        ("10.0", ["add_tma", "add_warp_specialized", "add_triton"]),
        ("8.0", ["add_triton"]),  # Ampere: only the portable kernel, the others say why
    ],
)
def test_lookup_by_capability(capability, runs):
    from tkreg.core.loading import build_registry

    verdicts = build_registry(env={"TKREG_PLUGINS": PLUGINS}).explain("add", capability)
    assert [v.kernel.name for v in verdicts if v.runs] == runs
    for v in verdicts:
        if not v.runs:
            assert any("capability" in r and "8.0" in r for r in v.reasons), v.reasons


def test_lookup_drops_it_for_a_transposed_input_saying_why():
    verdicts = explain_add(PLUGINS, torch.randn(136, 257).t(), torch.randn(257, 136))
    assert [v.kernel.name for v in verdicts if v.runs] == ["add_triton"]
    rejected = next(v for v in verdicts if v.kernel.name == "add_warp_specialized")
    assert "a: last stride is 257; TMA needs 1 (a contiguous last dimension)" in rejected.reasons
    assert not any(r.startswith("b:") for r in rejected.reasons)
