"""Op.peer_direct: a plan that runs the peer makes the one torch call the peer would make for its
signature, with no frame of the peer's own (a builtin that reorders the inputs, or its Python
stand-in), and the same values and gradients as the peer."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import tkreg
from tests.ops_support import registry_with
from tkreg.core.errors import SpecError
from tkreg.core.tolerances import EXACT
from tkreg.ops.binding import reordered_call

torch = pytest.importorskip("torch")

PEER_CALLS: list[bool] = []  # one per call of the Python peer: whether a bias came
DIRECT: dict[str, Any] = {"raise": False}


def reference(x: Any, w: Any, bias: Any) -> Any:
    return x @ w if bias is None else x @ w + bias


def peer(x: Any, w: Any, bias: Any = None, *, out: Any = None) -> Any:
    PEER_CALLS.append(bias is not None)
    if bias is None:
        return torch.mm(x, w, out=out)
    return torch.addmm(bias, x, w, out=out)


def peer_direct(shapes: tuple[Any, ...]) -> Any:
    if DIRECT["raise"]:
        raise RuntimeError("a broken peer_direct")
    bias = shapes[2]
    if bias is None:
        return torch.mm, (0, 1)
    if len(bias) == 1:
        return torch.addmm, (2, 0, 1)
    return None  # a 2-D bias: the peer's own code


def make_inputs(case: Any, dtype: Any, generator: Any, device: Any) -> Any:
    m, k, n = case["M"], case["K"], case["N"]
    made = [torch.randn(*s, generator=generator, dtype=dtype, device=device) for s in ((m, k), (k, n), (n,))]
    return (*made[:2], None if case.variant == "no_bias" else made[2])


class LinearPlugin:
    """op toy_linear: x @ w (+ bias), no kernels: every call runs the peer."""

    def __init__(self, direct: Any = peer_direct) -> None:
        self.direct = direct

    @tkreg.hookimpl
    def tkreg_register_ops(self, register: Any) -> None:
        register(tkreg.Op(
            name="toy_linear", reference=reference, make_inputs=make_inputs,
            make_output=lambda x, w, bias: torch.empty(x.shape[0], w.shape[1], dtype=x.dtype, device=x.device),
            cases=(tkreg.case(M=3, K=4, N=5), tkreg.case(M=3, K=4, N=5, variant="no_bias")), dtypes=("float32",),
            tolerances=EXACT, cost=lambda dims, itemsize: tkreg.Cost(bytes=1), peer=peer, peer_name="peer",
            peer_direct=self.direct, inputs=("x", "w", "bias"), optional=("bias",), grads=("x", "w", "bias"),
        ))  # fmt: skip


@pytest.fixture(params=["C++", "Python"])
def ops(request: Any, monkeypatch: Any) -> Any:
    """tkreg.ops with the C++ call and reordered builtin where built, then with the Python ones."""
    from tkreg.ops import native

    if request.param == "C++" and native.reordered_maker() is None:
        pytest.skip("tkreg.ops' C++ extension is not built here")
    if request.param == "Python":
        monkeypatch.setenv(native.ENV, "0")
    native._load.cache_clear()
    PEER_CALLS.clear()
    DIRECT["raise"] = False
    tkreg.ops.install(registry_with(LinearPlugin()))
    yield tkreg.ops
    tkreg.ops.uninstall()
    monkeypatch.delenv(native.ENV, raising=False)
    native._load.cache_clear()
    DIRECT["raise"] = False


def _inputs(bias_shape: tuple[int, ...] | None = (5,)) -> tuple[Any, Any, Any]:
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(3, 4, generator=g), torch.randn(4, 5, generator=g)
    return x, w, None if bias_shape is None else torch.randn(*bias_shape, generator=g)


@pytest.mark.filterwarnings("ignore::tkreg.ops.PeerFallbackWarning")
@pytest.mark.parametrize("bias_shape", [(5,), None])
def test_the_plan_makes_the_peers_torch_call_itself(ops: Any, bias_shape: Any) -> None:
    x, w, bias = _inputs(bias_shape)
    expected = reference(x.double(), w.double(), None if bias is None else bias.double()).float()
    for args in ((x, w, bias), (x, w, bias), (x, w) if bias is None else (x, w, bias)):
        torch.testing.assert_close(ops.toy_linear(*args), expected, rtol=1e-6, atol=1e-6)
    assert PEER_CALLS == []  # never the Python peer: its torch call, made by the plan
    (plan,) = tkreg.ops._installed["dispatchers"]["toy_linear"]._plans.values()
    assert "reordered" in getattr(plan.returned, "__name__", "")
    assert "calls its peer" in ops.explain("toy_linear", x, w, bias)


@pytest.mark.filterwarnings("ignore::tkreg.ops.PeerFallbackWarning")
def test_shapes_it_names_no_call_for_run_the_peer(ops: Any) -> None:
    x, w, bias = _inputs((3, 5))  # a 2-D bias
    torch.testing.assert_close(ops.toy_linear(x, w, bias), x @ w + bias)
    torch.testing.assert_close(ops.toy_linear(x, w, bias), x @ w + bias)
    assert PEER_CALLS == [True, True]


@pytest.mark.filterwarnings("ignore::tkreg.ops.PeerFallbackWarning")
def test_a_failing_peer_direct_is_logged_and_the_peer_runs(ops: Any, caplog: Any) -> None:
    DIRECT["raise"] = True
    x, w, bias = _inputs()
    with caplog.at_level(logging.WARNING, logger="tkreg.ops"):
        torch.testing.assert_close(ops.toy_linear(x, w, bias), x @ w + bias)
    assert PEER_CALLS == [True]
    assert "peer_direct failed" in caplog.text and "a broken peer_direct" in caplog.text


@pytest.mark.filterwarnings("ignore::tkreg.ops.PeerFallbackWarning")
def test_gradients_flow_through_the_direct_call(ops: Any) -> None:
    x, w, bias = (t.double().requires_grad_() for t in _inputs())
    copies = [t.detach().clone().requires_grad_() for t in (x, w, bias)]
    upstream = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    ops.toy_linear(x, w, bias).backward(upstream)
    reference(*copies).backward(upstream)
    for got, want in zip((x, w, bias), copies):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-12, atol=1e-12)


def test_peer_direct_needs_a_peer() -> None:
    with pytest.raises(SpecError, match="peer_direct"):
        tkreg.Op(name="toy_direct", reference=reference, make_inputs=make_inputs, make_output=make_inputs,
                 cases=(tkreg.case(M=1, K=1, N=1),), dtypes=("float32",), tolerances=EXACT,
                 cost=lambda dims, itemsize: tkreg.Cost(bytes=1), peer_direct=peer_direct)  # fmt: skip


@pytest.mark.parametrize("native_on", [True, False])
def test_a_reordered_call_passes_the_inputs_at_the_orders_positions(monkeypatch: Any, native_on: bool) -> None:
    from tkreg.ops import native

    if native_on and native.reordered_maker() is None:
        pytest.skip("tkreg.ops' C++ extension is not built here")
    if not native_on:
        monkeypatch.setattr(native, "reordered_maker", lambda: None)
    call = reordered_call(lambda *a: a, (2, 0, 1), 3)
    assert call("a", "b", "c") == ("c", "a", "b")
    assert reordered_call(lambda *a: a, (0, 1), 3)("a", "b", None) == ("a", "b")
    assert reordered_call(lambda *a: a, (), 2)(1, 2) == ()
    with pytest.raises(TypeError):
        call("a", "b")  # too few inputs for the order
    with pytest.raises(ValueError, match="order"):
        reordered_call(lambda *a: a, (3,), 3)
    with pytest.raises(ValueError, match="order"):
        reordered_call(lambda *a: a, (-1,), 3)


@pytest.mark.filterwarnings("ignore::tkreg.ops.PeerFallbackWarning")
def test_a_remembered_peer_signature_makes_the_direct_call_from_its_first_call(ops: Any) -> None:
    """A signature an earlier process ran through the peer is planned from its key alone (no
    tensors): its plan makes the same direct call."""
    from tkreg.ops import keys, remembered

    x, w, bias = _inputs()
    dispatcher = tkreg.ops._installed["dispatchers"]["toy_linear"]
    key = keys.plan_key((x, w, bias), ())
    plan = dispatcher._recalled_plan(key, {"way": remembered.FUNCTIONAL})
    assert plan is not None and "reordered" in getattr(plan.returned, "__name__", "")
    torch.testing.assert_close(plan.returned(x, w, bias), x @ w + bias)
    assert PEER_CALLS == []
