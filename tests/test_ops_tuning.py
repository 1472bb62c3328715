"""tkreg.ops' measured choice, on the CPU: the CUDA device and the clock are simulated (the
candidates are real calls, their times come from a table), so what is checked is the logic: the
first call of a bucket times every candidate once and keeps the fastest, the choice persists for
a new process, explain names the measurement, and nothing is timed with tuning off, inside a
capture, or where there is nothing to choose."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tkreg
from tests.ops_support import ToyPlugin, assert_sum_close, registry_with, toy_kernel, toy_mul_torch
from tkreg.core.errors import TkregError
from tkreg.ops import capturing as tkreg_capturing
from tkreg.ops import choosing, dispatch, measuring, tuning, tuning_cache, warming
from tkreg.ops.measuring import PEER

torch = pytest.importorskip("torch")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Simulated time per call (ms) of each candidate, by label.
SPEED = {"toy_fast": 0.010, "toy_slow": 0.030, "peer": 0.020}
TIMED: list[str] = []


RAN: list[str] = []  # the toy kernels' calls, in order


def toy_fast(x: Any, y: Any, out: Any) -> Any:
    RAN.append("toy_fast")
    return toy_mul_torch(x, y, out)


def toy_slow(x: Any, y: Any, out: Any) -> Any:
    RAN.append("toy_slow")
    return toy_mul_torch(x, y, out)


def _label(call: Any) -> str:
    target = getattr(call, "launcher", None) or getattr(call, "func", call)
    return {toy_fast: "toy_fast", toy_slow: "toy_slow"}.get(target, "peer")


def fake_clock(call: Any, n: int) -> float:
    label = _label(call)
    TIMED.append(label)
    return SPEED[label] * n


class ReplayClock:
    """Simulated (wall, host, replayed) ms per call of each candidate, by label; captures calls in
    CUDA graphs too, as tkreg's CUDA clock does."""

    def __init__(self, table: dict[str, tuple[float, float, float]]) -> None:
        self.table = table

    def __call__(self, call: Any, n: int) -> tuple[float, float]:
        label = _label(call)
        TIMED.append(label)
        return self.table[label][0] * n, self.table[label][1] * n

    def capture(self, call: Any, n: int) -> Any:
        call()  # as the CUDA clock's call ahead of a capture
        per_call = self.table[_label(call)][2]
        return lambda: per_call * n


CURRENT = [0]  # the simulated current CUDA device


@contextlib.contextmanager
def simulated_device(device: int) -> Iterator[None]:
    before, CURRENT[0] = CURRENT[0], device
    try:
        yield
    finally:
        CURRENT[0] = before


@pytest.fixture
def gpu_like(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Tensors count as on CUDA device 0 (on the CPU too); timing reads the table above; the
    cache is private."""
    monkeypatch.setattr(choosing, "cuda_device", lambda tensors: 0)
    monkeypatch.setattr(choosing, "on_device", simulated_device)
    monkeypatch.setattr(choosing, "_device_name", lambda device: "Simulated GPU")
    monkeypatch.setattr(choosing, "capturing_or_tracing", lambda: False)
    monkeypatch.setattr(choosing.Chooser, "environment", lambda self, device: {"device": "Simulated GPU", "torch": "x"})
    monkeypatch.setattr(measuring, "_cuda_clock", fake_clock)
    monkeypatch.setenv(tuning.ENV_CACHE, str(tmp_path))
    monkeypatch.delenv(tuning.ENV_TUNE, raising=False)
    if DEVICE == "cpu":  # the toy kernels are torch code; the registry runs kernels on CPU tensors only with the interpreter on
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    TIMED.clear()
    RAN.clear()
    yield tmp_path


def ops_with(*kernels: Any) -> Any:
    import tkreg.ops

    tkreg.ops.install(registry_with(ToyPlugin(*kernels)))
    return tkreg.ops


@pytest.fixture
def two_kernels() -> Iterator[Any]:
    yield ops_with(toy_kernel("toy_fast", toy_fast, priority=0), toy_kernel("toy_slow", toy_slow, priority=5))
    import tkreg.ops

    tkreg.ops.uninstall()


def test_the_first_call_of_a_bucket_times_every_candidate_once_and_runs_the_fastest(gpu_like: Path, two_kernels: Any) -> None:
    x, y = torch.randn(64, 64, device=DEVICE), torch.randn(64, 64, device=DEVICE)
    out = two_kernels.toy_mul(x, y)
    torch.testing.assert_close(out, x * y)
    assert set(TIMED) == {"toy_fast", "toy_slow", "peer"}
    timed = len(TIMED)
    two_kernels.toy_mul(torch.randn(60, 60, device=DEVICE), torch.randn(60, 60, device=DEVICE))  # same bucket (<= 64): no timing
    assert len(TIMED) == timed
    text = two_kernels.explain("toy_mul", x, y)
    assert text.startswith("tkreg.ops.toy_mul calls toy_fast")
    assert "timed in this process; measured on Simulated GPU" in text
    assert "toy_fast 10.0 us, peer 20.0 us, toy_slow 30.0 us" in text  # every candidate's time, fastest first
    # A new process over the same cache: the choice is read, nothing is timed.
    TIMED.clear()
    fresh = ops_with(toy_kernel("toy_fast", toy_fast, priority=0), toy_kernel("toy_slow", toy_slow, priority=5))
    registry = fresh._installed["registry"]
    asked: list[bool] = []
    ranking = registry.ranking
    registry.ranking = lambda *a, **k: asked.append(k.get("ranked", True)) or ranking(*a, **k)
    fresh.toy_mul(x, y)
    assert TIMED == []
    assert asked == [False]  # the kernels that take the inputs; the rankers' prior is not worked out
    assert "from the tuning cache" in fresh.explain("toy_mul", x, y)


def toy_narrow_rows_only(x: Any, y: Any, *rest: Any) -> list[str]:
    return [] if x.shape[-1] <= 62 else [f"rows of {x.shape[-1]} elements; toy_fast takes up to 62"]


def test_a_shape_the_buckets_winner_refuses_is_timed_in_a_bucket_of_its_own(gpu_like: Path) -> None:
    fast = toy_kernel("toy_fast", toy_fast, priority=0, requires=tkreg.Requirements(inputs=toy_narrow_rows_only))
    ops = ops_with(fast, toy_kernel("toy_slow", toy_slow, priority=5))
    try:
        even, odd = [(torch.randn(60, n, device=DEVICE), torch.randn(60, n, device=DEVICE)) for n in (60, 64)]
        ops.toy_mul(*even)  # times the bucket (<= 64 by <= 64, rows of 16-byte multiples): toy_fast wins
        assert set(TIMED) == {"toy_fast", "toy_slow", "peer"}
        TIMED.clear()
        RAN.clear()
        torch.testing.assert_close(ops.toy_mul(*odd), odd[0] * odd[1])
        # toy_fast cannot take 64 wide rows: not the registry's order (toy_slow first) unmeasured,
        # but the shapes it refuses timed apart, the peer the faster of what is left
        assert set(TIMED) == {"toy_slow", "peer"} and RAN == ["toy_slow"] * RAN.count("toy_slow")
        text = ops.explain("toy_mul", *odd)
        assert "calls its peer" in text and "|without=toy_fast (timed in this process" in text
        TIMED.clear()
        ops.toy_mul(torch.randn(57, 64, device=DEVICE), torch.randn(57, 64, device=DEVICE))  # refused too: that bucket
        ops.toy_mul(torch.randn(58, 56, device=DEVICE), torch.randn(58, 56, device=DEVICE))  # taken: the first one
        assert TIMED == []
        assert "toy_fast fastest for bucket" in ops.explain("toy_mul", *even) and "without" not in ops.explain("toy_mul", *even)
        # a later process reads both choices and times neither
        fresh = ops_with(fast, toy_kernel("toy_slow", toy_slow, priority=5))
        fresh.toy_mul(*odd), fresh.toy_mul(*even)
        assert TIMED == [] and "from the tuning cache" in fresh.explain("toy_mul", *odd)
    finally:
        ops.uninstall()


def test_inputs_on_another_gpu_than_the_current_one_are_timed_with_theirs_current(
    gpu_like: Path, monkeypatch: pytest.MonkeyPatch, two_kernels: Any
) -> None:
    """Triton launches on the current device and the clock times there: a model's tensors on its
    second GPU, called without torch.cuda.set_device, are timed with that GPU current, and the
    caller's current device is left as it was."""
    monkeypatch.setattr(choosing, "cuda_device", lambda tensors: 1)
    current_while_timed: list[int] = []

    def clock(call: Any, n: int) -> float:
        current_while_timed.append(CURRENT[0])
        return fake_clock(call, n)

    monkeypatch.setattr(measuring, "_cuda_clock", clock)
    x, y = torch.randn(64, 64, device=DEVICE), torch.randn(64, 64, device=DEVICE)
    torch.testing.assert_close(two_kernels.toy_mul(x, y), x * y)
    assert set(TIMED) == {"toy_fast", "toy_slow", "peer"}
    assert current_while_timed and set(current_while_timed) == {1}
    assert CURRENT == [0]


def test_the_peer_runs_when_it_is_fastest(gpu_like: Path, monkeypatch: pytest.MonkeyPatch, two_kernels: Any) -> None:
    monkeypatch.setitem(SPEED, "peer", 0.005)
    x, y = torch.randn(8, 8, device=DEVICE), torch.randn(8, 8, device=DEVICE)
    torch.testing.assert_close(two_kernels.toy_mul(x, y), x * y)
    assert two_kernels.explain("toy_mul", x, y).startswith("tkreg.ops.toy_mul calls its peer: faster for these inputs: peer")


def test_with_tuning_off_the_prior_decides_and_explain_says_what_a_call_would_time(
    gpu_like: Path, monkeypatch: pytest.MonkeyPatch, two_kernels: Any
) -> None:
    monkeypatch.setenv(tuning.ENV_TUNE, "0")
    x, y = torch.randn(16, 16, device=DEVICE), torch.randn(16, 16, device=DEVICE)
    two_kernels.toy_mul(x, y)
    assert TIMED == []
    text = two_kernels.explain("toy_mul", x, y)
    assert text.startswith("tkreg.ops.toy_mul calls toy_slow")  # priority 5 first: the prior
    assert "not measured on this GPU; a call with tuning on times peer, toy_slow, toy_fast" in text


def test_explain_never_times(gpu_like: Path, two_kernels: Any) -> None:
    x, y = torch.randn(16, 16, device=DEVICE), torch.randn(16, 16, device=DEVICE)
    two_kernels.explain("toy_mul", x, y)
    assert TIMED == []


def test_a_capture_uses_the_prior_and_times_nothing(gpu_like: Path, monkeypatch: pytest.MonkeyPatch, two_kernels: Any) -> None:
    monkeypatch.setattr(choosing, "capturing_or_tracing", lambda: True)
    two_kernels.toy_mul(torch.randn(16, 16, device=DEVICE), torch.randn(16, 16, device=DEVICE))
    assert TIMED == []


def test_a_single_way_to_run_is_not_timed(gpu_like: Path) -> None:
    import tkreg.ops

    tkreg.ops.install(registry_with(ToyPlugin(toy_kernel("toy_fast", toy_fast), peer=False)))  # one kernel, no peer
    try:
        x, y = torch.randn(4, 4, device=DEVICE), torch.randn(4, 4, device=DEVICE)
        torch.testing.assert_close(tkreg.ops.toy_mul(x, y), x * y)
        assert TIMED == []
        assert tkreg.ops.explain("toy_mul", x, y).startswith("tkreg.ops.toy_mul calls toy_fast (toy_fast): the only kernel")
    finally:
        tkreg.ops.uninstall()


def test_buckets_keep_dtypes_alignment_and_parameters_apart() -> None:
    from tkreg.core.loading import build_registry
    from tkreg.ops.forms import form_for

    registry = build_registry(plugins=[("toy", ToyPlugin())])
    op = registry.op("toy_mul")
    chooser = choosing.Chooser(registry, op, form_for(op))
    a = torch.randn(10, 20)
    key = chooser.bucket((a, a), {})
    assert key is not None and key.startswith("d0.0<=12,d0.1<=24,d1.0<=12,d1.1<=24|float32,float32|contiguous|align=")
    assert chooser.bucket((a.half(), a.half()), {}) != key
    assert chooser.bucket((a, a), {"alpha": 2.0}).endswith("alpha=2.0")
    unaligned = torch.randn(201)[1:].view(10, 20)
    assert chooser.bucket((unaligned, a), {}) != key
    # rows of a 16-byte multiple (20 float32) and rows off it (19, 21): one bucket of sizes, three of rows
    assert key.endswith("|rows=aa") and chooser.bucket((torch.randn(9, 24), torch.randn(9, 24)), {}) == key
    odd = chooser.bucket((torch.randn(10, 19), torch.randn(10, 19)), {})
    assert odd == key.replace("rows=aa", "rows=uu") and chooser.bucket((torch.randn(10, 21), a), {}).endswith("rows=ua")
    padded = torch.randn(10, 24)[:, :19]  # 19 wide rows 24 apart: the rows are off, the stride is not
    assert chooser.bucket((padded, padded), {}).endswith("rows=uu")
    # a transposed view: its last dim (the rows of a product's output) counts, and its stride
    assert chooser.bucket((torch.randn(12, 20).t(), torch.randn(10, 20).t()), {}).endswith("rows=au")  # 12 and 10 wide
    assert chooser.bucket((torch.randn(20, 10).half(), torch.randn(10, 24).half()), {}).endswith("rows=ua")  # 20 and 48 bytes


def recording_backend(graphs: list[str]) -> Any:
    """A torch.compile backend that runs each forward graph AOT autograd makes and keeps its code."""
    from torch._functorch.aot_autograd import aot_module_simplified

    def backend(gm: Any, example_inputs: Any) -> Any:
        def record(graph: Any, inputs: Any) -> Any:
            graphs.append(str(graph.code))
            return graph.forward

        return aot_module_simplified(gm, example_inputs, fw_compiler=record)

    return backend


@pytest.mark.parametrize(("fast_ms", "peer_ms", "traced"),
                         [(0.010, 0.005, True), (0.010, 0.0105, True), (0.002, 0.004, True), (0.010, 0.040, False)],
                         ids=["peer-fastest", "kernel-ahead-by-5pc", "kernel-ahead-by-2x-or-2us", "kernel-ahead-by-30us"])
def test_a_compiled_call_traces_the_peer_where_it_was_measured_fastest_or_nearly(
    gpu_like: Path, monkeypatch: pytest.MonkeyPatch, two_kernels: Any, fast_ms: float, peer_ms: float, traced: bool
) -> None:
    """torch.compile then sees torch's own operation (and can fuse it), not an opaque call, unless
    a kernel leads the peer by COMPILED_MARGIN and by more than an opaque call costs the host."""
    monkeypatch.setitem(SPEED, "peer", peer_ms)
    monkeypatch.setitem(SPEED, "toy_fast", fast_ms)
    x, y = torch.randn(8, 8, device=DEVICE), torch.randn(8, 8, device=DEVICE)
    two_kernels.toy_mul(x, y)  # tunes the bucket
    graphs: list[str] = []
    backend = recording_backend(graphs)

    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b: two_kernels.toy_mul(a, b) + 1, backend=backend, fullgraph=True)
    torch.testing.assert_close(compiled(x, y), x * y + 1)
    assert graphs and ("aten.mul" in graphs[0]) is traced and ("tkreg_dispatch" in graphs[0]) is not traced


def _compiled_graph(ops: Any, x: Any, y: Any) -> str:
    graphs: list[str] = []
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b: ops.toy_mul(a, b) + 1, backend=recording_backend(graphs), fullgraph=True)
    torch.testing.assert_close(compiled(x, y), x * y + 1)
    assert graphs
    return graphs[0]


def test_a_compiled_call_of_a_shape_its_buckets_winner_refuses_reads_that_shapes_own_choice(
    gpu_like: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(SPEED, "toy_fast", 0.001)  # far ahead of the peer: a trace keeps its opaque call
    fast = toy_kernel("toy_fast", toy_fast, priority=0, requires=tkreg.Requirements(inputs=toy_narrow_rows_only))
    ops = ops_with(fast, toy_kernel("toy_slow", toy_slow, priority=5))
    try:
        even, odd = [(torch.randn(60, n, device=DEVICE), torch.randn(60, n, device=DEVICE)) for n in (60, 64)]
        ops.toy_mul(*even), ops.toy_mul(*odd)  # the bucket (toy_fast), then the shapes toy_fast refuses (the peer)
        assert "tkreg_dispatch" in _compiled_graph(ops, *even)
        odd_graph = _compiled_graph(ops, *odd)
        assert "aten.mul" in odd_graph and "tkreg_dispatch" not in odd_graph  # their own choice, the peer, traced
    finally:
        ops.uninstall()


def toy_mul_in_float64(x: Any, y: Any, out: Any) -> Any:
    RAN.append("toy_mul_in_float64")
    return out.copy_(x.double() * y.double())


toy_mul_in_float64.tkreg_traceable = True  # type: ignore[attr-defined]


def test_a_compiled_call_traces_the_traceable_kernel_this_gpu_measured_not_the_registrys_first(
    gpu_like: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = toy_kernel("toy_first", toy_mul_torch, priority=10)  # the registry's first, traceable
    measured = toy_kernel("toy_measured", toy_mul_in_float64, priority=0)
    times = {"toy_first": 0.030, "toy_measured": 0.001, "peer": 0.040}
    labels = {toy_mul_torch: "toy_first", toy_mul_in_float64: "toy_measured"}

    def clock(call: Any, n: int) -> float:
        target = getattr(call, "launcher", None) or getattr(call, "func", call)
        return times[labels.get(target, "peer")] * n

    monkeypatch.setattr(measuring, "_cuda_clock", clock)
    ops = ops_with(first, measured)
    try:
        x, y = torch.randn(8, 8, device=DEVICE), torch.randn(8, 8, device=DEVICE)
        assert "toy_measured" not in _compiled_graph(ops, x, y) and "to_copy" not in _compiled_graph(ops, x, y)
        ops.toy_mul(x, y)  # times the bucket: toy_measured, far ahead
        graph = _compiled_graph(ops, x, y)
        assert "tkreg_dispatch" not in graph and ("to_copy" in graph or "convert_element_type" in graph)
    finally:
        ops.uninstall()


def test_tkreg_tune_has_help_and_says_it_needs_a_gpu(tmp_path: Path) -> None:
    import subprocess
    import sys

    helped = subprocess.run([sys.executable, "-m", "tkreg.cli", "tune", "--help"], capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and "--model CONFIG.json" in helped.stdout and "--training" in helped.stdout
    if torch.cuda.is_available():
        return
    refused = subprocess.run([sys.executable, "-m", "tkreg.cli", "tune", "matmul", "--shape", "M=16,N=64,K=64"],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "times kernels on a CUDA GPU; this machine has none" in refused.stderr


def test_the_package_functions_stay_functions_once_its_modules_are_imported() -> None:
    """Importing a module of tkreg.ops sets the package's attribute of that name, so no module may
    be named as one of its functions (tkreg.ops.tune was its own module after a first call)."""
    import importlib
    import pkgutil
    import types

    import tkreg.ops

    for module in pkgutil.iter_modules(tkreg.ops.__path__):
        importlib.import_module(f"tkreg.ops.{module.name}")
    shadowed = [name for name in tkreg.ops.__all__ if isinstance(getattr(tkreg.ops, name), types.ModuleType)]
    assert shadowed == []
    if not torch.cuda.is_available():  # the same clear error each time, not "'module' object is not callable"
        for _ in range(2):
            with pytest.raises(TkregError, match="times kernels on a CUDA GPU"):
                tkreg.ops.tune("matmul", [{"M": 16, "N": 64, "K": 64}])


def test_a_model_config_gives_each_distinct_linear_shape() -> None:
    from tkreg.ops.model_shapes import linear_shapes

    llama8b = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8}
    shapes = linear_shapes(llama8b, tokens=(16,))
    assert [(s.name, s.M, s.N, s.K) for s in shapes] == [
        ("q", 16, 4096, 4096), ("k", 16, 1024, 4096), ("gate", 16, 14336, 4096), ("down", 16, 4096, 14336)
    ]  # v repeats k, o repeats q, up repeats gate
    with pytest.raises(ValueError, match="no 'intermediate_size'"):
        linear_shapes({"hidden_size": 8, "num_attention_heads": 2})


def test_a_model_config_says_which_linear_layers_have_a_bias() -> None:
    from tkreg.ops.model_shapes import linear_shapes

    qwen2 = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
             "num_key_value_heads": 4}  # fmt: skip
    shapes = [(s.name, s.N, s.K, s.bias) for s in linear_shapes(qwen2, tokens=(16,))]
    # q, k and v with a bias; o (the same shape as q) without: a call of its own
    assert shapes == [("q", 3584, 3584, True), ("k", 512, 3584, True), ("o", 3584, 3584, False),
                      ("gate", 18944, 3584, False), ("down", 3584, 18944, False)]  # fmt: skip
    assert linear_shapes(qwen2, tokens=(16,))[0].describe() == "q 16x3584x3584 with bias"
    llama = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "attention_bias": True, "mlp_bias": True}
    assert all(s.bias for s in linear_shapes(llama, tokens=(1,)))
    assert not any(s.bias for s in linear_shapes({**llama, "attention_bias": False, "mlp_bias": False}, tokens=(1,)))


def test_on_a_cpu_without_the_interpreter_explain_and_lookup_say_the_peer_runs() -> None:
    """What the call does (it runs torch with a fallback warning) is what explain and lookup say."""
    import subprocess
    import sys

    code = (
        "import warnings, torch, tkreg\n"
        "a = torch.randn(4, 4)\n"
        "print(tkreg.lookup('add', inputs=(a, a)))\n"
        "print(tkreg.ops.explain('add', a, a))\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    assert torch.equal(tkreg.ops.add(a, a), a + a)\n"
        "print(w[0].message)\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    if torch.cuda.is_available():
        pytest.skip("a GPU runs the kernels")
    assert result.returncode == 0, result.stderr
    lookup, explained, warned = result.stdout.strip().splitlines()
    assert lookup == "[]"
    assert explained.startswith("tkreg.ops.add calls its peer: no registered kernel takes these inputs")
    assert "the Triton interpreter is off in this process (set TRITON_INTERPRET=1" in explained
    assert warned.startswith("tkreg.ops.add calls its peer torch.add") and "TRITON_INTERPRET=1" in warned


def test_a_spent_budget_still_times_the_peer_and_each_kernels_own_choice_first(
    gpu_like: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compiles eat the budget: what is left out when it runs out is the least likely."""
    from tests.ops_support import registry_with as with_plugins
    from tkreg.ops.choosing import Chooser
    from tkreg.ops.forms import form_for

    registry = with_plugins(ToyPlugin(toy_kernel("toy_fast", toy_fast, tune_configs=({"BLOCK": 64},))))
    op = registry.op("toy_mul")
    form = form_for(op)
    x, y = torch.randn(4, 4, device=DEVICE), torch.randn(4, 4, device=DEVICE)
    chooser = Chooser(registry, op, form)
    view = form.kernel_view((x, y))
    layouts = form.output_layouts((x, y), view, {})
    order = [c.label for c in chooser.candidates(registry.kernels("toy_mul"), lambda k: k.load(), (x, y), (x, y), layouts, {})]
    assert order == ["peer", "toy_fast", "toy_fast[BLOCK=64]"]


def test_a_later_process_runs_a_signature_whose_measured_choice_is_the_peer_without_planning(
    gpu_like: Path, monkeypatch: pytest.MonkeyPatch, two_kernels: Any
) -> None:
    from tkreg.ops import dispatch, remembered

    monkeypatch.setitem(SPEED, "peer", 0.005)
    x, y = torch.randn(64, 64, device=DEVICE), torch.randn(64, 64, device=DEVICE)
    other = torch.randn(3, 200, device=DEVICE)
    two_kernels.toy_mul(x, y)  # timed: the peer is fastest
    two_kernels.toy_mul(other, other)
    remembered.flush()  # what the process does at exit
    assert (gpu_like / "tuning").rglob("toy_mul.signatures.json")

    planned: list[Any] = []
    plan = dispatch.Dispatcher.plan
    monkeypatch.setattr(dispatch.Dispatcher, "plan", lambda self, *a, **k: planned.append(a) or plan(self, *a, **k))
    TIMED.clear()
    fresh = ops_with(toy_kernel("toy_fast", toy_fast, priority=0), toy_kernel("toy_slow", toy_slow, priority=5))
    torch.testing.assert_close(fresh.toy_mul(x, y), x * y)
    assert planned == [] and TIMED == []  # the remembered signature: no plan, no timing
    # reading what was remembered made the plans of the other signatures the peer runs: their first
    # calls take tkreg.ops' fast path, as later calls do
    from tkreg.ops import keys, library

    assert keys.tensors_key([other, other]) in fresh._installed["dispatchers"]["toy_mul"]._plans
    slow: list[Any] = []
    way_of = library.way_of
    monkeypatch.setattr(library, "way_of", lambda inputs: slow.append(inputs) or way_of(inputs))
    with torch.no_grad():
        torch.testing.assert_close(fresh.toy_mul(other, other), other * other)
    assert slow == []  # found on the fast path at its first call (by the C++ key too, where in use)
    assert fresh.explain("toy_mul", x, y).startswith("tkreg.ops.toy_mul calls its peer: faster for these inputs")
    planned.clear()
    fresh.toy_mul(torch.randn(60, 60, device=DEVICE), torch.randn(60, 60, device=DEVICE))  # another signature, same bucket
    assert len(planned) == 1 and TIMED == []  # planned from the cached choice


def test_a_later_process_reads_what_every_op_remembered_at_its_first_call_on_the_device(
    gpu_like: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first call on a device reads the signatures every installed op remembered there, so
    that another op's first call of a remembered signature finds its plan made: one read per op,
    paid once, not at each op's first call of the process."""
    import functools

    import tkreg.ops
    from tests.ops_support import RMS_BACKWARD, RMS_FORWARD, RmsPlugin, rms_reference
    from tkreg.ops import dispatch, keys, remembered

    # every peer (a partial of it, as candidates call it) is measured ten times faster than a kernel
    monkeypatch.setattr(measuring, "_cuda_clock", lambda call, n: (0.001 if isinstance(call, functools.partial) else 0.01) * n)
    x, y = torch.randn(64, 64, device=DEVICE), torch.randn(64, 64, device=DEVICE)
    rows, w = torch.randn(2, 3, 16, device=DEVICE), torch.randn(16, device=DEVICE)

    def registry() -> Any:
        return registry_with(ToyPlugin(toy_kernel("toy_fast", toy_fast)), RmsPlugin(RMS_FORWARD, RMS_BACKWARD))

    try:
        tkreg.ops.install(registry())
        tkreg.ops.toy_mul(x, y)
        tkreg.ops.toy_rms_norm(rows, w)
        remembered.flush()
        tkreg.ops.install(registry())  # a later process
        norm = tkreg.ops._installed["dispatchers"]["toy_rms_norm"]
        rms_key = keys.plan_key([rows, w], norm.params.defaults)
        assert rms_key not in norm._plans
        torch.testing.assert_close(tkreg.ops.toy_mul(x, y), x * y)
        assert rms_key in norm._plans  # read at toy_mul's first call
        planned: list[Any] = []
        plan = dispatch.Dispatcher.plan
        monkeypatch.setattr(dispatch.Dispatcher, "plan", lambda self, *a, **k: planned.append(a) or plan(self, *a, **k))
        torch.testing.assert_close(tkreg.ops.toy_rms_norm(rows, w), rms_reference(rows, w)[0])
        assert planned == [] and TIMED == []
    finally:
        tkreg.ops.uninstall()


@pytest.mark.parametrize("full_peer", [False, True], ids=["peer-only", "full-peer"])
def test_a_remembered_peer_that_returns_y_only_still_keeps_backward_kernels_off_rstd(
    gpu_like: Path, monkeypatch: pytest.MonkeyPatch, full_peer: bool
) -> None:
    """A later process runs a remembered peer without planning it: every output unwritten but y,
    so backward kernels stay off rstd; or, where the op has a full peer, rstd's values, which
    the backward kernel then reads."""
    import functools

    import tkreg.ops
    from tests.ops_support import RMS_BACKWARD, RMS_FORWARD, RmsPlugin, calls, rms_reference
    from tkreg.ops import dispatch, remembered

    # the peer (a partial of it, as candidates call it) is measured ten times faster than the kernel
    monkeypatch.setattr(measuring, "_cuda_clock", lambda call, n: (0.001 if isinstance(call, functools.partial) else 0.01) * n)
    x = torch.randn(2, 3, 16, device=DEVICE, requires_grad=True)
    w = torch.randn(16, device=DEVICE, requires_grad=True)

    def plugin() -> RmsPlugin:
        return RmsPlugin(RMS_FORWARD, RMS_BACKWARD, peer_y_only=True, full_peer=full_peer)

    try:
        tkreg.ops.install(registry_with(plugin()))
        tkreg.ops.toy_rms_norm(x.detach(), w.detach())  # timed: the peer, which computes y only
        remembered.flush()
        tkreg.ops.install(registry_with(plugin()))  # a later process
        planned: list[Any] = []
        plan = dispatch.Dispatcher.plan
        monkeypatch.setattr(dispatch.Dispatcher, "plan", lambda self, *a, **k: planned.append(a) or plan(self, *a, **k))
        _, rstd = torch.ops.tkreg.toy_rms_norm(x.detach(), w.detach())  # every output
        assert planned == [] and rstd.shape == (2, 3) and rstd.dtype == torch.float32
        if full_peer:
            torch.testing.assert_close(rstd, rms_reference(x.detach(), w.detach())[1])
            torch.ops.tkreg.toy_rms_norm(x, w)[0].sum().backward()
            assert len(calls("rms_backward_torch")) == 1
        else:
            with pytest.warns(tkreg.ops.PeerFallbackWarning, match="the forward ran the peer rms_peer"):
                torch.ops.tkreg.toy_rms_norm(x, w)[0].sum().backward()
            assert not calls("rms_backward_torch")
        x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
        rms_reference(x64, w64)[0].sum().backward()
        torch.testing.assert_close(x.grad.double(), x64.grad, atol=1e-4, rtol=1e-4)
    finally:
        tkreg.ops.uninstall()


@pytest.mark.parametrize("full_peer", [False, True], ids=["peer-only", "full-peer"])
def test_a_compiled_call_traces_the_full_peer_of_an_op_with_outputs_of_its_own(
    gpu_like: Path, monkeypatch: pytest.MonkeyPatch, full_peer: bool
) -> None:
    """Where the peer is measured fastest, torch.compile sees torch's own operations for an op
    whose kernels keep outputs of their own (rstd) only through a full peer, which writes every
    output; without one, the compiled call runs a kernel or the opaque run-time call, never a
    peer that leaves rstd unwritten."""
    import functools

    import tkreg.ops
    from tests.ops_support import CALLS, RMS_BACKWARD, RMS_FORWARD, RmsPlugin, calls, rms_reference

    monkeypatch.setattr(measuring, "_cuda_clock", lambda call, n: (0.001 if isinstance(call, functools.partial) else 0.01) * n)
    x, w = torch.randn(2, 3, 16, device=DEVICE), torch.randn(16, device=DEVICE)
    graphs: list[str] = []
    backend = recording_backend(graphs)

    try:
        tkreg.ops.install(registry_with(RmsPlugin(RMS_FORWARD, RMS_BACKWARD, peer_y_only=True, full_peer=full_peer)))
        tkreg.ops.toy_rms_norm(x, w)  # tunes the bucket: the peer wins
        CALLS.clear()
        torch._dynamo.reset()
        compiled = torch.compile(lambda a, b: torch.ops.tkreg.toy_rms_norm(a, b), backend=backend, fullgraph=True)
        y, rstd = compiled(x, w)
        want_y, want_rstd = rms_reference(x.double(), w.double())
        torch.testing.assert_close(y.double(), want_y, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(rstd.double(), want_rstd, atol=1e-6, rtol=1e-6)  # the full peer's, or a kernel's
        assert graphs and bool(calls("rms_full_peer")) is full_peer  # traced, once
        if full_peer:
            assert "tkreg_dispatch" not in graphs[0] and not calls("rms_torch")
    finally:
        tkreg.ops.uninstall()


def step_clock(peer_step: float, kernel_step: float, timed: list[str] | None = None) -> Any:
    """A simulated clock (ms per call) for training choices: the training steps by_peer and
    by_kernel take what is given (and run once each time, on their copies), the peer's forward
    (a partial) 0.100 and a kernel's 0.010; ``timed`` collects the name of every call timed."""
    import functools

    steps = {"by_peer": peer_step, "by_kernel": kernel_step}

    def clock(call: Any, n: int) -> float:
        name = getattr(call, "__name__", "")
        if timed is not None:
            timed.append(name)
        if name in steps:
            call()  # a step runs: on copies, whose gradients the caller never sees
            return steps[name] * n
        return (0.100 if isinstance(call, functools.partial) else 0.010) * n

    return clock


def _rms_gradient_call(formula: bool, through_peer: bool) -> None:
    """A call that wants a gradient after the bucket's forward was tuned (the kernel won): the
    peer's own call where ``through_peer``, else the kernel's, then the backward kernel or the
    formula; right gradients either way, and calls that want none still run the kernel."""
    import tkreg.ops
    from tests.ops_support import CALLS, calls, rms_reference

    x = torch.randn(2, 3, 16, device=DEVICE, requires_grad=True)
    w = torch.randn(16, device=DEVICE, requires_grad=True)
    tkreg.ops.toy_rms_norm(x.detach(), w.detach())  # tunes the bucket: the kernel wins
    CALLS.clear()
    y = tkreg.ops.toy_rms_norm(x, w)
    assert x.grad is None and w.grad is None  # timing trained on copies
    assert type(y.grad_fn).__name__.startswith("tkreg_") is not through_peer
    CALLS.clear()  # what timing ran, if anything
    y.sum().backward()
    backward = "rms_formula" if formula else "rms_backward_torch"
    assert bool(calls(backward)) is not through_peer
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    rms_reference(x64, w64)[0].sum().backward()
    torch.testing.assert_close(x.grad.double(), x64.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(w.grad.double(), w64.grad, atol=1e-4, rtol=1e-4)
    CALLS.clear()
    tkreg.ops.toy_rms_norm(x.detach(), w.detach())
    assert calls("rms_torch") and not calls("rms_peer")


@pytest.mark.parametrize("formula", [False, True], ids=["backward-kernel", "formula"])
@pytest.mark.parametrize(("steps_ms", "through_peer"), [((0.050, 0.080), True), ((0.080, 0.050), False)],
                         ids=["peer-trains-faster", "kernel-trains-faster"])
def test_a_call_that_wants_a_gradient_takes_the_way_that_trained_faster(
    gpu_like: Path, monkeypatch: pytest.MonkeyPatch, steps_ms: tuple[float, float], through_peer: bool, formula: bool
) -> None:
    """The first call of a kernel's bucket that wants a gradient times a forward and a backward
    each way (the peer's own call; the kernel, then its backward kernel or the formula) and takes
    the faster, whatever the forward alone said; a later process reads the choice and times
    nothing."""
    import tkreg.ops
    from tests.ops_support import RMS_BACKWARD, RMS_FORWARD, RmsPlugin

    timed: list[str] = []
    monkeypatch.setattr(measuring, "_cuda_clock", step_clock(*steps_ms, timed))
    kernels = (RMS_FORWARD,) if formula else (RMS_FORWARD, RMS_BACKWARD)
    try:
        tkreg.ops.install(registry_with(RmsPlugin(*kernels, peer_y_only=True, formula=formula)))
        _rms_gradient_call(formula, through_peer)  # the kernel led the forward by 90 us
        assert "by_peer" in timed and "by_kernel" in timed
        said = tkreg.ops.explain("toy_rms_norm", torch.randn(2, 3, 16, device=DEVICE), torch.randn(16, device=DEVICE))
        way = "the peer's own call" if through_peer else "and its backward"
        assert "A call that wants a gradient makes" in said and way in said and "|training" in said, said
        timed.clear()
        tkreg.ops.install(registry_with(RmsPlugin(*kernels, peer_y_only=True, formula=formula)))  # a new process's
        _rms_gradient_call(formula, through_peer)
        assert timed == []
    finally:
        tkreg.ops.uninstall()


@pytest.mark.parametrize("peer", ["bare", "y-only", "every-output"])
def test_a_peer_that_returns_what_callers_get_is_their_gradient_call_itself(
    gpu_like: Path, monkeypatch: pytest.MonkeyPatch, peer: str
) -> None:
    """Where training through the peer won a kernel's bucket, a later call that wants a gradient
    is the peer's own call: the peer itself where it returns the one tensor callers get (no frame
    of tkreg's around it), else a call that gives callers that tensor of what the peer returns.
    Either way the output and its gradients are right."""
    import tkreg.ops
    from tests.ops_support import RMS_BACKWARD, RMS_FORWARD, RmsPlugin, rms_reference

    monkeypatch.setattr(measuring, "_cuda_clock", step_clock(0.050, 0.080))
    plugin = RmsPlugin(RMS_FORWARD, RMS_BACKWARD, peer_y_only=peer == "y-only", peer_bare=peer == "bare")
    try:
        tkreg.ops.install(registry_with(plugin))
        x, w = torch.randn(2, 3, 16, device=DEVICE), torch.randn(16, device=DEVICE)
        tkreg.ops.toy_rms_norm(x, w)  # the forward's bucket: the kernel wins
        x.requires_grad_()
        tkreg.ops.toy_rms_norm(x, w)  # the training choice: the peer
        dispatcher = tkreg.ops._installed["dispatchers"]["toy_rms_norm"]
        plan = dispatcher.planned((x, w), dispatcher.params.defaults)
        functional = dispatcher._functional_peer(plan.params)
        assert plan.gradient_call is not None
        assert (plan.gradient_call is functional) is (peer == "bare")
        y = tkreg.ops.toy_rms_norm(x, w)
        assert isinstance(y, torch.Tensor) and y.grad_fn is not None
        assert not type(y.grad_fn).__name__.startswith("tkreg_")  # torch's own backward
        y.sum().backward()
        x64 = x.detach().double().requires_grad_()
        want = rms_reference(x64, w.double())[0]
        want.sum().backward()
        torch.testing.assert_close(y.detach().double(), want.detach(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(x.grad.double(), x64.grad, atol=1e-4, rtol=1e-4)
    finally:
        tkreg.ops.uninstall()


def test_tune_with_training_times_and_reports_the_training_choice(one_gpu: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tkreg tune --training calls each shape again wanting a gradient: where a kernel runs the
    forward, the bucket's training choice is timed, cached and said; without it, nothing is."""
    import tkreg.ops
    from tests.ops_support import RMS_BACKWARD, RMS_FORWARD, RmsPlugin
    from tkreg.ops.prefill import _tuned

    monkeypatch.setattr(measuring, "_cuda_clock", step_clock(0.050, 0.080))
    try:
        tkreg.ops.install(registry_with(RmsPlugin(RMS_FORWARD, RMS_BACKWARD, peer_y_only=True)))
        call, dispatcher = tkreg.ops.get("toy_rms_norm"), tkreg.ops._installed["dispatchers"]["toy_rms_norm"]
        inputs = (torch.randn(6, 16, device=DEVICE), torch.randn(16, device=DEVICE))
        plain = _tuned("toy_rms_norm", dispatcher, call, inputs, {}, "6x16")
        assert plain.choice is not None and plain.choice.winner == "rms_torch" and plain.training is None
        tuned = _tuned("toy_rms_norm", dispatcher, call, inputs, {}, "6x16", training=True)
        assert tuned.training is not None and tuned.training.winner == "peer" and tuned.training.bucket.endswith("|training")
        assert "; training: peer 50.0 us a step, 1.60x the other way (tuning)" in tuned.describe()
        assert not any(t.requires_grad for t in inputs)  # the caller's inputs are left as they were
    finally:
        tkreg.ops.uninstall()


def test_timing_a_training_step_lets_its_backward_call_the_op_from_another_thread(
    gpu_like: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a GPU, autograd runs a backward on its device thread. A formula that calls the op there
    (as matmul's backward products do), on a bucket nobody has timed, times it in that thread:
    the training timing that runs the formula must not hold the op's tuning lock meanwhile."""
    import threading

    import tkreg.ops
    from tests import ops_support
    from tests.ops_support import RMS_FORWARD, RmsPlugin

    formula = ops_support.rms_formula
    waited: list[bool] = []

    def formula_calling_the_op_elsewhere(inputs: Any, outputs: Any, grad_outputs: Any, eps: float) -> Any:
        if not waited:
            other = (torch.randn(5, 40, device=DEVICE), torch.randn(40, device=DEVICE))  # another bucket
            worker = threading.Thread(target=lambda: tkreg.ops.toy_rms_norm(*other))
            worker.start()
            worker.join(timeout=10)
            waited.append(worker.is_alive())
        return formula(inputs, outputs, grad_outputs, eps)

    monkeypatch.setattr(ops_support, "rms_formula", formula_calling_the_op_elsewhere)
    monkeypatch.setattr(measuring, "_cuda_clock", step_clock(0.050, 0.050))
    try:
        tkreg.ops.install(registry_with(RmsPlugin(RMS_FORWARD, peer_y_only=True, formula=True)))
        x, w = torch.randn(2, 3, 16, device=DEVICE), torch.randn(16, device=DEVICE)
        tkreg.ops.toy_rms_norm(x, w)  # the forward's bucket: the kernel wins
        tkreg.ops.toy_rms_norm(x.requires_grad_(), w)  # times the training step, whose formula calls the op
        assert waited == [False]  # the other thread's call finished
    finally:
        tkreg.ops.uninstall()


@pytest.mark.parametrize("formula", [False, True], ids=["backward-kernel", "formula"])
@pytest.mark.parametrize(("peer_ms", "through_peer"), [(0.020, True), (0.100, False)], ids=["lead-10us", "lead-90us"])
def test_without_a_training_choice_the_forwards_lead_decides(
    gpu_like: Path, monkeypatch: pytest.MonkeyPatch, peer_ms: float, through_peer: bool, formula: bool
) -> None:
    """With tuning off when the first call that wants a gradient comes, the training choice is not
    timed: where the kernel won the forward by 10 us (under AUTOGRAD_LEAD_US) such a call is the
    peer's own, as torch code would make it; by 90 us it runs the kernel, and the backward kernel
    or the op's formula after it."""
    import functools

    import tkreg.ops
    from tests.ops_support import RMS_BACKWARD, RMS_FORWARD, RmsPlugin

    monkeypatch.setattr(measuring, "_cuda_clock", lambda call, n: (peer_ms if isinstance(call, functools.partial) else 0.010) * n)
    kernels = (RMS_FORWARD,) if formula else (RMS_FORWARD, RMS_BACKWARD)
    try:
        tkreg.ops.install(registry_with(RmsPlugin(*kernels, peer_y_only=True, formula=formula)))
        x, w = torch.randn(2, 3, 16, device=DEVICE), torch.randn(16, device=DEVICE)
        tkreg.ops.toy_rms_norm(x, w)  # tunes the forward's bucket
        monkeypatch.setenv(tuning.ENV_TUNE, "0")
        _rms_gradient_call(formula, through_peer)
    finally:
        tkreg.ops.uninstall()


@pytest.fixture
def one_gpu(gpu_like: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """warm() replays on the process's GPUs: here one, simulated like the rest."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    return gpu_like


def _earlier_process_ran(two_kernels: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Two signatures a kernel runs and one the peer runs, remembered as a process's exit writes
    them; returns the inputs of each, kernels' first."""
    from tkreg.ops import remembered

    x, y = torch.randn(64, 64, device=DEVICE), torch.randn(64, 64, device=DEVICE)
    wide = torch.randn(64, 80, device=DEVICE)[:, 3:67]  # strided, and another alignment class
    two_kernels.toy_mul(x, y)  # timed: toy_fast
    two_kernels.toy_mul(wide, y)
    monkeypatch.setitem(SPEED, "peer", 0.005)
    small = torch.randn(5, 7, device=DEVICE)
    two_kernels.toy_mul(small, small)  # timed: the peer
    remembered.flush()
    return [(x, y), (wide, y), (small, small)]


def _a_later_process(two_kernels: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[tuple[Any, ...]], list[Any]]:
    """tkreg.ops installed anew over what an earlier process ran (:func:`_earlier_process_ran`),
    with its plans counted: (tkreg.ops, that process's inputs, the plans made)."""
    from tkreg.ops import dispatch

    ran = _earlier_process_ran(two_kernels, monkeypatch)
    fresh = ops_with(toy_kernel("toy_fast", toy_fast, priority=0), toy_kernel("toy_slow", toy_slow, priority=5))
    planned: list[Any] = []
    plan = dispatch.Dispatcher.plan
    monkeypatch.setattr(dispatch.Dispatcher, "plan", lambda self, *a, **k: planned.append(a) or plan(self, *a, **k))
    TIMED.clear()
    return fresh, ran, planned


def _first_calls_find_their_plans(fresh: Any, ran: list[tuple[Any, ...]], planned: list[Any]) -> None:
    from tests.ops_support import same_alignment_as

    (x, y), *others = ran
    planned.clear()
    TIMED.clear()
    for a, b in ((same_alignment_as(x, 1), y), *others):  # fresh values, the same signatures
        torch.testing.assert_close(fresh.toy_mul(a, b), a * b)
    assert planned == [] and TIMED == []  # every first call found its plan made


def test_warm_replays_what_earlier_processes_ran_so_first_calls_plan_and_time_nothing(
    one_gpu: Path, monkeypatch: pytest.MonkeyPatch, two_kernels: Any
) -> None:
    fresh, ran, planned = _a_later_process(two_kernels, monkeypatch)
    assert fresh.warm() == {"toy_mul": 3}
    assert len(planned) == 2 and TIMED == []  # the kernels' signatures are planned from the cache; the peer's not at all
    _first_calls_find_their_plans(fresh, ran, planned)


def test_the_first_call_on_a_gpu_preloads_the_remembered_kernel_signatures_so_their_first_calls_plan_nothing(
    one_gpu: Path, monkeypatch: pytest.MonkeyPatch, two_kernels: Any
) -> None:
    from tkreg.ops import keys, warming

    fresh, ran, planned = _a_later_process(two_kernels, monkeypatch)
    (x, y), (wide, _), _ = ran
    launched: list[Any] = []
    replay = warming.replay
    monkeypatch.setattr(warming, "replay", lambda *a, **k: launched.append(a[1]) or replay(*a, **k))
    dispatcher = fresh._installed["dispatchers"]["toy_mul"]
    entry, entered = dispatcher.entry, []
    assert entry is fresh.toy_mul
    dispatcher.entry = lambda *a, **k: entered.append(a) or entry(*a, **k)
    other = torch.randn(3, 9, device=DEVICE)
    torch.testing.assert_close(fresh.toy_mul(other, other), other * other)  # a new signature: planned and timed
    assert launched == [keys.tensors_key([wide, y]), keys.tensors_key([x, y])]  # the kernels' two, newest first
    # each made through tkreg.ops.toy_mul itself, as a caller's calls are
    calls = warming.REPLAYED_CALLS
    assert [keys.tensors_key(list(a)) for a in entered] == [launched[0]] * calls + [launched[1]] * calls
    assert warming.preloads[0]["signatures"] == 2
    assert len(planned) == 3 and TIMED  # the two replayed from the cache's choice, and this call's own
    _first_calls_find_their_plans(fresh, ran, planned)
    assert len(launched) == 2  # once per process and device


def test_warm_gives_a_remembered_signature_its_parameter_values_and_its_first_call_plans_nothing(
    one_gpu: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel-run signature with a parameter value other than the default (eps) is replayed with
    that value, by keyword through tkreg.ops.<op>, so its first call in a later process finds it."""
    import functools

    import tkreg.ops
    from tests.ops_support import RMS_BACKWARD, RMS_FORWARD, RmsPlugin, rms_reference, same_alignment_as
    from tkreg.ops import remembered

    # the kernel is measured ten times faster than the peer (a partial of it, as candidates call it)
    monkeypatch.setattr(measuring, "_cuda_clock", lambda call, n: (0.01 if isinstance(call, functools.partial) else 0.001) * n)
    x, w = torch.randn(4, 16, device=DEVICE), torch.randn(16, device=DEVICE)
    try:
        tkreg.ops.install(registry_with(RmsPlugin(RMS_FORWARD, RMS_BACKWARD)))
        tkreg.ops.toy_rms_norm(x, w, eps=0.25)  # timed: the kernel
        remembered.flush()
        tkreg.ops.install(registry_with(RmsPlugin(RMS_FORWARD, RMS_BACKWARD)))  # a later process
        dispatcher = tkreg.ops._installed["dispatchers"]["toy_rms_norm"]
        entry, entered = dispatcher.entry, []
        dispatcher.entry = lambda *a, **k: entered.append(k) or entry(*a, **k)
        assert tkreg.ops.warm() == {"toy_rms_norm": 1}
        assert entered == [{"eps": 0.25}] * warming.REPLAYED_CALLS
        planned: list[Any] = []
        plan = dispatch.Dispatcher.plan
        monkeypatch.setattr(dispatch.Dispatcher, "plan", lambda self, *a, **k: planned.append(a) or plan(self, *a, **k))
        rows = same_alignment_as(x, 5)  # fresh values, the same signature (alignment class included)
        torch.testing.assert_close(tkreg.ops.toy_rms_norm(rows, w, eps=0.25), rms_reference(rows, w, eps=0.25)[0])
        assert planned == []
    finally:
        tkreg.ops.uninstall()


def test_a_first_call_whose_own_signature_the_preload_made_runs_that_plan(
    one_gpu: Path, monkeypatch: pytest.MonkeyPatch, two_kernels: Any
) -> None:
    fresh, ((x, y), *_), planned = _a_later_process(two_kernels, monkeypatch)
    torch.testing.assert_close(fresh.toy_mul(x, y), x * y)
    assert len(planned) == 2 and TIMED == []  # the preload's two, this call's among them: not planned again


@pytest.mark.parametrize("why", ["turned off", "capturing", "too large", "too large for the free memory", "out of time",
                                 "unreadable"])  # fmt: skip
def test_the_preload_leaves_signatures_to_their_first_calls_when_off_capturing_too_large_out_of_time_or_failing(
    one_gpu: Path, monkeypatch: pytest.MonkeyPatch, two_kernels: Any, why: str
) -> None:
    from tkreg.ops import warming

    fresh, ((x, y), *_), planned = _a_later_process(two_kernels, monkeypatch)
    warming.preloads.clear()
    if why == "turned off":
        monkeypatch.setenv(warming.ENV_PRELOAD, "0")
    elif why == "capturing":
        monkeypatch.setattr(choosing, "capturing_or_tracing", lambda: True)
    elif why == "too large":
        monkeypatch.setattr(warming, "PRELOAD_MAX_BYTES", 64 * 64 * 4 - 1)  # under one input of 64 x 64 fp32
    elif why == "too large for the free memory":  # a 16th of it is under one input of 64 x 64 fp32
        free = 64 * 64 * 4 * warming.PRELOAD_FREE_SHARE - 1
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 1 << 40))
    elif why == "out of time":
        monkeypatch.setenv(warming.ENV_PRELOAD, "1e-9")
    else:  # what an op remembers cannot be read when the preload asks: the call itself still runs
        monkeypatch.setattr(warming, "_kernel_signatures", lambda *a: 1 / 0)
    torch.testing.assert_close(fresh.toy_mul(x, y), x * y)
    assert len(planned) == 1  # this call planned its own signature: nothing was planned ahead
    if why == "out of time":
        assert warming.preloads[0] == {"signatures": 0, "left": 2, "seconds": pytest.approx(0, abs=1)}
    elif why in ("too large", "too large for the free memory", "unreadable"):
        assert warming.preloads[0]["signatures"] == 0 and warming.preloads[0]["left"] == 0
    else:
        assert warming.preloads == {}


def test_the_preload_bound_is_a_share_of_the_free_memory_under_a_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    from tkreg.ops import warming

    asked: list[int] = []

    def free_memory(free: int) -> Any:
        return lambda device=None: asked.append(device) or (free, 1 << 40)

    monkeypatch.setattr(torch.cuda, "mem_get_info", free_memory(1 << 40))
    assert warming.preload_max_bytes(1) == warming.PRELOAD_MAX_BYTES and asked == [1]
    monkeypatch.setattr(torch.cuda, "mem_get_info", free_memory(1600 * warming.PRELOAD_FREE_SHARE + 3))
    assert warming.preload_max_bytes(0) == 1600

    def no_driver(device: int | None = None) -> tuple[int, int]:
        raise AssertionError("Torch not compiled with CUDA enabled")

    monkeypatch.setattr(torch.cuda, "mem_get_info", no_driver)
    assert warming.preload_max_bytes(0) == warming.PRELOAD_MAX_BYTES


def test_remembered_signatures_keep_the_most_recently_planned_last_and_forget_the_oldest(tmp_path: Path) -> None:
    cache = tuning_cache.TuningCache(tmp_path, {"device": "Simulated GPU"})
    cache.add_signatures("op", {"a": {"n": 1}, "b": {"n": 2}, "c": {"n": 3}}, limit=3)
    cache.add_signatures("op", {"a": {"n": 4}}, limit=3)  # planned again: goes last, with its new entry
    assert list(cache.signatures("op").items()) == [("b", {"n": 2}), ("c", {"n": 3}), ("a", {"n": 4})]
    cache.add_signatures("op", {"d": {"n": 5}}, limit=3)
    assert list(cache.signatures("op")) == ["c", "a", "d"]


def test_warm_checks_op_names_and_skips_what_it_cannot_replay(one_gpu: Path, two_kernels: Any) -> None:
    import tkreg
    from tkreg.ops import keys, warming

    with pytest.raises(tkreg.UnknownNameError, match="toy_mul"):
        two_kernels.warm(["no_such_op"])
    assert two_kernels.warm("toy_mul") == {}  # nothing remembered yet
    x = torch.randn(4, 6, device=DEVICE)
    key = keys.tensors_key([x])
    assert key is not None
    made = warming.inputs_of(key, False, devices=1)
    assert made is not None and keys.tensors_key(made) == key and not made[0].any()
    elsewhere = (*key[:3], torch.device("cuda", 3), key[4])
    assert warming.inputs_of(elsewhere, False, devices=1) is None  # a GPU this process lacks


def test_a_later_process_calls_a_remembered_peer_that_returns_y_itself_with_nothing_in_between(
    gpu_like: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an earlier process learnt of a y-only peer (it returns y itself) is remembered with
    the signature: a later process's plan calls the peer bound to its parameters, no wrapper."""
    import functools

    import tkreg.ops
    from tests.ops_support import RMS_BACKWARD, RMS_FORWARD, RmsPlugin, rms_peer_y_bare, rms_reference
    from tkreg.ops import keys, remembered

    # the peer (a partial of it, as candidates call it) is measured ten times faster than a kernel
    monkeypatch.setattr(measuring, "_cuda_clock", lambda call, n: (0.001 if isinstance(call, functools.partial) else 0.01) * n)
    rows, w = torch.randn(2, 3, 16, device=DEVICE), torch.randn(16, device=DEVICE)

    def registry() -> Any:
        return registry_with(RmsPlugin(RMS_FORWARD, RMS_BACKWARD, peer_y_only=True, full_peer=True, peer_bare=True))

    try:
        tkreg.ops.install(registry())
        tkreg.ops.toy_rms_norm(rows, w)
        remembered.flush()
        tkreg.ops.install(registry())  # a later process
        torch.testing.assert_close(tkreg.ops.toy_rms_norm(rows, w), rms_reference(rows, w)[0])
        norm = tkreg.ops._installed["dispatchers"]["toy_rms_norm"]
        plan = norm._plans[keys.plan_key([rows, w], norm.params.defaults)]
        assert plan.source == "cache" and not plan.launchers
        assert getattr(plan.returned, "func", None) is rms_peer_y_bare
        y, rstd = torch.ops.tkreg.toy_rms_norm(rows, w)  # every output: the full peer fills rstd
        want_y, want_rstd = rms_reference(rows, w)
        torch.testing.assert_close(y, want_y)
        torch.testing.assert_close(rstd, want_rstd)
    finally:
        tkreg.ops.uninstall()


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_on_a_second_gpu_a_new_bucket_is_timed_and_run_there_while_the_first_is_current(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tkreg.ops

    monkeypatch.setenv(tuning.ENV_CACHE, str(tmp_path))
    monkeypatch.delenv(tuning.ENV_TUNE, raising=False)
    tkreg.ops.install()
    try:
        torch.cuda.set_device(0)
        x = torch.randn(300, 5000, device="cuda:1")
        got = tkreg.ops.sum_row(x)
        torch.cuda.synchronize(1)
        assert torch.cuda.current_device() == 0 and got.device == x.device
        assert_sum_close(got, x)
        assert "timed in this process" in tkreg.ops.explain("sum_row", x)
        for _ in range(3):  # the recorded call, then replays
            assert_sum_close(tkreg.ops.sum_row(x), x)
        # a bucket the sum_row kernel runs: a replay on its own GPU, made current, switches no
        # device; a call from the other GPU switches to it, and runs the plan there again
        rows = torch.randn(37, 1000, device="cuda:1")
        dispatcher = tkreg.ops._installed["dispatchers"]["sum_row"]
        bucket = dispatcher.chooser.bucket([rows], {})
        assert bucket is not None
        dispatcher.chooser.tuner(1)._memory[bucket] = tuning_cache.Choice(
            bucket, "sum_row", "sum_row", {}, {"sum_row": 5.0, PEER: 7.0}, "GPU", tuning.now(), "37x1000")
        for _ in range(3):  # the launcher's call, the recorded one, a replay (from GPU 0)
            assert_sum_close(tkreg.ops.sum_row(rows), rows)
        assert "tkreg.ops.sum_row calls sum_row" in tkreg.ops.explain("sum_row", rows)
        switches: list[Any] = []

        class Switch(torch.cuda.device):  # a class still: torch checks isinstance against it
            def __init__(self, where: Any) -> None:
                switches.append(where)
                super().__init__(where)

        monkeypatch.setattr(torch.cuda, "device", Switch)
        torch.cuda.set_device(1)
        for _ in range(3):
            assert_sum_close(tkreg.ops.sum_row(rows), rows)
        assert switches == []
        plan = dispatcher.planned((rows,), dispatcher.params.defaults)
        replayed = plan.run
        rerun_on: list[int] = []
        plan.run = lambda *inputs: rerun_on.append(torch.cuda.current_device()) or replayed(*inputs)
        torch.cuda.set_device(0)
        assert_sum_close(tkreg.ops.sum_row(rows), rows)
        assert switches == [1] and rerun_on == [1] and torch.cuda.current_device() == 0
    finally:
        torch.cuda.set_device(0)
        tkreg.ops.uninstall()


def test_a_declined_replay_from_another_gpu_runs_the_plan_again_on_its_inputs_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model split across GPUs in one process calls with its layers' inputs on each while one is
    current: a replay (recorded on its inputs' GPU) declines there, and its fallback switches and
    replays, rather than launch through the launcher; one that declines on its own GPU too (a
    launch hook) runs the launcher, once."""
    current = [0]

    class Switch:  # torch.cuda.device, simulated
        def __init__(self, index: int) -> None:
            self.index = index

        def __enter__(self) -> None:
            self.before, current[0] = current[0], self.index

        def __exit__(self, *exc: Any) -> None:
            current[0] = self.before

    monkeypatch.setattr(torch.cuda, "current_device", lambda: current[0])
    monkeypatch.setattr(torch.cuda, "device", Switch)
    ran: list[tuple[str, int]] = []
    plan = PlanLike()
    declined = choosing.replayed_on_device_of(torch.device("cuda", 1), plan,
                                              lambda *inputs: ran.append(("launcher", current[0])) or "launched")  # fmt: skip

    def replay(*inputs: Any) -> Any:  # as a plan's replay: it runs on the GPU it was recorded on only
        if current[0] != 1:
            return declined(*inputs)
        ran.append(("replay", current[0]))
        return "replayed"

    plan.run = replay
    assert plan.run("x") == "replayed" and ran == [("replay", 1)] and current[0] == 0
    current[0] = 1
    assert plan.run("x") == "replayed" and ran == [("replay", 1)] * 2
    plan.run = lambda *inputs: declined(*inputs)  # it declines everywhere
    current[0] = 0
    assert plan.run("x") == "launched" and ran[2:] == [("launcher", 1)] and current[0] == 0


class Capture:
    """A CUDA graph capture, simulated: set ``on`` to begin or end one, as torch.cuda.CUDAGraph's
    capture_begin and capture_end (which tkreg wraps) tell tkreg.ops."""

    def __init__(self) -> None:
        self._on = False

    @property
    def on(self) -> bool:
        return self._on

    @on.setter
    def on(self, value: bool) -> None:
        if value and not self._on:
            tkreg_capturing.before()  # as the wrapped capture_begin calls them
            tkreg_capturing.began()
        elif self._on and not value:
            tkreg_capturing.ended()
        self._on = value


@pytest.fixture
def capture(gpu_like: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Capture]:
    """A simulated capture; the plans' own calls ahead of one allowed, as on a GPU outside one;
    torch.cuda.CUDAGraph left unwrapped."""
    state = Capture()
    monkeypatch.setattr(tkreg_capturing, "_hooked", True)
    monkeypatch.setattr(warming, "may_launch_own_work", lambda: not state.on)
    monkeypatch.setattr(tkreg_capturing, "_capturing_stream", lambda: state.on)  # the caller's stream is captured
    yield state
    state.on = False


def test_a_call_captured_in_a_cuda_graph_runs_the_fastest_replayed_candidate_and_tune_says_so(
    capture: Capture, monkeypatch: pytest.MonkeyPatch, two_kernels: Any
) -> None:
    """The peer launch-bound (host 19.5 us, replayed 4), toy_fast the faster eagerly (host 4,
    replayed 9.5): eager calls run toy_fast, captured ones the peer."""
    monkeypatch.setattr(measuring, "_cuda_clock", ReplayClock(
        {"toy_fast": (0.010, 0.004, 0.0095), "toy_slow": (0.030, 0.005, 0.0295), "peer": (0.020, 0.0195, 0.004)}))
    x, y = torch.randn(64, 64, device=DEVICE), torch.randn(64, 64, device=DEVICE)
    torch.testing.assert_close(two_kernels.toy_mul(x, y), x * y)
    text = two_kernels.explain("toy_mul", x, y)
    assert text.startswith("tkreg.ops.toy_mul calls toy_fast")
    assert "a call captured in a CUDA graph runs peer, the fastest replayed (4.0 us a call against 9.5)" in text
    from tkreg.ops.prefill import _tuned

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    dispatcher = two_kernels._installed["dispatchers"]["toy_mul"]
    said = _tuned("toy_mul", dispatcher, two_kernels.get("toy_mul"), (x, y), {}, "64x64").describe()
    assert said.endswith("(tuning); captured in a CUDA graph: peer 4.0 us a call replayed, 2.38x the eager winner's replay")
    RAN.clear()
    capture.on = True
    torch.testing.assert_close(two_kernels.toy_mul(x, y), x * y)
    assert RAN == []  # the peer ran
    with monkeypatch.context() as elsewhere:  # another thread's stream, not captured, meanwhile
        elsewhere.setattr(tkreg_capturing, "_capturing_stream", lambda: False)
        torch.testing.assert_close(two_kernels.toy_mul(x, y), x * y)
        assert RAN == ["toy_fast"]
    capture.on = False
    torch.testing.assert_close(two_kernels.toy_mul(x, y), x * y)
    assert RAN == ["toy_fast", "toy_fast"]


# (wall, host, replayed) ms per call: the peer the faster eagerly, toy_fast's replay the shorter
PEER_EAGERLY_TOY_FAST_REPLAYED = {"toy_fast": (0.010, 0.003, 0.002), "toy_slow": (0.030, 0.005, 0.0295),
                                  "peer": (0.008, 0.0078, 0.005)}


def test_a_kernel_that_captured_calls_run_makes_its_first_calls_just_before_a_capture_and_in_later_processes(
    capture: Capture, monkeypatch: pytest.MonkeyPatch, two_kernels: Any
) -> None:
    """The peer the faster eagerly, toy_fast's replay the shorter: eager calls never run toy_fast
    (a process that never captures never loads it); just before a capture begins, it makes its
    first calls on zero-filled inputs of the signature (a capture must not be its launcher's first
    call), once; a later process over the cache captures toy_fast too, timing nothing."""
    monkeypatch.setattr(measuring, "_cuda_clock", ReplayClock(PEER_EAGERLY_TOY_FAST_REPLAYED))
    x, y = torch.randn(64, 64, device=DEVICE), torch.randn(64, 64, device=DEVICE)
    torch.testing.assert_close(two_kernels.toy_mul(x, y), x * y)
    assert two_kernels.explain("toy_mul", x, y).startswith("tkreg.ops.toy_mul calls its peer")
    RAN.clear()
    for _ in range(3):
        torch.testing.assert_close(two_kernels.toy_mul(x, y), x * y)
    assert RAN == []
    capture.on = True
    assert RAN == ["toy_fast"] * dispatch.WARM_CALLS
    RAN.clear()
    torch.testing.assert_close(two_kernels.toy_mul(x, y), x * y)
    assert RAN == ["toy_fast"]
    capture.on = False
    capture.on = True  # a second capture: its first calls are not made again
    assert RAN == ["toy_fast"]
    capture.on = False
    import tkreg.ops

    tkreg.ops.uninstall()  # writes the remembered signatures, as a process's exit does
    TIMED.clear()
    RAN.clear()
    fresh = ops_with(toy_kernel("toy_fast", toy_fast, priority=0), toy_kernel("toy_slow", toy_slow, priority=5))
    torch.testing.assert_close(fresh.toy_mul(x, y), x * y)
    assert TIMED == [] and RAN == []
    capture.on = True
    RAN.clear()
    torch.testing.assert_close(fresh.toy_mul(x, y), x * y)
    assert RAN == ["toy_fast"]


def test_a_kernel_that_fails_its_first_calls_ahead_of_a_capture_leaves_captured_calls_to_the_eager_choice(
    capture: Capture, monkeypatch: pytest.MonkeyPatch, two_kernels: Any
) -> None:
    monkeypatch.setattr(measuring, "_cuda_clock", ReplayClock(PEER_EAGERLY_TOY_FAST_REPLAYED))
    x, y = torch.randn(64, 64, device=DEVICE), torch.randn(64, 64, device=DEVICE)
    two_kernels.toy_mul(x, y)
    plan = two_kernels._installed["dispatchers"]["toy_mul"].planned((x, y), ())
    assert plan.graphed is not None

    def broken(*inputs: Any) -> Any:
        raise RuntimeError("an illegal memory access was encountered")

    plan.graphed.run = broken
    capture.on = True
    RAN.clear()
    torch.testing.assert_close(two_kernels.toy_mul(x, y), x * y)
    assert RAN == [] and plan.graphed is None  # the peer, the eager choice


def _rms_clock(peer: tuple[float, float, float], kernel: tuple[float, float, float]) -> Any:
    """(wall, host, replayed) ms per call of the peer (a partial, as candidates call it) and of the kernel."""
    import functools

    class ByKind:
        def __call__(self, call: Any, n: int) -> tuple[float, float]:
            wall, host, _ = peer if isinstance(call, functools.partial) else kernel
            return wall * n, host * n

        def capture(self, call: Any, n: int) -> Any:
            replayed = (peer if isinstance(call, functools.partial) else kernel)[2]
            return lambda: replayed * n

    return ByKind()


def test_captured_calls_of_a_norm_run_a_peer_that_leaves_its_rstd_unwritten_only_where_no_one_reads_it(
    capture: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel the faster eagerly, the peer (which computes y only) the faster replayed: a
    captured call of tkreg.ops (y) runs the peer; one for every output (torch.ops.tkreg), or one
    that wants a gradient (whose backward reads rstd), runs the kernel."""
    import tkreg.ops
    from tests.ops_support import CALLS, RMS_BACKWARD, RMS_FORWARD, RmsPlugin, calls, rms_reference

    monkeypatch.setattr(measuring, "_cuda_clock", _rms_clock(peer=(0.020, 0.0195, 0.004), kernel=(0.010, 0.004, 0.0095)))
    x, w = torch.randn(2, 3, 16, device=DEVICE), torch.randn(16, device=DEVICE)
    try:
        tkreg.ops.install(registry_with(RmsPlugin(RMS_FORWARD, RMS_BACKWARD, peer_y_only=True)))
        tkreg.ops.toy_rms_norm(x, w)
        assert "a captured call for every output (one that wants a gradient, torch.ops.tkreg) runs rms_torch" in (
            tkreg.ops.explain("toy_rms_norm", x, w))
        capture.on = True  # the peer's first calls, ahead of the capture
        CALLS.clear()
        torch.testing.assert_close(tkreg.ops.toy_rms_norm(x, w), rms_reference(x, w)[0])
        assert len(calls("rms_peer")) == 1 and not calls("rms_torch")
        _, rstd = torch.ops.tkreg.toy_rms_norm(x, w)
        assert len(calls("rms_torch")) == 1
        torch.testing.assert_close(rstd.double(), rms_reference(x.double(), w.double())[1], atol=1e-6, rtol=1e-6)
        _gradients_as_torchs(tkreg.ops.toy_rms_norm, x, w)  # the way training was timed the faster, whole
    finally:
        tkreg.ops.uninstall()


def test_a_captured_call_that_wants_a_gradient_makes_the_peers_own_call_where_that_is_the_eager_choice(
    capture: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The peer the faster eagerly, the kernel the faster replayed: a captured call that wants a
    gradient still makes the peer's own call (a kernel's would record no backward)."""
    import tkreg.ops
    from tests.ops_support import CALLS, RMS_BACKWARD, RMS_FORWARD, RmsPlugin, calls

    monkeypatch.setattr(measuring, "_cuda_clock", _rms_clock(peer=(0.008, 0.0078, 0.005), kernel=(0.010, 0.003, 0.002)))
    x, w = torch.randn(2, 3, 16, device=DEVICE), torch.randn(16, device=DEVICE)
    try:
        tkreg.ops.install(registry_with(RmsPlugin(RMS_FORWARD, RMS_BACKWARD)))
        tkreg.ops.toy_rms_norm(x, w)
        assert tkreg.ops.explain("toy_rms_norm", x, w).startswith("tkreg.ops.toy_rms_norm calls its peer")
        CALLS.clear()
        capture.on = True
        assert len(calls("rms_torch")) == dispatch.WARM_CALLS  # the kernel's first calls, ahead of the capture
        CALLS.clear()
        tkreg.ops.toy_rms_norm(x, w)
        assert len(calls("rms_torch")) == 1  # no gradient wanted: the kernel
        _gradients_as_torchs(tkreg.ops.toy_rms_norm, x, w)
        assert len(calls("rms_torch")) == 1 and not calls("rms_backward_torch")  # torch's own backward
    finally:
        tkreg.ops.uninstall()


def _gradients_as_torchs(rms_norm: Any, x: Any, w: Any) -> None:
    """rms_norm's gradients of x and w, against float64 autograd through the reference."""
    from tests.ops_support import rms_reference

    xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
    y = rms_norm(xs, ws)
    assert y.grad_fn is not None
    upstream = torch.randn_like(y)
    y.backward(upstream)
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    rms_reference(x64, w64)[0].backward(upstream.double())
    torch.testing.assert_close(xs.grad.double(), x64.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ws.grad.double(), w64.grad, atol=1e-4, rtol=1e-4)


class PlanLike:
    """What tkreg.ops.capturing switches: a plan's run and returned, and its graphed plan's."""

    def __init__(self, graphed: Any = None) -> None:
        self.graphed, self.run, self.returned = graphed, None, None
        self.graphed_returned_only, self.eager_calls = False, None


def test_tkreg_learns_of_captures_from_torch_cuda_graphs_own_begin_and_end(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    events: list[Any] = []
    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_begin",
                        lambda self, *a, **k: events.append(("begin", tkreg_capturing.capturing())))

    def failing_end(self: Any) -> None:
        events.append("end")
        raise RuntimeError("the capture was invalidated")

    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_end", failing_end)
    monkeypatch.setattr(tkreg_capturing, "_hooked", False)
    stream_captured = [True]  # whether the caller's stream is the one captured
    monkeypatch.setattr(tkreg_capturing, "_capturing_stream", lambda: stream_captured[0])
    graphed = PlanLike()
    graphed.run = graphed.returned = lambda *inputs: "graphed"
    plan = PlanLike(graphed)
    made = id(plan)
    tkreg_capturing.track(plan, lambda *inputs: "eager run", lambda *inputs: "eager",
                          lambda warmed: events.append(("warm", id(warmed) == made)) or True)  # fmt: skip
    assert (plan.run(), plan.returned()) == ("eager run", "eager") and events == []
    torch.cuda.CUDAGraph.capture_begin(None)  # as torch.cuda.graph's __enter__ calls it
    # the graphed plan's first calls, then the capture, then the switch
    assert events == [("warm", True), ("begin", False)] and tkreg_capturing.capturing()
    assert (plan.run(), plan.returned()) == ("graphed", "graphed")
    stream_captured[0] = False  # another thread's eager call meanwhile keeps the plan's own
    assert (plan.run(), plan.returned()) == ("eager run", "eager")
    stream_captured[0] = True
    graphed.returned = lambda *inputs: "graphed, replayed"  # its first calls replace its own: read at each call
    assert plan.returned() == "graphed, replayed"
    with pytest.raises(RuntimeError, match="invalidated"):
        torch.cuda.CUDAGraph.capture_end(None)
    assert events[-1] == "end"
    assert not tkreg_capturing.capturing() and plan.returned() == "eager"  # a failed capture ends too
    key = id(plan)
    del plan
    gc.collect()
    assert key not in tkreg_capturing._plans


@pytest.mark.skipif(not torch.cuda.is_available(), reason="captures a CUDA graph")
def test_on_a_gpu_a_captured_call_replays_the_kernel_its_bucket_chose_for_graphs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bucket whose eager choice is the peer and whose choice for captured calls is the sum_row
    kernel (as tuning makes one where torch's call is launch-bound): eager calls run torch, the
    captured call the kernel, whose replay sums the inputs the graph reads."""
    import tkreg.ops

    monkeypatch.setenv(tuning.ENV_CACHE, str(tmp_path))
    monkeypatch.setenv(tuning.ENV_TUNE, "0")
    tkreg.ops.install()
    try:
        x = torch.randn(37, 1000, device="cuda")
        dispatcher = tkreg.ops._installed["dispatchers"]["sum_row"]
        bucket = dispatcher.chooser.bucket([x], {})
        assert bucket is not None
        dispatcher.chooser.tuner(x.device.index)._memory[bucket] = tuning_cache.Choice(
            bucket, PEER, None, {}, {PEER: 6.0, "sum_row": 7.0}, "GPU", tuning.now(), "37x1000",
            replayed_us={PEER: 3.0, "sum_row": 1.5}, graphed="sum_row", graphed_kernel="sum_row")  # fmt: skip
        assert_sum_close(tkreg.ops.sum_row(x), x)
        assert "a call captured in a CUDA graph runs sum_row" in tkreg.ops.explain("sum_row", x)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            tkreg.ops.sum_row(x)
        torch.cuda.current_stream().wait_stream(side)
        plan = dispatcher.planned((x,), dispatcher.params.defaults)
        assert plan.graphed is not None and plan.graphed.launchers[0][0] == "sum_row" and not plan.launchers
        assert id(plan) in tkreg_capturing._pending  # the kernel's first calls wait for a capture
        first = torch.cuda.CUDAGraph()
        with torch.cuda.graph(first):
            first_out = tkreg.ops.sum_row(x)
        assert id(plan) not in tkreg_capturing._pending and plan.graphed is not None  # made, and they worked
        first.replay()
        torch.cuda.synchronize()
        assert_sum_close(first_out, x)
        # the first calls replaced the graphed plan's calls with their recorded replay: spy on that one
        graphed_calls: list[int] = []
        replay = plan.graphed.returned
        plan.graphed.returned = lambda *inputs: graphed_calls.append(1) or replay(*inputs)
        graph = torch.cuda.CUDAGraph()
        elsewhere: list[torch.Tensor] = []

        def eager_call_on_another_thread() -> None:
            with torch.cuda.stream(torch.cuda.Stream()):
                elsewhere.append(tkreg.ops.sum_row(x))
                torch.cuda.current_stream().synchronize()

        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            out = tkreg.ops.sum_row(x)
            other = threading.Thread(target=eager_call_on_another_thread)  # while the capture is in progress
            other.start()
            other.join()
        assert graphed_calls == [1]  # the other thread's call ran the eager choice
        assert len(elsewhere) == 1
        assert_sum_close(elsewhere[0], x)
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        assert_sum_close(out, x)
        tkreg.ops.sum_row(x)  # eager again: the peer
        assert graphed_calls == [1]
    finally:
        tkreg.ops.uninstall()
