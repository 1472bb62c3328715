"""The bias (N,) of ``matmul_hopper_ws`` on the CPU: the checks that accept or refuse one (the
Requirements checker and the launcher's, before any launch), where the launcher sends it (the
kernel's epilogue, or once to the reduce kernel with split-K), the shape-class cache telling calls
with and without one apart, and the reduce kernel adding it under the interpreter. GluonLaunch
binding it is tested with GluonLaunch, in plugins/matmul/tests/test_matmul_gluon_launch.py; the
compiled epilogue in test_hopper_matmul_compile.py.

Inputs that pass the device check are CPU tensors wrapped in ``OnCuda`` (they report cuda:0), as in
test_hopper_matmul_inputs.py; the launch itself is replaced where a test goes past the checks.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import tkreg_hopper_matmul.launch as launch
import torch
from tkreg_hopper_matmul.launch import matmul_hopper_ws
from tkreg_hopper_matmul.plugin import KERNEL
from tkreg_matmul.checks import gluon_matmul_inputs_reasons

from tkreg import InputError
from tkreg.core.loading import build_registry
from tkreg.core.refs import resolve
from tkreg.testing.fakes import OnDevice as OnCuda
from tkreg.testing.markers import runs_the_interpreter


class Stop(Exception):
    pass


def fp16(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).half()


# -- the checks --------------------------------------------------------------------------------


def test_requirements_accept_a_bias_of_n_elements_and_the_operands_dtype():
    reasons = resolve(KERNEL.requires.inputs)
    a, w = fp16(64, 64), fp16(48, 64)
    assert reasons(a, w.t(), fp16(48)) == [] and reasons(a, w.t(), None) == [] and reasons(a, w.t()) == []
    assert reasons(a.bfloat16(), w.bfloat16().t(), fp16(48).bfloat16()) == []
    assert any("bias has 47 elements; it must have N=48" in r for r in reasons(a, w.t(), fp16(47)))
    assert any("bias must have a's dtype" in r for r in reasons(a, w.t(), fp16(48).bfloat16()))
    assert any("bias must be contiguous, got stride 2" in r for r in reasons(a, w.t(), fp16(96)[::2]))
    assert any("bias must be 1-D" in r for r in reasons(a, w.t(), fp16(1, 48)))
    assert any("bias has dtype float32" in r for r in reasons(a, w.t(), torch.randn(48)))
    # The operands' TMA rules still apply with a bias (K = 20: 40-byte rows).
    assert any("stride of dim 0" in r for r in reasons(fp16(64, 20), fp16(20, 64), fp16(64)))


def test_blackwell_still_refuses_a_bias():
    assert build_registry(env={}).kernel("matmul_blackwell_ws").requires.inputs == (
        "tkreg_matmul.checks:gluon_matmul_inputs_reasons"
    )
    assert gluon_matmul_inputs_reasons(fp16(64, 64), fp16(64, 48), fp16(48)) == [
        "bias: this kernel has no bias epilogue (it takes bias=None only)"
    ]


@pytest.mark.parametrize(
    ("bias", "match"),
    [
        (OnCuda(fp16(47)), "bias has 47 elements; it must have N=48"),
        (OnCuda(fp16(48).bfloat16()), "bias must have a's dtype"),
        (OnCuda(fp16(96)[::2]), "bias must be contiguous, got stride 2"),
        (OnCuda(fp16(1, 48)), "bias must be 1-D"),
        (OnCuda(torch.randn(48)), "bias has dtype float32"),
        (fp16(48), "tensors must share one device: a on cuda:0, bias on cpu"),
        ([0.0] * 48, "bias must be a torch.Tensor, got list"),
    ],
    ids=["length", "dtype", "strided", "2-D", "float32", "device", "list"],
)
def test_the_launcher_refuses_a_bad_bias_before_any_launch(monkeypatch, bias, match):
    monkeypatch.setattr(launch, "num_sms", lambda device: 132)
    monkeypatch.setattr(launch, "_launch", lambda *args: pytest.fail("launched with a bad bias"))
    launch._resolved.clear()
    with pytest.raises(InputError, match=match):
        matmul_hopper_ws(OnCuda(fp16(64, 64)), OnCuda(fp16(64, 48)), bias)


def test_a_bad_bias_is_refused_after_a_good_one_of_its_shape_was_cached(monkeypatch):
    """A cached shape class with a contiguous bias does not let a strided one of that shape through."""
    monkeypatch.setattr(launch, "num_sms", lambda device: 132)
    monkeypatch.setattr(launch, "make_output", lambda a, b: (_ for _ in ()).throw(Stop()))
    launch._resolved.clear()
    a, b = OnCuda(fp16(64, 64)), OnCuda(fp16(64, 48))
    with pytest.raises(Stop):
        matmul_hopper_ws(a, b, OnCuda(fp16(48)))
    with pytest.raises(InputError, match="bias must be contiguous"):
        matmul_hopper_ws(a, b, OnCuda(fp16(96)[::2]))
    with pytest.raises(InputError, match="bias must have a's dtype"):
        matmul_hopper_ws(a, b, OnCuda(fp16(48).bfloat16()))


def test_calls_with_and_without_a_bias_do_not_share_a_shape_class(monkeypatch):
    resolved = []
    monkeypatch.setattr(launch, "_resolve", lambda *args: resolved.append(args) or ("kn", None, None))
    monkeypatch.setattr(launch, "make_output", lambda a, b: (_ for _ in ()).throw(Stop()))
    launch._resolved.clear()
    a, b = OnCuda(fp16(64, 64)), OnCuda(fp16(64, 48))
    bias = OnCuda(fp16(48))
    # None twice, a bias twice (another tensor of its class: a hit), then a bf16 and a strided one.
    for given in (None, None, bias, OnCuda(fp16(48)), OnCuda(fp16(48).bfloat16()), OnCuda(fp16(96)[::2])):
        with pytest.raises(Stop):
            matmul_hopper_ws(a, b, given)
    assert [args[2] is None for args in resolved] == [True, False, False, False]
    assert len(resolved) == 4


# -- where the bias goes ---------------------------------------------------------------------


@pytest.mark.parametrize("split", [False, True], ids=["epilogue", "split-k"])
def test_the_bias_is_added_once_by_the_epilogue_or_by_the_reduce(monkeypatch, split):
    launched, reduced = [], []
    real_empty = torch.empty
    monkeypatch.setattr(launch, "num_sms", lambda device: 132)
    monkeypatch.setattr(launch, "make_output", lambda a, b: OnCuda(real_empty(a.shape[0], b.shape[1], dtype=a.dtype)))
    monkeypatch.setattr(launch, "_launch", lambda grid, tensors, blocks, constexprs, options, variant, args=(): launched.append(
        (tensors, tuple(args))))  # fmt: skip
    monkeypatch.setattr(launch, "reduce_partials", lambda ws, out, bias=None: reduced.append((ws, bias)) or out)
    # The split-K workspace, made on the "device" (a CPU tensor here).
    monkeypatch.setattr(torch, "empty", lambda *shape, device=None, **kw: OnCuda(real_empty(*shape, **kw)))
    launch._resolved.clear()
    a, w, bias = OnCuda(fp16(64, 1024)), OnCuda(fp16(256, 1024)), OnCuda(fp16(256))
    params = {"BLOCK_M": 64, "BLOCK_N": 128, "NUM_STAGES": 4, "CONSUMERS": 1, "SPLIT_K": 4 if split else 1}
    matmul_hopper_ws(a, OnCuda(w._t.t()), bias, **params)
    ((tensors, args),) = launched
    if split:
        # The partial sums carry no bias; the reduce adds it after the last slice.
        assert args == (None,)
        ((workspace, reduce_bias),) = reduced
        assert reduce_bias is bias and tuple(workspace.shape) == (4, 64, 256) and workspace.dtype == torch.float32
    else:
        assert args == (bias,) and reduced == []
        assert tensors[2].dtype == torch.float16
    # The weight is described as stored, whatever the bias.
    assert tuple(tensors[1].shape) == (256, 1024)


# -- the reduce kernel adds the bias, under the interpreter ----------------------------------------

REDUCE_BIAS_RUN = """
import torch
from tkreg_matmul.reduce import BLOCK, reduce_partials
g = torch.Generator().manual_seed(0)
UNIT = {torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24}
# fp16 and fp32 outputs: triton 3.6's interpreter rounds fp32 -> bf16 by truncation (the GPU rounds
# to nearest even), so a bf16 comparison would test the interpreter, not the kernel.
cases = ((3, 5, 200, torch.float32), (4, 1, 2 * BLOCK + 8, torch.float16), (2, 7, 136, torch.float16),
         (5, 3, 4104, torch.float16))
for split, M, N, dtype in cases:
    ws = torch.randn(split, M, N, generator=g)
    bias = (4 * torch.randn(N, generator=g)).to(dtype)
    buffer = torch.full((M, N + 8), float("nan"), dtype=dtype)
    out = buffer[:, 4:N + 4]  # strided, poisoned
    reduce_partials(ws, out, bias)
    assert buffer[:, :4].isnan().all() and buffer[:, N + 4:].isnan().all(), "wrote outside the output"
    assert not out.isnan().any(), ("unwritten elements", split, M, N)
    # Against float64: one rounding to dtype plus the fp32 sum of split + 1 terms.
    want = ws.double().sum(0) + bias.double()
    terms = ws.double().abs().sum(0) + bias.double().abs()
    bound = 2 * UNIT[dtype] * want.abs() + (split + 1) * 2.0 ** -24 * terms
    err = (out.double() - want).abs()
    assert (err <= bound).all(), ("float64", split, M, N, float(err.max()), int((err > bound).sum()))
    # Exactly what the kernel promises: the slices in order in fp32, then the bias, one rounding.
    expect = ws[0].clone()
    for s in range(1, split):
        expect += ws[s]
    assert torch.equal(out, (expect + bias.float()).to(dtype)), ("bits", split, M, N)
    # Without a bias the same workspace reduces to the sum alone (the bias is not added twice or
    # kept from an earlier launch).
    plain = torch.full((M, N), float("nan"), dtype=dtype)
    reduce_partials(ws, plain)
    assert torch.equal(plain, expect.to(dtype)), ("no bias", split, M, N)
print("reduced", len(cases))
"""


@runs_the_interpreter
def test_reduce_adds_the_bias_once_under_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", REDUCE_BIAS_RUN], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "reduced 4"


# Compiled in a fresh process without TRITON_INTERPRET (a worker that ran the interpreter has the
# kernel as an interpreter function, which cannot be compiled).
REDUCE_COMPILE_RUN = """
import json, re
from tkreg.launch.aot import AotSpec, compile_spec
from tkreg_matmul.reduce import BLOCK, NUM_WARPS, splitk_reduce_kernel
ints = {name: "i32" for name in ("M", "N", "SPLIT_K", "stride_om", "stride_on")}
found = {}
for bias in (False, True):
    signature = {"ws_ptr": "*fp32", "out_ptr": "*bf16", "bias_ptr": "*bf16" if bias else "constexpr", **ints,
                 "BLOCK": "constexpr"}
    constexprs = {"BLOCK": BLOCK} if bias else {"BLOCK": BLOCK, "bias_ptr": None}
    spec = AotSpec(splitk_reduce_kernel, signature, constexprs, {"num_warps": NUM_WARPS}, ("ws_ptr", "out_ptr", "bias_ptr"))
    code = compile_spec(spec, "sm_90a")
    found[str(bias)] = {"params": len(set(re.findall(r"splitk_reduce_kernel_param_(\\d+)", code.ptx))),
                        "b16_loads": len(re.findall(r"ld\\.global[.\\w]*\\.b16", code.ptx))}
print(json.dumps(found))
"""


def test_reduce_with_a_bias_compiles_for_sm90a():
    """The GPU build of the reduce kernel: the bias version loads bf16 bias values, the version
    without one has no bias parameter and loads no 2-byte value."""
    import json

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", REDUCE_COMPILE_RUN], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["False"]["b16_loads"] == 0 and found["True"]["b16_loads"] > 0, found
    assert found["True"]["params"] == found["False"]["params"] + 1, found
