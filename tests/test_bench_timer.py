"""The timer suite's verdicts and its own reading of a CUPTI trace, on made-up figures (the suite
itself runs on a GPU: `tkreg bench timer`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tkreg.bench import timer


def row(name: str, bound: str, ours: float, cupti: float) -> dict[str, Any]:
    return {"workload": name, "bound": bound, "tkreg_ms": ours, "cupti_ms": cupti, "source": "CUPTI"}


def test_each_bound_is_judged_with_its_own_tolerance() -> None:
    rows = [
        row("cuBLAS", "compute", 0.840, 0.851),  # -1.3%: within 3%
        row("cuBLAS", "compute", 0.830, 0.851),
        row("held-like", "compute", 0.718, 0.851),  # a hold before every repetition read it 16% fast
        row("add 16384^2", "memory", 1.0594, 1.0562),  # +0.3%
        row("sum 16384^2", "memory", 0.3600, 0.3527),  # +2.1%
        row("add_tma 1024^2", "memory", 0.0100, 0.0068),  # short: 3.2 us over
        row("add_tma 1024^2 do_bench-like", "memory", 0.0873, 0.0068),  # a launcher's host time counted
    ]
    checks = timer.check(rows)
    verdicts = {detail.split(":")[0]: ok for _, ok, detail in checks}
    assert verdicts == {
        "cuBLAS": True,
        "held-like": False,
        "add 16384^2": True,
        "sum 16384^2": False,
        "add_tma 1024^2": True,
        "add_tma 1024^2 do_bench-like": False,
    }
    summary = timer.per_bound(checks)
    assert [line.split(" (")[0] for line in summary] == [
        "FAIL compute-bound: tkreg within 3% of CUPTI",
        "FAIL memory-bound: tkreg within 0.5% of CUPTI",
        "FAIL short kernels: tkreg within 5 us of CUPTI",
    ]
    assert "held-like" in summary[0] and "cuBLAS" not in summary[0]


def test_host_time_after_cupti_traces_must_stay_what_it_was() -> None:
    costs = {"workload": "add 1024x1024", "host_us_before_cupti": 11.6}
    assert timer.host_check({**costs, "host_us_after_cupti": 13.5})[1]  # within 10% and 1 us
    _, ok, detail = timer.host_check({**costs, "host_us_after_cupti": 20.2})  # CUPTI left attached
    assert not ok and "11.60 us before, 20.20 us after" in detail
    # the host itself got slower: a CPU-only control call slowed as much, so the launcher did not
    drifted = {**costs, "host_us_after_cupti": 17.4, "control_us_before_cupti": 1.0, "control_us_after_cupti": 1.5}
    _, ok, detail = timer.host_check(drifted)
    assert ok and "control call: 1.00 us before, 1.50 us after" in detail
    assert not timer.host_check({**drifted, "control_us_after_cupti": 1.05})[1]  # the host held its pace: CUPTI it is


@dataclass
class Range:
    start: float  # us, as torch.profiler's FunctionEvent has them
    end: float

    def elapsed_us(self) -> float:
        return self.end - self.start


@dataclass
class Event:
    name: str
    time_range: Range
    device_type: Any


class Profile:
    def __init__(self, events: list[Event]) -> None:
        self._events = events

    def events(self) -> list[Event]:
        return self._events


def test_the_suite_splits_the_trace_at_each_flush_and_sums_each_calls_kernels() -> None:
    torch = pytest.importorskip("torch")
    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    flush = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>>"
    spans = [("warm-up call", 0, 5), (flush, 10, 20), ("memset", 21, 22), ("gemm", 24, 30), (flush, 40, 50),
             ("memset", 51, 52), ("gemm", 55, 60)]  # fmt: skip
    events = [Event(name, Range(a, b), cuda) for name, a, b in spans] + [Event("cudaLaunchKernel", Range(0, 1), cpu)]
    reading = timer.read_trace(Profile(events[::-1]), reps=2)  # any order: sorted by start
    assert reading.per_call_ms == pytest.approx([0.007, 0.006])  # memset + gemm durations
    assert reading.span_ms == pytest.approx([0.009, 0.009])  # first start to last end, the gap included
    assert timer.read_trace(Profile(events), reps=3).per_call_ms == []  # fewer calls than repetitions: no figure


def test_the_workloads_are_the_cases_each_op_puts_in_its_timer_set() -> None:
    """No op is named in the suites: the timer, ranking and linear suites read what plugins declare."""
    import tkreg
    from tkreg import Op, case, default_registry
    from tkreg.bench import linear, ranking
    from tkreg.core.registry import PluginInfo, Registry
    from tkreg.core.tolerances import EXACT

    def op(name: str, cases: tuple[Any, ...], contract: Any = None) -> Op:
        extra = {"contract": contract} if contract is not None else {}
        return Op(name=name, reference=lambda *a: a[0], make_inputs=lambda *a: (), make_output=lambda *a: None,
                  cases=cases, dtypes=("float32", "bfloat16"), bench_dtypes=("bfloat16", "float32"),
                  tolerances={"float32": EXACT["float32"], "bfloat16": EXACT["bfloat16"]}, cost=lambda *a: None, **extra)

    registry, toys = Registry(), PluginInfo("toys")
    registry.add(op("toy", (case(M=8, N=8), case(M=4096, N=4096, sets=("bench", "timer")),
                               case(M=64, N=64, sets=("ranking",), variant="strided"))), toys)
    registry.add(op("toy_linear", (case(M=2, N=4, K=8),
                                      case(M=16, N=32, K=64, sets=("bench",), variant="weight"),
                                      case(M=16, N=32, K=64, sets=("bench",))), tkreg.contracts.linear()), toys)
    assert [s.label for s in timer.signatures(registry)] == [timer.Signature.of("toy", {"M": 4096, "N": 4096}, "bfloat16").label]
    ranked = {(s.op, tuple(v for _, v in s.dims), s.variant) for s in ranking.signatures(registry)}
    assert ("toy", (64, 64), "strided") in ranked and ("toy", (8, 8), "") not in ranked
    assert ("toy_linear", (16, 32, 64), "") in ranked and ("toy_linear", (16, 32, 64), "weight") not in ranked
    covered = {(s.op, tuple(v for _, v in s.dims), s.variant) for s in linear.signatures(registry)}
    assert {o for o, _, _ in covered} == {"toy_linear"}
    assert {("toy_linear", (64, 32, 64), "weight"), ("toy_linear", (64, 32, 64), "")} <= covered  # M = 64 in both layouts
    installed = default_registry()  # the built-in plugins declare theirs
    assert {s.op for s in timer.signatures(installed)} >= {"add", "sum_row", "matmul"}


def test_the_linear_suite_names_a_given_optional_input_in_the_layout() -> None:
    """A call with a bias gets rows of its own beside the same shape without."""
    torch = pytest.importorskip("torch")
    from tkreg import default_registry
    from tkreg.bench import linear

    matmul = default_registry().op("matmul")
    a, w, bias = torch.zeros(4, 8), torch.zeros(6, 8), torch.zeros(6)
    assert linear.layout_of(matmul, (a, w.t(), None)) == "nk"
    assert linear.layout_of(matmul, (a, w.t(), bias)) == "nk+bias"
    assert linear.layout_of(matmul, (a, w.t().contiguous(), bias)) == "kn+bias"
    assert linear.layout_of(matmul, (a, w.t().contiguous())) == "kn"


def test_suites_call_tkreg_ops_as_a_model_does_leaving_trailing_none_out() -> None:
    torch = pytest.importorskip("torch")
    from tkreg import default_registry
    from tkreg.bench.calls import as_called

    registry = default_registry()
    matmul, layer_norm = registry.op("matmul"), registry.op("layer_norm")
    a, b, x, w = torch.zeros(2, 2), torch.zeros(2, 2), torch.zeros(3, 4), torch.zeros(4)
    assert as_called(matmul, (a, b, None)) == (a, b)  # F.linear(x, w): no bias
    assert len(as_called(matmul, (a, b, w[:2]))) == 3
    assert as_called(layer_norm, (x, None, None)) == (x,)
    assert as_called(layer_norm, (x, None, w)) == (x, None, w)  # None before a given input stays
