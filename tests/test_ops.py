"""tkreg.ops in eager mode: the inputs people pass (ranks, views, layouts), the op's clear error
for bad input, the peer fallback and how it is reported, decisions cached per signature, and a
third-party op callable as tkreg.ops.<name>. Kernels run under the Triton interpreter (CPU) or on
a GPU; every result is checked against float64."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import tkreg  # noqa: E402
from tests.ops_support import (  # noqa: E402
    ToyPlugin,
    assert_matmul_close,
    assert_sum_close,
    choice_by_priority,
    device_or_skip,
    install,
    installed_ops,
    randn,
    registry_with,
    same_alignment_as,
    toy_checks,
    toy_kernel,
    toy_mul_refusing,
    toy_mul_torch,
    toy_wide_rows_only,
)
from tkreg.ops import PeerFallbackWarning  # noqa: E402

device = pytest.fixture(scope="module")(device_or_skip)
ops = pytest.fixture(installed_ops)


@pytest.fixture(autouse=True)
def kernels_by_priority(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    choice_by_priority(monkeypatch, tmp_path, interpreter=False)  # the interpreter is on for the whole process or not at all


def _exact_sum(a: Any, b: Any) -> Any:
    return (a.double() + b.double()).to(a.dtype)


def _calls(ops: Any, op: str, *inputs: Any) -> str:
    return ops.explain(op, *inputs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "shape",
    [(), (1,), (1000,), (2053,), (33, 65), (3, 5, 7), (2, 3, 4, 129)],
    ids=lambda s: "x".join(map(str, s)) or "scalar",
)
def test_add_any_rank_is_exact(ops: Any, device: str, shape: tuple[int, ...], dtype: Any) -> None:
    a, b = randn(*shape, dtype=dtype, device=device, seed=1), randn(*shape, dtype=dtype, device=device, seed=2)
    got = ops.add(a, b)
    assert got.shape == a.shape and got.dtype == dtype
    assert torch.equal(got, _exact_sum(a, b))
    assert "calls its peer" not in _calls(ops, "add", a, b)  # a kernel took them


def _fresh(first: Any, call: int) -> Any:
    return same_alignment_as(first, seed=100 + call)  # one signature: the same alignment class too


@pytest.mark.parametrize("op", ["add", "sum_row", "matmul"])
def test_every_call_of_a_signature_computes_its_own_inputs(ops: Any, device: str, op: str) -> None:
    """From a plan's third call a kernel declared replay=True runs its recorded launches on the
    call's tensors (tkreg.ops.replaying): each call's result is of its own inputs, in a new output."""
    firsts = {"add": (randn(33, 65, dtype=torch.float32, device=device, seed=3),) * 2,
              "sum_row": (randn(33, 65, dtype=torch.float32, device=device, seed=3),),
              "matmul": (randn(40, 72, dtype=torch.float16, device=device, seed=3),
                         randn(72, 24, dtype=torch.float16, device=device, seed=4))}[op]  # fmt: skip
    outputs = []
    for call in range(5):
        inputs = tuple(_fresh(t, 2 * call + i) for i, t in enumerate(firsts))
        got = getattr(ops, op)(*inputs)
        assert all(got.data_ptr() != o.data_ptr() for o in outputs)
        outputs.append(got)
        if op == "add":
            assert torch.equal(got, _exact_sum(*inputs))
        elif op == "sum_row":
            assert_sum_close(got, inputs[0])
        else:
            assert_matmul_close(got, inputs[0].double() @ inputs[1].double(), k=72)
    text = _calls(ops, op, *inputs)
    assert "calls its peer" not in text
    kernel = tkreg.default_registry().kernel(text.split(" calls ", 1)[1].split(" ", 1)[0].split("[", 1)[0])
    if device == "cuda" and kernel.replay:  # under the interpreter launches take triton's ordinary path
        assert "recorded launch(es) are replayed" in text


def test_add_views_go_to_kernels_without_copies(ops: Any, device: str) -> None:
    base = randn(40, 70, dtype=torch.float32, device=device, seed=3)
    padded = base[:, 3:68]  # rows inside wider rows
    transposed = randn(65, 40, dtype=torch.float32, device=device, seed=4).t()
    assert torch.equal(ops.add(padded, transposed), _exact_sum(padded, transposed))
    # 3-D tensors whose dims merge into one 2-D layout for both inputs: rows of a wider tensor,
    # and a permutation whose two leading dims merge into transposed rows
    rows = randn(2, 3, 20, dtype=torch.float32, device=device, seed=5)[:, :, 5:15]  # strides (60, 20, 1)
    permuted = randn(10, 4, 6, dtype=torch.float32, device=device, seed=6).permute(1, 2, 0)  # (4, 6, 10), strides (6, 1, 24)
    contiguous = randn(4, 6, 10, dtype=torch.float32, device=device, seed=7)
    assert torch.equal(ops.add(rows, rows), _exact_sum(rows, rows))
    assert torch.equal(ops.add(permuted, contiguous), _exact_sum(permuted, contiguous))
    for inputs in ((padded, transposed), (rows, rows), (permuted, contiguous)):
        assert "calls add_triton" in _calls(ops, "add", *inputs)


def test_add_layout_no_view_can_express_goes_to_the_peer_and_says_why(ops: Any, device: str) -> None:
    x = randn(4, 6, 10, dtype=torch.float32, device=device, seed=7).permute(1, 0, 2)  # (6, 4, 10), strides (10, 60, 1)
    y = randn(6, 4, 10, dtype=torch.float32, device=device, seed=8)  # three dim groups between them
    with pytest.warns(PeerFallbackWarning, match=r"cannot be viewed as one 2-D layout without a copy"):
        got = ops.add(x, y)
    assert torch.equal(got, _exact_sum(x, y))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "shape", [(1,), (257,), (5, 33), (3, 4, 65), (2, 2, 3, 300)], ids=lambda s: "x".join(map(str, s))
)
def test_sum_row_sums_the_last_dim_of_any_rank(ops: Any, device: str, shape: tuple[int, ...], dtype: Any) -> None:
    x = randn(*shape, dtype=dtype, device=device, seed=9)
    assert_sum_close(ops.sum_row(x), x)
    assert "calls its peer" not in _calls(ops, "sum_row", x)


def test_sum_row_strided_views(ops: Any, device: str) -> None:
    sliced = randn(6, 5, 40, dtype=torch.float32, device=device, seed=10)[:, :, 3:37]  # rows in wider rows
    assert_sum_close(ops.sum_row(sliced), sliced)
    last_transposed = randn(7, 33, dtype=torch.float32, device=device, seed=11).t()  # last stride 33
    assert_sum_close(ops.sum_row(last_transposed), last_transposed)
    assert "calls its peer" not in _calls(ops, "sum_row", sliced)
    # leading dims that cannot merge into rows: the peer, with the reason
    x = randn(4, 5, 6, dtype=torch.float32, device=device, seed=12).transpose(0, 1)
    with pytest.warns(PeerFallbackWarning, match="leading dims cannot be merged into rows"):
        assert_sum_close(ops.sum_row(x), x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("a_shape", [(40,), (33, 40), (2, 5, 40)], ids=lambda s: "x".join(map(str, s)))
def test_matmul_as_linear_uses_it(ops: Any, device: str, a_shape: tuple[int, ...], dtype: Any) -> None:
    a = randn(*a_shape, dtype=dtype, device=device, seed=13)
    weight = randn(24, 40, dtype=dtype, device=device, seed=14)  # (N, K), row-major, as nn.Linear holds it
    got = ops.matmul(a, weight.t())
    assert got.shape == (*a_shape[:-1], 24)
    assert_matmul_close(got, a.double() @ weight.double().t(), k=40)
    b = randn(40, 24, dtype=dtype, device=device, seed=15)  # a row-major (K, N) B
    assert_matmul_close(ops.matmul(a, b), a.double() @ b.double(), k=40)
    assert "calls its peer" not in _calls(ops, "matmul", a, weight.t())


def test_inputs_no_kernel_takes_go_to_the_peer_once_warned_and_explain_says_the_same(ops: Any, device: str) -> None:
    a = randn(9, 17, dtype=torch.float64, device=device, seed=16)
    b = randn(9, 17, dtype=torch.float64, device=device, seed=17)
    with pytest.warns(PeerFallbackWarning) as caught:
        got = ops.add(a, b)
    assert torch.equal(got, a + b)
    (message,) = [str(w.message) for w in caught]
    assert message.startswith("tkreg.ops.add calls its peer torch.add: no registered kernel takes these inputs")
    reason = "input 0 is float64; add_triton takes float32, float16, bfloat16"
    assert reason in message
    assert any(reason in v.reasons for v in tkreg.explain("add", inputs=(a, b)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per reason: a second call is quiet, and explaining never warns
        assert torch.equal(ops.add(a, b), a + b)
        assert "calls its peer" in ops.explain("add", a, b)
        assert "calls its peer" in ops.explain("sum_row", a)


@pytest.mark.parametrize(
    ("op", "make", "message"),
    [
        ("add", lambda d: (torch.ones(3, 4, device=d), torch.ones(4, 3, device=d)), r"one shape, got \(3, 4\) and \(4, 3\)"),
        ("add", lambda d: (torch.ones(3, device=d), torch.ones(3, device=d).half()), "a and b must have one dtype"),
        ("add", lambda d: ([1.0], torch.ones(1, device=d)), "a must be a torch.Tensor, got list"),
        ("add", lambda d: (torch.ones(1, device=d), None), "b must be a torch.Tensor, got None: add has no optional inputs"),
        ("add", lambda d: (torch.ones(3, device=d),), "add takes 2 tensor"),
        ("sum_row", lambda d: (torch.tensor(1.0, device=d),), "x must have at least one dimension"),
        ("matmul", lambda d: (torch.ones(3, 5, device=d).half(), torch.ones(4, 2, device=d).half()), "inner dimensions differ"),
        ("matmul", lambda d: (torch.ones(3, 5, device=d), torch.ones(2, 5, 2, 1, device=d)), r"b must be 2-D \(K, N\) or 3-D"),
        ("matmul", lambda d: (torch.ones(3, 5, device=d), torch.ones(2, 5, 2, device=d)), r"takes a 3-D a \(B, M, K\)"),
        ("matmul", lambda d: (torch.ones(2, 3, 5, device=d), torch.ones(2, 4, 2, device=d)), "inner dimensions differ"),
    ],
)

def test_bad_input_gets_the_ops_clear_error(ops: Any, device: str, op: str, make: Any, message: str) -> None:
    with pytest.raises(tkreg.InputError, match=f"tkreg.ops.{op}: .*{message}"):
        tkreg.ops.get(op)(*make(device))


def test_a_repeated_signature_does_no_ranking(ops: Any, device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    registry = tkreg.default_registry()
    calls = []
    original = registry.ranking
    # a plan asks the registry which kernels take the inputs, then (nothing measured here) the rankers
    monkeypatch.setattr(registry, "ranking", lambda *a, **k: (k.get("ranked", True) and calls.append(a)) or original(*a, **k))
    a, b = (randn(12, 20, dtype=torch.float32, device=device, seed=s) for s in (18, 19))
    for _ in range(3):
        ops.add(a, b)
    assert len(calls) == 1
    ops.add(a.t().contiguous(), b.t().contiguous())  # another shape: another decision
    assert len(calls) == 2
    ops.add(same_alignment_as(a, seed=20), b)  # new tensors, same signature
    assert len(calls) == 2



def test_a_third_party_op_is_callable_as_tkreg_ops_and_torch_ops(device: str) -> None:
    plugin = ToyPlugin(toy_kernel("toy_mul_torch", toy_mul_torch, requires=tkreg.Requirements(inputs=toy_checks)))
    ops = install(registry_with(plugin))
    try:
        x, y = randn(5, 7, dtype=torch.float32, device=device, seed=21), randn(5, 7, dtype=torch.float32, device=device, seed=22)
        assert torch.equal(ops.toy_mul(x, y), x * y)
        assert torch.equal(torch.ops.tkreg.toy_mul(x, y), x * y)
        assert "toy_mul" in ops.names() and "calls toy_mul_torch" in ops.explain("toy_mul", x, y)
        with pytest.raises(tkreg.InputError, match=r"tkreg.ops.toy_mul: toy_mul takes 2 tensor\(s\) \(x, y\), got 1"):
            ops.toy_mul(x)  # the arity of the op's reference implementation
    finally:
        tkreg.ops.uninstall()


def test_the_torch_operator_runs_a_planned_signature_without_the_dispatcher(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.ops.tkreg.<op> finds a planned signature's plan itself (every output, the same key
    tkreg.ops builds), and sends anything else to the dispatcher: a new signature, a gradient
    wanted, another registry installed under the same schema."""
    from tkreg.ops import dispatch

    entered: list[int] = []
    call = dispatch.Dispatcher.__call__
    monkeypatch.setattr(dispatch.Dispatcher, "__call__", lambda self, *a, **k: entered.append(1) or call(self, *a, **k))
    install(registry_with(ToyPlugin(toy_kernel("toy_mul_torch", toy_mul_torch))))
    try:
        x, y = randn(5, 7, dtype=torch.float32, device=device, seed=23), randn(5, 7, dtype=torch.float32, device=device, seed=24)
        assert torch.equal(torch.ops.tkreg.toy_mul(x, y), x * y) and len(entered) == 1  # planned here
        for _ in range(3):
            assert torch.equal(torch.ops.tkreg.toy_mul(x, y), x * y)
        assert len(entered) == 1
        torch.ops.tkreg.toy_mul(x[:, :6], y[:, :6])  # another signature
        assert len(entered) == 2
        xg = x.clone().requires_grad_()
        assert torch.equal(torch.ops.tkreg.toy_mul(xg, y), x * y) and len(entered) == 3  # through autograd
        install(registry_with(ToyPlugin(toy_kernel("toy_mul_torch", toy_mul_torch))))  # same schema, new plans
        assert torch.equal(torch.ops.tkreg.toy_mul(x, y), x * y) and len(entered) == 4
    finally:
        tkreg.ops.uninstall()


def test_a_plan_imports_only_the_launchers_it_runs(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded: list[str] = []
    load = tkreg.Kernel.load
    monkeypatch.setattr(tkreg.Kernel, "load", lambda kernel: loaded.append(kernel.name) or load(kernel))
    plugin = ToyPlugin(toy_kernel("toy_mul_picky", toy_mul_refusing, priority=10), toy_kernel("toy_mul_torch", toy_mul_torch))
    ops = install(registry_with(plugin))
    try:
        even = randn(4, 8, dtype=torch.float32, device=device, seed=26)
        said = ops.explain("toy_mul", even, even)
        assert said.startswith("tkreg.ops.toy_mul calls toy_mul_picky (toy_mul_picky > toy_mul_torch)")
        assert loaded == []  # explaining a plan imports nothing
        assert torch.equal(ops.toy_mul(even, even), even * even)
        assert loaded == ["toy_mul_picky"]  # its fallback is listed, not imported
        odd = randn(3, 8, dtype=torch.float32, device=device, seed=27)
        assert torch.equal(ops.toy_mul(odd, odd), odd * odd)  # picky refuses 3 rows: the fallback is imported now
        assert loaded == ["toy_mul_picky", "toy_mul_torch"]
    finally:
        tkreg.ops.uninstall()


def test_a_refusing_launcher_passes_the_call_to_the_next_kernel(device: str) -> None:
    plugin = ToyPlugin(
        toy_kernel("toy_mul_picky", toy_mul_refusing, priority=10),
        toy_kernel("toy_mul_torch", toy_mul_torch),
        toy_kernel("toy_mul_wide", toy_mul_torch, priority=20, requires=tkreg.Requirements(inputs=toy_wide_rows_only)),
    )
    ops = install(registry_with(plugin))
    try:
        x, y = randn(3, 4, dtype=torch.float32, device=device, seed=23), randn(3, 4, dtype=torch.float32, device=device, seed=24)
        assert "toy_mul_picky" in ops.explain("toy_mul", x, y)  # toy_mul_wide's declared check drops it
        assert torch.equal(ops.toy_mul(x, y), x * y)  # picky refuses 3 rows at launch: toy_mul_torch runs
        assert ops.explain("toy_mul", x, y).startswith("tkreg.ops.toy_mul calls toy_mul_picky")  # a new plan
        even = randn(4, 4, dtype=torch.float32, device=device, seed=25)
        assert torch.equal(ops.toy_mul(even, even), even * even)
    finally:
        tkreg.ops.uninstall()


def test_no_kernel_and_no_peer_is_the_ops_error(device: str) -> None:
    wide = toy_kernel("toy_mul_wide", toy_mul_torch, requires=tkreg.Requirements(inputs=toy_wide_rows_only))
    plugin = ToyPlugin(wide, peer=False)
    ops = install(registry_with(plugin))
    try:
        narrow = randn(3, 4, dtype=torch.float32, device=device, seed=26)
        with pytest.raises(tkreg.InputError, match=r"toy_mul_wide \(rows of 4 elements; toy_mul_wide needs at least 8\).*peer"):
            ops.toy_mul(narrow, narrow)
    finally:
        tkreg.ops.uninstall()


def test_unknown_op_lists_the_known_ones(ops: Any) -> None:
    known = ", ".join(sorted(op.name for op in tkreg.default_registry().ops()))
    assert {"add", "matmul", "sum_row"} <= set(known.split(", "))
    with pytest.raises(AttributeError, match=f"tkreg.ops has no op 'conv'; registered ops: {known}$"):
        ops.conv  # noqa: B018
    with pytest.raises(tkreg.UnknownNameError, match=f"known ops: {known}$"):
        ops.get("conv")


# -- batched matmul (the linear contract with batched=True) ---------------------------------------
class BatchedLoop:
    """A matmul kernel that takes 3-D batches (B, M, K) @ (B, K, N), as a batched kernel would,
    by launching the portable 2-D kernel once per batch; it declares that it takes 3-D only."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = []

    @staticmethod
    def batches_only(a: Any, b: Any, bias: Any) -> list[str]:
        return [] if a.dim() == 3 and b.dim() == 3 else ["takes 3-D batches only"]

    def __call__(self, a: Any, b: Any, bias: Any, out: Any) -> Any:
        from tkreg_matmul.triton_kernel import matmul_triton

        self.calls.append((tuple(a.shape), tuple(b.shape), tuple(out.shape)))
        for i in range(a.shape[0]):
            matmul_triton(a[i], b[i], bias, out=out[i])
        return out

    @tkreg.hookimpl
    def tkreg_register_kernels(self, register: Any) -> None:
        requires = tkreg.Requirements(inputs=self.batches_only)
        register(tkreg.Kernel(name="matmul_batched_loop", op="matmul", launcher=self, interpretable=True, requires=requires))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_batched_matmul_runs_a_kernel_that_takes_3d(device: str, dtype: Any) -> None:
    loop = BatchedLoop()
    ops = install(registry_with(loop))
    try:
        a = randn(3, 33, 40, dtype=dtype, device=device, seed=30)
        b = randn(3, 24, 40, dtype=dtype, device=device, seed=31).transpose(1, 2)  # per-batch weights, as stored
        with warnings.catch_warnings():
            warnings.simplefilter("error", PeerFallbackWarning)  # a kernel takes them: no fallback
            got = ops.matmul(a, b)
        assert got.shape == (3, 33, 24)
        assert_matmul_close(got, a.double() @ b.double(), k=40)
        assert loop.calls == [((3, 33, 40), (3, 40, 24), (3, 33, 24))]
        assert "calls matmul_batched_loop" in ops.explain("matmul", a, b)
        c = randn(5, 40, dtype=dtype, device=device, seed=32)
        two_d = ops.explain("matmul", c, b[0])  # 2-D: the loop declares it does not take it, a 2-D kernel does
        assert two_d.startswith("tkreg.ops.matmul calls matmul_") and "matmul_batched_loop" not in two_d
    finally:
        tkreg.ops.uninstall()


@pytest.mark.parametrize("layout", ["batch", "weights"])
def test_batched_matmul_runs_the_built_in_batched_kernel(ops: Any, device: str, layout: str) -> None:
    a = randn(3, 9, 40, dtype=torch.bfloat16, device=device, seed=33)
    if layout == "batch":
        b = randn(3, 40, 24, dtype=torch.bfloat16, device=device, seed=34)
    else:  # per-batch weights as stored, (Bt, N, K), read through their transposes
        b = randn(3, 24, 40, dtype=torch.bfloat16, device=device, seed=34).transpose(1, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PeerFallbackWarning)  # a kernel takes them: no fallback
        got = ops.matmul(a, b)
    assert got.shape == (3, 9, 24) and got.is_contiguous()
    assert_matmul_close(got, a.double() @ b.double(), k=40)
    assert ops.explain("matmul", a, b).startswith("tkreg.ops.matmul calls matmul_triton_batched")


def test_batched_matmul_no_kernel_takes_goes_to_the_peer_and_says_why(ops: Any, device: str) -> None:
    a = randn(2, 9, 16, dtype=torch.float32, device=device, seed=33)
    b = randn(2, 16, 8, dtype=torch.float32, device=device, seed=34)
    with pytest.warns(PeerFallbackWarning, match=(
        r"batched a \(B, M, K\) @ b \(B, K, N\) with a b per batch, passed to kernels as 3-D tensors: "
        r"no registered kernel takes these inputs: .*matmul_triton_batched \(input 0 is float32"
    )):
        got = ops.matmul(a, b)
    assert torch.equal(got, torch.matmul(a, b))


@pytest.mark.parametrize("batch", [1, 4])
def test_a_batch_sharing_one_b_is_one_2d_product(device: str, batch: int) -> None:
    from tests.test_ops_autograd import MatmulSpy

    spy = MatmulSpy()
    ops = install(registry_with(spy))
    try:
        a = randn(batch, 6, 40, dtype=torch.float16, device=device, seed=35)
        weight = randn(40, 24, dtype=torch.float16, device=device, seed=36)
        b = weight.expand(batch, 40, 24)  # one matrix for every batch: stride 0 (or B = 1)
        got = ops.matmul(a, b)
        assert got.shape == (batch, 6, 24)
        assert_matmul_close(got, a.double() @ weight.double(), k=40)
        assert spy.calls == [((batch * 6, 40), (40, 1), (40, 24), (24, 1))]  # a's batches as rows, b read once
    finally:
        tkreg.ops.uninstall()


def test_a_plan_of_the_peer_calls_it_with_nothing_in_between(device: str) -> None:
    """No parameters and out= defaulting to None (a torch builtin, whose signature cannot be
    read, is taken to default it): the plan's run is the peer itself; with parameters, one
    generated function that passes them by keyword (no partial merging a dict per call)."""
    import functools

    from tests.ops_support import RmsPlugin, rms_peer

    ops = install(registry_with(RmsPlugin()))  # toy_rms_norm has no kernels: its peer runs
    try:
        x = randn(3, 8, dtype=torch.float64, device=device, seed=28)  # no add kernel takes float64
        with pytest.warns(PeerFallbackWarning):
            assert torch.equal(ops.add(x, x), x + x)
            ops.toy_rms_norm(x.float(), x[0].float(), eps=0.5)
        dispatchers = tkreg.ops._installed["dispatchers"]
        (add_plan,) = dispatchers["add"]._plans.values()
        assert add_plan.run is torch.add
        (rms_plan,) = dispatchers["toy_rms_norm"]._plans.values()
        assert not isinstance(rms_plan.run, functools.partial) and rms_plan.run.func is rms_peer
        assert rms_plan.run.keywords == {"out": None, "eps": 0.5}
        assert rms_plan.run.__code__.co_name == "call" and rms_plan.run.__code__.co_argcount == 2
    finally:
        tkreg.ops.uninstall()


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int32, torch.int64])
def test_sum_row_of_integers_and_bools_is_torchs_int64_sum(ops: Any, device: str, dtype: Any) -> None:
    """As torch.sum: a bool row sums to a count, not to any() in a bool."""
    g = torch.Generator().manual_seed(5)
    x = torch.randint(0, 3, (2, 3, 40), generator=g).to(device=device, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PeerFallbackWarning)
        got = ops.sum_row(x)
    assert got.dtype == torch.int64 and torch.equal(got, x.sum(-1))


def test_sparse_and_nested_tensors_take_the_peers_own_call(ops: Any, device: str) -> None:
    g = torch.Generator().manual_seed(6)
    dense = torch.randn(5, 7, generator=g).to(device)
    sparse = dense.relu().to_sparse()
    nested = torch.nested.nested_tensor([dense[:2], dense[2:]])
    ops.add(dense, dense)  # planned: a sparse tensor of the same shape must not take the dense plan
    with pytest.warns(PeerFallbackWarning, match="input 0 is a sparse_coo tensor"):
        got = ops.add(sparse, sparse)
    assert got.is_sparse and torch.equal(got.to_dense(), 2 * dense.relu())
    assert "calls its peer torch.add: input 0 is a sparse_coo tensor" in ops.explain("add", sparse, sparse)
    with pytest.warns(PeerFallbackWarning, match="input 0 is a nested tensor"):
        got = ops.add(nested, nested)
    assert all(torch.equal(a, 2 * b) for a, b in zip(got.unbind(), nested.unbind()))
    with pytest.raises(tkreg.InputError, match=r"torch\.ops\.tkreg\.add: input 0 is a sparse_coo tensor"):
        torch.ops.tkreg.add(sparse, sparse)
    assert torch.equal(ops.add(dense, dense), 2 * dense)
