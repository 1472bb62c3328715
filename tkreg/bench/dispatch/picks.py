"""Pick against best: tkreg.ops on a signature against every kernel that takes its inputs (at its
launcher's own choice and at each config it offers for tuning) and the peer, timed in the same
interleaved rounds as a model pays a call; then the same calls replayed from CUDA graphs. The
same for another shape of a tuned signature's bucket (:func:`inside_bucket`): the choice its
first shape's timing made, on a shape it was not timed on."""

from __future__ import annotations

import functools
import re
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from ...core.registry import Registry
from ...core.specs import Op
from ...report.dispatch_record import own_bucket_siblings, untimed_siblings
from ...report.figures import geomean
from ..calls import Signature, kernel_call, make_inputs, peer_call, planned_kernels, say
from ..graphed import graphed_us

PICK_WITHIN = 0.95  # tkreg.ops passes where the fastest other candidate takes at least this share of its time
TIMING_BUDGET_S = 20.0
# explain's account of a measured choice: "<winner> fastest for bucket <bucket> (<origin>; measured
# on <GPU> at <time> on shape <shape>): ..." (tkreg.ops.tuning_cache.Choice.describe)
_MEASURED = re.compile(r"fastest for bucket (?P<bucket>.+?) \((?:from the tuning cache|timed in this process); "
                       r"measured on .+? on shape (?P<shape>.+?)\): ")  # fmt: skip


class TimingCalls:
    """Counts the tuner's timing calls (``n``) from :meth:`start`: every one goes through
    tkreg.ops.tuning's ``measure``, which this wraps until :meth:`stop`."""

    def __init__(self) -> None:
        self.n = 0
        self._original: Callable[..., Any] | None = None

    def start(self) -> TimingCalls:
        from ...ops import tuning

        self._original = original = tuning.measure

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.n += 1
            return original(*args, **kwargs)

        tuning.measure = counting  # type: ignore[assignment]
        return self

    def stop(self) -> None:
        from ...ops import tuning

        if self._original is not None:
            tuning.measure = self._original  # type: ignore[assignment]
            self._original = None


def inside_bucket(registry: Registry, op: Op, sig: Signature, tuned: dict[str, Any]) -> dict[str, Any]:
    """The pick on ``sig``, another shape of the bucket the pick row ``tuned`` timed at its first
    call: tkreg.ops should time nothing and run what that timing chose, and the row says whether
    that is within PICK_WITHIN of the fastest for ``sig``'s own inputs."""
    row = pick_against_best(registry, op, sig, check="bucket")
    row["tuned_on"] = tuned["shape"]
    row["same_bucket"] = row.get("bucket") is not None and row.get("bucket") == tuned.get("bucket")
    # another rows class (an odd width), or a shape the bucket's winner refuses: a bucket of its own
    row["own_bucket"] = bool(row.get("bucket")) and not row["same_bucket"]
    return row


def pick_against_best(registry: Registry, op: Op, sig: Signature, check: str = "pick") -> dict[str, Any]:
    import torch

    from ... import ops
    from ...ops.measuring import measure as time_calls

    row: dict[str, Any] = {"check": check, "op": op.name, "shape": sig.shape, "dtype": sig.dtype, "variant": sig.variant}
    try:
        inputs = make_inputs(registry, sig, seed=1)
        call = ops.get(op.name)
        torch.cuda.synchronize()
        counted = TimingCalls().start()
        began = time.perf_counter()
        try:
            call(*inputs)  # tunes the bucket, as a model's first call does, where it is new
            torch.cuda.synchronize()
        finally:
            counted.stop()
        row["first_call_ms"] = round((time.perf_counter() - began) * 1e3, 1)  # the bucket's tuning, compiles included
        row["timing_calls"] = counted.n
        row["decision"] = ops.explain(op.name, *inputs)
        measured = _MEASURED.search(row["decision"])
        if measured:  # the bucket, and the shape its choice was timed on
            row.update(bucket=measured["bucket"], measured_on=measured["shape"])
        # every candidate a bound call, no frame of the harness's own around it (the kernels' are calls too)
        calls: dict[str, Callable[[], Any]] = {"tkreg.ops": functools.partial(call, *inputs)}
        calls.update(_candidates(registry, op, inputs))
        # tkreg.ops sits again with the leaders wherever it reads: one held-back sitting is no verdict
        rounds: dict[str, list[float]] = {}
        times = time_calls(calls, TIMING_BUDGET_S, sits_again=("tkreg.ops",), per_round=rounds)
    except Exception as e:  # a shape that cannot run is a finding: its row says why
        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        say(f"  pick {sig.label}: {row['error']}")
        return row
    timed = {k: v for k, v in times.items() if isinstance(v, float)}
    ours = timed.get("tkreg.ops")
    others = {k: v for k, v in timed.items() if k != "tkreg.ops"}
    row["times_us"] = {k: round(v, 2) for k, v in timed.items()}
    row["untimed"] = {k: v for k, v in times.items() if not isinstance(v, float)}
    if ours and others:
        best = min(others, key=lambda k: others[k])
        row.update(best=best, ratio=round(others[best] / ours, 4), tkreg_us=round(ours, 2))
        # the same ratio round by round, in the first sitting: how far the host's noise moves it
        row["ratio_quartiles"] = round_quartiles(rounds.get(best, []), rounds.get("tkreg.ops", []))
        row["pass"] = row["ratio"] >= PICK_WITHIN
        chosen, captured = chosen_labels(op.name, inputs)
        row["chosen"] = chosen
        # how the plan ran the timed calls (replayed, or why not): a first call cannot say yet
        launches = ops.explain(op.name, *inputs).partition(" Launches: ")[2]
        if launches:
            row["launches"] = launches.split(". ")[0]
        if chosen in others:
            # the choice itself, timed as a caller of it pays (without tkreg.ops' dispatch)
            row["choice_ratio"] = round(others[best] / others[chosen], 4)
            row["choice_pass"] = row["choice_ratio"] >= PICK_WITHIN
        say(f"  pick {sig.label}: tkreg.ops {ours:.1f} us ({chosen} {others.get(chosen, float('nan')):.1f}), "
            f"best {best} {others[best]:.1f} us ({row['ratio']:.3f}; choice {row.get('choice_ratio')})")
        row.update(_replayed_against_best(calls, timed, captured))
    return row


def round_quartiles(over: Sequence[float], under: Sequence[float]) -> list[float]:
    """The first and third quartiles of ``over[i] / under[i]``, two calls' times in the same
    rounds: how far the ratio of the two medians could move between runs. A host-bound call reads
    within a few percent of itself only as a median of many rounds; its rounds spread wider."""
    paired = [a / b for a, b in zip(over, under) if b > 0]
    if len(paired) < 4:
        return [round(min(paired), 4), round(max(paired), 4)] if paired else []
    q1, _, q3 = statistics.quantiles(paired, n=4)
    return [round(q1, 4), round(q3, 4)]


def _replayed_against_best(calls: dict[str, Callable[[], Any]], eager_us: dict[str, float], captured: str) -> dict[str, Any]:
    """The pick again, every call replayed from a CUDA graph (:mod:`.graphed`): what a captured
    model pays, its GPU time alone; ``captured``: the candidate tkreg.ops runs there."""
    try:
        got = graphed_us(calls, eager_us)
    except Exception as e:  # the row keeps its eager figures
        return {"graph_error": f"{type(e).__name__}: {str(e)[:300]}"}
    timed = {k: v for k, v in got.items() if isinstance(v, float)}
    row: dict[str, Any] = {"graphed_us": {k: round(v, 2) for k, v in timed.items()},
                           "not_captured": {k: v for k, v in got.items() if not isinstance(v, float)}}
    ours = timed.pop("tkreg.ops", None)
    if ours and timed:
        best = min(timed, key=lambda k: timed[k])
        row.update(graph_best=best, graph_ratio=round(timed[best] / ours, 4), graph_chosen=captured)
        row["graph_pass"] = row["graph_ratio"] >= PICK_WITHIN
        say(f"    replayed: tkreg.ops {ours:.2f} us ({row['graph_chosen']}), best {best} {timed[best]:.2f} us "
            f"({row['graph_ratio']:.3f})")
    return row


def chosen_labels(op: str, inputs: tuple[Any, ...]) -> tuple[str, str]:
    """The candidate tkreg.ops runs for these inputs, and the one it runs in a CUDA graph's
    capture, as the dispatch suite labels candidates."""
    from ... import ops

    dispatcher = ops._installed["dispatchers"][op]
    plan = dispatcher.plan(inputs, dispatcher.params.values({}), tune=False)
    return candidate_label(plan), candidate_label(plan.graphed if plan.graphed is not None else plan)


def candidate_label(plan: Any) -> str:
    """The candidate a plan runs, as the dispatch suite labels candidates."""
    return plan.launchers[0][0] if plan.launchers else "peer"


def _candidates(registry: Registry, op: Op, inputs: tuple[Any, ...]) -> dict[str, Callable[[], Any]]:
    """Every way to run the inputs as a Python caller would, each allocating its output: every
    kernel the registry finds for them (own choice and tuning configs), as tkreg.ops runs it
    (replayed where it declares replay), and the peer."""
    from ...ops.choosing import Chooser

    found: dict[str, Callable[[], Any]] = {}
    for kernel in planned_kernels(registry, op, inputs):
        launcher = kernel.load()
        for config in Chooser.tune_configs(kernel, inputs, op.defaults):
            label = kernel.name if not config else kernel.name + "[" + ",".join(f"{k}={v}" for k, v in config.items()) + "]"
            found[label] = kernel_call(op, kernel, functools.partial(launcher, **config), inputs)
    peer = peer_call(op, inputs, None)  # as torch code calls it
    if peer is not None:
        found["peer"] = peer
    return found



def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The picks' counts within PICK_WITHIN and geometric means: tkreg.ops end to end, its choice
    called directly, and the replayed calls."""
    picks = [r for r in rows if r.get("check") == "pick"]
    passed = [r for r in picks if r.get("pass")]
    chosen_well = [r for r in picks if r.get("choice_pass")]
    got: dict[str, Any] = {
        "picks": len(picks),
        "picks_within": len(passed),
        "pick_share": round(len(passed) / len(picks), 3) if picks else None,
        "pick_geomean": round(geomean(r["ratio"] for r in picks if "ratio" in r), 4) if picks else None,
        "choices_within": len(chosen_well),
        "choice_share": round(len(chosen_well) / len(picks), 3) if picks else None,
    }
    replayed = [r for r in picks if "graph_ratio" in r]
    if replayed:
        got.update(graph_picks=len(replayed), graph_picks_within=sum(bool(r["graph_pass"]) for r in replayed),
                   graph_geomean=round(geomean(r["graph_ratio"] for r in replayed), 4))
    return got | _inside_buckets(rows)


def _inside_buckets(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The same counts for other shapes of tuned buckets (:func:`inside_bucket`), of those that
    found their bucket timed and timed nothing themselves; and of those in a bucket of their own
    (another rows class, or refused by the bucket's winner)."""
    siblings = [r for r in rows if r.get("check") == "bucket" and "ratio" in r]
    if not siblings:
        return {}
    held, own = untimed_siblings(siblings), own_bucket_siblings(siblings)
    return {
        "bucket_siblings": len(siblings),
        "bucket_siblings_untimed": len(held),
        "bucket_siblings_within": sum(bool(r["pass"]) for r in held),
        "bucket_choices_within": sum(bool(r.get("choice_pass")) for r in held),
        "bucket_geomean": round(geomean(r["ratio"] for r in held), 4) if held else None,
        "bucket_siblings_own": len(own),
        "bucket_own_within": sum(bool(r["pass"]) for r in own),
    }
