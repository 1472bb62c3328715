"""Dispatch: one op's call goes to the best kernel for its input signature, decided once.

A call's signature (dtype, shape, strides, device and base alignment class of every input; see
:mod:`tkreg.core.signature`) keys a plan. The first call of a signature makes the plan: the op's form
checks the calling contract (bad input gets the op's clear error), views the inputs as kernel
inputs, and the registry ranks the kernels for them exactly as ``tkreg.lookup`` does (wall time
on a measured GPU, beside the op's peer). Later calls of the signature only run the plan: view
the inputs, allocate the output, call the first kernel's launcher.

A launcher that refuses (tkreg.InputError, raised before it launches anything) passes the call to
the next kernel, and the plan drops it for that signature. When no kernel takes the inputs (or the
inputs cannot be viewed as kernel inputs without a copy) the call goes to the op's peer, with a
PeerFallbackWarning that says why, once per reason. When the ranking says the peer is faster for
this signature the call goes to the peer too, logged at INFO on the "tkreg.ops" logger.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core import refs
from ..core.errors import InputError
from ..core.registry import Ranking, Registry
from ..core.signature import ALIGNMENT_CLASS_BYTES
from ..core.specs import Kernel, Op
from .forms import Form, KernelView, form_for

log = logging.getLogger("tkreg.ops")

PLAN_CACHE_SIZE = 4096  # signatures remembered per op before the cache starts over
TRACEABLE = "tkreg_traceable"  # launcher attribute: see tkreg.ops.traceable
# Stand-in base addresses for deciding at trace time: aligned far beyond any check, and aligned
# only to the element size (a real tensor's address is always a multiple of it).
ALIGNED_BASE = 1 << 20


class PeerFallbackWarning(UserWarning):
    """A tkreg op ran its peer (e.g. torch) because no registered kernel takes the inputs."""


@dataclass
class Plan:
    """What calls of one signature do: the kernels to try in order (launcher names and
    callables), else the peer, and why."""

    view: KernelView | None
    launchers: list[tuple[str, Callable[..., Any]]] = field(default_factory=list)
    why: str = ""
    peer_reason: str = ""  # why the peer runs when there is no launcher left
    fallback: bool = False  # the peer runs because no kernel takes the inputs (warned once per reason)
    run: Callable[[Sequence[Any]], Any] | None = None  # built by Dispatcher.prepare

    def describe(self, op: str) -> str:
        if self.launchers:
            names = " > ".join(name for name, _ in self.launchers)
            return f"tkreg.ops.{op} calls {self.launchers[0][0]} ({names}): {self.why}"
        return f"tkreg.ops.{op} calls its peer: {self.peer_reason}"


class Dispatcher:
    """Calls one op's best kernel (or its peer) for each input signature."""

    def __init__(self, registry: Registry, op: Op) -> None:
        self.registry = registry
        self.op = op
        self.form: Form = form_for(op)
        self._plans: dict[Any, Plan] = {}
        self._launchers: dict[str, Callable[..., Any]] = {}
        self._warned: set[str] = set()

    # -- the hot path -----------------------------------------------------------------------
    def __call__(self, *inputs: Any) -> Any:
        try:
            key = tuple([(t.dtype, t.shape, t.stride(), t.device, t.data_ptr() % ALIGNMENT_CLASS_BYTES) for t in inputs])
        except (AttributeError, TypeError):  # not tensors: plan() gives the op's error
            key = None
        plan = self._plans.get(key) if key is not None else None
        if plan is None:
            plan = self.plan(inputs)
            if plan.fallback:
                self.warn_peer(plan.peer_reason)
            self.prepare(plan, inputs)
            if key is not None:
                if len(self._plans) >= PLAN_CACHE_SIZE:
                    self._plans.clear()
                self._plans[key] = plan
        return plan.run(inputs)  # type: ignore[misc]

    def prepare(self, plan: Plan, inputs: Sequence[Any]) -> None:
        """Build ``plan.run`` for calls of this signature: everything the signature fixes (views,
        output shape, dtype and device, the launcher) is bound once."""
        import torch

        if not plan.launchers:
            plan.run = self.peer_run(inputs, plan.peer_reason)
            return

        name, launch = plan.launchers[0]
        view = plan.view
        assert view is not None  # a plan with launchers always has a view
        in_shapes, out_view = view.input_shapes, view.output_shape
        views = any(s is not None for s in in_shapes)
        spec = self.form.output_spec(inputs)
        new_output = self.form.new_output
        empty = torch.empty
        shape, dtype, device = (spec.shape, spec.dtype, spec.device) if spec is not None else ((), None, None)

        def run(inputs: Sequence[Any]) -> Any:
            kernel_inputs = [x if s is None else x.view(s) for x, s in zip(inputs, in_shapes)] if views else inputs
            out = empty(shape, dtype=dtype, device=device) if spec is not None else new_output(inputs)
            try:
                launch(*kernel_inputs, out=out if out_view is None else out.view(out_view))
            except InputError as e:
                self._refused(plan, name, e, inputs)
                return plan.run(inputs)  # type: ignore[misc]
            return out

        plan.run = run
        where = getattr(inputs[0], "device", None) if inputs else None
        if getattr(where, "type", None) == "cuda" and torch.cuda.device_count() > 1:
            # Triton launches on the current device; inputs on another GPU must run there.
            def on_their_device(inputs: Sequence[Any]) -> Any:
                with torch.cuda.device(where):
                    return run(inputs)

            plan.run = on_their_device

    # -- deciding ------------------------------------------------------------------------------
    def plan(self, inputs: Sequence[Any]) -> Plan:
        """Decide for these inputs (the slow path, once per signature)."""
        reasons = self.form.contract_reasons(inputs)
        if reasons:
            raise InputError(f"tkreg.ops.{self.op.name}: " + "; ".join(reasons))
        view = self.form.kernel_view(inputs)
        if isinstance(view, KernelView):
            try:
                kernel_inputs = view.inputs(inputs)
            except RuntimeError as e:  # the strides allow no such view after all
                view = f"inputs cannot be viewed as kernel inputs without a copy ({e})"
        if not isinstance(view, KernelView):
            return self._fallback(None, view)
        ranking = self.registry.ranking(self.op.name, None, kernel_inputs)
        if ranking.prefer_peer:
            plan = Plan(view, [], peer_reason=f"faster for these inputs: {ranking.peer_ranking}")
            log.info("%s", plan.describe(self.op.name))
            return plan
        kernels = ranking.runnable
        if not kernels:
            return self._fallback(view, "no registered kernel takes these inputs: " + _rejections(ranking))
        why = ranking.verdicts[0].ranking or ("the only kernel that takes them" if len(kernels) == 1 else "first by priority")
        plan = Plan(view, [(k.name, self.launcher(k)) for k in kernels], why, "every kernel refused")
        log.info("%s", plan.describe(self.op.name))
        return plan

    @staticmethod
    def _fallback(view: KernelView | None, reason: str) -> Plan:
        return Plan(view, [], peer_reason=reason, fallback=True)

    def launcher(self, kernel: Kernel) -> Callable[..., Any]:
        fn = self._launchers.get(kernel.name)
        if fn is None:
            fn = self._launchers[kernel.name] = kernel.load()
        return fn

    def _refused(self, plan: Plan, name: str, error: InputError, inputs: Sequence[Any]) -> None:
        """A launcher refused inputs its declared checks let through: drop it for this signature
        and run the next (or the peer)."""
        plan.launchers = [(n, f) for n, f in plan.launchers if n != name]
        plan.peer_reason = f"every kernel refused; the last, {name}: {error}"
        log.info("tkreg.ops.%s: %s refused these inputs (%s); falling to the next", self.op.name, name, error)
        if not plan.launchers:
            plan.fallback = True
            self.warn_peer(plan.peer_reason)
        self.prepare(plan, inputs)

    # -- the peer ------------------------------------------------------------------------------
    def peer_run(self, inputs: Sequence[Any], reason: str) -> Callable[[Sequence[Any]], Any]:
        """Calls of the peer for inputs of this signature: the peer resolved and the output's shape,
        dtype and device (fixed by the signature) worked out once, not per call."""
        if self.op.peer is None:
            raise InputError(f"tkreg.ops.{self.op.name}: {reason}; and op {self.op.name!r} has no peer to fall back to")
        import torch

        peer = refs.resolve(self.op.peer)
        spec = self.form.output_spec(inputs)
        new_output = self.form.new_output
        empty = torch.empty
        shape, dtype, device = (spec.shape, spec.dtype, spec.device) if spec is not None else ((), None, None)

        def run(inputs: Sequence[Any]) -> Any:
            out = empty(shape, dtype=dtype, device=device) if spec is not None else new_output(inputs)
            try:
                peer(*inputs, out=out)
            except torch.OutOfMemoryError:
                raise
            except (RuntimeError, TypeError, ValueError) as e:  # inputs even the peer cannot take
                raise InputError(f"tkreg.ops.{self.op.name}: {reason}; and the peer {self.op.peer_name} failed: {e}") from e
            return out

        return run

    def warn_peer(self, reason: str) -> None:
        if self.op.peer is None or reason in self._warned:
            return
        self._warned.add(reason)
        # stacklevel: the caller of tkreg.ops.<op> when a new signature falls back (eager path)
        warnings.warn(
            f"tkreg.ops.{self.op.name} calls its peer {self.op.peer_name}: {reason}", PeerFallbackWarning, stacklevel=4
        )

    # -- deciding at trace time ------------------------------------------------------------------
    def static_route(self, inputs: Sequence[Any]) -> Callable[..., Any] | None:
        """For tracing (FakeTensors, no addresses): the kernel a call of these inputs runs at any
        alignment, if its launcher is traceable (see tkreg.ops.traceable); else None, and the
        traced graph calls the op's run-time dispatch instead."""
        view = self.form.kernel_view(inputs)
        if not isinstance(view, KernelView):
            return None
        try:
            kernel_inputs = view.inputs(inputs)
            metas = [TensorMeta.of(t) for t in kernel_inputs]
        except (RuntimeError, TypeError, ValueError):  # symbolic sizes: decide at run time
            return None
        tops = []
        for aligned in (True, False):
            ranking = self.registry.ranking(self.op.name, None, [m.at(aligned) for m in metas])
            tops.append(None if ranking.prefer_peer or not ranking.runnable else ranking.runnable[0])
        first, other = tops
        if first is None or other is None or first.name != other.name:
            return None
        launch = self.launcher(first)
        if not getattr(launch, TRACEABLE, False):
            return None

        def traced(*inputs: Any) -> Any:
            out = self.form.new_output(inputs)
            launch(*view.inputs(inputs), out=view.output(out))
            return out

        return traced

    def describe(self, inputs: Sequence[Any]) -> str:
        """What a call with these inputs does and why (no launch)."""
        return self.plan(inputs).describe(self.op.name)


def _rejections(ranking: Ranking) -> str:
    return "; ".join(f"{v.kernel.name} ({' | '.join(v.reasons)})" for v in ranking.verdicts) or "the op has no kernels"


@dataclass(frozen=True)
class TensorMeta:
    """A tensor's metadata with a stand-in address: what the registry's checks read, for a
    FakeTensor (which has no address) at trace time."""

    dtype: Any
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    device: Any
    itemsize: int
    base: int = ALIGNED_BASE

    @classmethod
    def of(cls, t: Any) -> TensorMeta:
        shape, strides = tuple(t.shape), tuple(t.stride())
        if not all(isinstance(s, int) for s in (*shape, *strides)):
            raise TypeError("symbolic sizes")  # int() would specialize the trace on them
        return cls(t.dtype, shape, strides, t.device, t.element_size())

    def at(self, aligned: bool) -> TensorMeta:
        return TensorMeta(self.dtype, self.shape, self.strides, self.device, self.itemsize,
                          ALIGNED_BASE if aligned else ALIGNED_BASE + self.itemsize)

    def stride(self, dim: int | None = None) -> Any:
        return self.strides if dim is None else self.strides[dim]

    def data_ptr(self) -> int:
        return self.base

    def element_size(self) -> int:
        return self.itemsize

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]
