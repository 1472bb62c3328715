"""The tuning cache and the measured choice, without a GPU: bucket keys, the file per op and
environment (a version change starts over), concurrent writers, the timing rule on a fake clock,
and one timing per bucket however many threads ask at once."""

from __future__ import annotations

import json
import multiprocessing
import threading
from pathlib import Path
from typing import Any

import pytest

from tkreg.ops import measuring, tuning, tuning_cache
from tkreg.ops.measuring import PEER
from tkreg.ops.tuning import Candidate, Tuner
from tkreg.ops.tuning_cache import Choice, TuningCache

ENV = {"device": "Test GPU", "driver": "12.8", "torch": "2.11", "triton": "3.6.0", "tkreg": "0.1.0"}


def choice(bucket: str, winner: str = "k1") -> Choice:
    return Choice(bucket, winner, winner, {}, {winner: 1.0, PEER: 2.0}, "Test GPU", "2026-11-25T00:00:00Z", "4x4")


@pytest.mark.parametrize(("n", "bucket"), [(1, 1), (8, 8), (9, 12), (12, 12), (13, 16), (16, 16), (17, 24), (4096, 4096),
                                           (4097, 6144), (6144, 6144), (6145, 8192), (28672, 32768)])
def test_sizes_fall_in_two_buckets_per_octave(n: int, bucket: int) -> None:
    assert tuning.bucket_size(n) == bucket
    floor = tuning.bucket_floor(n)  # the bucket's sizes: above its floor, up to its top
    assert floor < n and tuning.bucket_size(floor) != bucket and tuning.bucket_size(floor + 1) == bucket


def test_bucket_keys_are_readable_and_skip_empty_qualifiers() -> None:
    assert tuning.bucket_key({"M": 10, "N": 4096}, "bfloat16", "", "eps=1e-05") == "M<=12,N<=4096|bfloat16|eps=1e-05"


def test_a_choice_survives_a_new_cache_object_and_a_version_change_starts_over(tmp_path: Path) -> None:
    TuningCache(tmp_path, ENV).put("op", choice("b1"))
    again = TuningCache(tmp_path, ENV).get("op", "b1")
    assert again is not None and again.winner == "k1" and again.source == "cache"
    assert TuningCache(tmp_path, {**ENV, "triton": "3.7.0"}).get("op", "b1") is None
    assert TuningCache(tmp_path, {**ENV, "device": "Other GPU"}).get("op", "b1") is None


def test_a_file_from_another_environment_or_a_broken_file_is_ignored(tmp_path: Path) -> None:
    cache = TuningCache(tmp_path, ENV)
    cache.put("op", choice("b1"))
    document = json.loads(cache.path("op").read_text())
    document["environment"]["torch"] = "2.0"
    cache.path("op").write_text(json.dumps(document))
    assert TuningCache(tmp_path, ENV).get("op", "b1") is None
    cache.path("op").write_text("{ not json")
    assert TuningCache(tmp_path, ENV).get("op", "b1") is None


def test_choices_timed_the_older_way_are_timed_again(tmp_path: Path) -> None:
    """A file of an older format (choices from an earlier timing method) is ignored, and the next
    choice written replaces it."""
    cache = TuningCache(tmp_path, ENV)
    cache.put("op", choice("b1"))
    document = json.loads(cache.path("op").read_text())
    assert document["format"] == tuning_cache.FORMAT
    cache.path("op").write_text(json.dumps({**document, "format": tuning_cache.FORMAT - 1}))
    fresh = TuningCache(tmp_path, ENV)
    assert fresh.get("op", "b1") is None
    fresh.put("op", choice("b2"))
    assert json.loads(cache.path("op").read_text())["format"] == tuning_cache.FORMAT
    assert TuningCache(tmp_path, ENV).get("op", "b2") is not None


def _write_buckets(directory: str, first: int, count: int) -> None:
    cache = TuningCache(Path(directory), ENV)
    for i in range(first, first + count):
        cache.put("op", choice(f"b{i}"))


def test_concurrent_writers_keep_every_choice(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_write_buckets, args=(str(tmp_path), 100 * w, 20)) for w in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    cache = TuningCache(tmp_path, ENV)
    assert all(cache.get("op", f"b{100 * w + i}") is not None for w in range(4) for i in range(20))
    assert not list(cache.folder.glob("*.tmp"))  # no half-written file left behind


class FakeClock:
    """ms per call of each candidate, by identity of the call."""

    def __init__(self, per_call_ms: dict[object, float]) -> None:
        self.per_call_ms = per_call_ms
        self.calls = 0

    def __call__(self, call: object, n: int) -> float:
        self.calls += 1
        return self.per_call_ms[call] * n


def test_the_fastest_candidate_wins_and_a_tie_goes_to_the_faster() -> None:
    def fast() -> None: ...
    def slow() -> None: ...
    def peer() -> None: ...

    times = measuring.measure({"fast": fast, "slow": slow, PEER: peer}, 10, FakeClock({fast: 0.010, slow: 0.020, peer: 0.0101}))
    assert times == {"fast": pytest.approx(10.0), "slow": pytest.approx(20.0), PEER: pytest.approx(10.1)}
    assert measuring.fastest(times) == "fast"
    assert measuring.fastest({"k": 10.05, PEER: 10.0}) == PEER  # no host times: the least wall time, however close
    assert measuring.fastest({"k": 11.0, PEER: 10.0}) == PEER
    assert measuring.fastest({"k": "failed: boom"}) is None


def test_rounds_reverse_their_order_so_a_rounds_first_place_costs_every_call_alike() -> None:
    """A clock where whatever runs first in a round pays 30% more (a cold cache, a clock ramp):
    with the order reversed each round, both calls pay it equally often and time alike."""
    def a() -> None: ...
    def b() -> None: ...

    seen: list[object] = []

    def clock(call: object, n: int) -> float:
        seen.append(call)
        first_of_round = len(seen) > 6 and (len(seen) - 7) % 2 == 0  # three warm-up calls each, then rounds of two
        return 0.010 * n * (1.3 if first_of_round else 1.0)

    times = measuring.measure({"a": a, "b": b}, 10, clock, rounds=4)
    assert seen[6:14] == [a, b, b, a, a, b, b, a]
    assert seen[14:] == [a, b, b, a, a, b, b, a]  # tied: as many rounds again
    assert times["a"] == pytest.approx(times["b"])


def test_per_round_gives_every_round_of_the_first_sitting_aligned_across_calls() -> None:
    """Round ``i`` of each call comes from the same round: a round that slows both (the host's
    noise) shows in both at the same index, and their ratio round by round stays put."""
    def a() -> None: ...
    def b() -> None: ...

    made = {a: 0, b: 0}

    def clock(call: object, n: int) -> float:
        made[call] += 1
        timed_round = made[call] - 3  # two warm-up calls and the estimate
        slowed = 2.0 if timed_round == 2 else 1.0
        return (0.010 if call is a else 0.020) * slowed * n

    per_round: dict[str, list[float]] = {}
    measuring.measure({"a": a, "b": b}, 10, clock, rounds=4, per_round=per_round)
    assert [round(v, 6) for v in per_round["a"]] == [10.0, 20.0, 10.0, 10.0]
    assert [round(v, 6) for v in per_round["b"]] == [20.0, 40.0, 20.0, 20.0]


def test_a_rounds_size_comes_from_calls_after_the_recorded_one() -> None:
    """A replayed kernel's first call loads and its second is recorded, both far slower than the
    replays after them: the rounds must be sized from the replays, or a round of a few calls
    times its own synchronize and first launch."""
    def replayed() -> None: ...

    sizes: list[int] = []

    def clock(call: object, n: int) -> float:
        sizes.append(n)
        return {1: 5.0, 2: 0.8}.get(len(sizes), 0.015 * n)  # ms: the load, the recording, then 15 us calls

    times = measuring.measure({"k": replayed}, 10, clock, round_ms=2.0, rounds=3)
    assert sizes[:3] == [1, 1, measuring.ESTIMATE_CALLS]
    assert sizes[3:] == [int(2.0 / 0.015)] * 3
    assert times["k"] == pytest.approx(15.0)


def test_close_candidates_get_more_rounds_and_the_rest_do_not() -> None:
    def near() -> None: ...
    def nearer() -> None: ...
    def far() -> None: ...

    clock = FakeClock({near: 0.0105, nearer: 0.010, far: 0.0125})
    seen: list[object] = []

    def watched(call: object, n: int) -> float:
        seen.append(call)
        return clock(call, n)

    times = measuring.measure({"near": near, "nearer": nearer, "far": far}, 10, watched, rounds=3)
    rounds = seen[3 * 3:]
    assert rounds.count(near) == rounds.count(nearer) == 6 and rounds.count(far) == 3
    assert measuring.fastest(times) == "nearer"


def test_a_peer_held_back_in_its_first_sitting_wins_the_second_and_the_bucket() -> None:
    """A busy host slows whatever runs while it is busy: here the peer's first sitting reads it 20%
    slow. A kernel's lead must hold in a second sitting of the leaders and the peer; each keeps
    its faster sitting, so the peer takes the bucket back."""
    def kernel() -> None: ...
    def far() -> None: ...
    def peer() -> None: ...

    seen: list[object] = []

    def clock(call: object, n: int) -> tuple[float, float]:
        seen.append(call)
        if call is peer:
            slowed = seen.count(peer) <= 3 + measuring.ROUNDS  # its warm-up and first sitting
            return (0.0465 * (1.25 if slowed else 1.0) * n, 0.038 * n if slowed else 0.020 * n)
        return ((0.0486 if call is kernel else 0.080) * n, 0.009 * n)

    host: dict[str, float] = {}
    times = measuring.measure({"kernel": kernel, "far": far, PEER: peer}, 10, clock, host=host)
    rounds = seen[3 * 3:]
    assert rounds.count(kernel) == rounds.count(peer) == 2 * measuring.ROUNDS and rounds.count(far) == measuring.ROUNDS
    assert times[PEER] == pytest.approx(46.5) and host[PEER] == pytest.approx(20.0)  # the second sitting's
    assert times["kernel"] == pytest.approx(48.6) and measuring.fastest(times, host) == PEER


def test_a_lead_that_holds_in_both_sittings_keeps_the_bucket_and_a_spent_budget_sits_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def kernel() -> None: ...
    def peer() -> None: ...

    clock = FakeClock({kernel: 0.030, peer: 0.050})
    times = measuring.measure({"kernel": kernel, PEER: peer}, 10, clock)
    assert clock.calls == 2 * 3 + 4 * measuring.ROUNDS and measuring.fastest(times) == "kernel"
    assert times == {"kernel": pytest.approx(30.0), PEER: pytest.approx(50.0)}
    alone = FakeClock({kernel: 0.030})
    measuring.measure({"kernel": kernel}, 10, alone)
    assert alone.calls == 3 + measuring.ROUNDS  # nothing to sit against
    spent = FakeClock({kernel: 0.030, peer: 0.050})
    seconds = iter(range(1000))  # each reading of the time a second later: the start, each candidate, the second sitting
    monkeypatch.setattr(measuring.time, "monotonic", lambda: float(next(seconds)))
    measuring.measure({"kernel": kernel, PEER: peer}, 2, spent)
    assert spent.calls == 2 * 3 + 2 * measuring.ROUNDS  # both timed, one sitting: the budget ran out before the second


def test_a_call_named_to_sit_again_does_so_however_far_behind_it_read() -> None:
    def kernel() -> None: ...
    def subject() -> None: ...

    seen: list[object] = []

    def clock(call: object, n: int) -> float:
        seen.append(call)
        slowed = call is subject and seen.count(subject) <= 3 + measuring.ROUNDS  # held back in its first sitting
        return (0.030 if call is kernel else 0.031 * (1.5 if slowed else 1.0)) * n

    times = measuring.measure({"kernel": kernel, "subject": subject}, 10, clock, sits_again=("subject",))
    assert seen[2 * 3:].count(subject) == 2 * measuring.ROUNDS
    assert times == {"kernel": pytest.approx(30.0), "subject": pytest.approx(31.0)}
    once = FakeClock({kernel: 0.030, subject: 0.050})
    measuring.measure({"kernel": kernel, "subject": subject}, 10, once)
    assert once.calls == 2 * 3 + 2 * measuring.ROUNDS  # not named: 67% behind, it sits once


def test_a_failing_candidate_is_reported_not_raised() -> None:
    def broken() -> None:
        raise RuntimeError("no kernel image")

    def fine() -> None: ...

    clock = FakeClock({fine: 0.01})

    def clock_or_fail(call: object, n: int) -> float:
        if call is broken:
            broken()
        return clock(call, n)

    times = measuring.measure({"broken": broken, "fine": fine}, 10, clock_or_fail)
    assert times["broken"] == "failed: RuntimeError: no kernel image" and isinstance(times["fine"], float)


def test_concurrent_first_calls_of_a_bucket_time_it_once(tmp_path: Path) -> None:
    def k1() -> None: ...
    def peer() -> None: ...

    clock = FakeClock({k1: 0.01, peer: 0.02})
    tuner = Tuner("op", TuningCache(tmp_path, ENV))
    candidates = {Candidate("k1"): k1, Candidate(None): peer}
    results: list[Choice | None] = []
    threads = [threading.Thread(target=lambda: results.append(tuner.choose("b", candidates, "4x4", "Test GPU", clock)))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {r.winner for r in results if r is not None} == {"k1"} and len(results) == 8
    # two warm-up calls and the estimate per candidate, a sitting of both, then the peer's second
    # sitting against the kernel that led it
    timed_once = 2 * 3 + 2 * measuring.ROUNDS + 2 * measuring.ROUNDS
    assert clock.calls == timed_once
    # a new process (a new tuner over the same folder) times nothing
    fresh = Tuner("op", TuningCache(tmp_path, ENV))
    cached = fresh.choose("b", candidates, "4x4", "Test GPU", FakeClock({}))
    assert cached is not None and cached.source == "cache" and "from the tuning cache" in cached.describe()


def test_the_tuner_times_through_its_modules_measure_which_counting_its_calls_may_wrap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dispatch suite counts a cold process's timing calls by wrapping ``tuning.measure``."""
    def k1() -> None: ...
    def peer() -> None: ...

    counted: list[int] = []
    original = tuning.measure
    monkeypatch.setattr(tuning, "measure", lambda *a, **k: counted.append(1) or original(*a, **k))
    tuner = Tuner("op", TuningCache(tmp_path, ENV))
    candidates = {Candidate("k1"): k1, Candidate(None): peer}
    assert tuner.choose("b", candidates, "4x4", "Test GPU", FakeClock({k1: 0.01, peer: 0.02})) is not None
    assert counted == [1]
    assert Tuner("op", TuningCache(tmp_path, ENV)).choose("b", candidates, "4x4", "Test GPU", FakeClock({})) is not None
    assert counted == [1]  # a later process over the cache times nothing


def test_tuning_can_be_turned_off_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tuning.ENV_TUNE, "0")
    assert not tuning.enabled()
    monkeypatch.setenv(tuning.ENV_TUNE, "1")
    assert tuning.enabled()
    monkeypatch.setenv(tuning.ENV_BUDGET, "0")

    def a() -> None: ...
    def b() -> None: ...

    times = measuring.measure({"a": a, "b": b}, tuning.budget_s(), FakeClock({a: 0.01, b: 0.01}))
    assert "budget" in str(times["b"])  # the budget ran out after the first candidate


def test_a_launcher_that_keeps_the_host_busy_loses_a_near_tie() -> None:
    assert measuring.fastest({"k": 47.0, PEER: 48.2}) == "k"  # wall time alone
    # within the tie band the host decides: its launch queues as long as it runs
    assert measuring.fastest({"k": 47.0, PEER: 48.2}, {"k": 48.0, PEER: 15.0}) == PEER
    assert measuring.fastest({"k": 47.0, PEER: 47.0, "j": 47.5}, {"k": 20.0, PEER: 20.0, "j": 10.0}) == "j"
    # a lead beyond the band stands: back-to-back wall time already counts a host that holds calls back
    assert measuring.fastest({"k": 31.5, PEER: 45.2}, {"k": 28.0, PEER: 11.0}) == "k"
    assert measuring.fastest({"k": 1900.0, PEER: 2000.0}, {"k": 50.0, PEER: 15.0}) == "k"
    # a tied candidate without a host figure: wall time alone
    assert measuring.fastest({"k": 47.0, PEER: 48.2}, {PEER: 15.0}) == "k"


def test_measure_reports_the_hosts_queueing_time_where_the_clock_gives_it() -> None:
    host: dict[str, float] = {}
    times = measuring.measure({"k": lambda: None}, 10, lambda call, n: (0.050 * n, 0.020 * n), host=host)
    assert times["k"] == pytest.approx(50.0) and host["k"] == pytest.approx(20.0)
    choice = tuning_cache.Choice("b", "k", "k", {}, {"k": 50.0, PEER: 60.0}, "GPU", "now", "1x1", host_us={"k": 20.0})
    assert "k 50.0 us (host 20.0), peer 60.0 us" in choice.describe()
    assert tuning_cache.Choice.from_json(choice.to_json()).host_us == {"k": 20.0}
    old = {k: v for k, v in choice.to_json().items() if k != "host_us"}  # a cache written before host times
    assert tuning_cache.Choice.from_json(old).host_us == {}


def test_launch_bound_ties_go_to_the_least_host_and_gpu_time_together() -> None:
    """Four launch-bound kernels read alike (their host's time); their GPU times differ."""
    walls = {"a": 9.45, "b": 9.2, "c": 9.2, PEER: 12.5}
    host = {"a": 8.9, "b": 9.1, "c": 9.1, PEER: 12.3}
    assert measuring.fastest(walls, host) == "a"  # host time alone: the slowest kernel
    assert measuring.fastest(walls, host, {"a": 9.3, "b": 6.7, "c": 7.9}) == "b"
    # a launcher that keeps the host busy still loses a tie its kernel does not win back
    assert measuring.fastest({"k": 47.0, PEER: 48.2}, {"k": 48.0, PEER: 15.0}, {"k": 40.0, PEER: 41.0}) == PEER
    # a tied candidate without a GPU figure: host time alone
    assert measuring.fastest(walls, host, {"b": 6.7, "c": 7.9}) == "a"
    # a lead beyond the tie band stands
    assert measuring.fastest({"k": 8.0, PEER: 9.0}, {"k": 7.9, PEER: 8.9}, {"k": 7.0, PEER: 2.0}) == "k"


def test_a_launch_bound_candidate_whose_host_time_ties_joins_the_tie() -> None:
    """Four row sums, all launch-bound, read 9.3-9.7 us (their host's time, 9.2-9.4): the one 4%
    behind whose kernel is fastest takes the tie, where its GPU time was read."""
    walls = {"sum_row": 9.3, "iterative": 9.5, "blocked": 9.6, "tiled": 9.7, PEER: 13.4}
    host = {"sum_row": 9.2, "iterative": 9.3, "blocked": 9.4, "tiled": 9.4, PEER: 13.1}
    gpu = {"sum_row": 5.4, "iterative": 5.5, "blocked": 6.1, "tiled": 3.6}
    assert measuring.fastest(walls, host, gpu) == "tiled"
    # without its GPU time it stays out, and the tie is the wall times' own
    assert measuring.fastest(walls, host, {k: v for k, v in gpu.items() if k != "tiled"}) == "sum_row"
    assert measuring.fastest(walls, host) == "sum_row"
    # beyond CONTESTED in wall time, or beyond TIE in host time, a lead stands
    assert measuring.fastest({**walls, "tiled": 10.4}, host, gpu) == "sum_row"
    assert measuring.fastest(walls, {**host, "tiled": 9.6}, gpu) == "sum_row"
    # a candidate that is not launch-bound does not join (its wall time is not its host's)
    assert measuring.fastest(walls, {**host, "tiled": 7.0}, gpu) == "sum_row"
    # nor does anything where the fastest is not launch-bound: its lead is its kernel's
    assert measuring.fastest(walls, {**host, "sum_row": 5.0}, gpu) == "sum_row"


class SleepClock(FakeClock):
    """A clock that also times a call on the GPU alone (ms per call by identity; None: fails)."""

    def __init__(self, per_call_ms: dict[object, float], gpu_ms: dict[object, float | None]) -> None:
        super().__init__(per_call_ms)
        self.gpu_ms = gpu_ms
        self.alone_calls: list[object] = []

    def alone(self, call: object, n: int, hold_ms: float) -> float | None:
        assert hold_ms >= self.per_call_ms[call] * n  # held for at least the calls' wall time
        self.alone_calls.append(call)
        got = self.gpu_ms[call]
        return None if got is None else got * n


def test_only_tied_candidates_are_timed_on_the_gpu_and_a_failed_reading_is_left_out() -> None:
    def a() -> None: ...
    def b() -> None: ...
    def c() -> None: ...
    def slow() -> None: ...

    clock = SleepClock({a: 0.0092, b: 0.0092, c: 0.0093, slow: 0.0200}, {a: 0.0093, b: 0.0067, c: None, slow: 0.002})
    gpu: dict[str, float] = {}
    times = measuring.measure({"a": a, "b": b, "c": c, "slow": slow}, 10, clock, device=gpu)
    assert set(clock.alone_calls) == {a, b, c} and len(clock.alone_calls) == 3 * measuring.DEVICE_ROUNDS
    assert gpu == {"a": pytest.approx(9.3), "b": pytest.approx(6.7)}
    assert measuring.fastest(times, {"a": 9.0, "b": 9.1, "c": 9.1}, {**gpu, "c": 7.0}) == "b"
    # without ``device`` nothing is timed alone
    clock.alone_calls.clear()
    measuring.measure({"a": a, "b": b}, 10, clock)
    assert clock.alone_calls == []


class HostClock(SleepClock):
    """A SleepClock that also gives the host's queueing time and captures calls in a simulated CUDA
    graph: (wall, host, GPU alone, replayed) ms per call by identity; replayed None: the capture
    fails."""

    def __init__(self, table: dict[object, tuple[float, float, float, float | None]]) -> None:
        super().__init__({c: t[0] for c, t in table.items()}, {c: t[2] for c, t in table.items()})
        self.host_ms = {c: t[1] for c, t in table.items()}
        self.replay_ms = {c: t[3] for c, t in table.items()}
        self.captured: list[object] = []

    def __call__(self, call: object, n: int) -> tuple[float, float]:  # type: ignore[override]
        return super().__call__(call, n), self.host_ms[call] * n

    def capture(self, call: object, n: int) -> Any:
        self.captured.append(call)
        per_call = self.replay_ms[call]
        if per_call is None:
            raise RuntimeError("operation not permitted when stream is capturing\nmore")
        return lambda: per_call * n


def _launch_bound_peer(slow_replays: bool = True) -> tuple[dict[str, Any], HostClock]:
    """The peer launch-bound (its host time is its wall time, its kernel short), a kernel faster
    eagerly (its host quick, its kernel long), and a slower one that cannot be captured (or can):
    (wall, host, GPU alone, replayed) ms per call."""
    def peer() -> None: ...
    def kernel() -> None: ...
    def slow() -> None: ...

    clock = HostClock({peer: (0.020, 0.0195, 0.004, 0.003), kernel: (0.010, 0.004, 0.0095, 0.0085),
                       slow: (0.030, 0.005, 0.0295, 0.029 if slow_replays else None)})  # fmt: skip
    return {PEER: peer, "kernel": kernel, "slow": slow}, clock


def test_where_a_candidate_is_launch_bound_every_candidate_is_replayed_from_a_cuda_graph() -> None:
    calls, clock = _launch_bound_peer(slow_replays=False)
    host: dict[str, float] = {}
    replayed: dict[str, float | str] = {}
    times = measuring.measure(calls, 10, clock, host=host, device={}, replayed=replayed)
    assert set(clock.captured) == set(calls.values()) and clock.alone_calls == []  # no tie: nothing timed alone
    assert replayed == {PEER: pytest.approx(3.0), "kernel": pytest.approx(8.5),
                        "slow": "not captured: RuntimeError: operation not permitted when stream is capturing"}  # fmt: skip
    winner = measuring.fastest(times, host)
    assert winner == "kernel"  # eagerly the kernel leads by half; replayed, the peer takes a third of its time
    assert measuring.fastest_replayed(replayed, winner) == PEER
    # without ``replayed`` nothing is captured
    clock.captured.clear()
    measuring.measure(calls, 10, clock, device={})
    assert clock.captured == []
    # where every candidate keeps the GPU busy, its wall time is what a replay takes: nothing is captured
    busy = HostClock({calls[PEER]: (0.020, 0.005, 0.0195, 0.0195), calls["kernel"]: (0.010, 0.004, 0.0098, 0.0097),
                      calls["slow"]: (0.030, 0.005, 0.0295, 0.029)})  # fmt: skip
    replayed.clear()
    measuring.measure(calls, 10, busy, replayed=replayed)
    assert busy.captured == [] and replayed == {}


def test_captured_calls_keep_the_winner_unless_another_replays_faster_beyond_the_tie() -> None:
    assert measuring.fastest_replayed({"k": 9.5, PEER: 4.0}, "k") == PEER
    assert measuring.fastest_replayed({"k": 4.1, PEER: 4.0}, "k") == "k"  # within TIE: no reason to run another
    assert measuring.fastest_replayed({"k": "not captured: boom", PEER: 4.0}, "k") == PEER  # the winner cannot be captured
    assert measuring.fastest_replayed({}, "k") is None


def test_a_choice_names_what_captured_calls_run_and_keeps_it_in_the_cache(tmp_path: Path) -> None:
    calls, clock = _launch_bound_peer()
    candidates = {Candidate(None): calls[PEER], Candidate("kernel", {"BLOCK": 64}): calls["kernel"],
                  Candidate("slow"): calls["slow"]}  # fmt: skip
    cache = TuningCache(tmp_path, {"device": "GPU"})
    made = Tuner("op", cache).choose("b", candidates, "1x1", "GPU", clock=clock)
    assert made is not None and made.winner == "kernel[BLOCK=64]" and made.config == {"BLOCK": 64}
    assert (made.graphed, made.graphed_kernel, made.graphed_config) == (PEER, None, {})
    assert "a call captured in a CUDA graph runs peer, the fastest replayed (3.0 us a call against 8.5)" in made.describe()
    read = Tuner("op", TuningCache(tmp_path, {"device": "GPU"})).known("b")
    assert read is not None and (read.graphed, read.graphed_kernel, read.source) == (PEER, None, "cache")
    assert read.replayed_us == {PEER: 3.0, "kernel[BLOCK=64]": 8.5, "slow": 29.0}
    # a training step's choice has none (what a capture of a forward runs is the forward's choice)
    clock.captured.clear()
    trained = Tuner("op", None).choose("t", candidates, "1x1", "GPU", clock=clock, exclusive=False, graphs=False)
    assert trained is not None and trained.graphed == "" and clock.captured == []


def test_a_choice_says_each_candidates_gpu_time_and_older_entries_read_without_it() -> None:
    made = Choice("b", "k", "k", {}, {"k": 9.2, PEER: 12.5}, "GPU", "now", "1x1", host_us={"k": 9.1}, device_us={"k": 6.7})
    assert "k 9.2 us (host 9.1, GPU 6.7), peer 12.5 us" in made.describe()
    assert Choice.from_json(made.to_json()).device_us == {"k": 6.7}
    older = {k: v for k, v in made.to_json().items() if k != "device_us"}
    assert Choice.from_json(older).device_us == {}


class ScriptedGpu:
    """torch.cuda as CudaClock.alone uses it, scripted: whether the event after each hold is
    already reached once the calls are queued (``reached``), and the ms each hold lasted."""

    def __init__(self, reached: list[bool], held_ms: float = 0.5, reading_ms: float = 0.3) -> None:
        self.reached, self.held_ms, self.reading_ms = list(reached), held_ms, reading_ms
        self.sleeps: list[int] = []
        self.device = 0
        gpu = self

        class Event:
            made = 0

            def __init__(self, enable_timing: bool = False) -> None:
                self.role = ("slept", "start", "end")[Event.made % 3]  # alone makes them in this order
                Event.made += 1

            def record(self) -> None:
                pass

            def synchronize(self) -> None:
                pass

            def query(self) -> bool:
                return gpu.reached.pop(0)

            def elapsed_time(self, other: Any) -> float:
                return gpu.held_ms if self.role == "slept" else gpu.reading_ms

        self.Event = Event

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import torch

        monkeypatch.setattr(torch.cuda, "Event", self.Event)
        monkeypatch.setattr(torch.cuda, "_sleep", self.sleeps.append, raising=False)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: self.device)


def test_a_gpu_alone_reading_counts_only_where_the_sleep_outlasted_the_queueing(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    gpu = ScriptedGpu(reached=[True, False])  # the first hold ended too soon, the second held
    gpu.install(monkeypatch)
    clock = measuring.CudaClock()
    assert clock.alone(lambda: None, 10, 0.2) == gpu.reading_ms
    load, first, second = gpu.sleeps
    assert load == 1  # the sleep kernel runs once before a hold is timed
    # the first hold, at the first guess of the rate, read the sleep's rate (cycles per ms held);
    # the second holds, at that rate, for twice the host's queueing time (near 0 here) plus 0.1 ms
    assert first == int(2.0e6 * 0.2)
    assert 0.1 <= second / (first / gpu.held_ms) < 0.2
    gpu.reached = [False]
    assert clock.alone(lambda: None, 10, 0.2) == gpu.reading_ms
    assert len(gpu.sleeps) == 4  # loaded already on this device
    gpu.device, gpu.reached = 1, [False]
    clock.alone(lambda: None, 10, 0.2)
    assert gpu.sleeps[4] == 1  # another device loads it again
    gpu.reached = [True, True, True]  # every call waits for the host
    assert clock.alone(lambda: None, 10, 0.2) is None


class SmallAdds:
    """Small adds on the GPU (launch-bound: each runs in a fraction of its launch), timed back to
    back by ``clock`` (default: a new CudaClock); ``waits`` also synchronizes."""

    def __init__(self, clock: Any = None) -> None:
        import torch

        self.torch, self.x = torch, torch.randn(1 << 16, device="cuda")
        self.clock = clock or measuring.CudaClock()
        for _ in range(10):
            self.add()
        self.wall_ms, self.queued_ms = self.clock(self.add, 200)

    def add(self) -> None:
        self.torch.add(self.x, 1.0)

    def waits(self) -> None:
        self.add()
        self.torch.cuda.synchronize()


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="times calls on a CUDA GPU")
def test_the_cuda_clock_times_calls_on_the_gpu_alone_and_refuses_calls_that_wait_for_the_host() -> None:
    adds = SmallAdds()
    # a new clock's first hold (it runs the sleep kernel once first), too short at first: it
    # holds longer and reads the calls' GPU time, below the host's time to queue them
    alone_ms = adds.clock.alone(adds.add, 200, 0.2)
    assert alone_ms is not None and 0 < alone_ms <= adds.wall_ms * 1.05
    assert alone_ms < adds.queued_ms
    assert adds.clock.alone(adds.waits, 20, 0.05) is None


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="captures calls in CUDA graphs")
def test_threads_that_capture_at_once_take_turns() -> None:
    """Threads that tune at once capture at once: one capture at a time, the clock's stream used
    by one thread at a time (captures at once on one stream, or on a stream each, failed:
    "operation not permitted when stream is capturing", "Offset increment outside graph capture")."""
    clock, start, errors = measuring.CudaClock(), threading.Barrier(4), []

    def captures() -> None:
        adds = SmallAdds(clock)
        try:
            start.wait()
            for _ in range(20):
                assert clock.capture(adds.add, 20)() > 0
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=captures) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="captures calls in CUDA graphs")
def test_the_cuda_clock_times_replays_of_captured_calls_and_refuses_calls_that_cannot_be_captured() -> None:
    from tkreg.ops import capturing

    adds = SmallAdds()
    replay = adds.clock.capture(adds.add, 200)
    replayed_ms = [replay() for _ in range(3)]
    # a replay launches nothing from Python: below the host's time to queue the calls eagerly
    assert all(0 < ms < adds.queued_ms and ms <= adds.wall_ms * 1.05 for ms in replayed_ms)
    assert not capturing.capturing()  # the tuner's own captures switch no plan
    with pytest.raises(RuntimeError):  # torch's own error: a synchronize is not permitted in a capture
        adds.clock.capture(adds.waits, 5)
    assert not capturing.capturing()
    after = adds.clock.capture(adds.add, 20)  # the clock captures again, and the GPU runs eager work
    assert after() > 0
    x = adds.x
    adds.torch.testing.assert_close((x + 1.0).cpu(), x.cpu() + 1.0)


def test_a_launch_bound_candidate_whose_host_time_ties_is_timed_on_the_gpu_and_can_win() -> None:
    """(wall, host, GPU alone, replayed) ms per call: ``tiled`` reads 4% behind on the host's time,
    ``busy`` 4% behind with a host 10% slower, ``far`` 20% behind."""
    def first() -> None: ...
    def tiled() -> None: ...
    def busy() -> None: ...
    def far() -> None: ...

    clock = HostClock({first: (0.0093, 0.0092, 0.0054, 0.005), tiled: (0.0097, 0.0094, 0.0036, 0.0035),
                       busy: (0.0097, 0.0102, 0.0020, 0.002), far: (0.0112, 0.0093, 0.0010, 0.001)})  # fmt: skip
    host: dict[str, float] = {}
    gpu: dict[str, float] = {}
    calls = {"first": first, "tiled": tiled, "busy": busy, "far": far}
    times = measuring.measure(calls, 10, clock, host=host, device=gpu)
    assert set(clock.alone_calls) == {first, tiled}
    assert measuring.fastest(times, host, gpu) == "tiled"
