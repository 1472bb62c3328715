"""tkreg.ops and torch.ops.tkreg for ops beyond tensors in and one out, declared by a third-party
plugin: parameters (checked, defaulted, passed by keyword, part of the plan's key, in the torch
schema), several outputs (tkreg.ops returns those marked returned, torch.ops.tkreg all of them),
the calling contracts (rows with per-column weights and per-row integer targets, elementwise) on
1-D to 3-D callers, what the hot path does per call, and that no op name decides anything in
tkreg. The "kernels" are torch launchers (a launcher is any callable), so everything here runs
on the CPU with or without the Triton interpreter."""

from __future__ import annotations

import ast
import inspect
import linecache
import re
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import tkreg  # noqa: E402
from tests.ops_support import (  # noqa: E402
    CALLS,
    RMS_FORWARD,
    ContractsPlugin,
    RmsPlugin,
    ToyPlugin,
    calls,
    choice_by_priority,
    install,
    registry_with,
    rms_kernel,
    rms_reference,
    rms_torch,
    toy_kernel,
    toy_mul_torch,
)


@pytest.fixture(autouse=True)
def kernels_by_priority(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    choice_by_priority(monkeypatch, tmp_path)


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def toy_ops() -> Any:
    """tkreg.ops with toy_rms_norm (a forward kernel), toy_pick and toy_axpy."""
    CALLS.clear()
    yield install(registry_with(RmsPlugin(RMS_FORWARD), ContractsPlugin()))
    tkreg.ops.uninstall()
    CALLS.clear()


def _rand(*shape: int, seed: int) -> Any:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(DEVICE)


def _rms64(x: Any, w: Any, eps: float) -> tuple[Any, Any]:
    return rms_reference(x.double(), w.double(), eps)


# -- parameters ----------------------------------------------------------------------------------
def test_parameters_reach_the_kernel_by_keyword_with_defaults_filled(toy_ops: Any) -> None:
    x, w = _rand(4, 16, seed=1), _rand(16, seed=2)
    default = toy_ops.toy_rms_norm(x, w)
    wide = toy_ops.toy_rms_norm(x, w, eps=0.5)
    torch.testing.assert_close(default.double(), _rms64(x, w, 1e-6)[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(wide.double(), _rms64(x, w, 0.5)[0], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(default, wide)
    assert [p for _, p in calls("rms_torch")] == [{"eps": 1e-6}, {"eps": 0.5}]
    toy_ops.toy_rms_norm(x, w, eps=1)  # an int for a float parameter is taken as a float
    assert calls("rms_torch")[-1][1] == {"eps": 1.0} and isinstance(calls("rms_torch")[-1][1]["eps"], float)


def test_bad_parameters_get_the_ops_clear_error(toy_ops: Any) -> None:
    x, w = _rand(4, 16, seed=3), _rand(16, seed=4)
    with pytest.raises(TypeError, match=r"toy_rms_norm\(\) got an unexpected keyword argument 'epsilon'; its parameters: eps"):
        toy_ops.toy_rms_norm(x, w, epsilon=0.1)
    with pytest.raises(TypeError, match=r"toy_rms_norm: parameter eps must be a float, got 'big'"):
        toy_ops.toy_rms_norm(x, w, eps="big")
    with pytest.raises(TypeError, match=r"toy_axpy\(\) got an unexpected keyword argument 'eps'; its parameters: alpha"):
        toy_ops.toy_axpy(x, x, eps=1.0)
    with pytest.raises(tkreg.InputError, match=r"toy_rms_norm takes 2 tensor\(s\) \(x, weight\), got 3"):
        toy_ops.toy_rms_norm(x, w, 0.1)  # parameters are keyword-only
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'eps'; its parameters: none"):
        install(registry_with(RmsPlugin(RMS_FORWARD))).add(x, x, eps=1.0)
    assert not calls("rms_torch")  # nothing launched


def test_the_plan_is_kept_per_signature_and_parameter_values(toy_ops: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    dispatcher = tkreg.ops._installed["dispatchers"]["toy_rms_norm"]
    plans = []
    original = dispatcher.plan
    monkeypatch.setattr(dispatcher, "plan", lambda *a: plans.append(a[1]) or original(*a))
    x, w = _rand(4, 16, seed=5), _rand(16, seed=6)
    for _ in range(3):
        toy_ops.toy_rms_norm(x, w)
        toy_ops.toy_rms_norm(x, w, eps=0.5)
    toy_ops.toy_rms_norm(x, w, eps=1e-6)  # the default, given: the same plan as leaving it out
    assert plans == [(1e-6,), (0.5,)]
    assert len(calls("rms_make_output")) == 2  # make_output once per plan, never on the hot path


def test_a_call_that_names_its_parameters_takes_the_fast_path(toy_ops: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from tkreg.ops import library

    x, w = _rand(4, 16, seed=5), _rand(16, seed=6)
    toy_ops.toy_rms_norm(x, w, eps=0.5)  # planned
    toy_ops.toy_rms_norm(x, w)
    slow: list[Any] = []
    way_of = library.way_of
    monkeypatch.setattr(library, "way_of", lambda inputs: slow.append(inputs) or way_of(inputs))
    with torch.no_grad():
        wide, default = toy_ops.toy_rms_norm(x, w, eps=0.5), toy_ops.toy_rms_norm(x, w, eps=1e-6)
    assert slow == []  # as a model passes its eps: both found on the fast path
    torch.testing.assert_close(wide.double(), _rms64(x, w, 0.5)[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(default.double(), _rms64(x, w, 1e-6)[0], atol=1e-5, rtol=1e-5)
    with pytest.raises(TypeError, match=r"toy_rms_norm: parameter eps must be a float, got 'big'"):
        toy_ops.toy_rms_norm(x, w, eps="big")  # still the op's own error
    toy_ops.toy_rms_norm(x, w, eps=1)  # an int: converted, then the same plan as 1.0
    assert calls("rms_torch")[-1][1] == {"eps": 1.0}


def test_the_torch_operator_takes_parameters_keyword_only_with_defaults(toy_ops: Any) -> None:
    schema = str(torch.ops.tkreg.toy_rms_norm.default._schema)
    assert re.fullmatch(r"tkreg::toy_rms_norm\(Tensor x, Tensor weight, \*, float eps=[0-9.e-]+\) -> \(Tensor, Tensor\)", schema)
    assert float(schema.split("eps=")[1].split(")")[0]) == pytest.approx(1e-6)
    x, w = _rand(3, 8, seed=7), _rand(8, seed=8)
    y, rstd = torch.ops.tkreg.toy_rms_norm(x, w, eps=0.5)
    want_y, want_rstd = _rms64(x, w, 0.5)
    torch.testing.assert_close(y.double(), want_y, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rstd.double(), want_rstd, atol=1e-5, rtol=1e-5)
    # tkreg.ops' callable says the same, as the C++ builtin (names and defaults) or the Python function
    # (with types, and the one tensor returned: y only, rstd is not returned)
    shown = inspect.signature(toy_ops.toy_rms_norm)
    assert str(shown) in ("(x, weight, /, *, eps=1e-06)",
                          "(x: torch.Tensor, weight: torch.Tensor, /, *, eps: float = 1e-06) -> torch.Tensor")  # fmt: skip
    assert shown.parameters["eps"].default == pytest.approx(1e-6)


def test_the_torch_operator_takes_a_planned_call_to_its_plan_and_every_other_call_through_torch(
    toy_ops: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch.ops.tkreg.<op>(...) of plain tensors that want no gradient, of a planned signature,
    runs its plan without crossing into torch's dispatcher; a new signature, keywords for inputs,
    a gradient or a dispatch mode take the operator's own call. Either way the same outputs."""
    from torch.utils._python_dispatch import TorchDispatchMode

    packet = torch.ops.tkreg.toy_rms_norm
    assert isinstance(packet, torch._ops.OpOverloadPacket) and packet.default is torch.ops.tkreg.toy_rms_norm.default
    through_torch: list[Any] = []
    op = packet._op
    monkeypatch.setattr(packet, "_op", lambda *a, **k: through_torch.append(k) or op(*a, **k))
    x, w = _rand(3, 8, seed=7), _rand(8, seed=8)
    want = _rms64(x, w, 0.5)

    def check(got: Any) -> None:
        for g, expected in zip(got, want):
            torch.testing.assert_close(g.double(), expected, atol=1e-5, rtol=1e-5)

    check(packet(x, w, eps=0.5))  # a new signature: planned through torch's dispatcher
    assert len(through_torch) == 1
    launched = len(calls("rms_torch"))
    check(packet(x, w, eps=0.5))
    assert len(through_torch) == 1 and len(calls("rms_torch")) == launched + 1  # the plan ran, once
    check(packet(x, weight=w, eps=0.5))  # an input by keyword
    assert len(through_torch) == 2

    class Seen(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            return func(*args, **(kwargs or {}))

    with Seen():
        check(packet(x, w, eps=0.5))
    assert len(through_torch) == 3
    xg = x.clone().requires_grad_()
    y, _ = packet(xg, w, eps=0.5)
    assert len(through_torch) == 4 and y.grad_fn is not None
    with pytest.raises(TypeError, match=r"toy_rms_norm: parameter eps must be a float, got 'big'"):
        packet(x, w, eps="big")


def test_parameters_under_torch_compile_fullgraph(toy_ops: Any) -> None:
    torch._dynamo.reset()
    try:
        from tests.ops_support import capturing_backend

        x, w = _rand(2, 3, 8, seed=9), _rand(8, seed=10)
        graphs: list[str] = []
        compiled = torch.compile(lambda x, w: toy_ops.toy_rms_norm(x, w, eps=0.5), fullgraph=True,
                                 backend=capturing_backend(graphs))
        assert torch.equal(compiled(x, w), toy_ops.toy_rms_norm(x, w, eps=0.5))
        (code,) = graphs  # the traceable launcher traced in, with its eps, on the rows view
        assert "aten.rsqrt" in code and "0.5" in code and "tkreg_dispatch" not in code
        axpy = torch.compile(lambda a, b: toy_ops.toy_axpy(a, b, alpha=3.0), fullgraph=True, backend="aot_eager")
        a, b = _rand(5, 7, seed=11), _rand(5, 7, seed=12)
        assert torch.equal(axpy(a, b), 3.0 * a + b)
        assert calls("axpy_torch")[-1][1] == {"alpha": 3.0}  # the compiled graph dispatched at run time
    finally:
        torch._dynamo.reset()


def test_dynamic_shapes_keep_one_graph_with_parameters_and_two_outputs(toy_ops: Any) -> None:
    torch._dynamo.reset()
    graphs = []

    def backend(gm: Any, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    try:
        compiled = torch.compile(lambda x, w: torch.ops.tkreg.toy_rms_norm(x, w, eps=0.5), fullgraph=True, backend=backend,
                                 dynamic=True)
        for rows in (3, 5, 9):
            x, w = _rand(2, rows, 8, seed=rows), _rand(8, seed=40)
            y, rstd = compiled(x, w)
            want_y, want_rstd = torch.ops.tkreg.toy_rms_norm(x, w, eps=0.5)
            assert torch.equal(y, want_y) and torch.equal(rstd, want_rstd) and rstd.shape == (2, rows)
        assert len(graphs) == 1
    finally:
        torch._dynamo.reset()


# -- several outputs ------------------------------------------------------------------------------
def test_tkreg_ops_returns_the_returned_outputs_and_torch_ops_all_of_them(toy_ops: Any) -> None:
    x, w = _rand(2, 3, 16, seed=13), _rand(16, seed=14)
    y = toy_ops.toy_rms_norm(x, w)
    assert isinstance(y, torch.Tensor) and y.shape == x.shape and y.dtype == x.dtype
    y2, rstd = torch.ops.tkreg.toy_rms_norm(x, w)
    want_y, want_rstd = _rms64(x, w, 1e-6)
    torch.testing.assert_close(y.double(), want_y, atol=1e-5, rtol=1e-5)
    assert torch.equal(y, y2)
    assert rstd.shape == (2, 3) and rstd.dtype == torch.float32  # the Output's dtype, the caller's leading dims
    torch.testing.assert_close(rstd.double(), want_rstd, atol=1e-5, rtol=1e-5)
    (shapes, _), _ = calls("rms_torch")
    assert shapes == ((6, 16), (16,), (6, 16), (6,))  # rows merged; the weight as it is; out a tuple


def test_the_peer_fills_every_output(toy_ops: Any) -> None:
    x, w = _rand(3, 8, seed=15), _rand(8, seed=16)
    install(registry_with(RmsPlugin()))  # no kernel: the peer, with out= a tuple
    with pytest.warns(tkreg.ops.PeerFallbackWarning, match="the op has no kernels") as warned:
        y = tkreg.ops.toy_rms_norm(x, w, eps=0.5)
    assert [(r.filename, linecache.getline(r.filename, r.lineno).strip()) for r in warned] == [
        (__file__, "y = tkreg.ops.toy_rms_norm(x, w, eps=0.5)")]  # the caller's own line
    _, rstd = torch.ops.tkreg.toy_rms_norm(x, w, eps=0.5)
    torch.testing.assert_close(y.double(), _rms64(x, w, 0.5)[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rstd.double(), _rms64(x, w, 0.5)[1], atol=1e-5, rtol=1e-5)
    assert [p for _, p in calls("rms_peer")] == [{"eps": 0.5}, {"eps": 0.5}]


# -- contracts on callers of any rank --------------------------------------------------------------
@pytest.mark.parametrize(
    ("shape", "kernel_x"),
    [((16,), (1, 16)), ((5, 16), (5, 16)), ((2, 3, 16), (6, 16)), ((2, 1, 3, 16), (6, 16))],
    ids=lambda s: "x".join(map(str, s)),
)
def test_rows_contract_views_the_first_input_as_rows_and_gives_outputs_its_leading_dims(
    toy_ops: Any, shape: tuple[int, ...], kernel_x: tuple[int, int]
) -> None:
    x, w = _rand(*shape, seed=17), _rand(16, seed=18)
    y, rstd = torch.ops.tkreg.toy_rms_norm(x, w)
    assert y.shape == shape and rstd.shape == shape[:-1]
    torch.testing.assert_close(y.double(), _rms64(x, w, 1e-6)[0], atol=1e-5, rtol=1e-5)
    ((shapes, _),) = calls("rms_torch")
    assert shapes[:2] == (kernel_x, (16,))
    ((probe, _),) = calls("rms_make_output")
    assert probe == (kernel_x, (16,))  # make_output saw the kernel-level inputs


@pytest.mark.parametrize(("shape", "kernel"), [((7,), ((1, 7), (1,))), ((2, 3, 7), ((6, 7), (6,)))], ids=["1d", "3d"])
def test_rows_contract_merges_per_row_integer_targets_too(toy_ops: Any, shape: tuple[int, ...], kernel: Any) -> None:
    x = _rand(*shape, seed=19)
    target = torch.randint(0, 7, shape[:-1], generator=torch.Generator().manual_seed(20)).to(DEVICE)
    got = toy_ops.toy_pick(x, target)
    assert got.shape == shape[:-1]
    assert torch.equal(got, x.gather(-1, target.unsqueeze(-1)).squeeze(-1))
    ((shapes, _),) = calls("pick_torch")
    assert shapes[:2] == kernel


def test_rows_contract_strided_rows_without_copies_and_unmergeable_ones_at_the_peer(toy_ops: Any) -> None:
    x, w = _rand(4, 5, 40, seed=21)[:, :, 3:19], _rand(16, seed=22)  # rows in wider rows: a view
    torch.testing.assert_close(toy_ops.toy_rms_norm(x, w).double(), _rms64(x, w, 1e-6)[0], atol=1e-5, rtol=1e-5)
    assert calls("rms_torch")[0][0][0] == (20, 16)
    t = _rand(4, 5, 16, seed=23).transpose(0, 1)  # leading dims that cannot merge
    with pytest.warns(tkreg.ops.PeerFallbackWarning, match=r"x \(shape \(5, 4, 16\).*cannot be merged into rows"):
        y = toy_ops.toy_rms_norm(t, w)
    torch.testing.assert_close(y.double(), _rms64(t, w, 1e-6)[0], atol=1e-5, rtol=1e-5)
    assert len(calls("rms_torch")) == 1


@pytest.mark.parametrize(
    ("shape", "kernel"),
    [((), (1, 1)), ((4096,), (4, 1024)), ((100,), (1, 100)), ((6, 5), (6, 5)), ((2, 3, 5), (6, 5))],
    ids=lambda s: "x".join(map(str, s)) or "0d",
)
def test_elementwise_contract_views_any_rank_as_one_2d_layout(toy_ops: Any, shape: tuple[int, ...], kernel: Any) -> None:
    x, y = _rand(*shape, seed=24), _rand(*shape, seed=25)
    got = toy_ops.toy_axpy(x, y, alpha=2.0)
    assert got.shape == shape and torch.equal(got, 2.0 * x + y)
    ((shapes, params),) = calls("axpy_torch")
    assert shapes == (kernel, kernel, kernel) and params == {"alpha": 2.0}


def test_elementwise_contract_errors_name_the_inputs(toy_ops: Any) -> None:
    with pytest.raises(tkreg.InputError, match=r"tkreg.ops.toy_axpy: x and y must have one shape, got \(2, 3\) and \(3, 2\)"):
        toy_ops.toy_axpy(_rand(2, 3, seed=26), _rand(3, 2, seed=27))
    with pytest.raises(tkreg.InputError, match=r"x and y must have one dtype, got torch\.float32 and torch\.float64"):
        toy_ops.toy_axpy(_rand(3, seed=28), _rand(3, seed=29).double())


def test_a_kernel_that_writes_its_inputs_is_not_called(toy_ops: Any) -> None:
    writer = rms_kernel("rms_writer", rms_torch, priority=10, writes=(tkreg.Writes("x", reason="scratch"),))
    ops = install(registry_with(RmsPlugin(writer, RMS_FORWARD)))
    x, w = _rand(3, 8, seed=30), _rand(8, seed=31)
    assert "calls rms_torch" in ops.explain("toy_rms_norm", x, w)
    ops.toy_rms_norm(x, w)
    assert len(calls("rms_torch")) == 1
    only_writer = install(registry_with(RmsPlugin(writer)))
    with pytest.warns(tkreg.ops.PeerFallbackWarning, match=r"rms_writer \(it writes x; tkreg.ops calls only kernels that leave"):
        only_writer.toy_rms_norm(x, w)


# -- the hot path --------------------------------------------------------------------------------
def test_a_repeated_call_allocates_its_outputs_and_launches_nothing_else(toy_ops: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """After the first call of a signature: no contract checks, no make_output, no ranking; one
    allocation per output, the launch."""
    from tkreg.ops import dispatch, native

    made, allocated = [], []
    real_empty, real_allocator = torch.empty, dispatch.outputs_allocator
    monkeypatch.setattr(torch, "empty", lambda *a, **k: made.append(a) or real_empty(*a, **k))

    def counting(layouts: Any) -> Any:
        allocate = real_allocator(layouts)
        return lambda: allocated.append(got := allocate()) or got

    monkeypatch.setattr(dispatch, "outputs_allocator", counting)
    x, w = _rand(2, 3, 16, seed=32), _rand(16, seed=33)
    toy_ops.toy_rms_norm(x, w, eps=0.5)
    dispatcher = tkreg.ops._installed["dispatchers"]["toy_rms_norm"]
    for slow in ("plan", "prepare"):
        monkeypatch.setattr(dispatcher, slow, lambda *a, **k: pytest.fail("planned again"))
    monkeypatch.setattr(dispatcher.form, "contract_reasons", lambda *a: pytest.fail("checked again"))
    monkeypatch.setattr(tkreg.ops._installed["registry"], "ranking", lambda *a, **k: pytest.fail("ranked again"))
    made.clear()
    allocated.clear()
    CALLS.clear()
    for _ in range(3):
        toy_ops.toy_rms_norm(x, w, eps=0.5)
    assert len(calls("rms_torch")) == 3 and not calls("rms_make_output")
    assert [tuple(tuple(t.shape) for t in outs) for outs in allocated] == [((2, 3, 16), (2, 3))] * 3
    # nothing else: no torch.empty where the outputs are made in C++, else one per output
    assert made == ([] if native.outputs_maker() is not None else [((2, 3, 16),), ((2, 3),)] * 3)


# -- no op name in tkreg's code ----------------------------------------------------------------------
PACKAGE = Path(tkreg.__file__).parent
# No part of tkreg knows an op: plugins declare what the core, tkreg.ops, the runner, the
# benchmark suites and the record need (contracts, case sets, peers).
# (torch's own functions of those names, e.g. torch.matmul for the compute ceiling, are not ops)
BUILT_IN_OPS = re.compile(r"['\"](add|sum_row|matmul)['\"]|(?<!torch\.)(?<!F\.)\b(sum_row|matmul|rms_norm|layer_norm)\b")


def _code_without_prose(path: Path) -> str:
    """The module's code with docstrings and comments gone (what can decide behaviour)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            if isinstance(body[0].value.value, str):
                body[0] = ast.Pass()
    return ast.unparse(tree)


def test_no_op_name_decides_behaviour_in_tkreg() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line in _code_without_prose(path).splitlines():
            if BUILT_IN_OPS.search(line):
                found.append(f"{path.relative_to(PACKAGE)}: {line.strip()}")
    assert not found, "\n".join(found)
    assert BUILT_IN_OPS.search(_code_without_prose(Path(__file__).parent / "test_ops.py"))  # the scan finds names


def test_a_plain_contract_op_keeps_its_outputs_layout_and_works_as_before() -> None:
    """toy_mul declares no contract (plain): inputs reach kernels as they are, make_output's
    output as it is."""
    ops = install(registry_with(ToyPlugin(toy_kernel("toy_mul_torch", toy_mul_torch))))
    try:
        x = _rand(3, 4, 5, seed=34)
        assert torch.equal(ops.toy_mul(x, x), x * x)
        assert "calls toy_mul_torch" in ops.explain("toy_mul", x, x)
    finally:
        tkreg.ops.uninstall()
