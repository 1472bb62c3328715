"""The ``dispatch`` suite: does tkreg.ops run the fastest implementation for the inputs actually
passed, on this GPU, at the cost of a torch call, in eager, compiled and training use?

1. Pick against best, on shapes nobody chose: per op, random shapes drawn at run time (the seed
   is recorded) across the sizes its contract names, in its benchmark dtypes and layouts. Each is
   called once through tkreg.ops (which tunes its bucket), then tkreg.ops, every kernel that takes
   the inputs (at its launcher's own choice and at each config it offers for tuning) and the peer
   are timed in the same interleaved rounds, as a model pays a call: back-to-back calls between
   CUDA events, launch included, each allocating its output. A pick passes within PICK_WITHIN of
   the fastest of the others. The same calls are then each captured in a CUDA graph and replayed,
   as a captured model pays them (their GPU time alone), and tkreg.ops (which runs the bucket's
   choice for captured calls) is judged the same way.
2. A cold process with the warm cache: the same shapes in a new process make no timing call; its
   first call of each is timed against a warm call of the same shape: the median of calls made
   back to back, and a call made after the same work as the first (the peer's calls of the shape).
3. CUDA graphs: a tuned call captured and replayed gives the bits of an eager call of what it runs
   (the bucket's choice for captured calls, where it has one).
4. torch.compile: a Llama-3-8B MLP block (gate, up, down) through the linear op under
   torch.compile(fullgraph=True), in the default mode and in mode="reduce-overhead" (CUDA
   graphs), against torch.compile of the same block written with ``@``; and whether Inductor
   generated the same code for the two.
5. Training: a 2-layer MLP step (forward and backward) through the linear op against torch;
   and a forward and backward through each differentiable row op (a norm) at model sizes
   against the same through its peer, as torch code trains.
6. Batched linear calls (B, M, K) @ (B, K, N) against torch.bmm.
"""

from __future__ import annotations

import functools
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..core import refs
from ..core.loading import default_registry
from ..core.registry import Registry
from ..core.specs import Op
from .calls import Signature, geomean, kernel_call, make_inputs, peer_call, say
from .graphed import graphed_us
from .suites import Deadline, Measured

PICK_WITHIN = 0.95  # tkreg.ops passes where the fastest other candidate takes at least this share of its time
SHAPES_PER_OP = {"linear": 10}  # random shapes per contract kind (others: DEFAULT_SHAPES)
DEFAULT_SHAPES = 12
MAX_ELEMENTS = 1 << 26  # per input: keeps each shape's inputs under a few hundred MB
LINEAR_WIDTHS = (256, 16384)  # N and K of a linear layer: model widths, multiples of 64
MLP = {"hidden": 4096, "intermediate": 14336}  # Llama-3-8B
MLP_TOKENS = (16, 4096)
ROW_TRAINING = ((4096, 4096), (16384, 4096))  # (tokens, width) of a model's row ops (a norm): M, N
TRAIN = {"tokens": 2048, "hidden": 4096, "inner": 16384}
TIMING_BUDGET_S = 20.0
# Many short rounds rather than a few long ones: a host-bound training step (100-300 us, nearly
# all host time) read 0.87 and 1.15 of torch with nine rounds of 30 ms on an H100 (2026-11-27),
# for calls that run torch's own code either way.
WORKLOAD_ROUND_MS = 10.0
WORKLOAD_ROUNDS = 25


def measure(deadline: Deadline) -> Measured:
    import torch

    from .. import ops

    registry = default_registry()
    seed = int(os.environ.get("TKREG_BENCH_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    tuned: list[Signature] = []
    for op in registry.ops():
        if op.contract.kind == "plain" or not op.cases_in("bench"):
            continue
        for sig in unseen(op, rng):
            deadline.check(f"pick against best for {sig.label}")
            row = pick_against_best(registry, op, sig)
            rows.append(row)
            if "error" not in row:
                tuned.append(sig)
    deadline.check("the cold process")
    rows += cold_process(tuned, min(deadline.left() - 60, 120))
    deadline.check("CUDA graphs")
    rows += graph_replays(registry, tuned)
    linear = [op for op in registry.ops() if op.contract.kind == "linear"]
    if linear:
        mm = ops.get(linear[0].name)
        deadline.check("the compiled MLP")
        rows += compiled_mlp(mm, linear[0].name)
        deadline.check("the training step")
        rows += training_step(mm, linear[0].name)
        rows += batched(mm, linear[0].name)
    for op in registry.ops():
        if op.contract.kind == "rows" and op.grads and op.peer is not None:
            deadline.check(f"{op.name}'s training step")
            rows += row_training(registry, op)
    torch.cuda.synchronize()
    picks = [r for r in rows if r.get("check") == "pick"]
    passed = [r for r in picks if r.get("pass")]
    chosen_well = [r for r in picks if r.get("choice_pass")]
    summary: dict[str, Any] = {
        "seed": seed,
        "picks": len(picks),
        "picks_within": len(passed),
        "pick_share": round(len(passed) / len(picks), 3) if picks else None,
        "pick_geomean": round(geomean(r["ratio"] for r in picks if "ratio" in r), 4) if picks else None,
        "choices_within": len(chosen_well),
        "choice_share": round(len(chosen_well) / len(picks), 3) if picks else None,
    }
    replayed = [r for r in picks if "graph_ratio" in r]
    if replayed:
        summary.update(graph_picks=len(replayed), graph_picks_within=sum(bool(r["graph_pass"]) for r in replayed),
                       graph_geomean=round(geomean(r["graph_ratio"] for r in replayed), 4))
    for warmed in (False, True):
        cold = [r for r in rows if r.get("check") == "cold" and r.get("warmed") is warmed and "first_us" in r]
        if cold:
            ratios = sorted(r["first_us"] / r["warm_us"] for r in cold)
            prefix = "cold_warmed" if warmed else "cold"
            summary[f"{prefix}_first_over_warm_median"] = round(statistics.median(ratios), 2)
            summary[f"{prefix}_within_2x"] = sum(x <= 2.0 for x in ratios)
            summary[f"{prefix}_calls"] = len(ratios)
            summary[f"{prefix}_timing_calls"] = sum(r.get("timing_calls", 0) for r in cold)
            preloaded = [r["preload"] for r in cold if r.get("preload")]
            if preloaded:  # what the process's first call loaded ahead (tkreg.ops.warming.preload)
                summary[f"{prefix}_preload"] = preloaded[0]
            # the same test of torch's own first call of each shape, just before tkreg's
            peer_ratios = [r["torch_first_us"] / r["torch_warm_us"] for r in cold if r.get("torch_warm_us")]
            if peer_ratios:
                summary[f"{prefix}_torch_within_2x"] = sum(x <= 2.0 for x in peer_ratios)
                summary[f"{prefix}_torch_calls"] = len(peer_ratios)
            # against a warm call made after the same work as the first call (see _after_each_other)
            after = [r["first_us"] / r["warm_after_peer_us"] for r in cold if r.get("warm_after_peer_us")]
            if after:
                summary[f"{prefix}_within_2x_after_same_work"] = sum(x <= 2.0 for x in after)
                summary[f"{prefix}_calls_after_same_work"] = len(after)
            torch_after = [r["torch_first_us"] / r["torch_warm_after_tkreg_us"] for r in cold
                           if r.get("torch_warm_after_tkreg_us")]  # fmt: skip
            if torch_after:
                summary[f"{prefix}_torch_within_2x_after_same_work"] = sum(x <= 2.0 for x in torch_after)
    notes = (f"pick: tkreg.ops against the fastest of every kernel (own choice and tuning configs) and the peer on random "
             f"shapes (seed {seed}), wall time per call as queued back to back (CUDA events, launch included), median of "
             f"interleaved rounds; pass where the fastest other takes >= {PICK_WITHIN} of tkreg.ops' time (ratio); "
             f"choice_ratio: the same for the candidate tkreg.ops chose, called directly (without the dispatch).")  # fmt: skip
    return Measured(kind="dispatch", rows=rows, notes=notes, summary=summary)


# -- 1. shapes nobody chose --------------------------------------------------------------------------
def unseen(op: Op, rng: random.Random) -> list[Signature]:
    """Random signatures across the sizes the op's contract names, in its benchmark dtypes and the
    layouts (case variants) its benchmark cases use."""
    names = op.contract.dims or tuple(op.cases_in("bench")[0].dims)
    variants = sorted({c.variant for c in op.cases_in("bench")} | {""})
    found: list[Signature] = []
    while len(found) < SHAPES_PER_OP.get(op.contract.kind, DEFAULT_SHAPES):
        dims = _random_dims(op.contract.kind, names, rng)
        if max(_elements(op.contract.kind, dims)) > MAX_ELEMENTS:
            continue
        found.append(Signature.of(op.name, dims, rng.choice(op.bench_dtypes), rng.choice(variants)))
    return found


def _random_dims(kind: str, names: Sequence[str], rng: random.Random) -> dict[str, int]:
    def log_uniform(low: int, high: int) -> int:
        return round(math.exp(rng.uniform(math.log(low), math.log(high))))

    if kind == "linear":
        m = log_uniform(1, 8192)
        n, k = (64 * max(1, log_uniform(*LINEAR_WIDTHS) // 64) for _ in range(2))
        return dict(zip(names, (m, n, k)))
    return {name: log_uniform(1, 1 << 17) for name in names}


def _elements(kind: str, dims: dict[str, int]) -> list[int]:
    sizes = list(dims.values())
    if kind == "linear":
        m, n, k = sizes
        return [m * k, k * n, m * n]
    return [math.prod(sizes)]


def pick_against_best(registry: Registry, op: Op, sig: Signature) -> dict[str, Any]:
    import torch

    from .. import ops
    from ..ops.measuring import measure as time_calls

    row: dict[str, Any] = {"check": "pick", "op": op.name, "shape": sig.shape, "dtype": sig.dtype, "variant": sig.variant}
    try:
        inputs = make_inputs(registry, sig, seed=1)
        call = ops.get(op.name)
        torch.cuda.synchronize()
        began = time.perf_counter()
        call(*inputs)  # tunes the bucket, as a model's first call does
        torch.cuda.synchronize()
        row["first_call_ms"] = round((time.perf_counter() - began) * 1e3, 1)  # the bucket's tuning, compiles included
        row["decision"] = ops.explain(op.name, *inputs)
        # every candidate a bound call, no frame of the harness's own around it (the kernels' are calls too)
        calls: dict[str, Callable[[], Any]] = {"tkreg.ops": functools.partial(call, *inputs)}
        calls.update(_candidates(registry, op, inputs))
        # tkreg.ops sits again with the leaders wherever it reads: one held-back sitting is no verdict
        times = time_calls(calls, TIMING_BUDGET_S, sits_again=("tkreg.ops",))
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
        row["pass"] = row["ratio"] >= PICK_WITHIN
        chosen, captured = _chosen(op.name, inputs)
        row["chosen"] = chosen
        if chosen in others:
            # the choice itself, timed as a caller of it pays (without tkreg.ops' dispatch)
            row["choice_ratio"] = round(others[best] / others[chosen], 4)
            row["choice_pass"] = row["choice_ratio"] >= PICK_WITHIN
        say(f"  pick {sig.label}: tkreg.ops {ours:.1f} us ({chosen} {others.get(chosen, float('nan')):.1f}), "
            f"best {best} {others[best]:.1f} us ({row['ratio']:.3f}; choice {row.get('choice_ratio')})")
        row.update(_replayed_against_best(calls, timed, captured))
    return row


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


def _chosen(op: str, inputs: tuple[Any, ...]) -> tuple[str, str]:
    """The candidate tkreg.ops runs for these inputs, and the one it runs in a CUDA graph's
    capture, as the dispatch suite labels candidates."""
    from .. import ops

    dispatcher = ops._installed["dispatchers"][op]
    plan = dispatcher.plan(inputs, dispatcher.params.values({}), tune=False)
    return _label(plan), _label(plan.graphed if plan.graphed is not None else plan)


def _label(plan: Any) -> str:
    """The candidate a plan runs, as the dispatch suite labels candidates."""
    return plan.launchers[0][0] if plan.launchers else "peer"


def _candidates(registry: Registry, op: Op, inputs: tuple[Any, ...]) -> dict[str, Callable[[], Any]]:
    """Every way to run the inputs as a Python caller would, each allocating its output: every
    kernel the registry finds for them (own choice and tuning configs), as tkreg.ops runs it
    (replayed where it declares replay), and the peer."""
    from ..ops.choosing import Chooser

    found: dict[str, Callable[[], Any]] = {}
    for kernel in registry.lookup(op.name, inputs=inputs):
        if kernel.writes:
            continue
        launcher = kernel.load()
        for config in Chooser.tune_configs(kernel, inputs, op.defaults):
            label = kernel.name if not config else kernel.name + "[" + ",".join(f"{k}={v}" for k, v in config.items()) + "]"
            found[label] = kernel_call(op, kernel, functools.partial(launcher, **config), inputs)
    peer = peer_call(op, inputs, None)  # as torch code calls it
    if peer is not None:
        found["peer"] = peer
    return found


# -- 2. a cold process with a warm cache ---------------------------------------------------------------
def cold_process(signatures: Sequence[Signature], timeout_s: float) -> list[dict[str, Any]]:
    """Two new processes over this one's cache: one calls each signature as a model would, the
    other calls tkreg.ops.warm() first, as a server would at start-up."""
    if not signatures or timeout_s <= 0:
        return []
    from ..ops import remembered

    remembered.flush()  # what this process remembers, written now as its exit would
    payload = json.dumps([[s.op, list(s.dims), s.dtype, s.variant] for s in signatures])
    rows: list[dict[str, Any]] = []
    for warmed in (False, True):
        code = ("import sys, json; from tkreg.bench.dispatch import cold_calls; "
                f"print(json.dumps(cold_calls(sys.argv[1], warmed={warmed})))")  # fmt: skip
        try:
            done = subprocess.run([sys.executable, "-c", code, payload], capture_output=True, text=True, timeout=timeout_s / 2)
        except subprocess.TimeoutExpired:
            late = f"the cold process did not finish within {timeout_s / 2:.0f} s"
            rows.append({"check": "cold", "warmed": warmed, "error": late})
            continue
        if done.returncode != 0:
            rows.append({"check": "cold", "warmed": warmed, "error": done.stderr.strip()[-500:]})
            continue
        got = json.loads(done.stdout.strip().splitlines()[-1])
        for r in got:
            say(f"  cold{' after warm()' if warmed else ''} {r.get('op')} {r.get('shape')}: first {r.get('first_us')} us, "
                f"warm {r.get('warm_us')} us, timing calls {r.get('timing_calls')}")  # fmt: skip
        rows += got
    return rows


def cold_calls(payload: str, warmed: bool = False) -> list[dict[str, Any]]:
    """In a new process: each signature's first call and a warm call (each synchronized), and how
    many times tuning timed anything. Before tkreg's, the peer's own first and warm calls of the
    signature: what torch itself pays the first time it sees a shape (cuBLAS picks its algorithm,
    a kernel loads) is then paid, and measured, apart from tkreg's own first-call work. With
    ``warmed``, tkreg.ops.warm() runs first (its seconds go in each row); without, the first row
    says what the process's first call preloaded."""
    from .. import ops
    from ..ops import tuning

    counted = {"n": 0}
    original = tuning.measure  # the tuner's own name for it: every timing call goes through it

    def counting(*args: Any, **kwargs: Any) -> Any:
        counted["n"] += 1
        return original(*args, **kwargs)

    tuning.measure = counting  # type: ignore[assignment]
    registry = default_registry()
    warm_s = None
    warmed_counts = None
    if warmed:
        started = time.perf_counter()
        warmed_counts = ops.warm()
        warm_s = round(time.perf_counter() - started, 3)
    rows = []
    for op_name, dims, dtype, variant in json.loads(payload):
        sig = Signature.of(op_name, dict(dims), dtype, variant)
        inputs = make_inputs(registry, sig, seed=2)
        op = registry.op(op_name)
        row: dict[str, Any] = {"check": "cold", "warmed": warmed, "op": op_name, "shape": sig.shape, "dtype": dtype,
                               "variant": variant}  # fmt: skip
        if warm_s is not None:
            row.update(warm_s=warm_s, warmed_signatures=(warmed_counts or {}).get(op_name, 0))
        peer = peer_call(op, inputs, None)  # as torch code calls it
        if peer is not None:
            first, warm = _first_and_warm(peer)
            row.update(torch_first_us=round(first, 1), torch_warm_us=round(warm, 1))
        call = functools.partial(ops.get(op_name), *inputs)
        plans = ops._installed["dispatchers"][op_name]._plans
        before, planned_before = counted["n"], len(plans)
        first, warm = _first_and_warm(call)
        row.update(first_us=round(first, 1), warm_us=round(warm, 1), timing_calls=counted["n"] - before,
                   source=_source(op_name, inputs), runs=_chosen(op_name, inputs)[0],
                   planned=len(plans) > planned_before)  # fmt: skip
        if peer is not None:
            after_peer, after_tkreg = _after_each_other(call, peer)
            row.update(warm_after_peer_us=round(after_peer, 1), torch_warm_after_tkreg_us=round(after_tkreg, 1))
        rows.append(row)
    if rows and not warmed:
        from ..ops import warming

        rows[0]["preload"] = warming.preloads.get(0)  # paid by this first call of the process
    return rows


def _after_each_other(call: Callable[[], Any], peer: Callable[[], Any], rounds: int = 3) -> tuple[float, float]:
    """Warm calls made after the same work as the first calls: tkreg's first call came right after
    the peer's calls, and a call made after other work pays for the host's caches and clock (a
    probe read a warm call at 2-3x its back-to-back time right after the peer's calls, on an H100).
    Medians over ``rounds`` (us) of one synchronized call each: ``call`` right after ten of
    ``peer``'s, and ``peer`` right after ten of ``call``'s."""
    after_peer, after_call = [], []
    for _ in range(rounds):
        after_call.append(_timed_after(peer, call))
        after_peer.append(_timed_after(call, peer))
    return statistics.median(after_peer), statistics.median(after_call)


def _timed_after(timed: Callable[[], Any], before: Callable[[], Any], calls_before: int = 10) -> float:
    """One synchronized call of ``timed`` (us), right after ``calls_before`` calls of ``before``."""
    import torch

    for _ in range(calls_before):
        before()
    torch.cuda.synchronize()
    start = time.perf_counter()
    timed()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e6


def _first_and_warm(call: Callable[[], Any]) -> tuple[float, float]:
    """A call's first time and the median of ten more (us), each synchronized."""
    import torch

    times = []
    for _ in range(11):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e6)
    return times[0], statistics.median(times[1:])


def _source(op: str, inputs: tuple[Any, ...]) -> str:
    from .. import ops

    text = ops.explain(op, *inputs)
    for source in ("from the tuning cache", "timed in this process", "prior"):
        if source in text:
            return source
    return "nothing to choose"


# -- 3. CUDA graphs ------------------------------------------------------------------------------------
def graph_replays(registry: Registry, signatures: Sequence[Signature]) -> list[dict[str, Any]]:
    import torch

    from .. import ops

    rows, seen = [], set()
    for sig in signatures:
        if sig.op in seen:
            continue
        seen.add(sig.op)
        inputs = make_inputs(registry, sig, seed=3)
        call = ops.get(sig.op)
        call(*inputs)
        # what a captured call runs, called eagerly: the bucket's choice for captured calls where it
        # has one (another kernel sums in another order), else the eager plan
        dispatcher = ops._installed["dispatchers"][sig.op]
        plan = dispatcher.planned(inputs, dispatcher.params.defaults)
        runs = _label(plan.graphed if plan.graphed is not None else plan)
        eager = (plan.graphed.returned if plan.graphed is not None else call)(*inputs)
        holder: dict[str, Any] = {}
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            call(*inputs)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                holder["out"] = call(*inputs)
            graph.replay()
            torch.cuda.synchronize()
            same = bool(torch.equal(holder["out"], eager))
            rows.append({"check": "graph", "op": sig.op, "shape": sig.shape, "dtype": sig.dtype, "runs": runs, "same_bits": same})
        except Exception as e:  # a call that cannot be captured is a finding
            rows.append({"check": "graph", "op": sig.op, "shape": sig.shape, "error": f"{type(e).__name__}: {e}"[:300]})
        say(f"  graph {sig.label}: {rows[-1]}")
    return rows


# -- 4. and 5. compiled and training use -------------------------------------------------------------------
def _wall_us(calls: dict[str, Callable[[], Any]]) -> dict[str, float]:
    """Per call, back to back, the calls' rounds interleaved (a clock change hits them alike);
    rounds of at least WORKLOAD_ROUND_MS (a training step is a few ms: one call per round would
    leave a median of a handful of samples)."""
    from ..ops.measuring import measure as time_calls

    got = time_calls(calls, TIMING_BUDGET_S, round_ms=WORKLOAD_ROUND_MS, rounds=WORKLOAD_ROUNDS)
    bad = {k: v for k, v in got.items() if not isinstance(v, float)}
    if bad:
        raise RuntimeError(str(bad))
    return {k: round(v, 2) for k, v in got.items()}  # type: ignore[misc]


def compiled_mlp(mm: Callable[..., Any], op: str) -> list[dict[str, Any]]:
    import torch
    import torch.nn.functional as F

    rows: list[dict[str, Any]] = []
    h, i = MLP["hidden"], MLP["intermediate"]
    weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / math.sqrt(k) for n, k in ((i, h), (i, h), (h, i))]

    def with_torch(x: Any, wg: Any, wu: Any, wd: Any) -> Any:
        return (F.silu(x @ wg.t()) * (x @ wu.t())) @ wd.t()

    def with_tkreg(x: Any, wg: Any, wu: Any, wd: Any) -> Any:
        return mm(F.silu(mm(x, wg.t())) * mm(x, wu.t()), wd.t())

    for tokens in MLP_TOKENS:
        rows.append(_mlp_row(op, tokens, weights, with_torch, with_tkreg))
        say(f"  compiled MLP {tokens} tokens: {rows[-1]}")
    return rows


def _mlp_row(op: str, tokens: int, weights: list[Any], with_torch: Callable[..., Any], with_tkreg: Callable[..., Any]) -> dict:
    """Both blocks under torch.compile (the default mode, and mode="reduce-overhead", which
    replays CUDA graphs as small-batch inference runs), timed interleaved with their eager
    calls; and whether Inductor generated the same code for both (``same_code``): where every
    product of the block traces as torch's own, the two compiled graphs should be one."""
    import torch
    from torch._inductor.utils import run_and_get_code

    h, i = MLP["hidden"], MLP["intermediate"]
    x = torch.randn(tokens, h, device="cuda", dtype=torch.bfloat16)
    row: dict[str, Any] = {"check": "compiled_mlp", "op": op, "tokens": tokens, "hidden": h, "intermediate": i}
    try:
        with_tkreg(x, *weights)  # tunes the three shapes eagerly, as a first eager call would
        torch._dynamo.reset()
        for w in weights:  # a model's weights stay put: CUDA graphs then read them where they are, uncopied
            torch._dynamo.mark_static_address(w, guard=False)
        ours = torch.compile(with_tkreg, fullgraph=True)
        theirs = torch.compile(with_torch, fullgraph=True)
        got, ours_code = run_and_get_code(ours, x, *weights)
        want, theirs_code = run_and_get_code(theirs, x, *weights)
        row["max_abs_diff"] = float((got.float() - want.float()).abs().max())
        row["same_code"] = bool(ours_code) and _wrapper_calls(ours_code) == _wrapper_calls(theirs_code)
        ours_graphs = torch.compile(with_tkreg, fullgraph=True, mode="reduce-overhead")
        theirs_graphs = torch.compile(with_torch, fullgraph=True, mode="reduce-overhead")
        for _ in range(3):  # CUDA graph trees warm up, record, then replay
            ours_graphs(x, *weights), theirs_graphs(x, *weights)
        row.update(_wall_us({"tkreg_us": lambda: ours(x, *weights), "torch_compile_us": lambda: theirs(x, *weights),
                             "tkreg_graphs_us": lambda: ours_graphs(x, *weights),
                             "torch_graphs_us": lambda: theirs_graphs(x, *weights),
                             "eager_tkreg_us": lambda: with_tkreg(x, *weights),
                             "eager_torch_us": lambda: with_torch(x, *weights)}))  # fmt: skip
        row["ratio"] = round(row["torch_compile_us"] / row["tkreg_us"], 4)
        row["graphs_ratio"] = round(row["torch_graphs_us"] / row["tkreg_graphs_us"], 4)

        hidden = torch.empty(tokens, i, device="cuda", dtype=torch.bfloat16)
        products = {"x @ gate.t()": (x, weights[0].t()), "x @ up.t()": (x, weights[1].t()),
                    "h @ down.t()": (hidden, weights[2].t())}
        row["decisions"] = _decisions(op, products)
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    return row


def _wrapper_calls(sources: Sequence[str]) -> list[str]:
    """What each generated module's ``call`` runs: its lines from ``def call(`` on, up to the
    module's next top-level statement, without comments (they name source lines)."""
    bodies = []
    for source in sources:
        lines = source.splitlines()
        start = next((n for n, line in enumerate(lines) if line.lstrip().startswith("def call(")), None)
        if start is None:
            continue
        body = [lines[start]]
        for line in lines[start + 1 :]:
            if line and not line[0].isspace():
                break
            if line.strip() and not line.strip().startswith("#"):
                body.append(line.rstrip())
        bodies.append("\n".join(body))
    return bodies


def _decisions(op: str, products: dict[str, tuple[Any, Any]]) -> dict[str, str]:
    """What tkreg.ops does for each product and why: the first line of its explanation, which
    names every candidate's time."""
    from .. import ops

    return {what: ops.explain(op, a, b).splitlines()[0][:2000] for what, (a, b) in products.items()}


def training_step(mm: Callable[..., Any], op: str) -> list[dict[str, Any]]:
    """The step's time; what the forward's two products run, and what tkreg.ops would run for
    the backward formula's four (the input's gradient d_out @ W and the weight's x.t() @ d_out),
    which it calls where a kernel ran the forward (where the peer did, torch's autograd runs
    torch's backward)."""
    import torch
    import torch.nn.functional as F


    t, h, inner = TRAIN["tokens"], TRAIN["hidden"], TRAIN["inner"]
    x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16)
    w1 = (torch.randn(inner, h, device="cuda", dtype=torch.bfloat16) / math.sqrt(h)).requires_grad_()
    w2 = (torch.randn(h, inner, device="cuda", dtype=torch.bfloat16) / math.sqrt(inner)).requires_grad_()

    def step(linear: Callable[[Any, Any], Any]) -> None:
        w1.grad = w2.grad = None
        out = linear(F.gelu(linear(x, w1.t())), w2.t())
        out.float().pow(2).mean().backward()

    row: dict[str, Any] = {"check": "training", "op": op, "tokens": t, "hidden": h, "inner": inner}
    try:
        step(mm)  # tunes the forward and backward shapes
        step(lambda a, b: a @ b)
        grads_torch = (w1.grad.clone(), w2.grad.clone())
        step(mm)
        row["grad_max_rel_diff"] = max(float((g.float() - r.float()).abs().max() / r.float().abs().max())
                                       for g, r in zip((w1.grad, w2.grad), grads_torch))  # fmt: skip
        row.update(_wall_us({"tkreg_us": lambda: step(mm), "torch_us": lambda: step(lambda a, b: a @ b)}))
        row["ratio"] = round(row["torch_us"] / row["tkreg_us"], 4)
        h = F.gelu(x @ w1.t()).detach()
        grad_out, grad_h = torch.empty(t, w2.shape[0], device="cuda", dtype=x.dtype), torch.empty_like(h)
        products = {"x @ w1.t()": (x, w1.t()), "h @ w2.t()": (h, w2.t()), "d_out @ w2": (grad_out, w2.detach()),
                    "h.t() @ d_out": (h.t(), grad_out), "d_h @ w1": (grad_h, w1.detach()), "x.t() @ d_h": (x.t(), grad_h)}
        row["decisions"] = _decisions(op, products)
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    say(f"  training step: {row}")
    return [row]


def row_training(registry: Registry, op: Op) -> list[dict[str, Any]]:
    """A forward and backward of a row op (inputs from its make_inputs, its gradients) through
    tkreg.ops against the same through its peer, with torch's autograd, at model sizes."""
    dtype = "bfloat16" if "bfloat16" in op.bench_dtypes else op.bench_dtypes[0]
    rows = []
    for m, n in ROW_TRAINING:
        sig = Signature.of(op.name, {"M": m, "N": n}, dtype)
        row: dict[str, Any] = {"check": "row_training", "op": op.name, "shape": sig.shape, "dtype": dtype}
        try:
            row.update(_row_step(registry, op, sig))
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        rows.append(row)
        say(f"  {op.name} training {row['shape']}: {row}")
    return rows


def _row_step(registry: Registry, op: Op, sig: Signature) -> dict[str, Any]:
    import torch

    from .. import ops
    from ..ops.forms import as_tuple

    call, peer = ops.get(op.name), refs.resolve(op.peer)
    inputs = tuple(t.requires_grad_(name in op.grads) for name, t in zip(op.inputs, make_inputs(registry, sig, seed=3)))
    leaves = [t for t in inputs if t.requires_grad]
    grad = torch.randn_like(as_tuple(call(*inputs))[0])

    def step(forward: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            for t in leaves:
                t.grad = None
            as_tuple(forward())[0].backward(grad)

        return run

    ours = step(lambda: call(*inputs))
    theirs = step(lambda: peer(*inputs, out=None, **op.defaults))
    ours()
    got = [t.grad.clone() for t in leaves]
    theirs()
    row: dict[str, Any] = {"grad_max_abs_diff": max(float((g.float() - t.grad.float()).abs().max()) for g, t in zip(got, leaves))}
    row.update(_wall_us({"tkreg_us": ours, "torch_us": theirs}))
    row["ratio"] = round(row["torch_us"] / row["tkreg_us"], 4)
    row["decision"] = ops.explain(op.name, *[t.detach() for t in inputs])  # whole: the training choice ends it
    return row


def batched(mm: Callable[..., Any], op: str) -> list[dict[str, Any]]:
    import torch

    from .. import ops

    rows = []
    for shape in ((4, 128, 256, 64), (8, 33, 1000, 72)):
        b, m, k, n = shape
        a = torch.randn(b, m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(b, k, n, device="cuda", dtype=torch.bfloat16)
        row: dict[str, Any] = {"check": "batched", "op": op, "shape": "x".join(map(str, shape))}
        try:
            got = mm(a, w)
            want = torch.bmm(a.float(), w.float())
            row["max_abs_err"] = float((got.float() - want).abs().max())
            row["decision"] = ops.explain(op, a, w)
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        rows.append(row)
        say(f"  batched {row['shape']}: {row}")
    return rows


def signatures(registry: Registry) -> list[Signature]:
    """Nothing to compile ahead: the shapes are drawn when the suite runs."""
    return []
