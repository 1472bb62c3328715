"""tkreg ops under torch.compile(fullgraph=True): no graph break, the same results as eager, the
compiled graph dispatching on the real tensors at run time, a traceable launcher traced into the
graph only where its choice cannot depend on alignment, and gradients through compiled code."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

import tkreg  # noqa: E402
from tests.ops_support import (  # noqa: E402
    ToyPlugin,
    capturing_backend,
    choice_by_priority,
    device_or_skip,
    fresh_dynamo,
    install,
    installed_ops,
    randn,
    registry_with,
    toy_kernel,
    toy_mul_refusing,
    toy_mul_torch,
)

device = pytest.fixture(scope="module")(device_or_skip)
ops = pytest.fixture(installed_ops)


@pytest.fixture(autouse=True)
def kernels_by_priority(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    choice_by_priority(monkeypatch, tmp_path, interpreter=False)  # the interpreter is on for the whole process or not at all

TMA_CHECKS = "tkreg.launch.inputs:tma_inputs_reasons"


fresh_dynamo = pytest.fixture(autouse=True)(fresh_dynamo)


def block(x: Any, weight: Any, residual: Any) -> Any:
    """Two chained tkreg ops and a third: the row sums of x @ weight^T + residual."""
    return tkreg.ops.sum_row(tkreg.ops.add(tkreg.ops.matmul(x, weight.t()), residual))


def test_fullgraph_aot_eager_matches_eager(ops: Any, device: str) -> None:
    x = randn(2, 9, 32, dtype=torch.float16, device=device, seed=1)
    weight = randn(24, 32, dtype=torch.float16, device=device, seed=2)
    residual = randn(2, 9, 24, dtype=torch.float16, device=device, seed=3)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x, weight, residual), block(x, weight, residual))  # the same kernels: bit for bit


def test_the_compiled_graph_dispatches_at_run_time(ops: Any, device: str) -> None:
    graphs: list[str] = []
    compiled = torch.compile(block, fullgraph=True, backend=capturing_backend(graphs))
    x = randn(4, 32, dtype=torch.float16, device=device, seed=4)
    weight = randn(16, 32, dtype=torch.float16, device=device, seed=5)
    residual = randn(4, 16, dtype=torch.float16, device=device, seed=6)
    assert torch.equal(compiled(x, weight, residual), block(x, weight, residual))
    (code,) = graphs
    for op in ("matmul", "add", "sum_row"):  # no built-in launcher is traceable: each op decides at run time
        assert f"torch.ops.tkreg_dispatch.{op}.default" in code


def test_dynamic_shapes_keep_one_graph(ops: Any, device: str) -> None:
    compiled = torch.compile(lambda a, b: tkreg.ops.add(a, b), fullgraph=True, backend="aot_eager", dynamic=True)
    for rows in (5, 11, 17):
        a, b = (randn(rows, 40, dtype=torch.float32, device=device, seed=rows + s) for s in (0, 1))
        assert torch.equal(compiled(a, b), a + b)


def compiled_toy_mul_graph(device: str, *kernels: tkreg.Kernel) -> str:
    """The forward graph of a compiled tkreg.ops.toy_mul call with these kernels registered,
    after checking the compiled result."""
    install(registry_with(ToyPlugin(*kernels)))
    try:
        graphs: list[str] = []
        compiled = torch.compile(lambda x, y: tkreg.ops.toy_mul(x, y), fullgraph=True, backend=capturing_backend(graphs))
        x, y = (randn(6, 8, dtype=torch.float32, device=device, seed=s) for s in (7, 8))
        assert torch.equal(compiled(x, y), x * y)
        (code,) = graphs
        return code
    finally:
        tkreg.ops.uninstall()


def test_a_traceable_launcher_is_traced_into_the_graph(device: str) -> None:
    code = compiled_toy_mul_graph(device, toy_kernel("toy_mul_torch", toy_mul_torch))
    assert "torch.ops.aten.mul" in code and "tkreg_dispatch" not in code


@pytest.mark.parametrize(
    "first",
    [
        # ranks first but is not traceable
        toy_kernel("toy_mul_picky", toy_mul_refusing, priority=10),
        # ranks first only for inputs with 16-byte aligned addresses and rows, which a trace cannot know
        toy_kernel("toy_mul_tma", toy_mul_torch, priority=10, requires=tkreg.Requirements(inputs=TMA_CHECKS)),
    ],
    ids=lambda k: k.name,
)

def test_a_choice_a_trace_cannot_make_is_left_to_run_time(device: str, first: tkreg.Kernel) -> None:
    code = compiled_toy_mul_graph(device, first, toy_kernel("toy_mul_torch", toy_mul_torch))
    assert "torch.ops.tkreg_dispatch.toy_mul.default" in code and "aten.mul" not in code


def test_gradients_through_compiled_code_match_eager(ops: Any, device: str) -> None:
    def leaves() -> tuple[Any, ...]:
        return (
            randn(3, 7, 32, dtype=torch.float16, device=device, seed=11).requires_grad_(),
            randn(16, 32, dtype=torch.float16, device=device, seed=12).requires_grad_(),
            randn(3, 7, 16, dtype=torch.float16, device=device, seed=13).requires_grad_(),
        )

    eager, compiled = leaves(), leaves()
    block(*eager).sum().backward()
    torch.compile(block, fullgraph=True, backend="aot_eager")(*compiled).sum().backward()
    for e, c in zip(eager, compiled):
        assert torch.equal(e.grad, c.grad)


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("add", lambda d: (torch.randn(5, 7, device=d, requires_grad=True), torch.randn(5, 7, device=d))),
        ("sum_row", lambda d: (torch.randn(3, 4, 9, device=d, requires_grad=True),)),
        ("matmul", lambda d: (torch.randn(2, 3, 16, device=d).half().requires_grad_(), torch.randn(8, 16, device=d).half().t())),
    ],
)
def test_the_torch_operators_pass_opcheck(ops: Any, device: str, name: str, make: Any) -> None:
    """torch.library.opcheck: schema, autograd registration, fake implementation against the real
    one, and AOT dispatch with dynamic shapes, for the operator and its run-time dispatch."""
    inputs = make(device)
    for namespace in ("tkreg", "tkreg_dispatch"):
        operator = getattr(getattr(torch.ops, namespace), name).default
        args = inputs if namespace == "tkreg" else tuple(t.detach() for t in inputs)
        results = torch.library.opcheck(operator, args)
        assert set(results.values()) == {"SUCCESS"}, (namespace, results)
