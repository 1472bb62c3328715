"""What the launchers refuse, before any launch, with a tkreg.InputError that names the problem;
and the fast checks, which must never accept what the full checks refuse. Nothing here launches
a kernel: every call is refused (or only the checks run)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from tkreg_norms import checks, launch

import tkreg
from tkreg.launch import inputs as launch_inputs

M, N = 6, 40


def _valid(layer: bool, backward: bool, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    args: dict[str, Any] = {
        "x": torch.randn(M, N, generator=g, dtype=dtype),
        "weight": torch.randn(N, generator=g, dtype=dtype),
        "bias": torch.randn(N, dtype=dtype) if layer else None,
        "y": torch.empty(M, N, dtype=dtype),
        "mean": torch.empty(M, 1) if layer else None,
        "rstd": torch.rand(M, 1) + 0.5,
        "eps": 1e-5,
    }
    if backward:
        args["grad_y"] = torch.randn(M, N, dtype=dtype)
        args["grad_x"] = torch.empty(M, N, dtype=dtype)
        args["grad_weight"] = torch.empty(N, dtype=dtype)
        args["grad_bias"] = torch.empty(N, dtype=dtype) if layer else None
    return args


def _call(layer: bool, backward: bool, a: dict[str, Any], out: Any = None) -> Any:
    if backward:
        grads = (a["grad_x"], a["grad_weight"], *((a["grad_bias"],) if layer else ()))
        out = grads if out is None else out
        if layer:
            return launch.layer_norm_backward(a["x"], a["weight"], a["bias"], a["y"], a["mean"], a["rstd"], a["grad_y"],
                                              out=out, eps=a["eps"])
        return launch.rms_norm_backward(a["x"], a["weight"], a["y"], a["rstd"], a["grad_y"], out=out, eps=a["eps"])
    outs = (a["y"], *((a["mean"],) if layer else ()), a["rstd"])
    out = outs if out is None else out
    if layer:
        return launch.layer_norm_forward(a["x"], a["weight"], a["bias"], out=out, eps=a["eps"])
    return launch.rms_norm_forward(a["x"], a["weight"], out=out, eps=a["eps"])


def _set(name: str, value: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], None]:
    def mutate(a: dict[str, Any]) -> None:
        a[name] = value(a)

    return mutate


# (what is wrong, how, a fragment of the message that must name it); applies to every op and direction
COMMON = [
    ("x 1-D", _set("x", lambda a: a["x"][0]), "x must be 2-D, got shape (40,)"),
    ("x 3-D", _set("x", lambda a: a["x"].view(2, 3, N)), "x must be 2-D"),
    ("x float64", _set("x", lambda a: a["x"].double()), "x has dtype float64; supported: float32, float16, bfloat16"),
    ("x int", _set("x", lambda a: a["x"].int()), "x has dtype int32"),
    ("x empty", _set("x", lambda a: a["x"][:0]), "x is empty"),
    ("x a list", _set("x", lambda a: a["x"].tolist()), "x must be a torch.Tensor, got list"),
    ("x column stride", _set("x", lambda a: torch.randn(M, 2 * N)[:, ::2]), "x has column stride 2; the kernels need 1"),
    ("weight too short", _set("weight", lambda a: a["weight"][:-1]), "weight has 39 elements; expected one per column (40)"),
    ("weight 2-D", _set("weight", lambda a: a["weight"].view(1, N)), "weight must be 1-D"),
    ("weight strided", _set("weight", lambda a: torch.randn(2 * N)[::2]), "weight has stride 2; the kernels need it contiguous"),
    ("weight float64", _set("weight", lambda a: a["weight"].double()), "weight has dtype float64"),
    ("rstd bf16", _set("rstd", lambda a: a["rstd"].bfloat16()), "rstd has dtype bfloat16; supported: float32"),
    ("rstd too long", _set("rstd", lambda a: torch.ones(M + 1, 1)), "rstd has shape (7, 1); expected one per row (6, 1)"),
    ("rstd 1-D", _set("rstd", lambda a: torch.ones(M)), "rstd must be 2-D, got shape (6,)"),
    ("rstd strided", _set("rstd", lambda a: torch.ones(2 * M, 1)[::2]), "rstd has row stride 2; the kernels need it contiguous"),
]
FORWARD = [
    ("y wrong shape", _set("y", lambda a: torch.empty(M, N + 1)), "y has shape (6, 41); expected (6, 40)"),
    ("y wrong dtype", _set("y", lambda a: torch.empty(M, N, dtype=torch.float16)), "y has dtype float16; expected float32"),
    ("y rows overlap", _set("y", lambda a: torch.empty(N).expand(M, N)), "y has row stride 0 < 40 columns: its rows overlap"),
    ("eps a tensor", _set("eps", lambda a: torch.tensor(1e-5)), "eps must be a Python float, got Tensor"),
]
BACKWARD = [
    ("grad_y wrong shape", _set("grad_y", lambda a: torch.randn(M, N + 1)), "grad_y has shape (6, 41); expected (6, 40)"),
    ("grad_x wrong dtype", _set("grad_x", lambda a: torch.empty(M, N, dtype=torch.float16)),
     "grad_x has dtype float16; expected float32"),
    ("grad_weight wrong dtype", _set("grad_weight", lambda a: torch.empty(N, dtype=torch.float16)),
     "grad_weight has dtype float16; expected float32"),
    ("grad_weight strided", _set("grad_weight", lambda a: torch.empty(2 * N)[::2]), "grad_weight has stride 2"),
]
LAYER = [
    ("bias too long", _set("bias", lambda a: torch.randn(N + 1)), "bias has 41 elements; expected one per column (40)"),
    ("mean float16", _set("mean", lambda a: torch.empty(M, 1, dtype=torch.float16)), "mean has dtype float16"),
]
LAYER_BACKWARD = [("grad_bias too short", _set("grad_bias", lambda a: torch.empty(N - 1)), "grad_bias has 39 elements")]
KINDS = [("rms_norm", False, False), ("layer_norm", True, False), ("rms_norm_bwd", False, True), ("layer_norm_bwd", True, True)]


def _mutations(layer: bool, backward: bool) -> list[tuple[str, Callable[[dict[str, Any]], None], str]]:
    found = COMMON + (BACKWARD if backward else FORWARD) + (LAYER if layer else [])
    return found + (LAYER_BACKWARD if layer and backward else [])


CASES = [(kind, layer, backward, *m) for kind, layer, backward in KINDS for m in _mutations(layer, backward)]


@pytest.fixture
def interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    # CPU tensors pass the device check only under the interpreter; nothing launches here
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.mark.parametrize(("kind", "layer", "backward", "what", "mutate", "message"), CASES,
                         ids=[f"{c[0]}-{c[3]}" for c in CASES])
def test_bad_inputs_are_refused_before_launch_naming_the_problem(
    interpreter: None, kind: str, layer: bool, backward: bool, what: str, mutate: Any, message: str
) -> None:
    a = _valid(layer, backward)
    mutate(a)
    with pytest.raises(tkreg.InputError) as refused:
        _call(layer, backward, a)
    assert message in str(refused.value)


@pytest.mark.parametrize(("kind", "layer", "backward"), KINDS, ids=[k[0] for k in KINDS])
def test_every_problem_is_named_at_once(interpreter: None, kind: str, layer: bool, backward: bool) -> None:
    a = _valid(layer, backward)
    a["weight"] = a["weight"][:-1]
    a["rstd"] = a["rstd"].half()
    with pytest.raises(tkreg.InputError) as refused:
        _call(layer, backward, a)
    assert "weight has 39 elements" in str(refused.value) and "rstd has dtype float16" in str(refused.value)


@pytest.mark.parametrize(("kind", "layer", "backward"), KINDS, ids=[k[0] for k in KINDS])
def test_out_must_be_a_tuple_of_the_outputs(interpreter: None, kind: str, layer: bool, backward: bool) -> None:
    a = _valid(layer, backward)
    with pytest.raises(tkreg.InputError, match="out must be a tuple"):
        _call(layer, backward, a, out=a["y"])


@pytest.mark.parametrize(("kind", "layer", "backward"), KINDS, ids=[k[0] for k in KINDS])
def test_cpu_tensors_need_the_interpreter(monkeypatch: pytest.MonkeyPatch, kind: str, layer: bool, backward: bool) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    needs = r"x is on cpu; this kernel needs CUDA tensors \(or CPU tensors with TRITON_INTERPRET=1\)"
    with pytest.raises(tkreg.InputError, match=needs):
        _call(layer, backward, _valid(layer, backward))


def test_bad_configs_are_programming_errors(interpreter: None) -> None:
    a = _valid(False, False)
    with pytest.raises(ValueError, match="BLOCK must be a power of two"):
        launch.rms_norm_forward(a["x"], a["weight"], out=(a["y"], a["rstd"]), eps=1e-5, BLOCK=100)
    with pytest.raises(TypeError):
        launch.rms_norm_forward(a["x"], a["weight"], out=(a["y"], a["rstd"]), eps=1e-5, BLOCK_M=64)


def _fast(layer: bool, backward: bool, a: dict[str, Any]) -> bool:
    """Whether the launchers' fast checks take these arguments."""
    y = a["grad_x"] if backward else a["y"]
    sizes = launch._plain_rows(a["x"], a["weight"], y, a["rstd"])
    if sizes is None or (not backward and type(a["eps"]) is not float):
        return False
    m, n, _, _, device = sizes
    if layer and not launch._plain_layer(a["bias"], a["mean"], m, n, device):
        return False
    return not backward or launch._plain_grads(a["grad_y"], a["grad_weight"], a["grad_bias"], a["weight"], a["bias"],
                                               a["x"].shape, n, device)


def _reasons(layer: bool, backward: bool, a: dict[str, Any]) -> list[str]:
    if backward:
        grads = (a["grad_x"], a["grad_weight"], *((a["grad_bias"],) if layer else ()))
        return checks.backward_reasons(a["x"], a["weight"], a["bias"], a["mean"], a["rstd"], a["grad_y"], grads, layer=layer)
    outs = (a["y"], *((a["mean"],) if layer else ()), a["rstd"])
    return checks.forward_reasons(a["x"], a["weight"], a["bias"], outs, a["eps"], layer=layer)


@pytest.mark.parametrize(("kind", "layer", "backward"), KINDS, ids=[k[0] for k in KINDS])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_fast_checks_take_plain_inputs_and_nothing_the_full_checks_refuse(
    interpreter: None, monkeypatch: pytest.MonkeyPatch, kind: str, layer: bool, backward: bool, dtype: torch.dtype
) -> None:
    monkeypatch.setattr(launch_inputs, "FAST_DEVICE_TYPE", "cpu")
    a = _valid(layer, backward, dtype)
    assert _reasons(layer, backward, a) == [] and _fast(layer, backward, a)
    a["weight"] = torch.nn.Parameter(a["weight"])  # models' weights: still the fast path
    assert _fast(layer, backward, a)
    for what, mutate, _ in _mutations(layer, backward):
        bad = _valid(layer, backward, dtype)
        mutate(bad)
        assert _reasons(layer, backward, bad), what
        assert not _fast(layer, backward, bad), what
    # things the full checks take but the fast path leaves to them: a width-1 x with any column stride
    odd = _valid(layer, backward, dtype)
    odd["x"] = torch.randn(M, 3, dtype=dtype)[:, :1].as_strided((M, 1), (3, 5))
    for name in ("weight", "bias", "grad_weight", "grad_bias"):
        if odd.get(name) is not None:
            odd[name] = odd[name][:1]
    for name in ("y", "grad_x", "grad_y"):
        if name in odd:
            odd[name] = odd[name][:, :1]
    assert _reasons(layer, backward, odd) == [] and not _fast(layer, backward, odd)


def test_requirements_tell_lookup_which_inputs_the_kernels_take(interpreter: None) -> None:
    a = _valid(True, True)
    assert checks.forward_inputs_reasons(a["x"], a["weight"]) == []
    assert checks.forward_inputs_reasons(a["x"], a["weight"], a["bias"]) == []
    assert checks.backward_inputs_reasons(a["x"], a["weight"], a["y"], a["rstd"], a["grad_y"]) == []
    assert checks.backward_inputs_reasons(a["x"], a["weight"], a["bias"], a["y"], a["mean"], a["rstd"], a["grad_y"]) == []
    transposed = torch.randn(N, M).t()
    assert checks.forward_inputs_reasons(transposed, a["weight"]) == [
        "x has column stride 6; the kernels need 1 (rows contiguous, any row stride)"
    ]
    assert "grad_y has shape (6, 41)" in checks.backward_inputs_reasons(a["x"], a["weight"], a["y"], a["rstd"],
                                                                         torch.randn(M, N + 1))[0]


# -- absent weight and bias (None, as Op.optional allows) ------------------------------------------

# (kind, layer, backward, weight present, bias present): every way an op can leave its vectors out
ABSENT = [(kind, layer, backward, weight, bias) for kind, layer, backward in KINDS
          for weight, bias in ([(True, False), (False, True), (False, False)] if layer else [(False, False)])]
ABSENT_IDS = [f"{k}-{'w' if w else 'no_w'}-{'b' if b else 'no_b'}" if layer else f"{k}-no_w"
              for k, layer, _, w, b in ABSENT]


def _without(layer: bool, backward: bool, weight: bool, bias: bool, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """Valid arguments with the weight and/or bias absent (None), and so their gradients."""
    a = _valid(layer, backward, dtype)
    for name, present in (("weight", weight), ("bias", bias)):
        if not present:
            a[name] = None
            if backward:
                a[f"grad_{name}"] = None
    return a


@pytest.mark.parametrize(("kind", "layer", "backward", "weight", "bias"), ABSENT, ids=ABSENT_IDS)
def test_absent_weight_and_bias_pass_the_full_and_the_fast_checks(
    interpreter: None, monkeypatch: pytest.MonkeyPatch, kind: str, layer: bool, backward: bool, weight: bool, bias: bool
) -> None:
    monkeypatch.setattr(launch_inputs, "FAST_DEVICE_TYPE", "cpu")
    for dtype in (torch.float32, torch.bfloat16):
        a = _without(layer, backward, weight, bias, dtype)
        assert _reasons(layer, backward, a) == [] and _fast(layer, backward, a)
        vectors = (a["weight"], a["bias"]) if layer else (a["weight"],)
        if backward:
            stats = (a["mean"], a["rstd"]) if layer else (a["rstd"],)
            assert checks.backward_inputs_reasons(a["x"], *vectors, a["y"], *stats, a["grad_y"]) == []
        else:
            assert checks.forward_inputs_reasons(a["x"], *vectors) == []
        # what is wrong beside an absent vector is still named, and never taken by the fast path
        for what, mutate, message in _mutations(layer, backward):
            bad = _without(layer, backward, weight, bias, dtype)
            if any(bad.get(name) is None for name in ("weight", "bias", "grad_weight", "grad_bias") if name in what):
                continue  # a mutation of the absent vector itself
            mutate(bad)
            reasons = " ".join(_reasons(layer, backward, bad))
            assert reasons and (dtype != torch.float32 or message in reasons), what  # messages name fp32
            assert not _fast(layer, backward, bad), what


@pytest.mark.parametrize(("kind", "layer"), [("rms_norm_bwd", False), ("layer_norm_bwd", True)])
def test_the_gradient_of_an_absent_input_must_be_none_and_only_then(interpreter: None, kind: str, layer: bool) -> None:
    names = ("weight", "bias") if layer else ("weight",)
    for name in names:
        given = _without(layer, True, name != "weight", name != "bias")
        given[f"grad_{name}"] = torch.empty(N)  # a gradient for an input the call left out
        with pytest.raises(tkreg.InputError, match=f"grad_{name} must be None: {name} is None"):
            _call(layer, True, given)
        missing = _valid(layer, True)
        missing[f"grad_{name}"] = None  # no gradient for an input the call passed
        with pytest.raises(tkreg.InputError, match=f"grad_{name} must be a torch.Tensor"):
            _call(layer, True, missing)
        assert not _fast(layer, True, given) and not _fast(layer, True, missing)
