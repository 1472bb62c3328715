"""Optional inputs (``Op(optional=...)``): a caller passes None for a LayerNorm's bias, as torch's
functions take it. The kernels, the peer, the reference, make_output and the backward get None in
its place; plans, keys, remembered signatures, the torch operator and gradients keep it apart
from a call that passes the tensor."""

from __future__ import annotations

import functools
import inspect
from typing import Any

import pytest

import tkreg
from tests.ops_support import choice_by_priority, device_or_skip, randn, registry_with, same_alignment_as
from tkreg.core.errors import InputError, SpecError
from tkreg.core.tolerances import EXACT

torch = pytest.importorskip("torch")

# What the toy kernels saw, per call: (kernel, which of weight and bias were passed)
SEEN: list[tuple[str, bool, bool]] = []


def affine_reference(x: Any, weight: Any, bias: Any) -> Any:
    y = x if weight is None else x * weight
    return y if bias is None else y + bias


def affine_make_output(x: Any, weight: Any, bias: Any) -> Any:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def affine_inputs(case: Any, dtype: Any, generator: Any, device: Any) -> Any:
    x = torch.randn(case["M"], case["N"], generator=generator, dtype=dtype, device=device)
    weight = torch.randn(case["N"], generator=generator, dtype=dtype, device=device)
    bias = torch.randn(case["N"], generator=generator, dtype=dtype, device=device)
    return x, None if case.variant == "no_weight" else weight, None if case.variant in ("no_bias", "no_weight") else bias


def affine_peer(x: Any, weight: Any, bias: Any, out: Any = None) -> Any:
    got = affine_reference(x, weight, bias)
    return got if out is None else out.copy_(got)


def affine_cost(dims: dict[str, int], itemsize: int) -> tkreg.Cost:
    return tkreg.Cost(bytes=2 * dims["M"] * dims["N"] * itemsize)


def affine_torch(x: Any, weight: Any, bias: Any, out: Any) -> Any:
    """A forward "kernel" of torch ops that takes 2-D rows only, as a Triton kernel would."""
    SEEN.append(("affine_torch", weight is not None, bias is not None))
    if x.dim() != 2:
        raise InputError(f"affine_torch takes 2-D rows, got shape {tuple(x.shape)}")
    return out.copy_(affine_reference(x, weight, bias))


def affine_backward_torch(x: Any, weight: Any, bias: Any, y: Any, grad_y: Any, out: Any) -> Any:
    """(inputs, output, upstream gradient) in; out=(dx, dweight, dbias), None for an absent input."""
    SEEN.append(("affine_backward_torch", weight is not None, bias is not None))
    dx, dweight, dbias = out
    assert (dweight is None) == (weight is None) and (dbias is None) == (bias is None)
    dx.copy_(grad_y if weight is None else grad_y * weight)
    if dweight is not None:
        dweight.copy_((grad_y * x).sum(0))
    if dbias is not None:
        dbias.copy_(grad_y.sum(0))
    return out


def no_weight_without_bias(x: Any, weight: Any, bias: Any) -> list[str]:
    return ["affine_picky takes a weight"] if weight is None else []


class AffinePlugin:
    """Registers op toy_affine: y = x * weight + bias over rows, weight and bias optional."""

    def __init__(self, *kernels: tkreg.Kernel, optional: tuple[str, ...] = ("weight", "bias"), autocast: Any = None) -> None:
        self.kernels, self.optional, self.autocast = kernels, optional, autocast

    @tkreg.hookimpl
    def tkreg_register_ops(self, register: Any) -> None:
        register(
            tkreg.Op(
                name="toy_affine",
                reference=affine_reference,
                make_inputs=affine_inputs,
                make_output=affine_make_output,
                cases=(tkreg.case(M=5, N=7), tkreg.case(M=5, N=7, variant="no_bias"), tkreg.case(M=3, N=9, variant="no_weight")),
                dtypes=("float32",),
                tolerances=EXACT,
                cost=affine_cost,
                peer=affine_peer,
                peer_name="affine_peer",
                inputs=("x", "weight", "bias"),
                optional=self.optional,
                grads=("x", "weight", "bias"),
                contract=tkreg.contracts.rows(),
                autocast=self.autocast,
            )
        )

    @tkreg.hookimpl
    def tkreg_register_kernels(self, register: Any) -> None:
        for k in self.kernels:
            register(k)


def affine_kernel(name: str, launcher: Any, **kw: Any) -> tkreg.Kernel:
    return tkreg.Kernel(name=name, op="toy_affine", launcher=launcher, interpretable=True, **kw)


FORWARD = affine_kernel("affine_torch", affine_torch)
BACKWARD = affine_kernel("affine_backward_torch", affine_backward_torch, backward=True)


@pytest.fixture
def ops(monkeypatch: Any, tmp_path: Any) -> Any:
    choice_by_priority(monkeypatch, tmp_path)
    SEEN.clear()
    tkreg.ops.install(registry_with(AffinePlugin(FORWARD, BACKWARD)))
    yield tkreg.ops
    tkreg.ops.uninstall()
    SEEN.clear()


def _inputs(device: str, seed: int = 0, rows: tuple[int, ...] = (6,), n: int = 10) -> tuple[Any, Any, Any]:
    x = randn(*rows, n, dtype=torch.float32, device=device, seed=seed)
    vector = functools.partial(randn, n, dtype=torch.float32, device=device)
    return x, vector(seed=seed + 1), vector(seed=seed + 2)


def test_a_spec_names_optional_inputs_among_its_inputs_and_never_the_first() -> None:
    def op(**kw: Any) -> tkreg.Op:
        return tkreg.Op(name="toy", reference=affine_reference, make_inputs=affine_inputs, make_output=affine_make_output,
                        cases=(tkreg.case(M=1, N=1),), dtypes=("float32",), tolerances=EXACT, cost=affine_cost, **kw)  # fmt: skip

    assert op(inputs=("x", "weight", "bias"), optional=("bias",)).optional == ("bias",)
    with pytest.raises(SpecError, match="not among inputs"):
        op(inputs=("x", "weight", "bias"), optional=("scale",))
    with pytest.raises(SpecError, match="first input"):
        op(inputs=("x", "weight", "bias"), optional=("x",))
    with pytest.raises(SpecError, match="name the op's inputs"):
        op(optional=("bias",))


@pytest.mark.parametrize("passed", [(True, True), (True, False), (False, True), (False, False)])
def test_absent_inputs_reach_the_kernel_as_none_and_each_pattern_is_its_own_plan(ops: Any, passed: tuple[bool, bool]) -> None:
    device = device_or_skip()
    x, w, b = _inputs(device)
    weight, bias = (w if passed[0] else None), (b if passed[1] else None)
    for seed in (3, 4):  # the second call (same signature, new values) runs the kept plan
        x = same_alignment_as(x, seed)
        got = ops.toy_affine(x, weight, bias)
        torch.testing.assert_close(got, affine_reference(x, weight, bias), rtol=0, atol=0)
    assert SEEN == [("affine_torch", *passed)] * 2
    dispatcher = tkreg.ops._installed["dispatchers"]["toy_affine"]
    assert len(dispatcher._plans) == 1
    assert "affine_torch" in ops.explain("toy_affine", x, weight, bias)


def test_calls_with_and_without_an_input_keep_apart_plans(ops: Any) -> None:
    device = device_or_skip()
    x, w, b = _inputs(device)
    for weight, bias in ((w, b), (w, None), (None, b), (w, b), (w, None)):
        torch.testing.assert_close(ops.toy_affine(x, weight, bias), affine_reference(x, weight, bias), rtol=0, atol=0)
    assert len(tkreg.ops._installed["dispatchers"]["toy_affine"]._plans) == 3


def test_none_for_an_input_that_is_not_optional_is_a_clear_error(ops: Any) -> None:
    device = device_or_skip()
    _, w, b = _inputs(device)
    with pytest.raises(InputError, match=r"x must be a torch.Tensor, got None: toy_affine's only weight and bias may be None"):
        ops.toy_affine(None, w, b)
    assert SEEN == []


def test_leading_dims_merge_with_an_absent_input(ops: Any) -> None:
    device = device_or_skip()
    x, w, _ = _inputs(device, rows=(2, 3))
    got = ops.toy_affine(x, w, None)
    assert got.shape == (2, 3, 10)
    torch.testing.assert_close(got, affine_reference(x, w, None), rtol=0, atol=0)


def test_the_torch_operator_takes_none_for_an_optional_input(ops: Any) -> None:
    device = device_or_skip()
    x, w, _ = _inputs(device)
    schema = str(torch.ops.tkreg.toy_affine.default._schema)
    assert "Tensor? weight" in schema and "Tensor? bias" in schema and "Tensor x" in schema
    torch.testing.assert_close(torch.ops.tkreg.toy_affine(x, w, None), affine_reference(x, w, None), rtol=0, atol=0)


@pytest.mark.parametrize("passed", [(True, True), (True, False), (False, False)])
def test_gradients_of_absent_inputs_are_none_and_the_others_right(ops: Any, passed: tuple[bool, bool]) -> None:
    device = device_or_skip()
    x, w, b = _inputs(device)
    x.requires_grad_(True)
    weight = w.requires_grad_(True) if passed[0] else None
    bias = b.requires_grad_(True) if passed[1] else None
    upstream = randn(6, 10, dtype=torch.float32, device=device, seed=9)
    ops.toy_affine(x, weight, bias).backward(upstream)
    leaves = [t for t in (x, weight, bias) if t is not None]
    copies = [None if t is None else t.detach().clone().requires_grad_(True) for t in (x, weight, bias)]
    affine_reference(*copies).backward(upstream)
    for t, c in zip(leaves, [c for c in copies if c is not None]):
        torch.testing.assert_close(t.grad, c.grad, rtol=0, atol=1e-6)
    assert ("affine_backward_torch", *passed) in SEEN


def test_keys_of_absent_inputs_travel_between_processes(ops: Any) -> None:
    from tkreg.ops import keys, warming

    device = device_or_skip()
    x, w, _ = _inputs(device)
    key = keys.plan_key((x, w, None), ())
    assert key is not None and key[-keys.PER_TENSOR :] == keys.ABSENT
    again = keys.from_json(keys.to_json(key, False), False)
    assert again == key and hash(again) == hash(key)
    made = warming.inputs_of(key, False, torch.cuda.device_count())
    assert made is not None and made[2] is None and made[0].shape == x.shape and made[1].shape == w.shape


def test_the_packed_key_of_none_is_the_key_pack_makes() -> None:
    from tkreg.ops import keys, native

    key_of, pack = native.plan_key(), native.packer()
    if key_of is None or pack is None:
        pytest.skip("tkreg.ops' C++ extension is not built here")
    x = torch.randn(4, 6)
    w = torch.randn(6)
    assert key_of(x, w, None) == pack(keys.tensors_key((x, w, None)))
    assert key_of(x, w, None) != key_of(x, None, w)
    assert key_of(x, None) != key_of(x)


def test_a_kernel_that_needs_an_input_refuses_its_absence_and_the_next_runs(monkeypatch: Any, tmp_path: Any) -> None:
    choice_by_priority(monkeypatch, tmp_path)
    SEEN.clear()
    picky = affine_kernel("affine_picky", affine_torch, priority=10,
                          requires=tkreg.Requirements(inputs=no_weight_without_bias))  # fmt: skip
    tkreg.ops.install(registry_with(AffinePlugin(picky, FORWARD)))
    try:
        device = device_or_skip()
        x, w, b = _inputs(device)
        tkreg.ops.toy_affine(x, None, b)
        text = tkreg.ops.explain("toy_affine", x, None, b)
        assert "affine_torch" in text
        tkreg.ops.toy_affine(x, w, b)
        assert [s[0] for s in SEEN] == ["affine_torch", "affine_torch"]
        assert "affine_picky" in tkreg.ops.explain("toy_affine", x, w, b).split(";")[0]
    finally:
        tkreg.ops.uninstall()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile_traces_a_call_without_an_optional_input(ops: Any, backend: str) -> None:
    device = device_or_skip()
    x, w, _ = _inputs(device)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(lambda x, w: ops.toy_affine(x, w, None) * 2, fullgraph=True, backend=backend)
        torch.testing.assert_close(compiled(x, w), affine_reference(x, w, None) * 2, rtol=0, atol=0)
        x.requires_grad_(True)
        compiled(x, w).sum().backward()
        torch.testing.assert_close(x.grad, 2 * w.expand_as(x), rtol=0, atol=0)
    finally:
        torch._dynamo.reset()


def test_under_autocast_a_call_without_an_optional_input_stays_on_the_fast_path(monkeypatch: Any, tmp_path: Any) -> None:
    """The C++ call takes a call under autocast with None among its inputs as it takes one without
    (casts as the op declares, None passed on): the checked path (its context detour) is never
    asked after the first call. The op declares "unchanged", so no cast allocates a tensor of
    another alignment class (CPU allocations are 64-byte aligned) and every call has one plan."""
    from tkreg.ops import library, native

    if native.fast_caller() is None:
        pytest.skip("tkreg.ops' C++ extension is not built here")
    choice_by_priority(monkeypatch, tmp_path)
    SEEN.clear()
    tkreg.ops.install(registry_with(AffinePlugin(FORWARD, autocast="unchanged")))
    try:
        device = device_or_skip()
        x, w, _ = _inputs(device)
        detours: list[int] = []
        original = library.context_detour
        monkeypatch.setattr(library, "context_detour", lambda *a: detours.append(1) or original(*a))
        with torch.autocast(device, dtype=torch.bfloat16):
            tkreg.ops.toy_affine(x, w, None)
            asked = len(detours)
            for _ in range(3):
                got = tkreg.ops.toy_affine(x, w, None)
        assert asked == 1 and len(detours) == asked  # later calls: the C++ call, no checked path
        torch.testing.assert_close(got, affine_reference(x, w, None), rtol=0, atol=0)
        assert SEEN == [("affine_torch", True, False)] * 4
    finally:
        tkreg.ops.uninstall()


def test_torch_func_transforms_take_a_call_without_an_optional_input(ops: Any) -> None:
    device = device_or_skip()
    x, w, _ = _inputs(device)
    got = torch.func.grad(lambda x, w: ops.toy_affine(x, w, None).sum(), argnums=(0, 1))(x, w)
    want = torch.func.grad(lambda x, w: affine_reference(x, w, None).sum(), argnums=(0, 1))(x, w)
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r, rtol=0, atol=1e-6)
    batch = randn(3, 6, 10, dtype=torch.float32, device=device, seed=5)
    with pytest.warns(UserWarning):  # vmap runs the peer's own code, and says so
        mapped = torch.func.vmap(lambda x: ops.toy_affine(x, w, None))(batch)
    torch.testing.assert_close(mapped, affine_reference(batch, w, None), rtol=0, atol=0)
    jacobian = torch.func.jacrev(lambda x: ops.toy_affine(x, w, None))(x[:2])
    torch.testing.assert_close(jacobian, torch.func.jacrev(lambda x: affine_reference(x, w, None))(x[:2]), rtol=0, atol=0)


@pytest.fixture(params=["C++", "Python"])
def either_fast_path(request: Any, monkeypatch: Any, tmp_path: Any) -> Any:
    """tkreg.ops built with the C++ call where it is built, then with the Python fast path."""
    from tkreg.ops import native

    if request.param == "C++" and native.fast_caller() is None:
        pytest.skip("tkreg.ops' C++ extension is not built here")
    if request.param == "Python":
        monkeypatch.setenv(native.ENV, "0")
    native._load.cache_clear()
    choice_by_priority(monkeypatch, tmp_path)
    SEEN.clear()
    tkreg.ops.install(registry_with(AffinePlugin(FORWARD, BACKWARD)))
    yield tkreg.ops
    tkreg.ops.uninstall()
    monkeypatch.delenv(native.ENV, raising=False)
    native._load.cache_clear()
    SEEN.clear()


def test_trailing_optional_inputs_may_be_left_out_and_share_the_plan_of_none(either_fast_path: Any) -> None:
    """As F.layer_norm(x, shape) leaves out weight and bias: toy_affine(x) is toy_affine(x, None,
    None), on the same plan and, after the first call, the same path (nothing planned again)."""
    ops = either_fast_path
    device = device_or_skip()
    x, w, _ = _inputs(device)
    dispatcher = tkreg.ops._installed["dispatchers"]["toy_affine"]
    planned: list[int] = []
    original = dispatcher.planned
    dispatcher.planned = lambda *a: planned.append(1) or original(*a)  # type: ignore[method-assign]
    for args in ((x,), (x, None), (x, None, None), (x,), (x, w), (x, w, None), (x, w)):
        full = (*args, *(None,) * (3 - len(args)))
        torch.testing.assert_close(ops.toy_affine(*args), affine_reference(*full), rtol=0, atol=0)
    assert len(dispatcher._plans) == 2  # (x, None, None) and (x, w, None)
    assert len(planned) == 2  # each signature planned once: the fast path took every later call
    shown = inspect.signature(ops.toy_affine).parameters
    assert [(p.name, p.default) for p in shown.values()] == [("x", inspect.Parameter.empty), ("weight", None), ("bias", None)]
    assert "affine_torch" in ops.explain("toy_affine", x)


def test_the_torch_operator_leaves_out_trailing_optional_inputs(ops: Any) -> None:
    device = device_or_skip()
    x, w, _ = _inputs(device)
    schema = str(torch.ops.tkreg.toy_affine.default._schema)
    assert "Tensor? weight=None, Tensor? bias=None" in schema
    torch.testing.assert_close(torch.ops.tkreg.toy_affine(x), x, rtol=0, atol=0)
    torch.testing.assert_close(torch.ops.tkreg.toy_affine(x, w), x * w, rtol=0, atol=0)


def test_the_torch_operator_runs_the_plan_of_a_call_that_leaves_inputs_out(ops: Any, monkeypatch: Any) -> None:
    """A planned call that leaves trailing optional inputs out takes the packet's planned run, as
    the same call with None does, not torch's dispatcher (matmul(a, b) leaves out its bias)."""
    device = device_or_skip()
    x, w, _ = _inputs(device)
    packet = torch.ops.tkreg.toy_affine
    through_torch: list[Any] = []
    op = packet._op
    monkeypatch.setattr(packet, "_op", lambda *a, **k: through_torch.append(a) or op(*a, **k))
    packet(x, w)  # plans the signature (None for the bias) through torch's dispatcher
    assert len(through_torch) == 1
    for _ in range(2):
        torch.testing.assert_close(packet(x, w), x * w, rtol=0, atol=0)
        torch.testing.assert_close(packet(x, w, None), x * w, rtol=0, atol=0)
    assert len(through_torch) == 1


def test_too_few_or_too_many_inputs_say_how_many_the_op_takes(ops: Any) -> None:
    device = device_or_skip()
    x, w, b = _inputs(device)
    for args in ((), (x, w, b, b)):
        with pytest.raises((InputError, TypeError), match=r"toy_affine.*(takes 1 to 3 tensor\(s\)|argument)"):
            ops.toy_affine(*args)


def test_the_python_key_of_an_optional_input_is_the_key_tensors_key_gives() -> None:
    from tkreg.core.generated import generated
    from tkreg.ops import keys

    key = generated(f"def key(a, b):\n    return ({keys.source(['a', 'b'], frozenset({1}))},)\n", "key", {"ABSENT": keys.ABSENT})
    x, w = torch.randn(4, 6), torch.randn(6)
    assert key(x, None) == keys.tensors_key((x, None)) and key(x, w) == keys.tensors_key((x, w))


def test_tune_with_training_takes_an_input_the_variant_leaves_out(ops: Any, monkeypatch: Any) -> None:
    """tkreg tune's per-shape step (the forward, then a call that wants a gradient) on inputs with
    None, as `tkreg tune layer_norm --variant no_bias --training` makes them; on the CPU no choice
    is measured, so the plan's description stands in for it."""
    from tkreg.ops import prefill

    device = device_or_skip()
    x, w, _ = _inputs(device)
    dispatcher = tkreg.ops._installed["dispatchers"]["toy_affine"]
    if device == "cpu":  # what tkreg tune does on a GPU after the calls: nothing to wait for, no choice measured
        monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
        monkeypatch.setattr(dispatcher.chooser, "known", lambda *a: None)
    tuned = prefill._tuned("toy_affine", dispatcher, ops.toy_affine, (x, w, None), {}, "6x10-no_bias", training=True)
    assert tuned.shape == "6x10-no_bias" and "affine_torch" in tuned.note
    assert SEEN == [("affine_torch", True, False)] * 2  # the plain call, then the one that wants a gradient
