"""Bad inputs and bad parameters raise InputError before any launch, so these run on the CPU.

Most checks come after the device check, so they are exercised with ``OnCuda``: a CPU tensor that
reports a CUDA device. Everything the launcher inspects before launching (shape, dtype, strides,
data pointer, device) is real; an input that passed every check would fail at the first CUDA call,
which none of these tests reach.
"""

from __future__ import annotations

import pytest
import tkreg_hopper_matmul.launch as launch
import torch
from tkreg_hopper_matmul import config as cfg
from tkreg_hopper_matmul.launch import matmul_hopper_ws
from tkreg_hopper_matmul.plugin import KERNEL

from tkreg import InputError
from tkreg.refs import resolve

CUDA = torch.device("cuda", 0)


class OnCuda:
    """A CPU tensor that says it lives on cuda:0 (torch.device needs no GPU to exist)."""

    def __init__(self, t: torch.Tensor) -> None:
        self._t = t
        self.dtype, self.shape, self.device = t.dtype, t.shape, CUDA

    def stride(self, dim: int | None = None):
        return self._t.stride() if dim is None else self._t.stride(dim)

    def __getattr__(self, name: str):  # data_ptr, element_size, dim, numel
        return getattr(self._t, name)


def fp16(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).half()


def raises(match: str, *args, **kwargs) -> None:
    with pytest.raises(InputError, match=match):
        matmul_hopper_ws(*args, **kwargs)


def test_cpu_tensors_are_refused():
    raises("a is on cpu; this kernel needs CUDA tensors", fp16(64, 64), fp16(64, 64))


def test_rank_dtype_and_inner_dimension():
    raises("a must be 2-D", OnCuda(fp16(4, 64, 64)), OnCuda(fp16(64, 64)))
    raises("a has dtype float32", OnCuda(torch.randn(64, 64)), OnCuda(torch.randn(64, 64)))
    raises("a and b must have one dtype", OnCuda(fp16(64, 64)), OnCuda(fp16(64, 64).bfloat16()))
    raises("inner dimensions differ", OnCuda(fp16(64, 32)), OnCuda(fp16(64, 64)))
    raises("a is empty", OnCuda(fp16(0, 64)), OnCuda(fp16(64, 64)))


def test_tma_layout_rules():
    # K = 20: A's rows are 40 bytes apart, not a multiple of 16.
    raises(r"a: stride of dim 0 is 20 elements \(40 bytes\)", OnCuda(fp16(64, 20)), OnCuda(fp16(20, 64)))
    # A transposed view: its last stride is not 1.
    raises("b: last stride is 64", OnCuda(fp16(64, 64)), OnCuda(fp16(64, 64).t()))
    # A view starting one element in: base address 2 bytes past 16-byte alignment.
    a = fp16(64, 72)[:, 1:65]
    raises("a: base address is not 16-byte aligned", OnCuda(a), OnCuda(fp16(64, 64)))


def test_output_checks():
    a, b = OnCuda(fp16(64, 32)), OnCuda(fp16(32, 48))
    raises(r"out has shape \(48, 64\); expected \(64, 48\)", a, b, out=OnCuda(fp16(48, 64)))
    raises("out has dtype bfloat16; expected float16", a, b, out=OnCuda(fp16(64, 48).bfloat16()))
    raises("tensors must share one device: a on cuda:0, b on cuda:0, out on cpu", a, b, out=fp16(64, 48))


def test_output_the_launcher_allocates_must_suit_tma(monkeypatch):
    # N = 36 with B inside a TMA-legal padded buffer: a contiguous (M, 36) output has 72-byte rows.
    monkeypatch.setattr(launch, "num_sms", lambda device: 132)
    monkeypatch.setattr(launch, "output_for", lambda a, b, out: OnCuda(fp16(a.shape[0], b.shape[1])))
    b = fp16(32, 40)[:, :36]
    raises(r"out: rows of N=36 elements are 72 bytes, not a multiple of 16", OnCuda(fp16(64, 32)), OnCuda(b))


def test_bad_parameters_are_refused_before_the_inputs_are_looked_at():
    raises("unknown parameter", fp16(64, 64), fp16(64, 64), BLOCK=64)
    raises("CONSUMERS=4 must be 1..2", fp16(64, 64), fp16(64, 64), CONSUMERS=4)


def test_requirements_inputs_checker_drops_tma_illegal_inputs():
    reasons = resolve(KERNEL.requires.inputs)
    assert reasons(fp16(64, 64), fp16(64, 64)) == []
    assert any("stride of dim 0" in r for r in reasons(fp16(64, 20), fp16(20, 64)))


def test_launcher_default_choice_uses_the_sm_count(monkeypatch):
    """With no parameters the launcher asks choose() with this GPU's SM count; check which blocks
    reach the descriptors by stopping there."""
    seen = {}

    def stop(a, b, c, **blocks):
        seen.update(blocks)
        raise InputError("stop before launch")

    monkeypatch.setattr(launch, "num_sms", lambda device: 132)
    monkeypatch.setattr(launch, "output_for", lambda a, b, out: OnCuda(fp16(a.shape[0], b.shape[1])))
    monkeypatch.setattr(launch, "matmul_descriptors", stop)
    for (M, N), expected in [
        ((8192, 8192), cfg.CANDIDATES[0]),
        ((2048, 2048), cfg.CANDIDATES[1]),
        ((1024, 1024), cfg.CANDIDATES[-1]),
    ]:
        seen.clear()
        raises("stop before launch", OnCuda(fp16(M, 64)), OnCuda(fp16(64, N)))
        assert (seen["BLOCK_M"], seen["BLOCK_N"], seen["BLOCK_K"]) == (expected.rows, expected.BLOCK_N, expected.BLOCK_K)
        assert seen["c_block"] == [expected.rows, expected.BLOCK_N // expected.EPILOGUE_SPLIT]
