"""Calls replayed from CUDA graphs, timed as a captured model pays them: each call captured
several times over in one graph (after a call on a side stream, as torch asks before a capture),
the graphs replayed in interleaved rounds between CUDA events; the median round's time per call.
A replay launches no Python, so this is the calls' GPU time, launch gaps included. GPU only."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from typing import Any

ROUND_US = 2000.0  # GPU time each graph replays per round (its calls' eager time tells how many)
MAX_CALLS = 500  # calls captured in one graph
ROUNDS = 7


def graphed_us(calls: Mapping[str, Callable[[], Any]], eager_us: Mapping[str, float]) -> dict[str, float | str]:
    """Per-call time (us) of each call replayed from a CUDA graph, or why it could not be captured;
    ``eager_us`` (its time per call queued eagerly) sizes each graph."""
    import torch

    graphs: dict[str, tuple[Any, int]] = {}
    got: dict[str, float | str] = {}
    for name, call in calls.items():
        count = max(1, min(MAX_CALLS, int(ROUND_US / max(eager_us.get(name, ROUND_US), 1.0))))
        try:
            graphs[name] = (_captured(call, count), count)
        except Exception as e:  # a call that cannot be captured is a finding, not the end of the run
            got[name] = f"not captured: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    taken: dict[str, list[float]] = {name: [] for name in graphs}
    order = list(graphs)
    for _ in range(ROUNDS):
        for name in order:
            graph, count = graphs[name]
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            taken[name].append(start.elapsed_time(end) * 1e3 / count)
        order.reverse()
    got.update({name: statistics.median(values) for name, values in taken.items()})
    graphs.clear()
    torch.cuda.synchronize()
    return got


def _captured(call: Callable[[], Any], count: int) -> Any:
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(count):
            call()
    return graph
