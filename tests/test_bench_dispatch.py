"""The dispatch suite's shapes nobody chose: drawn at run time from a recorded seed, across the
sizes each op's contract names, within the memory bound, in the op's benchmark dtypes and layouts;
its comparison of Inductor's generated code (the ``call`` a compiled module runs); and the warm
calls a cold process's first calls are compared with."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

import tkreg
from tkreg.bench.calls import Signature
from tkreg.bench.dispatch import cold, picks, shapes, workloads


def test_random_shapes_follow_each_contract_and_repeat_for_a_seed() -> None:
    registry = tkreg.default_registry()
    for op in registry.ops():
        if op.contract.kind == "plain" or not op.cases_in("bench"):
            continue
        first = shapes.unseen(op, random.Random(7))
        assert first == shapes.unseen(op, random.Random(7))  # the seed in the record reproduces them
        assert len(first) == shapes.SHAPES_PER_OP.get(op.contract.kind, shapes.DEFAULT_SHAPES)
        variants = {c.variant for c in op.cases_in("bench")} | {""}
        for sig in first:
            dims = dict(sig.dims)
            assert tuple(dims) == (op.contract.dims or tuple(op.cases_in("bench")[0].dims))
            assert max(shapes._elements(op.contract.kind, dims)) <= shapes.MAX_ELEMENTS
            assert sig.dtype in op.bench_dtypes and sig.variant in variants
            if op.contract.kind == "linear":
                assert dims["N"] % 64 == 0 and dims["K"] % 64 == 0 and 1 <= dims["M"] <= 8192


def test_a_sibling_shape_stays_in_its_bucket_and_changes_where_a_size_can() -> None:
    from tkreg.ops.tuning import bucket_size

    registry = tkreg.default_registry()
    rng = random.Random(3)
    for op in registry.ops():
        if op.contract.kind == "plain" or not op.cases_in("bench"):
            continue
        for sig in shapes.unseen(op, rng):
            other = shapes.sibling(sig, op.contract.kind, rng)
            dims = dict(sig.dims)
            steps = [64 if op.contract.kind == "linear" and name != "M" else 8 for name in dims]
            if all(_sizes_like(n, step) == 1 for n, step in zip(dims.values(), steps)):
                assert other is None  # no other size of its bucket keeps its remainder
                continue
            assert other is not None and other != sig and (other.dtype, other.variant) == (sig.dtype, sig.variant)
            drawn = dict(other.dims)
            assert [bucket_size(n) for n in drawn.values()] == [bucket_size(n) for n in dims.values()]
            assert [n % step for n, step in zip(drawn.values(), steps)] == [n % step for n, step in zip(dims.values(), steps)]
            assert max(shapes._elements(op.contract.kind, drawn)) <= shapes.MAX_ELEMENTS
            if op.contract.kind == "linear":
                assert drawn["N"] % 64 == 0 and drawn["K"] % 64 == 0
    linear = Signature.of("matmul", {"M": 100, "N": 4096, "K": 4096}, "bfloat16")
    for i in range(20):
        odd = dict(shapes.sibling(linear, "linear", random.Random(i), odd_width=True).dims)  # type: ignore[union-attr]
        assert odd["N"] % 2 == 1 and 3072 < odd["N"] <= 4096 and odd["K"] % 64 == 0 and 96 < odd["M"] <= 128
    tiny = Signature.of("add", {"M": 3, "N": 8}, "float32")
    assert shapes.sibling(tiny, "rows", rng) is None  # every size exact: a bucket of one shape
    assert {shapes.within_bucket(100, random.Random(i)) for i in range(200)} == {100, 108, 116, 124}  # 96 < n <= 128
    assert {shapes.within_bucket(3008, random.Random(i), 64) for i in range(200)} == set(range(2112, 3073, 64))


def _sizes_like(n: int, step: int) -> int:
    """How many sizes of n's bucket share its remainder modulo ``step``."""
    from tkreg.ops.tuning import bucket_floor, bucket_size

    top = bucket_size(n)
    return 1 if top <= 8 else sum(1 for m in range(bucket_floor(n) + 1, top + 1) if m % step == n % step)


def test_sibling_rows_count_where_their_bucket_was_timed_by_another_shape() -> None:
    def sibling(ratio: float, **extra: object) -> dict[str, object]:
        return {"check": "bucket", "ratio": ratio, "pass": ratio >= 0.95, "choice_pass": ratio >= 0.9,
                "same_bucket": True, "timing_calls": 0, **extra}  # fmt: skip

    own = sibling(0.99, same_bucket=False, own_bucket=True, timing_calls=1)  # the winner refused it: timed apart
    rows = [sibling(1.0), sibling(0.81), sibling(0.5, timing_calls=2), own]
    got = picks.summary(rows)
    assert (got["bucket_siblings"], got["bucket_siblings_untimed"], got["bucket_siblings_within"]) == (4, 2, 1)
    assert (got["bucket_choices_within"], got["bucket_geomean"]) == (1, 0.9)
    assert (got["bucket_siblings_own"], got["bucket_own_within"]) == (1, 1)
    assert "bucket_siblings" not in picks.summary([{"check": "pick", "ratio": 1.0}])


def test_explains_account_of_a_measured_choice_gives_its_bucket_and_shape() -> None:
    from tkreg.ops.tuning_cache import Choice

    choice = Choice(bucket="M<=12,N<=4096|bfloat16|a row, b col|align=aa", winner="k", kernel="k", config={},
                    times_us={"k": 1.0, "peer": 2.0}, device="NVIDIA H200", measured_at="2026-12-03T10:00:00Z",
                    shape="9x4000; 4000x4096", source="cache")  # fmt: skip
    found = picks._MEASURED.search(f"calls k: {choice.describe()}. Launches: replayed")
    assert found is not None and found["bucket"] == choice.bucket and found["shape"] == choice.shape


def test_timing_calls_count_the_tuners_timings_until_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    from tkreg.ops import tuning

    monkeypatch.setattr(tuning, "measure", lambda *args, **kwargs: "timed")
    counted = picks.TimingCalls().start()
    assert tuning.measure(1) == "timed" and tuning.measure(2) == "timed" and counted.n == 2
    counted.stop()
    tuning.measure(3)
    assert counted.n == 2 and tuning.measure(4) == "timed"


MODULE = '''
import torch
async_compile = None  # {kernel}


class Runner:
    def call(self, args):
        arg0_1, = args
        # Topologically Sorted Source Nodes: [{source}]
        buf0 = empty_strided_cuda((16, 16), (16, 1), torch.bfloat16)
        extern_kernels.mm(arg0_1, arg0_1, out=buf0)

        return (buf0, )

runner = Runner()
'''


def test_the_same_calls_compare_equal_whatever_their_comments_and_kernel_sources() -> None:
    ours = MODULE.format(kernel="one", source="t, got")
    theirs = MODULE.format(kernel="two", source="t_2, mm")
    assert workloads._wrapper_calls([ours]) == workloads._wrapper_calls([theirs])
    assert workloads._wrapper_calls([ours])[0].splitlines()[-1].strip() == "return (buf0, )"


def test_another_call_compares_unequal_and_a_module_without_one_gives_nothing() -> None:
    ours = MODULE.format(kernel="one", source="a")
    theirs = ours.replace("extern_kernels.mm(arg0_1, arg0_1", "torch.ops.tkreg_dispatch.matmul.default(arg0_1, arg0_1")
    assert workloads._wrapper_calls([ours]) != workloads._wrapper_calls([theirs])
    assert workloads._wrapper_calls(["x = 1\n"]) == []


def test_a_warm_call_after_the_same_work_is_timed_right_after_the_other_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison for a first call: the median of three calls, each right after ten of the
    calls the first call came after, a call costing more right after another's (as a host's cold
    caches make it)."""
    import torch

    clock, log = [0.0], []
    costs = iter([90.0, 70.0, 80.0])  # the timed call's three rounds, each after the other's calls

    def called(name: str) -> Callable[[], None]:
        def call() -> None:
            switched = log and log[-1] != name
            clock[0] += (next(costs) if switched and name == "tkreg" else 20.0) * 1e-6
            log.append(name)

        return call

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(cold.time, "perf_counter", lambda: clock[0])
    assert cold._timed_after(called("tkreg"), called("previous")) == pytest.approx(80.0)
    assert log == (["previous"] * 10 + ["tkreg"]) * 3


def test_a_pick_row_holds_the_fastest_against_tkreg_ops_with_the_spread_by_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """pick_against_best times tkreg.ops beside every candidate (here faked): the row's ratio is
    the fastest other's time over tkreg.ops', its quartiles come from the same two calls round by
    round, and the choice's own ratio from the candidate tkreg.ops chose."""
    import torch

    import tkreg.ops
    from tkreg.ops import measuring

    registry = tkreg.default_registry()
    op = registry.op("add")
    monkeypatch.setattr(picks, "make_inputs", lambda registry, sig, seed: ("x", "y"))
    monkeypatch.setattr(tkreg.ops, "get", lambda name: lambda *inputs: None)
    monkeypatch.setattr(tkreg.ops, "explain", lambda name, *inputs: "tkreg.ops.add runs k.")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(picks, "_candidates", lambda registry, op, inputs: {"k": lambda: None, "peer": lambda: None})
    monkeypatch.setattr(picks, "chosen_labels", lambda name, inputs: ("k", "k"))
    monkeypatch.setattr(picks, "_replayed_against_best", lambda calls, eager, captured: {})
    rounds = {"tkreg.ops": [10.0, 10.0, 10.0, 10.0, 10.0], "k": [9.0, 9.5, 9.4, 12.0, 9.6], "peer": [20.0] * 5}

    def fake_measure(calls: dict, budget: float, sits_again: tuple = (), per_round: dict | None = None) -> dict:
        assert set(calls) == {"tkreg.ops", "k", "peer"} and sits_again == ("tkreg.ops",)
        if per_round is not None:
            per_round.update(rounds)
        return {"tkreg.ops": 10.0, "k": 9.5, "peer": 20.0}

    monkeypatch.setattr(measuring, "measure", fake_measure)
    row = picks.pick_against_best(registry, op, Signature.of("add", {"M": 4, "N": 4}, "float32", ""))
    assert (row["best"], row["ratio"], row["pass"], row["chosen"]) == ("k", 0.95, True, "k")
    assert row["ratio_quartiles"] == picks.round_quartiles(rounds["k"], rounds["tkreg.ops"])
    assert row["ratio_quartiles"][0] < row["ratio"] < row["ratio_quartiles"][1]
    assert row["choice_ratio"] == 1.0 and row["timing_calls"] == 0


def test_the_summaries_count_picks_and_first_calls_from_the_rows() -> None:
    rows = [
        {"check": "pick", "ratio": 1.0, "pass": True, "choice_pass": True, "graph_ratio": 0.9, "graph_pass": False},
        {"check": "pick", "ratio": 0.81, "pass": False, "choice_pass": True},
        {"check": "cold", "warmed": False, "first_us": 30.0, "warm_us": 10.0, "timing_calls": 0, "preload": {"signatures": 2},
         "warm_after_same_work_us": 20.0, "torch_first_us": 15.0, "torch_warm_us": 10.0, "torch_at_same_point_us": 25.0,
         "torch_after_tkreg_at_same_point_us": 15.0, "device_allocs": 0},
        {"check": "cold", "warmed": False, "first_us": 12.0, "warm_us": 10.0, "timing_calls": 1, "warm_over_2x": 1,
         "warm_calls": 10, "torch_first_us": 25.0, "torch_warm_us": 10.0, "torch_at_same_point_us": 18.0, "device_allocs": 2},
        {"check": "cold", "warmed": True, "first_us": 11.0, "warm_us": 10.0, "timing_calls": 0},
    ]  # fmt: skip
    got = picks.summary(rows)
    assert (got["picks"], got["picks_within"], got["choices_within"], got["graph_picks_within"]) == (2, 1, 2, 0)
    assert got["pick_geomean"] == 0.9
    got = cold.summary(rows)
    assert (got["cold_calls"], got["cold_within_2x"], got["cold_timing_calls"]) == (2, 1, 1)
    assert got["cold_within_2x_after_same_work"] == 1 and got["cold_torch_within_2x"] == 1
    assert got["cold_preload"] == {"signatures": 2} and got["cold_first_over_warm_median"] == 2.1
    assert (got["cold_warmed_calls"], got["cold_warmed_within_2x"]) == (1, 1) and "cold_warmed_preload" not in got
    assert (got["cold_warm_samples_over_2x"], got["cold_warm_samples"]) == (1, 10) and "cold_warmed_warm_samples" not in got
    # torch's own call at the same point: over 2x its warm call on the one shape whose first call missed
    assert (got["cold_torch_at_same_point_calls"], got["cold_torch_at_same_point_within_2x"]) == (2, 1)
    assert (got["cold_misses_at_same_point"], got["cold_misses_torch_at_same_point_also_over_2x"]) == (1, 1)
    assert got["cold_first_calls_allocating"] == 1 and "cold_warmed_torch_at_same_point_calls" not in got
    # after tkreg.ops' calls: timed on the one shape, whose first call missed while torch's did not
    assert (got["cold_torch_after_tkreg_at_same_point_calls"], got["cold_torch_after_tkreg_at_same_point_within_2x"]) == (1, 1)
    assert got["cold_misses_after_tkreg_at_same_point"] == 1
    assert got["cold_misses_torch_after_tkreg_at_same_point_also_over_2x"] == 0
    assert picks.summary([])["pick_share"] is None and cold.summary([]) == {}


def test_a_cold_process_makes_every_peer_first_call_before_tkreg_first_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's own first calls come in a pass of their own, so each tkreg first call follows the
    previous shape's warm calls, not torch's first call of its own shape; each same-work call
    follows the calls its first call followed."""
    import json

    made: list[str] = []

    def first_and_warm(call: Callable[[], object]) -> cold._Timed:
        made.append(getattr(call, "side", "tkreg"))
        return cold._Timed(30.0, 10.0, 0, 12.0, 5.0)

    def peer_call(op: object, inputs: object, out: object) -> Callable[[], None]:
        def call() -> None:
            pass

        call.side = "peer"  # type: ignore[attr-defined]
        return call

    after: list[tuple[str, str]] = []

    def timed_after(timed: Callable[[], object], before: Callable[[], object]) -> float:
        after.append((getattr(timed, "side", "tkreg"), getattr(before, "side", "tkreg")))
        return 20.0

    monkeypatch.setattr(cold, "_first_and_warm", first_and_warm)
    monkeypatch.setattr(cold, "peer_call", peer_call)
    monkeypatch.setattr(cold, "_timed_after", timed_after)
    work: list[str] = []  # what each first call comes right after: the previous shape's calls
    monkeypatch.setattr(cold, "_model_work", lambda previous: work.append(getattr(previous, "side", "tkreg")))
    monkeypatch.setattr(cold, "make_inputs", lambda registry, sig, seed: ())
    monkeypatch.setattr(cold, "_source", lambda op, inputs: "from the tuning cache")
    monkeypatch.setattr(cold, "chosen_labels", lambda op, inputs: ["peer"])
    from tkreg.ops import tuning

    monkeypatch.setattr(tuning, "measure", tuning.measure)  # cold_calls counts through it: restored after
    payload = json.dumps([["add", [["M", 4], ["N", 4]], "float32", ""], ["add", [["M", 8], ["N", 8]], "float32", ""],
                          ["sum_row", [["M", 4], ["N", 4]], "float32", ""]])  # fmt: skip
    rows = cold.cold_calls(payload)
    assert made == ["peer"] * 3 + ["tkreg"] * 3
    assert work == ["peer"] * 2 + ["tkreg"] * 2  # every first call but each pass's first
    assert after == [("tkreg", "tkreg"), ("peer", "peer")] * 2  # the second and third shapes: after the one before
    assert [r["shape"] for r in rows] == ["4x4", "8x8", "4x4"] and all(r["peers_first"] and r["inputs_first"] for r in rows)
    assert "warm_after_same_work_us" not in rows[0] and rows[1]["warm_after_same_work_us"] == 20.0
    assert rows[2]["torch_warm_after_same_work_us"] == 20.0 and rows[0]["first_us"] == 30.0
    assert all(r["device_allocs"] == 0 for r in rows) and not any("torch_here_us" in r for r in rows)
    assert rows[0]["first_host_us"] == 12.0 and rows[0]["warm_host_us"] == 5.0 and rows[0]["torch_warm_host_us"] == 5.0

    # torch's own call of each shape right before tkreg's first call, and nothing timed after
    made.clear()
    after.clear()
    work.clear()
    once: list[str] = []
    monkeypatch.setattr(cold, "_split", lambda call: once.append(made[-1] if made else "") or (40.0, 15.0))
    monkeypatch.setattr(cold, "_model_work", lambda previous: once.append("after " + getattr(previous, "side", "tkreg")))
    here = cold.cold_calls(payload, torch_here=True)
    # torch's call of each shape after torch's calls of the previous shape, right before tkreg's first call
    assert made == ["peer"] * 3 + ["tkreg"] * 3 and after == []
    assert once == ["after peer", "after peer", "peer", "after peer", "tkreg", "after peer", "tkreg"]
    assert [r["torch_here_after"] for r in here] == [None, "peer", "peer"]
    assert [r["torch_here_us"] for r in here] == [40.0] * 3 and not any("source" in r for r in here)
    assert [r["torch_here_host_us"] for r in here] == [15.0] * 3

    # and in the fourth process, torch's call after tkreg.ops' calls of the previous shape
    made.clear()
    once.clear()
    here = cold.cold_calls(payload, torch_here=True, torch_after_tkreg=True)
    assert once == ["after peer", "after peer", "peer", "after tkreg", "tkreg", "after tkreg", "tkreg"]
    assert [r["torch_here_after"] for r in here] == [None, "tkreg", "tkreg"]


def test_torch_at_the_same_point_joins_the_rows_of_the_same_shapes_only() -> None:
    rows = [{"op": "add", "shape": "4x4", "dtype": "float32", "variant": ""},
            {"op": "add", "shape": "8x8", "dtype": "float32", "variant": ""}]  # fmt: skip
    here = [{**rows[0], "torch_here_us": 31.0, "torch_here_host_us": 12.0, "first_us": 25.0, "warm_us": 20.0,
             "torch_here_after": "peer"},
            {**rows[1], "shape": "9x9", "torch_here_us": 5.0, "first_us": 9.0}]  # fmt: skip
    cold.same_point(rows, here)
    assert rows[0]["torch_at_same_point_us"] == 31.0 and rows[0]["torch_at_same_point_host_us"] == 12.0
    assert rows[0]["torch_at_same_point_after"] == "peer"
    assert rows[0]["first_after_torch_at_same_point_us"] == 25.0 and rows[0]["warm_in_same_point_process_us"] == 20.0
    assert not any(key.endswith("same_point_us") or "same_point_process" in key for key in rows[1])
    # the process whose torch call followed tkreg.ops' calls gives that call alone, under its own key
    after = [{**rows[0], "torch_here_us": 77.0, "torch_here_host_us": 60.0, "first_us": 1.0, "torch_here_after": "tkreg"}]
    cold.same_point(rows, after, after_tkreg=True)
    assert rows[0]["torch_after_tkreg_at_same_point_us"] == 77.0 and rows[0]["torch_after_tkreg_at_same_point_host_us"] == 60.0
    assert rows[0]["torch_at_same_point_us"] == 31.0 and rows[0]["first_after_torch_at_same_point_us"] == 25.0


def test_a_cold_process_left_no_time_says_so_in_the_rows() -> None:
    from tkreg.bench.calls import Signature

    sig = Signature.of("add", {"M": 4, "N": 4}, "float32", "")
    rows = cold.cold_process([sig], 0.0)
    assert [r["warmed"] for r in rows] == [False, True] and all("too little left" in r["error"] for r in rows)
    assert cold.cold_process([], 30.0) == []


def test_a_cold_process_that_fails_or_runs_late_says_so_and_the_rest_keep_their_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    import subprocess

    from tkreg.bench.calls import Signature
    from tkreg.ops import remembered

    row = {"check": "cold", "op": "add", "shape": "4x4", "dtype": "float32", "variant": "", "first_us": 30.0, "warm_us": 20.0}

    def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        code = command[2]
        if "torch_after_tkreg=True" in code:  # the fourth process: its torch calls still join the rows
            return subprocess.CompletedProcess(command, 0, json.dumps([{**row, "torch_here_us": 50.0}]) + "\n", "")
        if "torch_here=True" in code:
            raise subprocess.TimeoutExpired(command, 1.0)
        if "warmed=True" in code:
            return subprocess.CompletedProcess(command, 1, "", "Traceback: boom\n")
        return subprocess.CompletedProcess(command, 0, json.dumps([{**row, "warmed": False}]) + "\n", "")

    monkeypatch.setattr(cold.subprocess, "run", run)
    monkeypatch.setattr(remembered, "flush", lambda: None)
    rows = cold.cold_process([Signature.of("add", {"M": 4, "N": 4}, "float32", "")], 30.0)
    assert rows[0]["first_us"] == 30.0 and "torch_at_same_point_us" not in rows[0]  # the late third process adds nothing
    assert rows[0]["torch_after_tkreg_at_same_point_us"] == 50.0
    assert rows[1] == {"check": "cold", "warmed": True, "error": "Traceback: boom"} and len(rows) == 2


def test_round_quartiles_read_the_spread_of_the_ratio_round_by_round() -> None:
    over = [100.0, 110.0, 90.0, 100.0, 120.0, 100.0, 80.0, 100.0]
    under = [100.0] * 8
    q1, q3 = picks.round_quartiles(over, under)
    assert q1 < 1.0 < q3
    assert (q1, q3) == (0.925, 1.075)
    assert picks.round_quartiles([2.0, 3.0], [1.0, 1.0]) == [2.0, 3.0]  # too few rounds: the range
    assert picks.round_quartiles([], []) == []


def test_wall_us_gives_each_named_ratio_of_medians_with_its_quartiles(monkeypatch: pytest.MonkeyPatch) -> None:
    from tkreg.ops import measuring

    def fake(calls: object, budget: float, round_ms: float, rounds: int, per_round: dict) -> dict:
        per_round.update({"tkreg_us": [10.0] * 4, "torch_us": [9.0, 10.0, 11.0, 10.0]})
        return {"tkreg_us": 10.0, "torch_us": 10.004}

    monkeypatch.setattr(measuring, "measure", fake)
    row = workloads._wall_us({"tkreg_us": lambda: None, "torch_us": lambda: None}, {"ratio": ("torch_us", "tkreg_us")})
    assert row["tkreg_us"] == 10.0 and row["torch_us"] == 10.0  # rounded to 0.01 us, and the ratio from those
    assert row["ratio"] == 1.0
    assert row["ratio_quartiles"] == picks.round_quartiles([9.0, 10.0, 11.0, 10.0], [10.0] * 4)
