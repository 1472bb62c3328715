"""Gradients of tkreg.ops add, sum_row and matmul (their plugins' formulas) against float64 torch,
matmul's backward running through registered kernels (dA = dC B^T, dB = A^T dC, whatever their
layouts); and a third party's op differentiated in each way tkreg.ops knows: its backward kernel,
its formula, its peer, or a clear error, eagerly and compiled."""

from __future__ import annotations

import linecache
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import tkreg  # noqa: E402
from tests.ops_support import (  # noqa: E402
    CALLS,
    RMS_BACKWARD,
    RMS_FORWARD,
    ContractsPlugin,
    RmsPlugin,
    assert_matmul_close,
    calls,
    choice_by_priority,
    device_or_skip,
    install,
    installed_ops,
    randn,
    recorded_calls,
    registry_with,
    rms_backward_refusing,
    rms_backward_torch,
    rms_kernel,
    rms_reference,
)

device = pytest.fixture(scope="module")(device_or_skip)
ops = pytest.fixture(installed_ops)


@pytest.fixture(autouse=True)
def kernels_by_priority(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    choice_by_priority(monkeypatch, tmp_path)


def _leaf(*shape: int, dtype: Any, device: str, seed: int) -> Any:
    return randn(*shape, dtype=dtype, device=device, seed=seed).requires_grad_()


def test_add_gradient_is_the_incoming_gradient(ops: Any, device: str) -> None:
    a, b = (_leaf(3, 4, 33, dtype=torch.float32, device=device, seed=s) for s in (1, 2))
    grad = randn(3, 4, 33, dtype=torch.float32, device=device, seed=3)
    ops.add(a, b).backward(grad)
    assert torch.equal(a.grad, grad) and torch.equal(b.grad, grad)
    c = _leaf(5, 7, dtype=torch.float32, device=device, seed=4)
    grad_c = randn(5, 7, dtype=torch.float32, device=device, seed=13)
    ops.add(c, torch.ones(5, 7, device=device)).backward(grad_c)  # only one input needs a gradient
    assert torch.equal(c.grad, grad_c)


@pytest.mark.parametrize("shape", [(65,), (9, 33), (2, 3, 130)], ids=lambda s: "x".join(map(str, s)))
def test_sum_row_gradient_reaches_every_element_of_its_row(ops: Any, device: str, shape: tuple[int, ...]) -> None:
    x = _leaf(*shape, dtype=torch.float32, device=device, seed=5)
    grad = randn(*shape[:-1], dtype=torch.float32, device=device, seed=6)
    ops.sum_row(x).backward(grad)
    x64 = x.detach().double().requires_grad_()
    x64.sum(-1).backward(grad.double())
    assert torch.equal(x.grad.double(), x64.grad)


class MatmulSpy:
    """A matmul kernel that records the layouts it is called with and runs the portable kernel:
    it ranks first, so every matmul tkreg.ops runs passes through it (where nothing is timed:
    see ``by_priority``)."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = []

    def __call__(self, a: Any, b: Any, bias: Any = None, out: Any = None) -> Any:
        from tkreg_matmul.triton_kernel import matmul_triton

        self.calls.append((tuple(a.shape), a.stride(), tuple(b.shape), b.stride()))
        return matmul_triton(a, b, bias, out=out)

    @tkreg.hookimpl
    def tkreg_register_kernels(self, register: Any) -> None:
        register(tkreg.Kernel(name="matmul_spy", op="matmul", launcher=self, interpretable=True, priority=1000))


def by_priority(monkeypatch: pytest.MonkeyPatch, *plugins: Any) -> Any:
    """tkreg.ops over the installed plugins and ``plugins``, ranking kernels by priority alone: no
    tuning and no shipped wall times, so that on a GPU too the spy, not a faster kernel, runs."""
    from tkreg.ops.walltime import rank_by

    monkeypatch.setenv("TKREG_TUNE", "0")
    registry = registry_with(*plugins)
    rank_by(registry, None)
    return install(registry)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_matmul_gradients_run_through_registered_kernels(device: str, dtype: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = MatmulSpy()
    ops = by_priority(monkeypatch, spy)
    try:
        a = _leaf(2, 5, 40, dtype=dtype, device=device, seed=7)
        weight = _leaf(24, 40, dtype=dtype, device=device, seed=8)  # (N, K), used as F.linear does: a @ weight.t()
        grad = randn(2, 5, 24, dtype=dtype, device=device, seed=9)
        ops.matmul(a, weight.t()).backward(grad)
        a64, w64 = a.detach().double(), weight.detach().double()
        assert_matmul_close(a.grad, grad.double() @ w64, k=24)  # dA = dC W
        assert_matmul_close(weight.grad, grad.double().reshape(10, 24).t() @ a64.reshape(10, 40), k=10)  # dW = dC^T A
        forward, grad_a, grad_b = spy.calls
        assert forward == ((10, 40), (40, 1), (40, 24), (1, 40))  # A's rows merged; B the transposed weight
        assert grad_a == ((10, 24), (24, 1), (24, 40), (40, 1))  # dC times B^T, which is the weight itself
        # dW = dC^T A in the weight's own (N, K) layout: dC^T a transposed view, no copy; the
        # weight's gradient then needs no transposing copy either
        assert grad_b[0] == (24, 10) and grad_b[1] == (1, 24)
        assert weight.grad.is_contiguous()
    finally:
        tkreg.ops.uninstall()


def test_matmul_gradient_of_a_vector(ops: Any, device: str) -> None:
    a = _leaf(40, dtype=torch.float16, device=device, seed=10)
    b = _leaf(40, 16, dtype=torch.float16, device=device, seed=11)
    grad = randn(16, dtype=torch.float16, device=device, seed=12)
    ops.matmul(a, b).backward(grad)
    assert_matmul_close(a.grad, b.detach().double() @ grad.double(), k=16)
    assert_matmul_close(b.grad, torch.outer(a.detach().double(), grad.double()), k=1)


def test_matmul_formula_skips_the_gradient_nobody_needs(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = MatmulSpy()
    ops = by_priority(monkeypatch, spy)
    try:
        a = _leaf(2, 5, 40, dtype=torch.float16, device=device, seed=14)
        weight = randn(24, 40, dtype=torch.float16, device=device, seed=15)  # frozen
        ops.matmul(a, weight.t()).backward(randn(2, 5, 24, dtype=torch.float16, device=device, seed=16))
        assert len(spy.calls) == 2  # the forward and dA: no dW product for a weight nobody trains
        assert a.grad is not None and weight.grad is None
    finally:
        tkreg.ops.uninstall()


def test_batched_matmul_gradients(ops: Any, device: str) -> None:
    a = _leaf(3, 5, 40, dtype=torch.float16, device=device, seed=17)
    b = _leaf(3, 40, 24, dtype=torch.float16, device=device, seed=18)
    grad = randn(3, 5, 24, dtype=torch.float16, device=device, seed=19)
    with warnings.catch_warnings():
        warnings.simplefilter("error", tkreg.ops.PeerFallbackWarning)  # the batched kernel, both ways
        ops.matmul(a, b).backward(grad)
    assert_matmul_close(a.grad, grad.double() @ b.detach().double().transpose(1, 2), k=24)
    assert_matmul_close(b.grad, a.detach().double().transpose(1, 2) @ grad.double(), k=5)


# -- a third party's op: backward kernel, formula, peer, or a clear error ---------------------------
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


recorded = pytest.fixture(recorded_calls)


def _rms_leaves(seed: int, shape: tuple[int, ...] = (2, 3, 16)) -> tuple[Any, Any, Any]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g).to(DEVICE).requires_grad_()
    w = (1 + torch.randn(shape[-1], generator=g)).to(DEVICE).requires_grad_()
    return x, w, torch.randn(shape, generator=g).to(DEVICE)


def _rms_grads64(x: Any, w: Any, grad: Any, eps: float) -> tuple[Any, Any]:
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    rms_reference(x64, w64, eps)[0].backward(grad.double())
    return x64.grad, w64.grad


def _assert_rms_grads(x: Any, w: Any, grad: Any, eps: float) -> None:
    want_x, want_w = _rms_grads64(x, w, grad, eps)
    torch.testing.assert_close(x.grad.double(), want_x, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(w.grad.double(), want_w, atol=1e-4, rtol=1e-4)


def test_gradients_through_a_backward_kernel(recorded: None) -> None:
    ops = install(registry_with(RmsPlugin(RMS_FORWARD, RMS_BACKWARD, formula=True)))
    x, w, grad = _rms_leaves(20)
    ops.toy_rms_norm(x, w, eps=0.5).backward(grad)
    _assert_rms_grads(x, w, grad, 0.5)
    ((shapes, params),) = calls("rms_backward_torch")
    # kernel-level (rows) inputs, every output, the upstream gradient of y only (rstd has none), out=(dx, dweight)
    assert shapes == ((6, 16), (16,), (6, 16), (6,), (6, 16), (6, 16), (16,)) and params == {"eps": 0.5}
    assert not calls("rms_formula") and not calls("rms_peer")


def test_a_refusing_backward_kernel_passes_to_the_formula(recorded: None) -> None:
    picky = rms_kernel("rms_backward_picky", rms_backward_refusing, backward=True, priority=10)
    ops = install(registry_with(RmsPlugin(RMS_FORWARD, picky, formula=True)))
    x, w, grad = _rms_leaves(21)
    ops.toy_rms_norm(x, w).backward(grad)
    _assert_rms_grads(x, w, grad, 1e-6)
    ((shapes, params),) = calls("rms_formula")
    assert shapes == ((2, 3, 16), (16,), (2, 3), (2, 3, 16)) and params == {"eps": 1e-6}  # callers' tensors


def test_gradients_through_the_formula_for_only_the_inputs_that_need_them(recorded: None) -> None:
    install(registry_with(RmsPlugin(RMS_FORWARD, formula=True)))
    x, w, grad = _rms_leaves(22)
    w.requires_grad_(False)
    y, rstd = torch.ops.tkreg.toy_rms_norm(x, w, eps=0.5)
    assert not rstd.requires_grad  # a statistic: no gradient flows from it
    y.backward(grad)
    assert w.grad is None
    torch.testing.assert_close(x.grad.double(), _rms_grads64(x, w, grad, 0.5)[0], atol=1e-4, rtol=1e-4)
    assert len(calls("rms_formula")) == 1


def test_backward_kernels_never_read_outputs_a_peer_left_unwritten(recorded: None) -> None:
    """A peer that computes y only (as F.rms_norm does) leaves rstd, the kernels' own output,
    unwritten: a backward kernel or the formula would read garbage from it, so autograd through
    the peer computes the gradients of the torch operator, which returns every output. (A
    tkreg.ops call is the peer's own: torch's autograd, no formula.)"""
    ops = install(registry_with(RmsPlugin(RMS_BACKWARD, formula=True, peer_y_only=True)))  # no forward kernel
    x, w, grad = _rms_leaves(29)
    with pytest.warns(tkreg.ops.PeerFallbackWarning, match="no registered kernel takes these inputs") as forward:
        y = torch.ops.tkreg.toy_rms_norm(x, w, eps=0.5)[0]
    through_peer = "differentiates through its peer rms_peer: the forward ran the peer"
    with pytest.warns(tkreg.ops.PeerFallbackWarning, match=through_peer) as backward:
        y.backward(grad)
    # each names the caller's own line: through torch's operator, and through autograd's engine,
    # which runs a CUDA backward in a thread of its own, where no caller's line is on the stack
    assert [(r.filename, linecache.getline(r.filename, r.lineno).strip()) for r in forward] == [
        (__file__, "y = torch.ops.tkreg.toy_rms_norm(x, w, eps=0.5)[0]")]
    (named,) = [(r.filename, linecache.getline(r.filename, r.lineno).strip()) for r in backward]
    assert named == (__file__, "y.backward(grad)") if DEVICE == "cpu" else "tkreg" in Path(named[0]).parts
    _assert_rms_grads(x, w, grad, 0.5)
    assert not calls("rms_backward_torch") and not calls("rms_formula") and len(calls("rms_peer")) == 2  # forward, recompute
    x.grad = w.grad = None
    ops.toy_rms_norm(x, w, eps=0.5).backward(grad)
    _assert_rms_grads(x, w, grad, 0.5)
    assert not calls("rms_backward_torch") and not calls("rms_formula") and len(calls("rms_peer")) == 3  # the forward only


def test_a_full_peer_fills_the_outputs_the_peer_leaves_for_the_operator_and_the_backward(recorded: None) -> None:
    """Where the op has a full peer (as torch.native_layer_norm is beside F.layer_norm), a caller
    that gets every output gets rstd's values, and a backward kernel may read it; tkreg.ops,
    which returns y alone, keeps calling the peer that computes y only."""
    ops = install(registry_with(RmsPlugin(RMS_BACKWARD, peer_y_only=True, full_peer=True)))  # no forward kernel
    x, w, grad = _rms_leaves(31)
    want_y, want_rstd = rms_reference(x.detach().double(), w.detach().double(), 0.5)
    with pytest.warns(tkreg.ops.PeerFallbackWarning, match="no registered kernel takes these inputs"):
        y, rstd = torch.ops.tkreg.toy_rms_norm(x.detach(), w.detach(), eps=0.5)
    for _ in range(2):  # the first call decides how the peer is called, later ones run the plan
        y, rstd = torch.ops.tkreg.toy_rms_norm(x.detach(), w.detach(), eps=0.5)
        torch.testing.assert_close(rstd.double(), want_rstd, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(y.double(), want_y, atol=1e-5, rtol=1e-5)
    CALLS.clear()
    torch.testing.assert_close(ops.toy_rms_norm(x.detach(), w.detach(), eps=0.5).double(), want_y, atol=1e-5, rtol=1e-5)
    assert len(calls("rms_peer")) == 1 and not calls("rms_full_peer")
    torch.ops.tkreg.toy_rms_norm(x, w, eps=0.5)[0].backward(grad)  # the forward keeps rstd: the backward kernel reads it
    _assert_rms_grads(x, w, grad, 0.5)
    assert len(calls("rms_full_peer")) == 1 and len(calls("rms_backward_torch")) == 1 and len(calls("rms_peer")) == 1


@pytest.mark.parametrize("bare", [False, True], ids=["returns (y,)", "returns y"])
def test_a_peer_returning_y_itself_is_what_tkreg_ops_calls_with_nothing_in_between(recorded: None, bare: bool) -> None:
    """A y-only peer that returns y itself (not a one-tuple) is the plan's call for tkreg.ops,
    bound to its parameters and nothing else; one returning (y,) gets y picked out. Both give y,
    and the torch operator still gets every output through the full peer."""

    from tests.ops_support import rms_peer_y_bare

    ops = install(registry_with(RmsPlugin(RMS_BACKWARD, peer_y_only=True, full_peer=True, peer_bare=bare)))
    x, w, _ = _rms_leaves(32)
    want_y, want_rstd = rms_reference(x.detach().double(), w.detach().double(), 0.5)
    with pytest.warns(tkreg.ops.PeerFallbackWarning, match="no registered kernel takes these inputs"):
        ops.toy_rms_norm(x.detach(), w.detach(), eps=0.5)
    for _ in range(2):
        got = ops.toy_rms_norm(x.detach(), w.detach(), eps=0.5)
        assert isinstance(got, torch.Tensor)
        torch.testing.assert_close(got.double(), want_y, atol=1e-5, rtol=1e-5)
    (plan,) = tkreg.ops._installed["dispatchers"]["toy_rms_norm"]._plans.values()
    direct = getattr(plan.returned, "func", None) is rms_peer_y_bare
    assert direct is bare
    y, rstd = torch.ops.tkreg.toy_rms_norm(x.detach(), w.detach(), eps=0.5)
    torch.testing.assert_close(rstd.double(), want_rstd, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(y.double(), want_y, atol=1e-5, rtol=1e-5)


def test_plans_of_the_peer_share_one_bound_call_per_parameter_values(recorded: None) -> None:
    """Peer plans with the same parameter values call one bound function (each is compiled once),
    and other values get their own, with their own eps in the result."""
    ops = install(registry_with(RmsPlugin(RMS_BACKWARD, peer_y_only=True, full_peer=True, peer_bare=True)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tkreg.ops.PeerFallbackWarning)  # no forward kernel: the peer runs
        for rows in (8, 9):
            for eps in (0.5, 0.25):
                x, w, _ = _rms_leaves(rows, (rows, 16))
                x, w = x.detach(), w.detach()
                got = ops.toy_rms_norm(x, w, eps=eps)
                torch.testing.assert_close(got.double(), rms_reference(x.double(), w.double(), eps)[0], atol=1e-5, rtol=1e-5)
    plans = list(tkreg.ops._installed["dispatchers"]["toy_rms_norm"]._plans.values())
    by_eps: dict[float, set[int]] = {}
    for plan in plans:
        assert plan.returned.keywords["out"] is None
        by_eps.setdefault(plan.returned.keywords["eps"], set()).add(id(plan.returned))
    assert len(plans) == 4 and set(by_eps) == {0.5, 0.25}
    assert all(len(ids) == 1 for ids in by_eps.values()) and len(set().union(*by_eps.values())) == 2


def test_where_the_peer_runs_a_call_that_wants_a_gradient_is_the_peers_own(recorded: None) -> None:
    """tkreg.ops.<op> of an op without a backward formula, where the peer runs the inputs: the
    peer's own call, so torch's autograd records torch's backward (no Python backward, no
    recompute). The torch operator, which returns every output, keeps the op's own backward."""
    ops = install(registry_with(RmsPlugin(RMS_BACKWARD, peer_y_only=True, full_peer=True)))  # no forward kernel
    x, w, grad = _rms_leaves(33)
    with pytest.warns(tkreg.ops.PeerFallbackWarning, match="no registered kernel takes these inputs"):
        y = ops.toy_rms_norm(x, w, eps=0.5)
    assert not type(y.grad_fn).__name__.startswith("tkreg_")  # recorded by torch, through the peer's operations
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the peer's own gradient: no fallback to say
        y.backward(grad)
    _assert_rms_grads(x, w, grad, 0.5)
    # no recompute, no backward kernel; the full peer tried once, as the signature's plan was made
    assert len(calls("rms_peer")) == 1 and not calls("rms_backward_torch") and len(calls("rms_full_peer")) == 1
    y2 = ops.toy_rms_norm(x, w, eps=0.5)  # the plan made, the same way
    assert not type(y2.grad_fn).__name__.startswith("tkreg_") and len(calls("rms_peer")) == 2
    assert len(calls("rms_full_peer")) == 1
    assert type(torch.ops.tkreg.toy_rms_norm(x, w, eps=0.5)[0].grad_fn).__name__ == "tkreg_toy_rms_normBackward"


def test_a_planned_call_that_wants_a_gradient_goes_straight_to_the_peers_own(
    recorded: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a signature's first call that wants a gradient was the peer's own, later ones make
    that call from tkreg.ops' fast path, planning nothing; an input the op gives no gradient
    that wants one still takes the checked way."""
    from tkreg.ops.dispatch import Dispatcher

    ops = install(registry_with(RmsPlugin(RMS_BACKWARD, peer_y_only=True)))  # no forward kernel
    x, w, grad = _rms_leaves(34)
    with pytest.warns(tkreg.ops.PeerFallbackWarning, match="no registered kernel takes these inputs"):
        ops.toy_rms_norm(x, w, eps=0.5)

    def planned(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("planned again")

    monkeypatch.setattr(Dispatcher, "planned", planned)
    y = ops.toy_rms_norm(x, w, eps=0.5)
    assert not type(y.grad_fn).__name__.startswith("tkreg_") and len(calls("rms_peer")) == 2
    y.backward(grad)
    _assert_rms_grads(x, w, grad, 0.5)
    with pytest.raises(AssertionError, match="planned again"):
        ops.toy_rms_norm(x, w, eps=0.25)  # another signature: planned
    monkeypatch.undo()
    ops.toy_rms_norm(x.detach().requires_grad_(), w.detach(), eps=0.5).sum().backward()  # only x: the same plan
    assert len(calls("rms_peer")) == 3


def test_an_input_without_a_gradient_that_wants_one_skips_the_fast_way_to_the_peer(recorded: None) -> None:
    """The op gives x a gradient, not the weight: once calls that want x's went straight to the
    peer's own call, one whose weight wants a gradient too takes the checked way, the op's
    autograd.Function, which gives the weight none."""
    ops = install(registry_with(RmsPlugin(RMS_BACKWARD, peer_y_only=True, grads=("x",))))
    x, w, grad = _rms_leaves(35)
    w_plain = w.detach()
    with pytest.warns(tkreg.ops.PeerFallbackWarning, match="no registered kernel takes these inputs"):
        ops.toy_rms_norm(x, w_plain, eps=0.5)
    assert not type(ops.toy_rms_norm(x, w_plain, eps=0.5).grad_fn).__name__.startswith("tkreg_")  # the peer's own
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tkreg.ops.PeerFallbackWarning)
        y = ops.toy_rms_norm(x, w, eps=0.5)
        assert type(y.grad_fn).__name__ == "tkreg_toy_rms_normBackward"
        y.backward(grad)
    assert w.grad is None and x.grad is not None


@pytest.fixture
def without_operators(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch refuses to define tkreg's operators (as a torch without these APIs would)."""
    from tkreg.ops import library

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("this torch defines no such operator")

    monkeypatch.setattr(library, "_define", refuse)
    monkeypatch.setattr(library, "_REGISTERED", {})


def test_without_a_torch_operator_gradients_go_through_the_peer(recorded: None, without_operators: None) -> None:
    """tkreg's autograd comes with the torch operator: without one, a call that wants a gradient
    is the peer's own, with a warning that says why, never outputs that drop the gradient."""
    ops = install(registry_with(RmsPlugin(RMS_FORWARD, RMS_BACKWARD, formula=True)))
    x, w, grad = _rms_leaves(41)
    with torch.no_grad():
        ops.toy_rms_norm(x, w, eps=0.5)  # no gradient wanted: the kernel
    assert len(calls("rms_torch")) == 1 and not calls("rms_peer")
    with pytest.warns(tkreg.ops.PeerFallbackWarning, match="it has no torch operator: torch would not define its operator"):
        y = ops.toy_rms_norm(x, w, eps=0.5)
    assert y.requires_grad and y.shape == x.shape
    y.backward(grad)
    _assert_rms_grads(x, w, grad, 0.5)
    assert len(calls("rms_peer")) == 1 and len(calls("rms_torch")) == 1 and not calls("rms_backward_torch")


def test_without_a_torch_operator_an_input_the_op_gives_no_gradient_gets_none(recorded: None, without_operators: None) -> None:
    ops = install(registry_with(RmsPlugin(RMS_BACKWARD, grads=("x",))))
    x, w, grad = _rms_leaves(42)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tkreg.ops.PeerFallbackWarning)
        ops.toy_rms_norm(x, w, eps=0.5).backward(grad)
    want_x, _ = _rms_grads64(x, w, grad, 0.5)
    torch.testing.assert_close(x.grad.double(), want_x, atol=1e-4, rtol=1e-4)
    assert w.grad is None


def test_without_a_torch_operator_or_a_peer_a_gradient_is_a_clear_error(recorded: None, without_operators: None) -> None:
    ops = install(registry_with(RmsPlugin(RMS_FORWARD, RMS_BACKWARD, peer=False)))
    x, w, _ = _rms_leaves(43)
    with pytest.raises(tkreg.ops.NoGradientError, match=r"it has no torch operator.*has no peer to differentiate"):
        ops.toy_rms_norm(x, w, eps=0.5)
    assert not calls("rms_torch")  # refused before any launch


def test_a_full_peer_that_lays_out_an_output_otherwise_is_not_used(recorded: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full peer whose rstd is not the op's (here float64) is not used: the outputs stay the
    peer's, rstd unwritten, and gradients flow through the peer as before."""
    from tests import ops_support

    full = ops_support.rms_full_peer

    def float64_rstd(x: Any, w: Any, eps: float = 1e-6) -> Any:
        y, rstd = full(x, w, eps)
        return y, rstd.double()

    monkeypatch.setattr(ops_support, "rms_full_peer", float64_rstd)
    install(registry_with(RmsPlugin(RMS_BACKWARD, peer_y_only=True, full_peer=True)))
    x, w, grad = _rms_leaves(32)
    with pytest.warns(tkreg.ops.PeerFallbackWarning, match="no registered kernel takes these inputs"):
        _, rstd = torch.ops.tkreg.toy_rms_norm(x.detach(), w.detach())
    assert rstd.dtype == torch.float32 and len(calls("rms_full_peer")) == 1  # tried once; the op's layout, allocated
    with pytest.warns(tkreg.ops.PeerFallbackWarning, match="the forward ran the peer rms_peer"):
        torch.ops.tkreg.toy_rms_norm(x, w)[0].backward(grad)
    assert not calls("rms_backward_torch")


def test_gradients_through_the_peer_say_so_once(recorded: None) -> None:
    ops = install(registry_with(RmsPlugin(RMS_FORWARD)))
    x, w, grad = _rms_leaves(23)
    with pytest.warns(tkreg.ops.PeerFallbackWarning, match=(
        r"tkreg.ops.toy_rms_norm differentiates through its peer rms_peer: op 'toy_rms_norm' has no backward kernels; "
        "no backward formula"
    )):
        ops.toy_rms_norm(x, w, eps=0.5).backward(grad)
    _assert_rms_grads(x, w, grad, 0.5)
    assert [p for _, p in calls("rms_peer")] == [{"eps": 0.5}]  # recomputed once, with the call's eps


def test_gradients_through_the_peer_skip_integer_inputs(recorded: None) -> None:
    ops = install(registry_with(ContractsPlugin()))
    x = torch.randn(2, 3, 7, device=DEVICE, requires_grad=True)
    target = torch.randint(0, 7, (2, 3), device=DEVICE)
    grad = torch.randn(2, 3, device=DEVICE)
    with pytest.warns(tkreg.ops.PeerFallbackWarning, match="differentiates through its peer"):
        ops.toy_pick(x, target).backward(grad)
    want = torch.zeros(2, 3, 7, device=DEVICE).scatter_(-1, target.unsqueeze(-1), grad.unsqueeze(-1))
    assert torch.equal(x.grad, want)


def test_compiled_gradients_through_the_peer_are_the_eager_ones(recorded: None) -> None:
    """Compiled, the backward runs below autograd (inside torch.ops.tkreg_backward): the peer's
    recompute must still record its graph, or every gradient would come out zero."""
    ops = install(registry_with(ContractsPlugin()))
    torch._dynamo.reset()
    try:
        target = torch.randint(0, 7, (2, 3), device=DEVICE)
        eager, compiled = (torch.randn(2, 3, 7, device=DEVICE).requires_grad_() for _ in range(2))
        with torch.no_grad():
            compiled.copy_(eager)
        grad = torch.randn(2, 3, device=DEVICE)

        def loss(x: Any) -> Any:
            return (ops.toy_pick(x, target) * grad).sum()

        with pytest.warns(tkreg.ops.PeerFallbackWarning, match="differentiates through its peer"):
            loss(eager).backward()
        torch.compile(loss, fullgraph=True, backend="aot_eager")(compiled).backward()
        assert eager.grad.abs().sum() > 0 and torch.equal(compiled.grad, eager.grad)
    finally:
        torch._dynamo.reset()


@pytest.mark.parametrize(
    ("plugin", "message"),
    [
        (lambda: RmsPlugin(RMS_FORWARD, peer=False), r"has no gradient for these inputs: op 'toy_rms_norm' has no backward "
         r"kernels; op 'toy_rms_norm' has no backward formula \(Op\(backward=...\)\) and no peer to differentiate"),
        (lambda: RmsPlugin(RMS_FORWARD, grads=False), r"has no gradient: op 'toy_rms_norm' declares no differentiable"),
    ],
    ids=["nothing-to-differentiate-with", "no-grads-declared"],
)
def test_no_gradient_is_a_clear_error(recorded: None, plugin: Any, message: str) -> None:
    ops = install(registry_with(plugin()))
    x, w, grad = _rms_leaves(24)
    y = ops.toy_rms_norm(x, w)
    assert y.requires_grad
    with pytest.raises(tkreg.ops.NoGradientError, match=message):
        y.backward(grad)


def test_compiled_gradients_run_the_backward_kernel_as_eager_ones_do(recorded: None) -> None:
    ops = install(registry_with(RmsPlugin(RMS_FORWARD, RMS_BACKWARD)))
    torch._dynamo.reset()
    try:
        eager, compiled = _rms_leaves(25), _rms_leaves(25)

        def loss(x: Any, w: Any, grad: Any) -> Any:
            return (ops.toy_rms_norm(x, w, eps=0.5) * grad).sum()

        loss(*eager).backward()
        CALLS.clear()
        torch.compile(loss, fullgraph=True, backend="aot_eager")(*compiled).backward()
        assert torch.equal(eager[0].grad, compiled[0].grad) and torch.equal(eager[1].grad, compiled[1].grad)
        assert [p for _, p in calls("rms_backward_torch")] == [{"eps": 0.5}]  # at run time, on real tensors
    finally:
        torch._dynamo.reset()


def test_the_operator_with_parameters_and_two_outputs_passes_opcheck(recorded: None) -> None:
    install(registry_with(RmsPlugin(RMS_FORWARD, RMS_BACKWARD)))
    x, w, _ = _rms_leaves(26)
    results = torch.library.opcheck(torch.ops.tkreg.toy_rms_norm.default, (x, w), {"eps": 0.5})
    assert set(results.values()) == {"SUCCESS"}, results


def _contiguous_grad_only(x: Any, weight: Any, y: Any, rstd: Any, grad_y: Any) -> list[str]:
    return [] if grad_y.is_contiguous() else [f"grad_y has strides {grad_y.stride()}; this kernel needs them contiguous"]


def test_an_expanded_upstream_gradient_is_made_contiguous_for_a_kernel_that_needs_it(recorded: None) -> None:
    picky = rms_kernel("rms_backward_dense", rms_backward_torch, backward=True,
                       requires=tkreg.Requirements(inputs=_contiguous_grad_only))
    ops = install(registry_with(RmsPlugin(RMS_FORWARD, picky)))
    x, w, _ = _rms_leaves(27)
    ops.toy_rms_norm(x, w).sum().backward()  # the gradient of sum() is one value expanded: strides 0
    _assert_rms_grads(x, w, torch.ones(x.shape, device=DEVICE), 1e-6)
    assert len(calls("rms_backward_torch")) == 1 and not calls("rms_peer")  # the kernel, not the peer


@pytest.fixture
def backend_entries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts torch's redispatches below autograd (what a call through torch.library's own
    autograd kernel pays before it reaches the implementation)."""
    entered: list[str] = []
    redispatch = torch._ops.OpOverload.redispatch

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        entered.append(str(self))
        return redispatch(self, *args, **kwargs)

    monkeypatch.setattr(torch._ops.OpOverload, "redispatch", counting)
    return entered


def test_eager_operator_calls_dispatch_without_torchs_redispatch(recorded: None, backend_entries: list[str]) -> None:
    from torch.utils._python_dispatch import TorchDispatchMode

    install(registry_with(RmsPlugin(RMS_FORWARD, RMS_BACKWARD)))
    x, w, grad = _rms_leaves(28)
    y, _ = torch.ops.tkreg.toy_rms_norm(x, w, eps=0.5)
    assert "tkreg_toy_rms_norm" in type(y.grad_fn).__name__  # the op's eager autograd.Function
    y.backward(grad)
    _assert_rms_grads(x, w, grad, 0.5)
    with torch.no_grad():
        plain = torch.ops.tkreg.toy_rms_norm(x, w, eps=0.5)[0]
        run_time = torch.ops.tkreg_dispatch.toy_rms_norm(x, w, eps=0.5)[0]  # what a compiled graph calls
    assert backend_entries == []  # no call went below autograd through torch's wrappers
    assert torch.equal(plain, run_time)

    seen: list[str] = []

    class Recording(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Recording():
        moded = torch.ops.tkreg.toy_rms_norm(x, w, eps=0.5)[0]
    assert "tkreg.toy_rms_norm.default" in seen and backend_entries  # a dispatch mode still sees the operator
    assert torch.equal(plain, moded)


def test_the_eager_path_is_installed_quietly_where_warnings_are_errors() -> None:
    """torch warns once per process when a kernel is replaced: installing must not let that
    warning out (under -W error it would cost the op its torch operator)."""
    import subprocess
    import sys

    script = ("import torch, tkreg.ops as ops; from tkreg.ops.library import _REGISTERED; names = ops.names(); "
              "fast = {name for name, (_, slot, _) in _REGISTERED.items() if slot.differentiable is not None}; "
              "print(sorted(set(names) - fast))")
    done = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"  # every op's operator takes eager calls the short way


def test_a_peer_that_returns_y_only_allocates_nothing_more_for_tkreg_ops(recorded: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """rstd is the kernels' own: where the peer runs, tkreg.ops (which returns y alone) allocates
    no unwritten rstd per call; the operator, which returns every output, does."""
    from tkreg.ops.forms import OutputLayout

    made: list[Any] = []
    allocator = OutputLayout.allocator
    monkeypatch.setattr(OutputLayout, "allocator", lambda layout: lambda: made.append(layout.shape) or allocator(layout)())
    ops = install(registry_with(RmsPlugin(RMS_BACKWARD, peer_y_only=True)))  # no forward kernel: the peer runs
    x, w, _ = _rms_leaves(30)
    x, w = x.detach(), w.detach()
    with pytest.warns(tkreg.ops.PeerFallbackWarning):
        ops.toy_rms_norm(x, w)
    made.clear()
    for _ in range(3):
        torch.testing.assert_close(ops.toy_rms_norm(x, w), rms_reference(x, w)[0])
    assert made == []
    _, rstd = torch.ops.tkreg.toy_rms_norm(x, w)
    assert made == [(2, 3)] and rstd.shape == (2, 3)
