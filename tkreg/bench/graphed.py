"""Calls replayed from CUDA graphs, timed as a captured model pays them: each call captured
several times over in one graph (tkreg.ops.measuring.CudaClock.capture, its calls in a model's
capture: tkreg.ops runs its choice for captured calls), the graphs replayed in interleaved rounds
between CUDA events; the median round's time per call. A replay launches no Python, so this is
the calls' GPU time, launch gaps included. GPU only."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from ..ops.measuring import CudaClock, replay_times

ROUND_US = 2000.0  # GPU time each graph replays per round (its calls' eager time tells how many)
MAX_CALLS = 500  # calls captured in one graph
ROUNDS = 7


def graphed_us(calls: Mapping[str, Callable[[], Any]], eager_us: Mapping[str, float]) -> dict[str, float | str]:
    """Per-call time (us) of each call replayed from a CUDA graph, or why it could not be captured;
    ``eager_us`` (its time per call queued eagerly) sizes each graph."""
    order = [(name, max(1, min(MAX_CALLS, int(ROUND_US / max(eager_us.get(name, ROUND_US), 1.0))))) for name in calls]
    return replay_times(calls, order, functools.partial(CudaClock().capture, own=False), replays=ROUNDS)
