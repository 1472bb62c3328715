"""Bad inputs and bad parameters raise InputError before any launch, so these run on the CPU.

Most checks come after the device check, so they are exercised with ``OnCuda``: a CPU tensor that
reports a CUDA device. Everything the launcher inspects before launching (shape, dtype, strides,
data pointer, device) is real; an input that passed every check would fail at the first CUDA call,
which none of these tests reach.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import tkreg_hopper_matmul.launch as launch
import torch
from tkreg_hopper_matmul import config as cfg
from tkreg_hopper_matmul.choice import choose
from tkreg_hopper_matmul.launch import matmul_hopper_ws
from tkreg_hopper_matmul.plugin import KERNEL

from tkreg import InputError
from tkreg.core.refs import resolve
from tkreg.testing.fakes import OnDevice as OnCuda


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
    # A transposed view: its last stride is not 1 (A is read row-major only).
    raises("a: last stride is 64", OnCuda(fp16(64, 64).t()), OnCuda(fp16(64, 64)))
    # B with no contiguous dimension at all.
    raises(r"b: no dimension has stride 1 \(strides \(128, 2\)\)", OnCuda(fp16(64, 64)), OnCuda(fp16(64, 128)[:, ::2]))
    # B = W.t() for a weight whose rows (K = 36 elements of a 44-wide buffer) are 88 bytes apart.
    a, w = fp16(8, 48)[:, :36], fp16(64, 44)[:, :36]
    raises(r"b.t\(\) \(B read as the transpose of an \(N, K\) weight\): stride of dim 0 is 44", OnCuda(a), OnCuda(w.t()))
    # A view starting one element in: base address 2 bytes past 16-byte alignment.
    a = fp16(64, 72)[:, 1:65]
    raises("a: base address is not 16-byte aligned", OnCuda(a), OnCuda(fp16(64, 64)))


def test_output_checks():
    a, b = OnCuda(fp16(64, 32)), OnCuda(fp16(32, 48))
    raises(r"out has shape \(48, 64\); expected \(64, 48\)", a, b, out=OnCuda(fp16(48, 64)))
    raises("out has dtype bfloat16; expected float16", a, b, out=OnCuda(fp16(64, 48).bfloat16()))
    raises("tensors must share one device: a on cuda:0, b on cuda:0, out on cpu", a, b, out=fp16(64, 48))


def test_output_the_launcher_allocates_must_suit_tma():
    # N = 36 with B inside a TMA-legal padded buffer: a contiguous (M, 36) output has 72-byte rows.
    b = fp16(32, 40)[:, :36]
    raises(r"out: rows of N=36 elements are 72 bytes, not a multiple of 16", OnCuda(fp16(64, 32)), OnCuda(b))


def test_bad_parameters_are_refused_before_the_inputs_are_looked_at():
    raises("unknown parameter", fp16(64, 64), fp16(64, 64), BLOCK=64)
    raises("CONSUMERS=4 must be 1..2", fp16(64, 64), fp16(64, 64), CONSUMERS=4)


def test_requirements_inputs_checker_drops_tma_illegal_inputs():
    reasons = resolve(KERNEL.requires.inputs)
    assert reasons(fp16(64, 64), fp16(64, 64)) == []
    # An nn.Linear weight as stored: B = W.t() is taken without a copy.
    assert reasons(fp16(64, 64), fp16(48, 64).t()) == []
    assert any("stride of dim 0" in r for r in reasons(fp16(64, 20), fp16(20, 64)))


@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_launcher_plans_with_the_layout_and_the_sm_count(monkeypatch, layout):
    """With no parameters the launcher plans with B's layout and this GPU's SM count (stopped at
    the plan: nothing is launched)."""
    seen = {}

    def stop(*args):
        seen["args"] = args
        raise InputError("stop before launch")

    monkeypatch.setattr(launch, "num_sms", lambda device: 132)
    monkeypatch.setattr(launch, "launch_plan", stop)
    launch._resolved.clear()
    b = fp16(64, 48) if layout == "kn" else fp16(48, 64).t()
    raises("stop before launch", OnCuda(fp16(32, 64)), OnCuda(b), scheduler="grouped-1")
    assert seen["args"] == (32, 48, 64, layout, 132, None, "grouped-1")
    raises("stop before launch", OnCuda(fp16(32, 64)), OnCuda(b), NUM_STAGES=4, EPILOGUE_SPLIT=2)
    assert seen["args"][5] == cfg.HopperConfig(NUM_STAGES=4, EPILOGUE_SPLIT=2) and seen["args"][6] is None


@pytest.mark.parametrize("layout", ["kn", "nk"])
@pytest.mark.parametrize(("M", "N", "K"), [(8192, 8192, 512), (2048, 2048, 256), (16, 4096, 4096), (100, 1000, 72)])
def test_launch_plan_follows_the_choice(layout, M, N, K):
    plan = launch.launch_plan(M, N, K, layout, 132, None, None)
    pick = choose(M, N, K, layout, 132)
    c = plan.config
    assert c == replace(pick.config, SPLIT_K=plan.split_k) and plan.scheduler == pick.scheduler and plan.why == pick.why
    assert plan.split_k == cfg.effective_split_k(K, pick.config)
    units = -(-M // c.BLOCK_M) * -(-N // c.BLOCK_N) * plan.split_k
    assert plan.grid == (min(132, units),)
    b_block = [c.BLOCK_K, c.BLOCK_N] if layout == "kn" else [c.BLOCK_N, c.BLOCK_K]
    c_block = [c.rows, c.BLOCK_N // c.EPILOGUE_SPLIT]
    assert plan.blocks == {"a": [c.rows, c.BLOCK_K], "b": b_block, "c": [1, *c_block] if plan.split_k > 1 else c_block}
    assert plan.constexprs["B_NK"] == (layout == "nk")


def test_launch_plan_with_given_config_and_scheduler():
    given = cfg.HopperConfig(BLOCK_M=64, BLOCK_N=128, NUM_STAGES=4, CONSUMERS=1, SPLIT_K=8)
    plan = launch.launch_plan(64, 256, 100, "kn", 132, given, None)
    # K = 100 is two 64-wide steps: eight slices shrink to two; the default scheduler for a given config.
    assert plan.split_k == 2 and plan.config.SPLIT_K == 2 and plan.scheduler == launch.DEFAULT_SCHEDULER
    assert plan.grid == (4,) and plan.why == "given"


def test_checks_are_cached_per_shape_class_but_addresses_are_checked_every_call(monkeypatch):
    """A call of a cached shape class skips the checks but not the addresses' alignment."""
    resolved = []
    monkeypatch.setattr(launch, "_resolve", lambda *args: resolved.append(args) or ("kn", None, None))
    monkeypatch.setattr(launch, "make_output", lambda a, b: (_ for _ in ()).throw(Stop()))
    launch._resolved.clear()
    buffer = fp16(64, 80)
    a, b = OnCuda(buffer[:, :64]), OnCuda(fp16(64, 48))
    for _ in range(2):
        with pytest.raises(Stop):
            matmul_hopper_ws(a, b)
    assert len(resolved) == 1
    # The same shape class one element in: not taken from the cache, so the checks run (and refuse it).
    monkeypatch.undo()
    launch._resolved.clear()
    matmul_hopper_ws_stop(a, b)
    raises("a: base address is not 16-byte aligned", OnCuda(buffer[:, 1:65]), b)
    # Not tensors at all: the full checks and their message.
    raises(r"a must be a torch\.Tensor, got list", [[1.0]], b)


class Stop(Exception):
    pass


def matmul_hopper_ws_stop(a, b) -> None:
    """Fill the cache for a and b's shape class (stopped at the output allocation)."""
    from unittest import mock

    with mock.patch.object(launch, "make_output", side_effect=Stop), mock.patch.object(launch, "num_sms", return_value=132):
        with pytest.raises(Stop):
            matmul_hopper_ws(a, b)
