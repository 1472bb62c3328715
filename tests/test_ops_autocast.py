"""tkreg.ops under torch.autocast: an op that declares what autocast does to it (Op.autocast)
has its inputs cast as torch casts its peer's, then runs tkreg's kernels, so a call computes in
the dtypes torch's code would, forward and backward, eagerly, through torch.ops.tkreg and
compiled. An op that declares nothing for the device type makes the peer's own call, compiled
too. Kernels run under the Triton interpreter (CPU) or on a GPU."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import tkreg  # noqa: E402
from tests.ops_support import (  # noqa: E402
    ToyPlugin,
    capturing_backend,
    choice_by_priority,
    device_or_skip,
    fresh_dynamo,
    install,
    installed_ops,
    registry_with,
    toy_kernel,
    toy_mul_refusing,
)
from tkreg.ops import PeerFallbackWarning, autocasting  # noqa: E402
from tkreg.testing.checking import compare  # noqa: E402
from tkreg.testing.harness import float64_reference  # noqa: E402

device = pytest.fixture(scope="module")(device_or_skip)
ops = pytest.fixture(installed_ops)
OPS = ["matmul", "layer_norm", "rms_norm", "sum_row", "add"]
# the ops' tolerance scales at these sizes: a dot product of 64, row sums of 40
SCALES = {"matmul": math.sqrt(64), "sum_row": math.sqrt(40)}


@pytest.fixture(autouse=True)
def kernels_by_priority(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    choice_by_priority(monkeypatch, tmp_path, interpreter=False)  # the interpreter is on for the whole process or not at all


fresh_dynamo = pytest.fixture(autouse=True)(fresh_dynamo)


def _inputs(op: str, device: str, requires_grad: bool = False) -> tuple[Any, ...]:
    """float32 inputs as a model under autocast passes them (bfloat16 rows for sum_row, which
    autocast sums to float32 on CUDA), and weights in float32 beside a bfloat16 activation for
    the norms (mixed, as an autocast region makes them)."""
    g = torch.Generator().manual_seed(3)
    shapes = {"matmul": ((24, 64), (64, 32)), "layer_norm": ((6, 40), (40,), (40,)), "rms_norm": ((6, 40), (40,)),
              "sum_row": ((6, 40),), "add": ((24, 64), (24, 64))}[op]  # fmt: skip
    made = [torch.randn(shape, generator=g).to(device) for shape in shapes]
    if op in ("sum_row", "layer_norm", "rms_norm"):
        made[0] = made[0].bfloat16()
    return tuple(t.requires_grad_(requires_grad) for t in made)


def _torch_call(op: str) -> Callable[..., Any]:
    return {"matmul": torch.matmul, "add": torch.add, "sum_row": lambda x: x.sum(-1),
            "layer_norm": lambda x, w, b: F.layer_norm(x, (40,), w, b, eps=1e-5),
            "rms_norm": lambda x, w: F.rms_norm(x, (40,), w, eps=1e-6)}[op]  # fmt: skip


def _assert_close_to_reference(op_name: str, got: Any, inputs: tuple[Any, ...], device: str) -> None:
    """``got`` against the float64 reference of the inputs as the op's policy casts them, within
    the op's tolerance for ``got``'s dtype."""
    op = tkreg.default_registry().op(op_name)
    with torch.autocast(device, dtype=torch.bfloat16):  # the region's dtype, as the call read it
        cast = autocasting.cast(inputs, device, op.autocast_policy(device))
    params = {p.name: p.default for p in op.params}
    want = float64_reference(op, tuple(t.detach() for t in cast), params)[0]
    tol = op.tolerances[str(got.dtype).removeprefix("torch.")].scaled(SCALES.get(op_name, 1.0))
    result = compare(got, want.to(got.dtype).double(), tol)
    assert result.ok, result.report(f"{op_name} under autocast on {device}")


@pytest.mark.parametrize("planned", [True, False], ids=["planned outside autocast", "first call under autocast"])
@pytest.mark.parametrize("op", OPS)
def test_a_call_under_autocast_computes_in_torchs_dtypes(ops: Any, device: str, op: str, planned: bool) -> None:
    inputs = _inputs(op, device)
    mine, theirs = getattr(ops, op), _torch_call(op)
    declared = tkreg.default_registry().op(op).autocast_policy(device) is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PeerFallbackWarning)
        outside = mine(*inputs) if planned else None
        with torch.autocast(device, dtype=torch.bfloat16):
            got, want, again = mine(*inputs), theirs(*inputs), mine(*inputs)
            told = ops.explain(op, *inputs)
        after = mine(*inputs)
    assert got.dtype == want.dtype and again.dtype == want.dtype and torch.equal(got, again)
    if declared:  # tkreg's kernels, in the dtypes torch computes in
        assert "calls its peer" not in told and "torch.autocast" in told, told
        _assert_close_to_reference(op, got, inputs, device)
    else:  # the peer's own call: torch's result, bit for bit
        assert told.endswith(f"declares no autocast policy for {device})") and torch.equal(got, want), told
    if outside is not None:  # outside autocast again: the plan's own call, in the inputs' dtypes
        assert torch.equal(after, outside)


@pytest.mark.parametrize("op", ["matmul", "layer_norm", "rms_norm"])
def test_gradients_under_autocast_reach_the_inputs_in_their_own_dtypes(ops: Any, device: str, op: str) -> None:
    mine, theirs = _inputs(op, device, requires_grad=True), _inputs(op, device, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PeerFallbackWarning)
        with torch.autocast(device, dtype=torch.bfloat16):
            got, want = getattr(ops, op)(*mine), _torch_call(op)(*theirs)
        upstream = torch.randn(got.shape, generator=torch.Generator().manual_seed(5)).to(device, got.dtype)
        got.backward(upstream)
        want.backward(upstream)
    for a, b in zip(mine, theirs):
        assert a.grad is not None and a.grad.dtype == a.dtype == b.grad.dtype
        # both through bfloat16 arithmetic (a product, a bfloat16 output): within 5% of the largest gradient
        scale = b.grad.abs().max().item()
        assert (a.grad.double() - b.grad.double()).abs().max().item() <= 0.05 * scale + 1e-3, op


@pytest.mark.parametrize("op", OPS)
def test_a_planned_call_under_autocast_takes_the_cpp_call(ops: Any, device: str, op: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A call under autocast makes its casts and finds its plan in C++: the checked path runs
    only to plan a signature of cast inputs not seen before (on the CPU, fresh tensors of another
    alignment class), and never casts again itself."""
    from tkreg.ops import library, native

    if native.fast_caller() is None:
        pytest.skip(f"the C++ call is not in use here: {native.status()}")
    inputs = _inputs(op, device)
    plans = tkreg.ops._installed["dispatchers"][op]._plans
    with torch.autocast(device, dtype=torch.bfloat16):
        first = getattr(ops, op)(*inputs)  # the checked path plans the cast inputs' signature
        planned, checked = len(plans), []
        monkeypatch.setattr(autocasting, "policy_for", lambda *a: pytest.fail("the checked path cast"))
        way_of = library.way_of
        monkeypatch.setattr(library, "way_of", lambda inputs: checked.append(inputs) or way_of(inputs))
        again = [getattr(ops, op)(*inputs) for _ in range(6)]
    # on the CPU each fresh input is 64-byte aligned: one of two classes of the key's 128 bytes
    assert len(checked) == len(plans) - planned <= (2 ** len(inputs) - 1 if device == "cpu" else 0)
    assert all(t.dtype == first.dtype and torch.equal(t, first) for t in again)


def _casts_of_weight(outputs: list[Any]) -> int:
    """The distinct casts (ToCopyBackward nodes) that the outputs' autograd graphs hold."""
    seen, casts, stack = set(), set(), [t.grad_fn for t in outputs]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if node.name().startswith("ToCopyBackward"):
            casts.add(node)
        stack.extend(f for f, _ in node.next_functions)
    return len(casts)


def test_a_weight_is_cast_once_per_autocast_region_as_torch_casts_it(ops: Any, device: str) -> None:
    """torch casts a float32 weight (a leaf that wants a gradient) once per autocast region and
    reuses the copy; tkreg.ops' C++ call uses torch's own cast cache, so a model's weight used
    twice in a region is cast once there, and again in the next region."""
    from tkreg.ops import native

    if native.fast_caller() is None:
        pytest.skip(f"the C++ call is not in use here (every call casts): {native.status()}")
    x, w = _inputs("matmul", device)
    w.requires_grad_(True)
    counts = {}
    for name, matmul in (("tkreg", ops.matmul), ("torch", torch.matmul)):
        outputs = []
        for _ in range(2):  # two regions, two calls each
            with torch.autocast(device, dtype=torch.bfloat16):
                outputs += [matmul(x, w), matmul(x, w)]
        counts[name] = _casts_of_weight(outputs)
        sum(t.float().sum() for t in outputs).backward()
    assert counts == {"tkreg": 2, "torch": 2}


def test_a_float16_region_casts_to_float16(ops: Any, device: str) -> None:
    a, b = _inputs("matmul", device)
    with torch.autocast(device, dtype=torch.float16):
        got, want = ops.matmul(a, b), torch.matmul(a, b)
    assert got.dtype == want.dtype == torch.float16
    torch.testing.assert_close(got, ops.matmul(a.half(), b.half()), rtol=0, atol=0)  # the same kernel on float16 inputs


def test_the_torch_operator_casts_as_the_op_declares(ops: Any, device: str) -> None:
    a, b = _inputs("matmul", device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PeerFallbackWarning)
        outside_sum = torch.ops.tkreg.add(a, a)
        with torch.autocast(device, dtype=torch.bfloat16):
            product, total = torch.ops.tkreg.matmul(a, b), torch.ops.tkreg.add(a, a)
            eager = ops.matmul(a, b)
    assert product.dtype == torch.bfloat16 and torch.equal(product, eager)  # "lower": the same kernel on bfloat16 inputs
    assert total.dtype == torch.float32 and torch.equal(total, outside_sum)  # "unchanged"


def test_a_compiled_call_under_autocast_casts_as_an_eager_one(ops: Any, device: str) -> None:
    a, b = _inputs("matmul", device)
    compiled = torch.compile(lambda a, b: ops.matmul(a, b), fullgraph=True, backend="aot_eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PeerFallbackWarning)
        with torch.autocast(device, dtype=torch.bfloat16):
            got, eager = compiled(a, b), ops.matmul(a, b)
            mixed = compiled(a.bfloat16(), b)  # a bfloat16 activation and a float32 weight
        outside = compiled(a, b)
    assert got.dtype == torch.bfloat16 and torch.equal(got, eager) and torch.equal(mixed, eager)
    assert outside.dtype == torch.float32


def test_an_op_that_declares_nothing_is_the_peers_own_code_eager_and_compiled(device: str) -> None:
    graphs: list[str] = []
    # a launcher the compiler cannot trace: the operator stays in a graph that calls it
    ops = install(registry_with(ToyPlugin(toy_kernel("toy_mul_picky", toy_mul_refusing))))
    try:
        x, y = (torch.randn(6, 7, generator=torch.Generator().manual_seed(i)).to(device) for i in (1, 2))
        compiled = torch.compile(lambda x, y: ops.toy_mul(x, y), fullgraph=True, backend=capturing_backend(graphs))
        assert "declares no autocast policy" not in ops.explain("toy_mul", x, y)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.autocast(device, dtype=torch.bfloat16):
                eager, got = ops.toy_mul(x, y), compiled(x, y)
                told = ops.explain("toy_mul", x, y)
        assert torch.equal(got, x * y) and torch.equal(eager, x * y)
        assert told.endswith(f"declares no autocast policy for {device})")
        assert any("torch.autocast takes the peer's own code" in str(w.message) for w in caught)
        assert graphs and "tkreg" not in graphs[-1] and "aten.mul" in graphs[-1]  # the peer traced, not the operator
        assert torch.equal(compiled(x, y), x * y)  # outside autocast: the operator
        assert len(graphs) == 2 and "tkreg" in graphs[-1]
    finally:
        tkreg.ops.uninstall()


def test_autocast_policies_are_checked_when_an_op_is_declared() -> None:
    from tests.ops_support import toy_cost, toy_make_inputs, toy_make_output, toy_reference

    def toy(autocast: Any) -> tkreg.Op:
        return tkreg.Op(name="toy", reference=toy_reference, make_inputs=toy_make_inputs, make_output=toy_make_output,
                        cases=(tkreg.case(M=2, N=2),), dtypes=("float32",), tolerances={"float32": tkreg.Tolerance(0, 0)},
                        cost=toy_cost, autocast=autocast)  # fmt: skip

    assert toy("lower").autocast_policy("cuda") == "lower" and toy("lower").autocast_policy("xpu") == "lower"
    both = toy({"cuda": "float32", "cpu": "unchanged"})
    assert [both.autocast_policy(d) for d in ("cuda", "cpu", "xpu")] == ["float32", "unchanged", None]
    assert toy(None).autocast_policy("cuda") is None
    for bad in ("half", {"cuda": "fp16"}, {}, {"": "lower"}, 3):
        with pytest.raises(tkreg.SpecError, match="autocast"):
            toy(bad)
