"""add_triton refuses bad inputs and configs with a clear error before launching anything."""

from __future__ import annotations

import re

import pytest
import torch
from tkreg_elementwise.add_triton import add_triton, choose_config, tile_shape
from tkreg_elementwise.testing import bad_calls

from tkreg import InputError


@pytest.mark.parametrize("call", bad_calls(tma=False), ids=lambda c: c.id)
def test_bad_inputs_raise_input_error(monkeypatch, call):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # CPU tensors pass the device check: what is wrong is the call
    with pytest.raises(InputError, match=re.escape(call.expect)):
        add_triton(*call.args, **call.kwargs)


def test_cpu_tensors_without_the_interpreter_are_refused(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(InputError, match=r"needs CUDA tensors \(or CPU tensors with TRITON_INTERPRET=1\)"):
        add_triton(torch.randn(4, 8), torch.randn(4, 8))


@pytest.mark.parametrize("params", [{"BLOCK": 1000}, {"BLOCK": 0}, {"num_warps": 3}])
def test_bad_configs_raise_value_error(monkeypatch, params):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # past the device check: the config is what is wrong
    with pytest.raises(ValueError, match=r"add_triton: (BLOCK|num_warps) must be"):
        add_triton(torch.randn(4, 8), torch.randn(4, 8), **params)


def test_heuristic_uses_smaller_blocks_for_small_inputs():
    assert choose_config(1024 * 1024)["BLOCK"] < choose_config(32768 * 32768)["BLOCK"]


@pytest.mark.parametrize(("block", "n", "expect"), [(4096, 136, (32, 128)), (4096, 1, (4096, 1)), (1024, 33, (16, 64))])
def test_strided_tile_is_as_wide_as_the_rows_allow(block, n, expect):
    assert tile_shape(block, n) == expect
