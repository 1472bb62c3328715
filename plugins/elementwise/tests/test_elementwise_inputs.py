"""add_triton refuses bad inputs and configs with a clear error before launching anything."""

from __future__ import annotations

import itertools
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


def _candidate_tensors() -> list[object]:
    """Inputs good and bad in every way the add checks look at (CPU tensors: the fast checks are
    pointed at the CPU below)."""
    f = torch.randn
    return [
        f(4, 8), f(4, 8), f(4, 8).half(), f(4, 8).bfloat16(), f(4, 8).double(), torch.ones(4, 8, dtype=torch.int32),
        f(8), f(2, 4, 8), f(0, 8), f(8, 4).t(), f(4, 12)[:, 1:9], f(4, 12)[:, :8], f(8, 8)[::2], f(4, 16)[:, ::2],
        torch.nn.Parameter(f(4, 8)), [[1.0]],
    ]


@pytest.mark.parametrize("tma", [False, True], ids=["portable", "tma"])
def test_fast_checks_never_accept_what_the_full_checks_refuse(monkeypatch, tma):
    """plainly_valid is a sufficient condition for the full checks: over every (a, b, out) of the
    candidates, whatever it accepts, the full checks accept too; and it does accept good inputs."""
    from tkreg_elementwise import add_checks

    from tkreg.launch import inputs

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(inputs, "FAST_DEVICE_TYPE", "cpu")
    pool = _candidate_tensors()
    accepted = 0
    for a, b, out in itertools.product(pool, pool, [None, *pool]):
        if not add_checks.plainly_valid(a, b, out, tma=tma):
            continue
        accepted += 1
        with monkeypatch.context() as full:
            full.setattr(add_checks, "plainly_valid", lambda *args, **kw: False)
            add_checks.checked_output(a, b, out, interpretable=True, tma=tma)  # raises if refused
    assert accepted >= (60 if tma else 300)


def test_fast_checks_take_only_plain_tensors_on_the_fast_device():
    from tkreg_elementwise.add_checks import plainly_valid

    a = torch.randn(4, 8)
    assert not plainly_valid(a, a, None, tma=False)  # CPU: the full checks decide (interpreter or not)
