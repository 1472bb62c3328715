"""What calls of one signature do (:class:`Plan`), and an op's parameters as calls give them
(:class:`Params`): the data a dispatcher (:mod:`.dispatch`) keeps per signature."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.registry import Ranking
from ..core.specs import Op
from . import native
from .forms import KernelView, OutputLayout
from .replaying import Replayer

PLAN_CACHE_SIZE = 4096  # signatures remembered per op (and direction) before the cache starts over
# The calls tkreg.ops' C++ fast path keeps in its memo (fast_call.cpp): setting either on any plan
# empties every memo, so the next call reads them from its plan again.
MEMOIZED_CALLS = frozenset({"returned", "gradient_call"})


class Params:
    """An op's scalar parameters as calls give them: checked against the op's declaration,
    defaults filled, as a tuple in the declared order (part of a plan's key)."""

    def __init__(self, op: Op) -> None:
        self.owner = f"tkreg.ops.{op.name}"
        self.specs = {p.name: p for p in op.params}
        self.names = tuple(self.specs)
        self.defaults = tuple(p.default for p in op.params)
        self.kinds = tuple(p.kind for p in op.params)

    def values(self, given: dict[str, Any]) -> tuple[Any, ...]:
        if not given:
            return self.defaults
        if len(given) == len(self.names):
            # The common call names every parameter with a value of its declared type (a model's
            # eps, torch.ops' schema): nothing to fill or convert.
            try:
                got = tuple([given[n] for n in self.names])
            except KeyError:
                pass
            else:
                if all(type(v) is k for v, k in zip(got, self.kinds)):
                    return got
        specs = self.specs
        for name in given:
            if name not in specs:
                known = ", ".join(self.names) if self.names else "none"
                raise TypeError(f"{self.owner}() got an unexpected keyword argument {name!r}; its parameters: {known}")
        return tuple(specs[n].check(self.owner, given[n]) if n in given else d for n, d in zip(self.names, self.defaults))

    def as_dict(self, values: tuple[Any, ...]) -> dict[str, Any]:
        return dict(zip(self.names, values))


@dataclass
class Plan:
    """What calls of one signature do: the kernels to try in order (launcher names and
    callables), else the peer, and why; the outputs they allocate."""

    view: KernelView | None
    outputs: tuple[OutputLayout, ...]
    params: dict[str, Any]
    launchers: list[tuple[str, Callable[..., Any]]] = field(default_factory=list)
    why: str = ""
    peer_reason: str = ""  # why the peer runs when there is no launcher left
    fallback: bool = False  # the peer runs because no kernel takes the inputs (warned once per reason)
    run: Callable[..., Any] | None = None  # built by Dispatcher.prepare: run(*inputs) -> every output
    returned: Callable[..., Any] | None = None  # run(*inputs) -> the outputs callers get (tkreg.ops.<op>)
    source: str = ""  # what decided: "tuning", "cache" or "prior" (empty: nothing to decide)
    complete: bool = True  # every output is written (False: a peer left the kernels' own unwritten)
    key: Any = None  # the signature key the plan is kept under
    # the peer runs as torch code calls it (out=None), so torch's autograd records its own backward
    autograd_peer: bool = False
    # what a call that wants a gradient makes, once a first such call found it the peer's own (the
    # peer runs these inputs, or training through it was timed the faster, or without that timing
    # the kernel leads by less than AUTOGRAD_LEAD_US; tkreg.ops' fast path calls it too); None
    # until then, or where the op's autograd.Function takes such calls
    gradient_call: Callable[..., Any] | None = None
    autograd_decided: bool = False  # a kernel's plan: whether gradient_call was decided
    replayer: Replayer | None = None  # a kernel declared replay=True: its launches are recorded (.replaying)
    # what calls captured in a CUDA graph run instead, where the bucket's choice names another
    # candidate for them (the fastest replayed: Choice.graphed); its run is made with this plan's
    graphed: Plan | None = None
    # the graphed plan gives only the outputs callers get (a peer without the kernels' own outputs,
    # which a backward reads): captured calls for every output (an autograd.Function's forward,
    # torch.ops.tkreg) run this plan's own
    graphed_returned_only: bool = False
    # its own run and returned, where a capture switches ``run`` and ``returned`` to ``graphed``'s
    eager_calls: tuple[Callable[..., Any], Callable[..., Any]] | None = None
    bucket: str | None = None  # the tuning bucket its choice is kept under, where it has one

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in MEMOIZED_CALLS:
            native.plans_changed()

    def describe(self, op: str) -> str:
        if self.launchers:
            names = " > ".join(name for name, _ in self.launchers)
            return f"tkreg.ops.{op} calls {self.launchers[0][0]} ({names}): {self.why}"
        return f"tkreg.ops.{op} calls its peer: {self.peer_reason}"


def picker(count: int, returned: tuple[int, ...]) -> Callable[[Any], Any] | None:
    """From an op's ``count`` outputs, the ones callers of tkreg.ops.<op> get (``returned``, their
    indices; None: all of them)."""
    if count == 1 or len(returned) == count:
        return None
    if len(returned) == 1:
        (index,) = returned
        return lambda outs: outs[index]
    return lambda outs: tuple([outs[i] for i in returned])


def rejections(ranking: Ranking, skipped: Sequence[str] = ()) -> str:
    """Why no kernel runs: those skipped, then each rejected kernel with its reasons."""
    parts = [*skipped, *(f"{v.kernel.name} ({' | '.join(v.reasons)})" for v in ranking.verdicts if v.reasons)]
    return "; ".join(parts) or "the op has no kernels"
