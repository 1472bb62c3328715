"""Calls captured in CUDA graphs run their bucket's choice for graphs, at no cost to eager calls.

A replay of a CUDA graph pays the GPU time of what was captured, not the host's: where a bucket's
eager choice is launch-bound, another candidate may take far less GPU time (``Choice.graphed``),
and a plan then keeps that candidate's plan beside its own (``Plan.graphed``). Asking at every call
whether the stream is being captured cost about a microsecond (an H200, 2026-11-29: launch-bound
calls of divergent plans read 0.87-0.93 of the same call without the check), so the plans are
switched instead: while any ``torch.cuda.CUDAGraph`` captures (``torch.cuda.graph``,
``make_graphed_callables`` and torch.compile's CUDA graphs all begin and end their captures there)
every such plan's calls go to its graphed plan, and back when the last capture ends.

Just before a capture begins, each such plan not yet ready makes its graphed plan's first calls
(``warm``: the load of its kernel, the recorded call), so that no capture is a kernel's first call,
while a process that never captures never loads a kernel it will not run (its first calls, and
their preload, stay as cheap as before).

While a capture is in progress, a switched plan asks whether its caller's stream is the one captured,
so an eager call made meanwhile on another thread or stream keeps its own choice. A capture begun
some other way (``cudaStreamBeginCapture`` from another library) runs the eager choices.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

_lock = threading.RLock()
_own = threading.local()  # .quiet: this thread's captures are tkreg's own (tuning), not a model's
_depth = 0  # captures in progress
_hooked = False
# Plans with a graphed plan, by id (weakly: a plan's own calls are kept on it, ``Plan.eager_calls``),
# and those whose graphed plan has not made its first calls yet, with what makes them (given the
# plan; False: failed).
_plans: dict[int, weakref.ref[Any]] = {}
_pending: dict[int, Callable[[Any], bool]] = {}


def track(plan: Any, run: Callable[..., Any], returned: Callable[..., Any],
          warm: Callable[[Any], bool] | None = None) -> None:
    """Give ``plan`` (which has a ``graphed`` plan) its eager ``run`` and ``returned``, and the graphed
    plan's calls instead while a capture is in progress; ``warm(plan)`` makes the graphed plan's
    first calls before the next capture begins (None: nothing to make, or made already)."""
    _hook()
    with _lock:
        key = id(plan)

        def gone(_: Any, key: int = key) -> None:
            _plans.pop(key, None)
            _pending.pop(key, None)

        _plans[key] = weakref.ref(plan, gone)
        if warm is not None:
            _pending[key] = warm
        plan.eager_calls = (run, returned)
        if _depth:
            _to_graphed(plan)
        else:
            plan.run, plan.returned = run, returned


def forget(plan: Any) -> None:
    """``plan`` keeps its own calls, captured or not (its graphed plan failed)."""
    with _lock:
        _plans.pop(id(plan), None)
        _pending.pop(id(plan), None)
        if plan.eager_calls is not None:
            plan.run, plan.returned = plan.eager_calls
        plan.graphed, plan.eager_calls = None, None


def eager(plan: Any) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``plan``'s own run and returned, whether or not a capture is in progress (a call that wants
    a gradient needs the peer's own call, which records torch's backward)."""
    calls = plan.eager_calls
    return calls if calls is not None else (plan.run, plan.returned)


def capturing() -> bool:
    """Whether a CUDA graph capture is in progress in this process (as far as the switch knows)."""
    return _depth > 0


def before() -> None:
    """A capture is about to begin (the stream does not capture yet): every pending graphed plan
    makes its first calls; one that fails is forgotten."""
    with _lock:
        pending = [(_plans[key](), warm) for key, warm in _pending.items() if key in _plans]
        _pending.clear()
    for plan, warm in pending:
        if plan is not None and not warm(plan):
            forget(plan)


def began() -> None:
    """A capture began: every tracked plan calls its graphed plan."""
    global _depth
    with _lock:
        _depth += 1
        if _depth == 1:
            for ref in list(_plans.values()):
                plan = ref()
                if plan is not None:
                    _to_graphed(plan)


def ended() -> None:
    """A capture ended: where none is left, every tracked plan calls its own again."""
    global _depth
    with _lock:
        _depth = max(0, _depth - 1)
        if _depth == 0:
            for ref in list(_plans.values()):
                plan = ref()
                if plan is not None and plan.eager_calls is not None:
                    plan.run, plan.returned = plan.eager_calls


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Captures this thread begins inside are tkreg's own (the tuner times candidates' replays):
    they switch no plan."""
    before = getattr(_own, "quiet", False)
    _own.quiet = True
    try:
        yield
    finally:
        _own.quiet = before


def _capturing_stream() -> bool:
    """Whether the current stream is being captured (about a microsecond: asked only by switched
    plans, so only while a capture is in progress somewhere in the process)."""
    import torch

    return torch.cuda.is_current_stream_capturing()


def _to_graphed(plan: Any) -> None:
    """``plan``'s calls made on a capturing stream go to its graphed plan's; every output's too,
    unless the graphed plan leaves some unwritten (a peer without the kernels' own outputs:
    ``Plan.graphed_returned_only``). Calls on other streams (another thread's eager work while a
    capture is in progress) keep the plan's own."""
    graphed = plan.graphed
    own_run, own_returned = plan.eager_calls

    # graphed.run read at each call: the graphed plan's first calls replace its own (.replaying)
    def run(*inputs: Any) -> Any:
        return graphed.run(*inputs) if _capturing_stream() else own_run(*inputs)

    def returned(*inputs: Any) -> Any:
        return graphed.returned(*inputs) if _capturing_stream() else own_returned(*inputs)

    if not plan.graphed_returned_only:
        plan.run = run
    plan.returned = returned


def _hook() -> None:
    """Wrap ``torch.cuda.CUDAGraph``'s capture_begin and capture_end (once, at the first plan that
    needs it, so a process without one leaves torch as it is)."""
    global _hooked
    if _hooked:
        return
    import torch

    with _lock:
        if _hooked:
            return
        graph = torch.cuda.CUDAGraph
        begin, end = graph.capture_begin, graph.capture_end

        def capture_begin(self: Any, *args: Any, **kwargs: Any) -> Any:
            own = getattr(_own, "quiet", False)
            if not own:
                before()
            got = begin(self, *args, **kwargs)
            if not own:
                began()
            return got

        def capture_end(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return end(self, *args, **kwargs)
            finally:
                if not getattr(_own, "quiet", False):
                    ended()

        capture_begin.__wrapped__ = begin  # type: ignore[attr-defined]
        capture_end.__wrapped__ = end  # type: ignore[attr-defined]
        graph.capture_begin, graph.capture_end = capture_begin, capture_end  # type: ignore[method-assign]
        _hooked = True
