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
   choice for captured calls) is judged the same way. After 2 and 3, inside the buckets: for
   tuned signatures, another shape of the same bucket (every size redrawn within it), which
   tkreg.ops runs from the first shape's timing without timing anything, judged the same way on
   its own inputs, within :data:`SIBLINGS_BUDGET_S`; for a linear layer also one of an odd
   width, which a winner needing TMA's 16-byte rows refuses (then timed in a bucket of its own).
2. A cold process with the warm cache: the same shapes in a new process make no timing call; torch's
   own first call of each is made first, then tkreg's first call of each, one shape after another,
   timed against a warm call of the same shape: the median of calls made back to back, and a call
   made after the same work as the first (the previous shape's calls); and, from a third process
   making the same calls, torch's own call of each shape at the point where tkreg's first call
   came.
3. CUDA graphs: a tuned call captured and replayed gives the bits of an eager call of what it runs
   (the bucket's choice for captured calls, where it has one).
4. torch.compile: a Llama-3-8B MLP block (gate, up, down) through the linear op under
   torch.compile(fullgraph=True), in the default mode and in mode="reduce-overhead" (CUDA
   graphs), against torch.compile of the same block written with ``@``; and whether Inductor
   generated the same code for the two.
5. Training: a 2-layer MLP step (forward and backward) through the linear op against torch, at
   2048 tokens and at 256 (a small batch, host-bound), in bfloat16 and as mixed-precision
   training runs it (float32 weights, torch.autocast);
   and a forward and backward through each differentiable row op (a norm) at model sizes
   against the same through its peer, as torch code trains.
6. Batched linear calls (B, M, K) @ (B, K, N) against torch.bmm.

Modules: :mod:`.shapes` (1's signatures), :mod:`.picks` (1), :mod:`.cold` (2), :mod:`.graphs`
(3), :mod:`.workloads` (4-6).
"""

from __future__ import annotations

import itertools
import os
import random
import time
from typing import Any

from ...core.loading import default_registry
from ...core.registry import Registry
from ..calls import Signature
from ..suites import Deadline, Measured
from . import cold, picks
from .graphs import graph_replays
from .shapes import sibling, unseen
from .workloads import TRAIN_TOKENS, batched, compiled_mlp, row_training, training_step

SIBLINGS_BUDGET_S = 90.0  # for the shapes inside tuned buckets (at most a third of what the suite has left)


def measure(deadline: Deadline) -> Measured:
    """The suite, in the order of the module's docstring, within ``deadline``."""
    import torch

    from ... import ops

    registry = default_registry()
    seed = int(os.environ.get("TKREG_BENCH_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    tuned: list[tuple[Signature, dict[str, Any]]] = []  # each tuned signature, and its pick's row
    for op in registry.ops():
        if op.contract.kind == "plain" or not op.cases_in("bench"):
            continue
        for sig in unseen(op, rng):
            deadline.check(f"pick against best for {sig.label}")
            row = picks.pick_against_best(registry, op, sig)
            rows.append(row)
            if "error" not in row:
                tuned.append((sig, row))
    tuned_signatures = [sig for sig, _ in tuned]
    deadline.check("the cold process")
    rows += cold.cold_process(tuned_signatures, min(deadline.left() - 60, 120))
    deadline.check("CUDA graphs")
    rows += graph_replays(registry, tuned_signatures)
    # after the cold processes: the siblings' signatures, remembered too, would add to their preload
    rows += _inside_buckets(registry, tuned, rng, deadline)
    linear = [op for op in registry.ops() if op.contract.kind == "linear"]
    if linear:
        mm = ops.get(linear[0].name)
        deadline.check("the compiled MLP")
        rows += compiled_mlp(mm, linear[0].name)
        for tokens in TRAIN_TOKENS:
            deadline.check(f"the training step of {tokens} tokens")
            rows += training_step(mm, linear[0].name, tokens)
            deadline.check(f"the training step of {tokens} tokens under autocast")
            rows += training_step(mm, linear[0].name, tokens, autocast=True)
        rows += batched(mm, linear[0].name)
    for op in registry.ops():
        if op.contract.kind == "rows" and op.grads and op.peer is not None:
            deadline.check(f"{op.name}'s training step")
            rows += row_training(registry, op)
    torch.cuda.synchronize()
    summary: dict[str, Any] = {"seed": seed, **picks.summary(rows), **cold.summary(rows)}
    notes = (f"pick: tkreg.ops against the fastest of every kernel (own choice and tuning configs) and the peer on random "
             f"shapes (seed {seed}), wall time per call as queued back to back (CUDA events, launch included), median of "
             f"interleaved rounds; pass where the fastest other takes >= {picks.PICK_WITHIN} of tkreg.ops' time (ratio); "
             f"choice_ratio: the same for the candidate tkreg.ops chose, called directly (without the dispatch).")  # fmt: skip
    return Measured(kind="dispatch", rows=rows, notes=notes, summary=summary)


def _inside_buckets(registry: Registry, tuned: list[tuple[Signature, dict[str, Any]]], rng: random.Random,
                    deadline: Deadline) -> list[dict[str, Any]]:
    """Another shape of each tuned signature's bucket, the ops taken in turn so that a budget that
    runs out leaves every op some (:func:`.picks.inside_bucket`)."""
    by_op: dict[str, list[tuple[Signature, dict[str, Any]]]] = {}
    for sig, row in tuned:
        by_op.setdefault(sig.op, []).append((sig, row))
    ends = time.monotonic() + min(SIBLINGS_BUDGET_S, deadline.left() / 3)
    rows = []
    for pair in (p for turn in itertools.zip_longest(*by_op.values()) for p in turn if p is not None):
        sig, tuned_row = pair
        op = registry.op(sig.op)
        # a linear layer's bucket also gets a shape of an odd width, which TMA kernels refuse
        for odd_width in (False, True) if op.contract.kind == "linear" else (False,):
            other = sibling(sig, op.contract.kind, rng, odd_width)
            if other is None or time.monotonic() > ends:
                continue
            deadline.check(f"inside the bucket of {sig.label}")
            rows.append(picks.inside_bucket(registry, op, other, tuned_row) | ({"odd_width": True} if odd_width else {}))
    return rows


def signatures(registry: Registry) -> list[Signature]:
    """Nothing to compile ahead: the shapes are drawn when the suite runs."""
    return []
