"""add_tma refuses bad inputs and configs before touching CUDA (so on this CPU machine too), and
lookup with inputs TMA cannot take drops it, saying why, for the portable kernel."""

from __future__ import annotations

import re

import pytest
import torch
from tkreg_elementwise.testing import bad_calls, explain_add, heavy_imports
from tkreg_tma_elementwise.add_tma import KERNEL, add_tma

from tkreg import InputError

PLUGINS = "elementwise,tma_elementwise"


def test_plugin_module_imports_neither_torch_nor_triton():
    assert heavy_imports("tkreg_tma_elementwise.plugin") == []


@pytest.mark.parametrize("call", bad_calls(tma=True), ids=lambda c: c.id)
def test_bad_inputs_raise_input_error_before_any_launch(call):
    with pytest.raises(InputError, match=re.escape(call.expect)):
        add_tma(*call.args, **call.kwargs)


@pytest.mark.parametrize(
    ("params", "expect"),
    [
        ({"YBLOCK": 512}, "YBLOCK must be a power of two <= 256"),
        ({"XBLOCK": 48}, "XBLOCK must be a power of two"),
        ({"YBLOCK": 2}, "a TMA box row needs >= 16"),
        ({"XBLOCK": 128, "YBLOCK": 128, "num_buffers": 4}, "bytes of shared memory; a block has 232448"),
        ({"num_buffers": 0}, "num_buffers must be an integer >= 1"),
        ({"num_warps": 3}, "num_warps must be one of"),
        ({"BLOCK": 64}, "unknown parameters ['BLOCK']"),
    ],
)
def test_bad_configs_raise_value_error(params, expect):
    with pytest.raises(ValueError, match=re.escape(expect)):
        KERNEL.resolve("float32", params)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_default_tiles_are_the_measured_flat_tiles(dtype):
    config = KERNEL.resolve(dtype, {})
    assert (config["XBLOCK"], config["YBLOCK"], config["num_store_buffers"]) == (16, 256, 2)
    # the load slots fill about the same shared memory whatever the dtype
    assert config["num_buffers"] * getattr(torch, dtype).itemsize == 16


def test_lookup_picks_add_triton_for_rows_tma_cannot_address():
    verdicts = explain_add(PLUGINS, torch.randn(33, 33), torch.randn(33, 33))
    assert [v.kernel.name for v in verdicts if v.runs] == ["add_triton"]
    rejected = next(v for v in verdicts if v.kernel.name == "add_tma")
    assert any("stride of dim 0 is 33 elements (132 bytes), not a multiple of 16 bytes" in r for r in rejected.reasons)


def test_lookup_keeps_add_tma_for_tma_legal_inputs_below_the_measured_faster_add_triton():
    padded = torch.randn(33, 40)[:, :33]
    assert [v.kernel.name for v in explain_add(PLUGINS, padded, padded) if v.runs] == ["add_triton", "add_tma"]
