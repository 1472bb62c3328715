"""CUDA graphs: a tuned call captured and replayed gives the bits of an eager call of what it runs
(the bucket's choice for captured calls, where it has one)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...core.registry import Registry
from ..calls import Signature, make_inputs, say
from .picks import candidate_label


def graph_replays(registry: Registry, signatures: Sequence[Signature]) -> list[dict[str, Any]]:
    import torch

    from ... import ops

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
        runs = candidate_label(plan.graphed if plan.graphed is not None else plan)
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

