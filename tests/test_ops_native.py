"""tkreg.ops' plan key in C++ (tkreg.ops.native): it tells tensors apart exactly where the Python
key does, refuses what it cannot key (so those calls take the checked path), says why it is not
in use, and the fast path finds plans alike with it and without it."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import tkreg  # noqa: E402
from tests.ops_support import (  # noqa: E402
    CALLS,
    RMS_FORWARD,
    RmsPlugin,
    ToyPlugin,
    choice_by_priority,
    install,
    registry_with,
    rms_reference,
    same_alignment_as,
    toy_kernel,
    toy_mul_torch,
)
from tkreg.ops import keys, native  # noqa: E402

built = pytest.mark.skipif(
    native.plan_key() is None, reason=f"the C++ plan key is not in use here: {native.status()}"
)


def _alike_in_python(tensors: list[Any]) -> Iterator[tuple[Any, Any, bool]]:
    for a, b in itertools.combinations(tensors, 2):
        yield a, b, keys.tensors_key([a]) == keys.tensors_key([b])


def _many_tensors() -> list[Any]:
    base = torch.randn(64, 64)
    flat = torch.randn(4097)
    return [
        base, base.clone(), base.t(), base[1:], base[:, 1:], base[::2], base.reshape(4096), base.reshape(16, 256),
        base.double(), base.half(), base.to(torch.bfloat16), base.int(), base.long(), base.bool(),
        flat[1:], flat[2:], flat[4:], flat[32:], flat[:4096].view(64, 64), flat[1:4097].view(64, 64),
        torch.randn(64, 1).expand(64, 64), torch.randn(1, 64).expand(64, 64), torch.tensor(3.0), torch.zeros(0, 64),
        torch.nn.Parameter(base.clone()), base.unsqueeze(0), torch.empty(64, 64, device="meta"),
        torch.randn(2, 3, 4, 5, 6, 7).permute(5, 3, 1, 0, 2, 4),
    ]  # fmt: skip


@built
def test_the_cpp_key_tells_tensors_apart_exactly_where_the_python_key_does() -> None:
    key = native.plan_key()
    tensors = _many_tensors()
    compared = 0
    for a, b, alike in _alike_in_python(tensors):
        got_a, got_b = key(a), key(b)
        if got_a is None or got_b is None:  # refused: the checked path keys it in Python
            continue
        compared += 1
        assert (got_a == got_b) == alike, (a.dtype, a.shape, a.stride(), b.dtype, b.shape, b.stride())
    assert compared > 300
    # and for several inputs at once: the same tensors in another order are another signature
    a, b = tensors[0], tensors[2]
    assert key(a, b) != key(b, a) and key(a, b) == key(same_alignment_as(a, seed=1), b) and key(a, b) != key(a)


@built
def test_a_python_key_packs_to_the_bytes_of_its_tensors() -> None:
    """What a plan made without tensors (a remembered signature) is filed under in the fast table
    is what a call with such tensors looks up."""
    key, pack = native.plan_key(), native.packer()
    assert pack is not None
    tensors = _many_tensors()
    for t in tensors:
        assert pack(keys.tensors_key([t])) == key(t)
    for a, b in itertools.pairwise(tensors):
        assert pack(keys.tensors_key([a, b])) == key(a, b)
    remembered = keys.from_json(keys.to_json(keys.tensors_key([tensors[0], tensors[2]]), False), False)
    assert pack(remembered) == key(tensors[0], tensors[2])
    with_values, without = keys.PlanTable(has_params=True), keys.PlanTable(has_params=False)
    with_values[keys.plan_key([tensors[0]], (0.5, True))] = "planned"
    without[keys.tensors_key(tensors[:2])] = "planned"
    assert with_values.fast == {(key(tensors[0]), (0.5, True)): "planned"}
    assert without.fast == {key(*tensors[:2]): "planned"}
    for bad in ((1, 2, 3, 4, 5), (torch.float32,), (torch.float32, (2,), (1, 1), torch.device("cpu"), 0)):
        with pytest.raises(TypeError):
            pack(bad)


@built
def test_the_cpp_key_refuses_what_it_cannot_key() -> None:
    key = native.plan_key()

    class Sub(torch.Tensor):
        pass

    x = torch.randn(4, 4)
    refused = [
        x.as_subclass(Sub), 3, "x", object(), torch.randn(4, 4).to_sparse(),
        torch.randn(4, dtype=torch.complex64).conj(), torch._neg_view(torch.randn(4, dtype=torch.complex64)),
    ]  # fmt: skip
    for thing in refused:
        assert key(thing) is None
        assert key(x, thing) is None  # any input refused: the whole call is
    assert key() == b""
    assert key(x) is not None
    assert key(x, None) not in (None, key(x))  # None: an absent optional input, keyed as one word
    with torch.autocast("cpu", dtype=torch.bfloat16):  # a peer's own call would compute in another dtype
        assert key(x) is None


def test_the_status_says_why_it_is_not_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each state in turn, whatever TKREG_NATIVE the run itself has (the state it had is
    loaded again at the end)."""
    native._load.cache_clear()
    try:
        monkeypatch.setenv(native.ENV, "0")
        assert native.plan_key() is None
        assert native.status().startswith("off (TKREG_NATIVE=0)")
        monkeypatch.delenv(native.ENV)
        native._load.cache_clear()
        try:
            from tkreg.ops.native import _plan_key  # type: ignore[attr-defined]
        except ImportError:
            assert native.plan_key() is None and native.status().startswith("not built")
            return
        assert native.plan_key() is not None and native.status().startswith("in use")
        monkeypatch.setattr(_plan_key, "torch_version", "0.0.1")
        native._load.cache_clear()
        assert native.plan_key() is None
        assert f"built for torch 0.0.1, not this torch {torch.__version__}" in native.status()
    finally:
        monkeypatch.undo()
        native._load.cache_clear()


@pytest.fixture(params=["cpp", "python"])
def key_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[str]:
    """tkreg.ops with toy_mul and toy_rms_norm, its fast paths generated with the C++ key or the
    Python one."""
    if request.param == "cpp" and native.plan_key() is None:
        pytest.skip(f"the C++ plan key is not in use here: {native.status()}")
    choice_by_priority(monkeypatch, tmp_path)
    if request.param == "python":
        monkeypatch.setenv(native.ENV, "0")
    native._load.cache_clear()
    CALLS.clear()
    install(registry_with(ToyPlugin(toy_kernel("toy_mul_kernel", toy_mul_torch)), RmsPlugin(RMS_FORWARD)))
    try:
        yield request.param
    finally:
        tkreg.ops.uninstall()
        monkeypatch.delenv(native.ENV, raising=False)
        native._load.cache_clear()
        CALLS.clear()


def test_the_fast_path_finds_plans_with_either_key(key_mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tkreg.ops import library

    dispatchers = tkreg.ops._installed["dispatchers"]
    mul, rms = dispatchers["toy_mul"], dispatchers["toy_rms_norm"]
    x, y, w = torch.randn(5, 7), torch.randn(5, 7), torch.randn(7)
    first = tkreg.ops.toy_mul(x, y), tkreg.ops.toy_rms_norm(x, w, eps=0.25)
    slow: list[Any] = []
    way_of = library.way_of
    monkeypatch.setattr(library, "way_of", lambda inputs: slow.append(inputs) or way_of(inputs))
    for dispatcher in (mul, rms):
        monkeypatch.setattr(dispatcher, "plan", lambda *a, **k: pytest.fail("planned again"))
    with torch.no_grad():
        again = tkreg.ops.toy_mul(x, y), tkreg.ops.toy_rms_norm(x, w, eps=0.25)
        # another tensor of the same signature finds the plan too; another signature does not
        tkreg.ops.toy_mul(same_alignment_as(x, seed=3), y)
    assert slow == []
    torch.testing.assert_close(again[0], x * y, rtol=0, atol=0)
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    expected_fast = 2 if key_mode == "cpp" else 0  # one packed key per planned signature
    assert len(mul._plans.fast) + len(rms._plans.fast) == expected_fast
    monkeypatch.undo()
    with torch.no_grad():
        tkreg.ops.toy_mul(x.t(), y.t())  # a new signature: planned on the checked path, then fast
    assert len(mul._plans) == 2 and len(mul._plans.fast) == (2 if key_mode == "cpp" else 0)


def test_a_table_starting_over_forgets_its_aliases(key_mode: str) -> None:
    mul = tkreg.ops._installed["dispatchers"]["toy_mul"]
    x = torch.randn(3, 3)
    with torch.no_grad():
        for _ in range(2):  # the second call finds the plan (and the C++ call keeps it in its memo)
            tkreg.ops.toy_mul(x, x)
    assert len(mul._plans.fast) == (1 if key_mode == "cpp" else 0)
    mul._plans.clear()
    assert not mul._plans and not mul._plans.fast
    with torch.no_grad():
        torch.testing.assert_close(tkreg.ops.toy_mul(x, x), x * x, rtol=0, atol=0)
    assert len(mul._plans) == 1 and len(mul._plans.fast) == (1 if key_mode == "cpp" else 0)


def test_recent_plans_are_found_as_the_table_finds_them(key_mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The C++ call keeps the plans it found last (a memo of a few slots); calls of more
    signatures than it has slots, interleaved, and of one signature with parameter values given
    or not, each run their own plan, and none is planned twice."""
    mul, rms = (tkreg.ops._installed["dispatchers"][name] for name in ("toy_mul", "toy_rms_norm"))
    shapes = [(m, n) for m in range(1, 7) for n in range(1, 7)]  # 36 signatures: more than the memo's slots
    tensors = [(torch.randn(*s), torch.randn(*s)) for s in shapes]
    x, w = torch.randn(5, 7), torch.randn(7)
    eps_calls = [{}, {"eps": 0.25}, {"eps": 0.5}, {"eps": 1e-6}]
    with torch.no_grad():
        for a, b in tensors:
            tkreg.ops.toy_mul(a, b)
        for params in eps_calls:
            tkreg.ops.toy_rms_norm(x, w, **params)
        for dispatcher in (mul, rms):
            monkeypatch.setattr(dispatcher, "plan", lambda *a, **k: pytest.fail("planned again"))
        for _ in range(3):
            for a, b in tensors:
                torch.testing.assert_close(tkreg.ops.toy_mul(a, b), a * b, rtol=0, atol=0)
            for params in eps_calls:
                expected = rms_reference(x, w, params.get("eps", rms.params.defaults[0]))[0]
                torch.testing.assert_close(tkreg.ops.toy_rms_norm(x, w, **params), expected)
    eps_values = {params.get("eps", rms.params.defaults[0]) for params in eps_calls}
    assert len(mul._plans) == len(shapes) and len(rms._plans) == len(eps_values)


def test_a_plans_calls_set_anew_reach_the_very_next_call(key_mode: str) -> None:
    """The C++ call keeps a plan's calls in its memo, not the plan: setting ``returned`` or
    ``gradient_call`` on the plan (as a capture's switch or a first call that decides the peer's
    way does) reaches the next call of that signature, in either order of calls and signatures."""
    mul = tkreg.ops._installed["dispatchers"]["toy_mul"]
    x, y, other = torch.randn(4, 5), torch.randn(4, 5), torch.randn(2, 3)
    with torch.no_grad():
        for _ in range(3):  # planned, then found in the table, then in the memo
            tkreg.ops.toy_mul(x, y)
        tkreg.ops.toy_mul(other, other)  # another signature in between: the memo's last slot moves
    plan = mul._plans[keys.tensors_key([x, y])]
    own, ran = plan.returned, []
    plan.returned = lambda a, b: ran.append("swapped") or own(a, b) * 0
    with torch.no_grad():
        assert not tkreg.ops.toy_mul(x, y).any() and ran == ["swapped"]
        plan.returned = own
        torch.testing.assert_close(tkreg.ops.toy_mul(x, y), x * y, rtol=0, atol=0)
    assert ran == ["swapped"]
    rms = tkreg.ops._installed["dispatchers"]["toy_rms_norm"]  # an op with gradients
    w = torch.randn(5, requires_grad=True)
    for _ in range(3):
        expected = tkreg.ops.toy_rms_norm(x, w)
    (planned,) = list(rms._plans.values())
    planned.gradient_call = lambda a, b: ran.append("gradient") or expected
    assert tkreg.ops.toy_rms_norm(x, w) is expected
    assert ran == ["swapped", "gradient"]


def test_a_plan_given_under_a_key_that_had_another_empties_the_memo() -> None:
    table = keys.PlanTable(has_params=False)
    x = torch.randn(3, 3)
    key = keys.tensors_key([x])
    before = bytes(table.epoch)
    table[key] = "first"
    assert bytes(table.epoch) == before  # a new key: the memo holds nothing of it
    table[key] = "second"
    changed = bytes(table.epoch)
    assert changed != before or native.packer() is None
    table.clear()
    assert bytes(table.epoch) != changed


def _outcomes() -> list[Any]:
    """What tkreg.ops gives for calls its fast path does not take, and for ones it does: each
    call's result, or its error's type and message."""
    g = torch.Generator().manual_seed(5)
    x, y, w = (torch.randn(*shape, generator=g) for shape in ((5, 7), (5, 7), (7,)))
    mul, rms = tkreg.ops.toy_mul, tkreg.ops.toy_rms_norm
    calls = [
        lambda: mul(x, y), lambda: mul(x, y), lambda: mul(x), lambda: mul(x, y, y), lambda: mul(x, 3.0),
        lambda: mul(x, y, scale=2.0), lambda: mul(x, y.double()), lambda: rms(x, w), lambda: rms(x, w, eps=0.25),
        lambda: rms(x, w, eps=1), lambda: rms(x, w, eps="big"), lambda: rms(x, w, epsilon=0.1),
        lambda: rms(x=x, weight=w), lambda: rms(x, weight=w, eps=0.5), lambda: rms(x.t().contiguous().t(), w),
        lambda: mul(x.requires_grad_(), y), lambda: rms(x, w.requires_grad_()),
    ]  # fmt: skip
    # under torch.autocast: toy_mul declares float32 (the C++ call casts, first unplanned, then planned),
    # toy_rms_norm declares nothing (the peer's own call); a float64 input is not cast
    half, wide = x.detach().half(), y.detach().double()
    calls += [lambda: _autocast(mul, half, y), lambda: _autocast(mul, half, y), lambda: _autocast(mul, half, half),
              lambda: _autocast(mul, x, wide), lambda: _autocast(mul, half, y.requires_grad_()),
              lambda: _autocast(rms, x, w, eps=0.25), lambda: _autocast(mul, half, 3.0)]  # fmt: skip
    got: list[Any] = []
    for call in calls:
        try:
            result = call()
        except Exception as e:
            got.append((type(e).__name__, str(e)))
        else:
            got.append([t.detach() for t in (result if isinstance(result, tuple) else (result,))])
    return got


def _autocast(call: Any, *inputs: Any, **params: Any) -> Any:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return call(*inputs, **params)


def test_the_cpp_call_answers_every_call_as_the_python_one_does(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """tkreg.ops.<op> is one C++ builtin where the extension is in use; calls it does not take
    itself (a missing, extra or keyword input, a non-tensor, parameters unnamed, misnamed or of
    another type, inputs that want a gradient, calls under torch.autocast) get what the Python fast
    path gives them."""
    import types

    if native.fast_caller() is None:
        pytest.skip(f"the C++ plan key is not in use here: {native.status()}")
    choice_by_priority(monkeypatch, tmp_path)
    answers = {}
    for mode in ("cpp", "python"):
        if mode == "python":
            monkeypatch.setenv(native.ENV, "0")
        native._load.cache_clear()
        install(registry_with(ToyPlugin(toy_kernel("toy_mul_kernel", toy_mul_torch), autocast="float32"), RmsPlugin(RMS_FORWARD)))
        try:
            kind = types.BuiltinFunctionType if mode == "cpp" else types.FunctionType
            assert isinstance(tkreg.ops.toy_mul, kind) and isinstance(tkreg.ops.toy_rms_norm, kind)
            answers[mode] = _outcomes()
        finally:
            tkreg.ops.uninstall()
    monkeypatch.delenv(native.ENV)
    native._load.cache_clear()
    cpp, python = answers["cpp"], answers["python"]
    assert len(cpp) == len(python)
    errors = [a for a in cpp if isinstance(a, tuple)]
    assert len(errors) >= 6  # the calls that must fail do
    for a, b in zip(cpp, python):
        if isinstance(b, tuple):
            assert a == b
        else:
            assert isinstance(a, list) and len(a) == len(b)
            for s, t in zip(a, b):
                torch.testing.assert_close(s, t, rtol=0, atol=0)


def test_a_dispatch_mode_sees_the_torch_operator_with_either_key(key_mode: str) -> None:
    """Under a dispatch mode (FakeTensorMode, a tracer, a user's) a call goes through the torch
    operator, which the mode sees, whichever key the fast path has."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    class Recording(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    x, y = torch.randn(4, 6), torch.randn(4, 6)
    with torch.no_grad():
        tkreg.ops.toy_mul(x, y)
        tkreg.ops.toy_mul(x, y)  # planned: the fast path would take it
        with Recording():
            got = tkreg.ops.toy_mul(x, y)
    assert any("tkreg.toy_mul" in name for name in seen), seen
    torch.testing.assert_close(got, x * y, rtol=0, atol=0)


@built
def test_a_plans_outputs_made_in_cpp_are_those_torch_empty_makes() -> None:
    """outputs(layouts): each call new tensors of each layout (contiguous or strided), as the
    Python allocator makes them; a layout that is not one is refused when it is given, and an
    allocation that fails raises torch's own error."""
    from tkreg.ops.forms import OutputLayout, outputs_allocator

    layouts = [OutputLayout((3, 5), None, torch.float16, torch.device("cpu")),
               OutputLayout((4, 2), (1, 8), torch.float32, torch.device("cpu")),
               OutputLayout((0, 7), None, torch.int64, torch.device("cpu")),
               OutputLayout((2, 3), None, torch.bfloat16, torch.device("meta"))]  # fmt: skip
    allocate = outputs_allocator(layouts)
    first, second = allocate(), allocate()
    assert isinstance(first, tuple) and len(first) == len(layouts)
    for t, u, layout in zip(first, second, layouts):
        want = layout.empty()
        assert (t.shape, t.stride(), t.dtype, t.device) == (want.shape, want.stride(), want.dtype, want.device)
        assert type(t) is torch.Tensor and not t.requires_grad
        assert t.numel() == 0 or t.device.type == "meta" or t.data_ptr() != u.data_ptr()  # new storage each call
    make = native.outputs_maker()
    with pytest.raises(TypeError, match="each layout is"):
        make((((2, 3), (1,), torch.float16, torch.device("cpu")),))  # strides of another rank
    with pytest.raises(TypeError):
        make((((2, "3"), None, torch.float16, torch.device("cpu")),))
    with pytest.raises(RuntimeError, match="overflow"):
        make((((1 << 40, 1 << 30), None, torch.float16, torch.device("cpu")),))()
