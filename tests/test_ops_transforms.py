"""tkreg.ops under torch's other ways to differentiate: torch.func transforms (grad, jacrev, vmap,
vmap of grad, jvp, hessian), forward-mode AD with dual tensors, and gradients differentiated again
(``create_graph=True``, as a gradient penalty does). Each result is checked against the same
function written in torch and run in float64; where tkreg cannot give a result, the error says so.
Kernels run under the Triton interpreter (CPU) or on a GPU."""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import torch.autograd.forward_ad as fwAD  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tkreg  # noqa: E402
from tests.ops_support import (  # noqa: E402
    CALLS,
    RMS_BACKWARD,
    RMS_FORWARD,
    RmsPlugin,
    calls,
    choice_by_priority,
    device_or_skip,
    install,
    installed_ops,
    recorded_calls,
    registry_with,
    rms_reference,
)
from tkreg.ops import NoGradientError, PeerFallbackWarning  # noqa: E402

device = pytest.fixture(scope="module")(device_or_skip)
ops = pytest.fixture(installed_ops)


@pytest.fixture(autouse=True)
def kernels_by_priority(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    choice_by_priority(monkeypatch, tmp_path, interpreter=False)  # the interpreter is on for the whole process or not at all


# Each case: tkreg's function, torch's, and how to make its two inputs (x first). add takes x and
# x * w: one input computed from the other, whose gradients must not mix.
def _cases(ops: Any) -> dict[str, tuple[Callable[..., Any], Callable[..., Any], tuple[int, ...]]]:
    return {
        "rms_norm": (lambda x, w: ops.rms_norm(x, w, eps=1e-5), lambda x, w: F.rms_norm(x, (x.shape[-1],), w, eps=1e-5), (9,)),
        "layer_norm": (lambda x, w: ops.layer_norm(x, w, w * 0.5),
                       lambda x, w: F.layer_norm(x, (x.shape[-1],), w, w * 0.5, eps=1e-5), (9,)),
        "matmul": (lambda x, w: ops.matmul(x, w), lambda x, w: x @ w, (9, 4)),
        "add": (lambda x, w: ops.add(x, x * w), lambda x, w: x + x * w, (9,)),
        "sum_row": (lambda x, w: ops.sum_row(x * w), lambda x, w: (x * w).sum(-1), (9,)),
    }


CASES = ["rms_norm", "layer_norm", "matmul", "add", "sum_row"]


def _inputs(device: str, w_shape: tuple[int, ...], seed: int, rows: int = 5) -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, 9, generator=g).to(device), (1 + torch.randn(w_shape, generator=g)).to(device))


def _close(got: Any, want: Any) -> None:
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.double(), w, atol=1e-4, rtol=1e-4)


def _apply(transform: Callable[..., Any], fn: Callable[..., Any], x: Any, w: Any, f64: bool = False) -> Any:
    if f64:
        x, w = x.double(), w.double()
    return transform(fn, x, w)


def _loss(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda x, w: (fn(x, w) ** 2).sum()


TRANSFORMS: dict[str, Callable[..., Any]] = {
    "grad": lambda fn, x, w: torch.func.grad(_loss(fn), argnums=(0, 1))(x, w),
    "jacrev": lambda fn, x, w: torch.func.jacrev(fn, argnums=(0, 1))(x, w),
    "vmap": lambda fn, x, w: torch.vmap(lambda xi: fn(xi.unsqueeze(0), w))(x),
    "vmap of grad": lambda fn, x, w: torch.vmap(torch.func.grad(lambda xi, w: _loss(fn)(xi.unsqueeze(0), w), argnums=(0, 1)),
                                                in_dims=(0, None))(x, w),
    "jvp": lambda fn, x, w: torch.func.jvp(fn, (x, w), (torch.ones_like(x), torch.ones_like(w) * 0.5)),
    "hessian": lambda fn, x, w: torch.func.hessian(lambda a: _loss(fn)(a, w))(x),
}


@pytest.mark.parametrize("transform", list(TRANSFORMS))
@pytest.mark.parametrize("case", CASES)
def test_torch_func_transforms_give_torchs_results(ops: Any, device: str, case: str, transform: str) -> None:
    mine, theirs, w_shape = _cases(ops)[case]
    x, w = _inputs(device, w_shape, seed=len(case) + len(transform))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PeerFallbackWarning)  # transforms other than one grad run the peer
        got = _apply(TRANSFORMS[transform], mine, x, w)
    _close(got, _apply(TRANSFORMS[transform], theirs, x, w, f64=True))


@pytest.mark.parametrize("transform", ["grad", "jacrev"])
def test_one_grad_transform_runs_the_kernels(ops: Any, device: str, transform: str) -> None:
    """grad and jacrev differentiate tkreg's own forward and backward (a warning would say the
    peer ran)."""
    x, w = _inputs(device, (9,), seed=7)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PeerFallbackWarning)
        got = TRANSFORMS[transform](_cases(ops)["rms_norm"][0], x, w)
    _close(got, TRANSFORMS[transform](_cases(ops)["rms_norm"][1], x.double(), w.double()))
    assert "calls rms_norm_triton" in ops.explain("rms_norm", x, w)


def test_matmul_kernels_under_a_grad_transform_and_a_gradient_penalty(ops: Any, device: str) -> None:
    """bfloat16, which matmul's kernels take (float32 runs the peer): grad runs them forward and
    backward; the gradient penalty's second differentiation goes through the peer."""
    g = torch.Generator().manual_seed(16)
    x, w = torch.randn(6, 16, generator=g).bfloat16().to(device), torch.randn(16, 8, generator=g).bfloat16().to(device)
    x64, w64 = x.double(), w.double()
    want_gx, want_gw = 2 * (x64 @ w64) @ w64.T, 2 * x64.T @ (x64 @ w64)

    def near(got: Any, want: Any) -> None:  # bfloat16 products and sums: about 2**-8 of the largest
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2 * want.abs().max().item())

    with warnings.catch_warnings():
        warnings.simplefilter("error", PeerFallbackWarning)
        gx, gw = torch.func.grad(lambda a, b: ops.matmul(a, b).float().pow(2).sum(), argnums=(0, 1))(x, w)
    near(gx, want_gx)
    near(gw, want_gw)
    assert "calls matmul_triton" in ops.explain("matmul", x, w) or device == "cuda"

    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PeerFallbackWarning)
        gx, gw = torch.autograd.grad(ops.matmul(xr, wr).float().pow(2).sum(), (xr, wr), create_graph=True)
        (gx.float().pow(2).sum()).backward()
    near(gx.detach(), want_gx)
    x64r = x64.clone().requires_grad_()
    (2 * (x64r @ w64) @ w64.T).pow(2).sum().backward()
    near(xr.grad, x64r.grad)


def test_the_torch_operator_says_it_has_no_gradient_under_a_grad_transform(ops: Any, device: str) -> None:
    x, w = _inputs(device, (9,), seed=8)
    with pytest.raises(NoGradientError, match=r"torch.ops.tkreg.rms_norm has no gradient under torch.func transforms"):
        torch.func.grad(lambda x: torch.ops.tkreg.rms_norm(x, w).sum())(x)


@pytest.mark.parametrize("case", CASES)
def test_dual_tensors_get_torchs_tangents(ops: Any, device: str, case: str) -> None:
    """Forward-mode AD outside torch.func: the tangent of each output, not a tensor without one."""
    mine, theirs, w_shape = _cases(ops)[case]
    x, w = _inputs(device, w_shape, seed=9)
    tangent = torch.randn_like(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PeerFallbackWarning)
        mine(x, w)  # planned: a dual tensor of this signature must not take the fast path to the plan
        with fwAD.dual_level():
            got = fwAD.unpack_dual(mine(fwAD.make_dual(x, tangent), w))
    with fwAD.dual_level():
        want = fwAD.unpack_dual(theirs(fwAD.make_dual(x.double(), tangent.double()), w.double()))
    assert got.tangent is not None
    _close((got.primal, got.tangent), (want.primal, want.tangent))


def test_the_torch_operator_says_it_has_no_tangent_for_dual_tensors(ops: Any, device: str) -> None:
    x, w = _inputs(device, (9,), seed=10)
    with fwAD.dual_level(), pytest.raises(NoGradientError, match="or of dual tensors"):
        torch.ops.tkreg.rms_norm(fwAD.make_dual(x, torch.ones_like(x)), w)


@pytest.mark.parametrize("case", CASES)
def test_a_gradient_penalty_differentiates_the_gradients_again(ops: Any, device: str, case: str) -> None:
    """``create_graph=True``: the gradients are themselves differentiable, and the second
    differentiation counts the path through them (with constant gradients it would miss it)."""
    results = []
    for fn, dtype in ((_cases(ops)[case][0], torch.float32), (_cases(ops)[case][1], torch.float64)):
        x, w = (t.to(dtype).requires_grad_() for t in _inputs(device, _cases(ops)[case][2], seed=11))
        y = fn(x, w)
        gx, gw = torch.autograd.grad((y**3).sum(), (x, w), create_graph=True)
        ((gx**2).sum() + (gw**2).sum() + y.sum()).backward()
        results.append((gx.detach(), gw.detach(), x.grad, w.grad))
    _close(results[0], results[1])


# -- a third party's op without a peer -------------------------------------------------------


recorded = pytest.fixture(recorded_calls)


@pytest.fixture
def toy_device(recorded: None, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where the toy kernels (torch code) run: a GPU, else CPU tensors, which the registry gives
    kernels only with the interpreter on."""
    if torch.cuda.is_available():
        return "cuda"
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    return "cpu"


def _rms_inputs(seed: int, device: str) -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 16, generator=g).to(device), (1 + torch.randn(16, generator=g)).to(device)


def test_without_a_peer_forward_mode_is_a_clear_error(toy_device: str) -> None:
    toy = install(registry_with(RmsPlugin(RMS_FORWARD, RMS_BACKWARD, peer=False)))
    x, w = _rms_inputs(12, toy_device)
    with pytest.raises(NoGradientError, match="toy_rms_norm has no forward-mode gradient"):
        torch.func.jvp(lambda a: toy.toy_rms_norm(a, w, eps=0.5), (x,), (torch.ones_like(x),))
    with fwAD.dual_level(), pytest.raises(NoGradientError, match="toy_rms_norm has no forward-mode gradient"):
        toy.toy_rms_norm(fwAD.make_dual(x, torch.ones_like(x)), w, eps=0.5)


def test_explain_says_what_a_call_of_dual_tensors_does(toy_device: str) -> None:
    """The peer's own code where the op has one (and the call runs it), the error where not."""
    x, w = _rms_inputs(14, toy_device)
    for peer in (True, False):
        toy = install(registry_with(RmsPlugin(RMS_FORWARD, RMS_BACKWARD, peer=peer)))
        plain = tkreg.ops.explain("toy_rms_norm", x, w, eps=0.5)
        assert "calls its peer" not in plain and "raises" not in plain  # a kernel runs plain inputs
        with warnings.catch_warnings(), fwAD.dual_level():
            warnings.simplefilter("ignore", PeerFallbackWarning)
            dual = fwAD.make_dual(x, torch.ones_like(x))
            text = tkreg.ops.explain("toy_rms_norm", dual, w, eps=0.5)
            if peer:
                assert text == ("tkreg.ops.toy_rms_norm calls its peer rms_peer: forward-mode AD (dual tensors) takes the "
                                "peer's own code")  # fmt: skip
                before = len(calls("rms_peer"))
                toy.toy_rms_norm(dual, w, eps=0.5)
                assert len(calls("rms_peer")) == before + 1
            else:
                assert text.startswith("tkreg.ops.toy_rms_norm raises NoGradientError: tkreg.ops.toy_rms_norm has no "
                                       "forward-mode gradient")  # fmt: skip
                with pytest.raises(NoGradientError, match=re.escape(text.split("NoGradientError: ", 1)[1])):
                    toy.toy_rms_norm(dual, w, eps=0.5)


def test_without_a_peer_vmap_runs_the_kernel_per_sample(toy_device: str) -> None:
    toy = install(registry_with(RmsPlugin(RMS_FORWARD, RMS_BACKWARD, peer=False)))
    x, w = _rms_inputs(13, toy_device)
    got = torch.vmap(lambda xi: toy.toy_rms_norm(xi.unsqueeze(0), w, eps=0.5))(x)
    _close(got.squeeze(1), rms_reference(x.double(), w.double(), 0.5)[0])
    assert len(calls("rms_torch")) == x.shape[0]


# toy_cube: y = x ** 3, a kernel of torch code, a formula, no peer, one output (differentiable).
def _cube_reference(x: Any) -> Any:
    return x**3


def _cube_kernel(x: Any, out: Any) -> Any:
    CALLS.append(("cube_kernel", (tuple(x.shape),), {}))
    return torch.pow(x, 3, out=out)


def _cube_formula(inputs: Any, outputs: Any, grad_outputs: Any) -> tuple[Any]:
    CALLS.append(("cube_formula", (), {}))
    return (3 * inputs[0] ** 2 * grad_outputs[0],)


class CubePlugin:
    @tkreg.hookimpl
    def tkreg_register_ops(self, register: Any) -> None:
        register(tkreg.Op(
            name="toy_cube", reference=_cube_reference, make_inputs=lambda case, dtype, generator, device: (
                torch.randn(case["M"], case["N"], generator=generator, dtype=dtype, device=device),),
            make_output=lambda x: torch.empty_like(x), cases=(tkreg.case(M=3, N=5),), dtypes=("float32",),
            tolerances={"float32": tkreg.Tolerance(1e-5, 1e-5)},
            cost=lambda dims, itemsize: tkreg.Cost(bytes=2 * dims["M"] * dims["N"] * itemsize, flops=dims["M"] * dims["N"]),
            inputs=("x",), grads=("x",), backward=_cube_formula,
        ))  # fmt: skip

    @tkreg.hookimpl
    def tkreg_register_kernels(self, register: Any) -> None:
        register(tkreg.Kernel(name="cube_kernel", op="toy_cube", launcher=_cube_kernel, interpretable=True))


def test_gradients_differentiated_again_take_the_formula_without_a_peer(toy_device: str) -> None:
    toy = install(registry_with(CubePlugin()))
    x = _rms_inputs(14, toy_device)[0].requires_grad_()
    (gx,) = torch.autograd.grad(toy.toy_cube(x).sum(), x, create_graph=True)
    (gx**2).sum().backward()
    x64 = x.detach().double()
    _close((gx.detach(), x.grad), (3 * x64**2, 2 * (3 * x64**2) * 6 * x64))
    assert calls("cube_kernel") and calls("cube_formula")


@pytest.mark.parametrize("formula", [False, True], ids=["no formula", "a formula that reads rstd"])
def test_gradients_differentiated_again_without_a_peer_or_a_safe_formula_are_a_clear_error(toy_device: str,
                                                                                             formula: bool) -> None:
    """rstd is an output the op marks not differentiable: a formula that reads it would give
    gradients that the next differentiation takes as constant in it."""
    toy = install(registry_with(RmsPlugin(RMS_FORWARD, RMS_BACKWARD, formula=formula, peer=False)))
    x, w = (t.requires_grad_() for t in _rms_inputs(15, toy_device))
    reason = "may read rstd, which it marks not differentiable" if formula else "it has no backward formula"
    with pytest.raises(NoGradientError, match=f"no gradient that can be differentiated again.*{reason}"):
        torch.autograd.grad(toy.toy_rms_norm(x, w, eps=0.5).sum(), (x, w), create_graph=True)


def _context(kind: str, x: Any) -> tuple[Any, Any]:
    """A context and the x input a call of ``kind`` is made with inside it."""
    if kind == "sparse":
        return contextlib.nullcontext(), x.to_sparse()
    if kind == "autocast":  # the toy op declares no autocast policy
        return torch.autocast(x.device.type, dtype=torch.bfloat16), x
    level = fwAD.dual_level()
    return level, lambda: fwAD.make_dual(x, torch.ones_like(x))


@pytest.mark.parametrize("peer", [True, False])
@pytest.mark.parametrize("kind", ["sparse", "autocast", "dual"])
def test_explain_and_the_call_take_the_same_detour(toy_device: str, kind: str, peer: bool) -> None:
    """Where a call leaves the plans (a sparse input, autocast the op declares nothing for, dual
    tensors), explain says what the call then does: the peer's own code, with the warning's
    reason, or the error the call raises, or a kernel."""
    toy = install(registry_with(RmsPlugin(RMS_FORWARD, RMS_BACKWARD, peer=peer)))
    x, w = _rms_inputs(15, toy_device)
    context, made = _context(kind, x)
    with context:
        x = made() if callable(made) else made
        text = tkreg.ops.explain("toy_rms_norm", x, w, eps=0.5)
        before = len(calls("rms_peer")), len(calls("rms_torch"))
        if " raises " in text:
            error, message = text.split(" raises ", 1)[1].split(": ", 1)
            with pytest.raises((tkreg.InputError, NoGradientError)) as raised:
                toy.toy_rms_norm(x, w, eps=0.5)
            assert type(raised.value).__name__ == error and str(raised.value) == message
        elif "calls its peer" in text:
            reason = text.split("calls its peer rms_peer: ", 1)[1]
            with pytest.warns(PeerFallbackWarning) as warned, contextlib.suppress(tkreg.InputError):
                toy.toy_rms_norm(x, w, eps=0.5)  # a sparse x fails in the peer, after it was called
            assert [str(w.message).split(": ", 1)[1] for w in warned] == [reason]
            assert len(calls("rms_peer")) == before[0] + 1
        else:
            toy.toy_rms_norm(x, w, eps=0.5)
            assert len(calls("rms_peer")) == before[0] and len(calls("rms_torch")) == before[1] + 1
    expected = {("sparse", True): "calls its peer", ("sparse", False): "raises InputError",
                ("autocast", True): "calls its peer", ("autocast", False): "calls rms_torch",
                ("dual", True): "calls its peer", ("dual", False): "raises NoGradientError"}  # fmt: skip
    assert expected[kind, peer] in text, text
