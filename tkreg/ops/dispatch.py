"""Dispatch: one op's call goes to the best kernel for its input signature, decided once.

A call's signature (dtype, shape, strides, device and base alignment class of every input; see
:mod:`tkreg.core.signature`) and its parameter values key a plan. The first call of a signature
makes the plan: the op's form (its calling contract, :mod:`.forms`) checks the inputs (bad input
gets the op's clear error), views them as kernel inputs, lays out the outputs (the op's
``make_output``, once), and the registry ranks the kernels for the kernel inputs exactly as
``tkreg.lookup`` does (wall time on a measured GPU, beside the op's peer). Later calls of the
signature only run the plan: view the inputs, allocate the outputs from the cached shapes, dtypes
and devices, call the first kernel's launcher. Nothing on that path reads a tensor's values or
waits for the device, so it can be captured in a CUDA graph.

A launcher that refuses (tkreg.InputError, raised before it launches anything) passes the call to
the next kernel, and the plan drops it for that signature. When no kernel takes the inputs (or the
inputs cannot be viewed as kernel inputs without a copy) the call goes to the op's peer, with a
PeerFallbackWarning that says why, once per reason. When the ranking says the peer is faster for
this signature the call goes to the peer too, logged at INFO on the "tkreg.ops" logger.

Gradients (:meth:`Dispatcher.backward`) are planned the same way, per signature of (inputs,
outputs, upstream gradients): the best backward kernel that takes them (launched with ``out=`` a
tuple of new gradient tensors), else the op's backward formula, else autograd through the peer
(recomputed), else a NoGradientError that says why.
"""

from __future__ import annotations

import functools
import inspect
import logging
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core import refs
from ..core.errors import InputError
from ..core.registry import Ranking, Registry
from ..core.specs import Kernel, Op
from . import capturing, choosing, gradients, keys, remembered, warming
from .binding import bound_call
from .choosing import Chooser, Decision
from .deferred import Deferred, loaded
from .forms import Form, KernelView, OutputLayout, as_tuple, form_for, is_dense_row_major, outputs_allocator
from .gradients import BackwardPlan
from .replaying import Replayer
from .tuning import PEER, Candidate

log = logging.getLogger("tkreg.ops")

PLAN_CACHE_SIZE = 4096  # signatures remembered per op (and direction) before the cache starts over
PARTIAL_KEYS_SIZE = 1 << 16  # forward signatures remembered as leaving outputs unwritten
TRACEABLE = "tkreg_traceable"  # launcher attribute: see tkreg.ops.traceable
NOT_TAKEN = object()  # Dispatcher.through_peer_autograd: the call is not the peer's own
# Stand-in base addresses for deciding at trace time: aligned far beyond any check, and aligned
# only to the element size (a real tensor's address is always a multiple of it).
ALIGNED_BASE = 1 << 20
# A compiled graph reaches a chosen kernel through an opaque operator, whose call costs the host
# more than an eager call does (on an H100, a 16-token Llama MLP block compiled ran 2x slower with
# kernels behind opaque calls than with the peer traced, the kernels having won the eager timing by
# a few microseconds each). Where the kernel's measured lead over the peer is under 10%, or under
# what the opaque call costs the host beyond the peer's own (7-12 us for a matmul on an H100 host,
# the host suite of 2026-11-25), a trace holds the peer's torch operations instead.
COMPILED_MARGIN = 1.10
OPAQUE_CALL_US = 10.0
# A call that wants a gradient through the op's autograd.Function costs the host about 120 us more
# than the peer's own autograd over the forward and its backward (a layer norm at 4096x4096 bf16 on
# an H200 host, 2026-11-26: 17 us forward, about 100 backward). Where a bucket's training choice
# is not measured (tuning off, a capture), a kernel's measured forward lead over the peer under a
# third of that (its backward, kernel or formula, taken to lead by at most twice as much) makes
# such a call the peer's own: training at launch-bound sizes runs at torch's speed.
AUTOGRAD_LEAD_US = 40.0
# Calls made ahead of a capture of the candidate captured calls run (the load, the recording, a replay).
WARM_CALLS = 3


class PeerFallbackWarning(UserWarning):
    """A tkreg op ran its peer (e.g. torch) because no registered kernel takes the inputs."""


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

    def describe(self, op: str) -> str:
        if self.launchers:
            names = " > ".join(name for name, _ in self.launchers)
            return f"tkreg.ops.{op} calls {self.launchers[0][0]} ({names}): {self.why}"
        return f"tkreg.ops.{op} calls its peer: {self.peer_reason}"


class Dispatcher:
    """Calls one op's best kernel (or its peer) for each input signature, forward and backward."""

    def __init__(self, registry: Registry, op: Op) -> None:
        self.registry = registry
        self.op = op
        self.form: Form = form_for(op)
        self.chooser = Chooser(registry, op, self.form)
        self.params = Params(op)
        self.several = len(op.outputs) > 1
        self.grad_index = tuple(op.inputs.index(g) for g in op.grads)
        self.differentiable = tuple(i for i, o in enumerate(op.outputs) if o.differentiable)
        # outputs only kernels compute (an rstd kept for the backward): a peer may not write them
        self.returned = tuple(i for i, o in enumerate(op.outputs) if o.returned)
        self.kernels_own_outputs = len(self.returned) < len(op.outputs)
        self.pick = _picker(len(op.outputs), self.returned)
        self._plans = keys.PlanTable(bool(self.params.names))  # Python key -> Plan, and its C++ key (keys.PlanTable)
        self._backward_plans: dict[Any, BackwardPlan] = {}
        self._launchers: dict[str, Callable[..., Any]] = {}
        self._warned: set[str] = set()
        # Keys of forwards that left the kernels' own outputs unwritten, kept apart from the plans
        # (which start over when full) so a backward never mistakes such a forward for a kernel's.
        self._partial_keys: set[Any] = set()
        self._partial_forgotten = False
        self._remembered: dict[int, dict[Any, dict[str, Any]]] = {}  # per CUDA device (see .remembered)
        self.preloaded: set[int] = set()  # CUDA devices whose first call preloaded this op (see .warming)
        # the dispatchers installed with this one (tkreg.ops.install): the first call on a device
        # reads what every op remembers there, so that each other op's first call finds it read
        self.siblings: dict[str, Dispatcher] = {}
        self._peer_out_default: bool | None = None  # the peer's out= defaults to None (None: not asked yet)
        self._bound_peers: dict[tuple[Any, ...], Callable[..., Any]] = {}  # parameter values -> the peer bound to them
        self._replayable = frozenset(k.name for k in registry.kernels(op.name) if k.replayable)

    # -- the hot path -----------------------------------------------------------------------
    def __call__(self, *inputs: Any, **params: Any) -> Any:
        """Every output: one tensor, or a tuple where the op has several."""
        values = self.params.values(params) if params else self.params.defaults
        return self.planned(inputs, values).run(*inputs)  # type: ignore[misc]

    def through_peer_autograd(
        self, inputs: Sequence[Any], params: dict[str, Any], differentiable: Callable[..., Any] | None = None
    ) -> Any:
        """The outputs callers get, for a call that wants a gradient, where these inputs run the
        peer (it was measured faster, or no kernel takes them), or where training through the
        peer is the faster for a kernel's plan (:meth:`_peer_for_gradients`; ``differentiable``
        is the op's autograd.Function call, ``differentiable(*inputs, params)``, which that
        times): the peer's own call, so that torch's autograd records torch's own backward.
        NOT_TAKEN where that does not hold: the autograd.Function takes the call (a kernel's
        forward, then its backward kernel or the formula, which may call tkreg.ops again)."""
        op = self.op
        if op.peer is None or not op.grads:
            return NOT_TAKEN
        grads = self.grad_index
        if any(getattr(t, "requires_grad", False) and i not in grads for i, t in enumerate(inputs)):
            return NOT_TAKEN  # an input the op gives no gradient: its own error, or None
        plan = self.planned(inputs, self.params.values(params) if params else self.params.defaults)
        if plan.gradient_call is not None:
            return plan.gradient_call(*inputs)
        if plan.launchers:
            if plan.autograd_decided:
                return NOT_TAKEN
            plan.autograd_decided = True
            instead = self._peer_for_gradients(plan, inputs, differentiable)
            if instead is None:
                return NOT_TAKEN
            import torch

            try:
                got = instead(*inputs)
            except torch.OutOfMemoryError:
                raise
            except (RuntimeError, TypeError, ValueError) as e:  # a peer that takes out= only, say
                log.debug("tkreg.ops.%s: gradients through the kernel (the peer's own call failed: %s)", op.name, e)
                return NOT_TAKEN
            layouts = [plan.outputs[i] for i in self.returned]
            outs = as_tuple(got)
            if len(outs) != len(layouts) or any(
                tuple(t.shape) != tuple(o.shape) or t.dtype != o.dtype for t, o in zip(outs, layouts)
            ):
                return NOT_TAKEN  # not the outputs a kernel gives: its plan's autograd.Function
            plan.gradient_call = instead
            return got
        if not plan.autograd_peer:
            return NOT_TAKEN
        # the peer's own call (a capture's switch to another candidate would record no backward)
        got = capturing.eager(plan)[1](*inputs)
        if not plan.autograd_peer:
            return NOT_TAKEN  # the first call found the peer wants out=
        plan.gradient_call = capturing.eager(plan)[1]  # as the first call left it
        return got

    def _peer_for_gradients(
        self, plan: Plan, inputs: Sequence[Any], differentiable: Callable[..., Any] | None = None
    ) -> Callable[..., Any] | None:
        """The peer's own call (the outputs callers get) for calls of a kernel's plan that want a
        gradient, where training through it is the faster: the bucket's training choice, a
        forward and a backward each way timed on copies of the inputs (:meth:`_training_steps`),
        made now where tuning may time and nobody has. Without one (tuning off, a capture, no
        ``differentiable`` to time), where the forward's measured choice puts the kernel ahead
        by less than AUTOGRAD_LEAD_US. None otherwise: the kernel's way."""
        device = self.chooser.device(inputs)
        view = plan.view
        if device is None or view is None:
            return None
        kernel_inputs = view.inputs(inputs)
        choice = self.chooser.known(kernel_inputs, plan.params, device)
        if choice is None:
            return None
        functional, count, returned = self._functional_peer(plan.params), len(self.op.outputs), self.returned
        pick = self.pick

        def peer_call(*inputs: Any) -> Any:
            got = as_tuple(functional(*inputs))
            if len(got) == count:
                return got[0] if count == 1 else (got if pick is None else pick(got))
            return got[0] if len(returned) == 1 else tuple(got)

        steps = None
        if differentiable is not None:
            steps = functools.partial(self._training_steps, plan, inputs, peer_call, differentiable, plan.launchers[0][0])
        training = self.chooser.training(kernel_inputs, plan.params, device, steps)
        if training is not None:
            return peer_call if training.winner == PEER else None
        peer_us, winner_us = choice.times_us.get(PEER), choice.times_us.get(choice.winner)
        if not (isinstance(peer_us, float) and isinstance(winner_us, float)) or peer_us - winner_us >= AUTOGRAD_LEAD_US:
            return None
        return peer_call

    def _training_steps(
        self, plan: Plan, inputs: Sequence[Any], peer_call: Callable[..., Any], differentiable: Callable[..., Any],
        kernel: str,
    ) -> dict[Candidate, Callable[[], None]] | None:
        """A forward and a backward of each way a call that wants a gradient can go, as a training
        step makes them: the peer's own call with torch's backward, and the op's
        autograd.Function (the kernel, then its backward kernel or formula). They run on copies of
        the inputs of the same signature (so the plan is this one and nothing is planned inside
        the timing), wanting the same gradients, and write into the copies' .grad only. None
        where no buffer can give the signature."""
        import torch

        from .warming import inputs_of

        if plan.key is None:
            return None
        copies = inputs_of(plan.key, bool(self.params.names), torch.cuda.device_count())
        if copies is None:
            return None
        with torch.no_grad():
            for copy, t in zip(copies, inputs):
                copy.copy_(t)
        for copy, t in zip(copies, inputs):
            copy.requires_grad_(bool(getattr(t, "requires_grad", False)))
        wanting = [c for c in copies if c.requires_grad]
        kept = [j for j, i in enumerate(self.returned) if self.op.outputs[i].differentiable]
        params, pick = plan.params, self.pick
        upstream: list[Any] = []

        def backward(got: Any) -> None:
            outs = as_tuple(got)
            chosen = [outs[j] for j in kept if outs[j].requires_grad]
            if not upstream:
                upstream.extend(torch.randn_like(o) for o in chosen)
            torch.autograd.backward(chosen, upstream)

        def by_peer() -> None:
            for t in wanting:
                t.grad = None
            backward(peer_call(*copies))

        def by_kernel() -> None:
            for t in wanting:
                t.grad = None
            got = differentiable(*copies, params)
            backward(got if pick is None else pick(got))

        return {Candidate(None): by_peer, Candidate(kernel): by_kernel}

    def planned(self, inputs: Sequence[Any], values: tuple[Any, ...]) -> Plan:
        """The plan of these inputs and parameter values, made (and kept) if new."""
        key = keys.plan_key(inputs, values)
        plan = self._plans.get(key) if key is not None else None
        if plan is None:
            plan = self._recalled(inputs, key) if key is not None else None
            if plan is None:
                plan = self.plan(inputs, values)
                plan.key = key
                if plan.fallback:
                    self.warn_peer(plan.peer_reason)
                self.prepare(plan, inputs)
                if plan.launchers:
                    self._remember(plan, inputs, {"way": remembered.KERNEL})
            if key is not None:
                if len(self._plans) >= PLAN_CACHE_SIZE:
                    self._plans.clear()
                self._plans[key] = plan
        return plan

    def prepare(self, plan: Plan, inputs: Sequence[Any]) -> None:
        """Build ``plan.run`` for calls of this signature, and where calls captured in a CUDA graph
        run another candidate (``plan.graphed``), its run too (whose first calls wait for the
        next capture: :meth:`_warm_graphed`)."""
        graphed = plan.graphed
        if graphed is not None and graphed.run is None:
            self._prepare_run(graphed, inputs)
        self._prepare_run(plan, inputs)

    def _warm_graphed(self, plan: Plan) -> bool:
        """Just before a capture begins (.capturing): the first calls of the plan captured calls run
        (the load of its kernel, the recorded call, a replay), on zero-filled inputs of the
        signature, into outputs of their own, so that the capture is not the kernel's first call;
        False where one failed (the plan's captured calls then run its own)."""
        import torch

        graphed = plan.graphed
        if graphed is None or plan.key is None or not warming.may_launch_own_work():
            return True  # nothing to make, or not now (a trace, a mode): the capture makes the first call
        inputs = warming.inputs_of(plan.key, bool(self.params.names), torch.cuda.device_count())
        device = self.chooser.device(inputs) if inputs is not None else None
        if inputs is None or device is None:
            return True  # no buffer gives the signature: the capture makes the first call
        try:
            with choosing.on_device(device):
                for _ in range(WARM_CALLS):
                    graphed.run(*inputs)  # type: ignore[misc]
        except Exception as e:
            log.info("tkreg.ops.%s: captured calls run the eager choice (%s failed ahead of a capture: %s: %s)",
                     self.op.name, graphed.launchers[0][0] if graphed.launchers else "the peer", type(e).__name__, e)
            return False
        return True

    def _prepare_run(self, plan: Plan, inputs: Sequence[Any]) -> None:
        """Build ``plan.run`` for calls of this signature: everything the signature fixes (views,
        output shapes, dtypes and devices, the launcher, the parameters) is bound once."""
        import torch

        if not plan.launchers:
            self._set_run(plan, self.peer_run(plan))
            return

        name, launch = plan.launchers[0]
        launch = loaded(launch)
        plan.launchers[0] = (name, launch)
        view = plan.view
        assert view is not None  # a plan with launchers always has a view
        shapes = view.shapes
        identity, selects = view.identity, bool(view.selects)
        to_kernel = view.inputs
        params = plan.params
        layouts = plan.outputs
        several = self.several
        new_outputs = outputs_allocator(layouts)
        kernel_shapes = [layout.kernel_shape for layout in layouts]

        if not several and layouts[0].stride is None:
            # one contiguous output: the common case, kept to the fewest Python operations
            kernel_shape = layouts[0].kernel_shape

            def run(*inputs: Any) -> Any:
                out = new_outputs()[0]
                if identity:
                    kernel_inputs = inputs
                elif selects:
                    kernel_inputs = to_kernel(inputs)
                else:
                    kernel_inputs = [x if s is None else x.view(s) for x, s in zip(inputs, shapes)]
                try:
                    launch(*kernel_inputs, out=out if kernel_shape is None else out.view(kernel_shape), **params)
                except InputError as e:
                    self._refused(plan, name, e, inputs)
                    return plan.run(*inputs)  # type: ignore[misc]
                return out

        else:

            def run(*inputs: Any) -> Any:
                outs = new_outputs()
                kernel_outs = tuple([o if s is None else o.view(s) for o, s in zip(outs, kernel_shapes)])
                try:
                    launch(*to_kernel(inputs), out=kernel_outs if several else kernel_outs[0], **params)
                except InputError as e:
                    self._refused(plan, name, e, inputs)
                    return plan.run(*inputs)  # type: ignore[misc]
                return outs if several else outs[0]

        where = getattr(inputs[0], "device", None) if inputs else None
        several_gpus = getattr(where, "type", None) == "cuda" and torch.cuda.device_count() > 1

        def install(run: Callable[..., Any], returned: Callable[..., Any] | None = None) -> None:
            if several_gpus:
                # Triton launches on the current device; inputs on another GPU must run there.
                def on_their_device(*inputs: Any) -> Any:
                    with torch.cuda.device(where):
                        return run(*inputs)

                self._set_run(plan, on_their_device)
            else:
                self._set_run(plan, run, returned)

        if name.split("[", 1)[0] not in self._replayable:
            install(run)
            return

        def launch_into(inputs: Sequence[Any], outs: tuple[Any, ...]) -> None:
            kernel_outs = tuple([o if s is None else o.view(s) for o, s in zip(outs, kernel_shapes)])
            launch(*to_kernel(inputs), out=kernel_outs if several else kernel_outs[0], **params)

        # A launch takes a kernel input by address: the caller's tensor has the same one as its view.
        plan.replayer = Replayer(
            self.op.name, name, install, run,
            allocate=new_outputs,
            launch_into=launch_into,
            tensors_of=(lambda inputs, outs: (*to_kernel(inputs), *outs)) if selects else None,
            several=several, returned=self.returned if self.pick is not None else None,
        )  # fmt: skip
        install(plan.replayer.first)

    # -- deciding ------------------------------------------------------------------------------
    def plan(self, inputs: Sequence[Any], values: tuple[Any, ...] = (), tune: bool = True) -> Plan:
        """Decide for these inputs and parameter values (the slow path, once per signature);
        without ``tune``, never time: say what the cache or the prior decides."""
        reasons = self.form.contract_reasons(inputs)
        if reasons:
            raise InputError(f"tkreg.ops.{self.op.name}: " + "; ".join(reasons))
        params = self.params.as_dict(values or self.params.defaults)
        view = self.form.kernel_view(inputs)
        if isinstance(view, KernelView):
            try:
                kernel_inputs = view.inputs(inputs)
            except RuntimeError as e:  # the strides allow no such view after all
                view = f"inputs cannot be viewed as kernel inputs without a copy ({e})"
        if not isinstance(view, KernelView):
            return Plan(None, self.form.output_layouts(inputs, None, params), params, peer_reason=view, fallback=True)
        outputs = self.form.output_layouts(inputs, view, params)
        note = f"{view.note}: " if view.note else ""
        # The kernels that take the inputs, then the bucket's measured choice where there is one;
        # only without it the rankers' estimates (the prior), which cost far more to work out.
        ranking = self.registry.ranking(self.op.name, None, kernel_inputs, ranked=False)
        skipped: list[str] = []
        kernels = self._without_writers(ranking.runnable, skipped)
        if not kernels:
            reason = f"{note}no registered kernel takes these inputs: {_rejections(ranking, skipped)}"
            return Plan(view, outputs, params, peer_reason=reason, fallback=True)
        decision = self.chooser.cached(kernels, self.deferred, kernel_inputs, params)
        if decision is None:
            ranking = self.registry.ranking(self.op.name, None, kernel_inputs)
            kernels = self._without_writers(ranking.runnable, [])
            if ranking.prefer_peer:
                prior = Decision([], f"faster for these inputs: {ranking.peer_ranking}", "prior")
            else:
                first = next(v for v in ranking.verdicts if v.kernel is kernels[0])
                why = first.ranking or ("the only kernel that takes them" if len(kernels) == 1 else "first by priority")
                prior = Decision([(k.name, self.deferred(k)) for k in kernels], why, "prior")
            decision = self.chooser.decide(kernels, self.deferred, inputs, kernel_inputs, outputs, params, prior, tune)
        refused = f"{note}every kernel refused"
        if decision.peer:
            plan = Plan(view, outputs, params, peer_reason=f"faster for these inputs: {decision.why}", source=decision.source)
        else:
            plan = Plan(view, outputs, params, decision.launchers, decision.why, refused, source=decision.source)
        if decision.graphed is not None:
            label, launch = decision.graphed
            if launch is not None:
                plan.graphed = Plan(view, outputs, params, [(label, launch)], decision.why, refused, source=decision.source)
            else:
                plan.graphed = Plan(view, outputs, params, peer_reason=f"the fastest replayed: {decision.why}",
                                    source=decision.source)
                plan.graphed_returned_only = self.kernels_own_outputs
            if plan.graphed_returned_only:
                plan.why += (f"; a captured call for every output (one that wants a gradient, torch.ops.tkreg) runs "
                             f"{plan.launchers[0][0]}: the peer leaves outputs of the kernels' own unwritten")
        log.info("%s", plan.describe(self.op.name))
        return plan

    @staticmethod
    def _without_writers(kernels: Sequence[Kernel], reasons: list[str]) -> list[Kernel]:
        """Kernels that leave their inputs as they were: a call must not change the caller's
        tensors (and torch.ops.tkreg's schema says it does not)."""
        kept = []
        for k in kernels:
            if k.writes:
                written = ", ".join(w.input for w in k.writes)
                reasons.append(f"{k.name} (it writes {written}; tkreg.ops calls only kernels that leave inputs as they were)")
            else:
                kept.append(k)
        return kept

    def launcher(self, kernel: Kernel) -> Callable[..., Any]:
        fn = self._launchers.get(kernel.name)
        if fn is None:
            fn = self._launchers[kernel.name] = kernel.load()
        return fn

    def deferred(self, kernel: Kernel) -> Callable[..., Any]:
        """The kernel's launcher, or where it is not imported yet, a stand-in that imports it when
        first called: a plan lists fallbacks it may never run, and a cached choice of the peer
        runs none, while importing a kernel module costs milliseconds (Triton reads each
        kernel's source)."""
        fn = self._launchers.get(kernel.name)
        return fn if fn is not None else Deferred(functools.partial(self.launcher, kernel))

    def _refused(self, plan: Plan, name: str, error: InputError, inputs: Sequence[Any]) -> None:
        """A launcher refused inputs its declared checks let through: drop it for this signature
        and run the next (or the peer)."""
        plan.launchers = [(n, f) for n, f in plan.launchers if n != name]
        note = f"{plan.view.note}: " if plan.view is not None and plan.view.note else ""
        plan.peer_reason = f"{note}every kernel refused; the last, {name}: {error}"
        log.info("tkreg.ops.%s: %s refused these inputs (%s); falling to the next", self.op.name, name, error)
        if not plan.launchers:
            plan.fallback = True
            self.warn_peer(plan.peer_reason)
        self.prepare(plan, inputs)

    # -- the peer ------------------------------------------------------------------------------
    def peer_run(self, plan: Plan) -> Callable[..., Any]:
        """Calls of the peer for inputs of this signature. The peer is called as torch code is
        (``out=None``: it returns its outputs), which costs the caller least; where its outputs
        are not what the op lays out (a dtype, a shape), or it wants ``out=``, it writes into
        outputs allocated here, their shapes, dtypes and devices worked out once."""
        if self.op.peer is None:
            raise InputError(f"tkreg.ops.{self.op.name}: {plan.peer_reason}; and op {self.op.name!r} has no peer to fall back to")
        import torch

        peer = refs.resolve(self.op.peer)
        params, several, reason = plan.params, self.several, plan.peer_reason
        layouts = plan.outputs
        new_outputs = outputs_allocator(layouts)
        returned = self.returned

        def failed(e: Exception) -> InputError:
            return InputError(f"tkreg.ops.{self.op.name}: {reason}; and the peer {self.op.peer_name} failed: {e}")

        def into_outputs(*inputs: Any) -> Any:
            outs = new_outputs()
            try:
                peer(*inputs, out=outs if several else outs[0], **params)
            except torch.OutOfMemoryError:
                raise
            except (RuntimeError, TypeError, ValueError) as e:  # inputs even the peer cannot take
                raise failed(e) from e
            return outs if several else outs[0]

        functional = self._functional_peer(params)
        plan.autograd_peer = True  # until its first call finds the peer wants out= (outputs_given)

        def outputs_given(inputs: Sequence[Any]) -> Any:
            """From now on the peer writes into outputs allocated here (it may fill only those it
            returns: the kernels' own may stay unwritten)."""
            plan.complete = not self.kernels_own_outputs
            plan.autograd_peer = False
            self._set_run(plan, into_outputs)
            self._note_partial(plan)
            return into_outputs(*inputs)

        def first(*inputs: Any) -> Any:
            """The first call decides which way the peer is called for this signature."""
            try:
                raw = functional(*inputs)
            except torch.OutOfMemoryError:
                raise
            except (RuntimeError, TypeError, ValueError):
                return outputs_given(inputs)
            got, bare = as_tuple(raw), not isinstance(raw, (tuple, list))
            fits = len(got) in (len(layouts), len(returned)) and all(
                tuple(t.shape) == tuple(layout.shape) and t.dtype == layout.dtype
                for t, layout in zip(got, layouts if len(got) == len(layouts) else [layouts[i] for i in returned])
            )
            if not fits:
                return outputs_given(inputs)
            if len(got) == len(layouts):
                self._set_run(plan, functional)
                self._remember(plan, inputs, {"way": remembered.FUNCTIONAL})
                return got if several else got[0]

            internal = [(i, layouts[i]) for i in range(len(layouts)) if i not in returned]
            full, full_outs = self._full_peer_fitting(params, inputs, layouts)
            self._peer_with_internal(plan, functional, internal, full, bare)
            self._remember(plan, inputs, {"way": remembered.WITH_INTERNAL, "full": full is not None, "bare": bare, "internal": [
                [i, list(o.shape), None if o.stride is None else list(o.stride), str(o.dtype).removeprefix("torch.")]
                for i, o in internal
            ]})  # fmt: skip
            if full_outs is not None:
                return full_outs
            outs = [None] * len(layouts)
            for i, t in zip(returned, got):
                outs[i] = t
            for i, layout in internal:
                outs[i] = layout.empty()
            return tuple(outs)

        return first

    def _full_peer_fitting(
        self, params: dict[str, Any], inputs: Sequence[Any], layouts: Sequence[OutputLayout]
    ) -> tuple[Callable[..., Any] | None, tuple[Any, ...] | None]:
        """The op's full peer (every output) and what it gave for ``inputs``, where it has one
        that runs them and gives every output as the op lays it out; (None, None) otherwise."""
        if self.op.full_peer is None:
            return None, None
        import torch

        full = self._full_peer(params)
        try:
            got = as_tuple(full(*inputs))
        except torch.OutOfMemoryError:
            raise
        except (RuntimeError, TypeError, ValueError, AttributeError) as e:  # a torch without it, or inputs it refuses
            log.debug("tkreg.ops.%s: the full peer does not run these inputs (%s)", self.op.name, e)
            return None, None
        fits = len(got) == len(layouts) and all(
            tuple(t.shape) == tuple(layout.shape) and t.dtype == layout.dtype for t, layout in zip(got, layouts)
        )
        return (full, got) if fits else (None, None)

    def _full_peer(self, params: dict[str, Any]) -> Callable[..., Any]:
        full = refs.resolve(self.op.full_peer)
        return functools.partial(full, **params) if params else full

    def _peer_with_internal(
        self, plan: Plan, functional: Callable[..., Any], internal: Sequence[tuple[int, OutputLayout]],
        full: Callable[..., Any] | None = None, bare: bool = False,
    ) -> None:
        """Runs of a peer that returns what callers get (y) but not the kernels' own outputs
        (``internal``: index and layout). Where every output is returned, the op's full peer
        (``full``) computes them all; without one they are allocated, unwritten. tkreg.ops.<op>
        calls the peer alone: the peer itself where it returns the one tensor callers get
        (``bare``), with nothing of tkreg's in between."""
        count, returned = len(self.op.outputs), self.returned
        allocate = [(i, layout.allocator()) for i, layout in internal]

        def with_internal(*inputs: Any) -> Any:
            outs: list[Any] = [None] * count
            for i, t in zip(returned, as_tuple(functional(*inputs))):
                outs[i] = t
            for i, new in allocate:
                outs[i] = new()
            return tuple(outs)

        returned_only: Callable[..., Any]
        if len(returned) == 1 and bare:
            returned_only = functional
        elif len(returned) == 1:

            def returned_only(*inputs: Any) -> Any:
                return as_tuple(functional(*inputs))[0]
        else:

            def returned_only(*inputs: Any) -> Any:
                return tuple(as_tuple(functional(*inputs)))

        if full is not None:
            self._set_run(plan, full, returned_only)
            return
        plan.complete = False
        self._set_run(plan, with_internal, returned_only)
        self._note_partial(plan)

    # -- signatures remembered across processes (see .remembered) -----------------------------------
    def _remember(self, plan: Plan, inputs: Sequence[Any], entry: dict[str, Any]) -> None:
        """Remember a plan that follows a measured choice, for later processes."""
        if plan.key is None or plan.fallback or plan.source not in ("cache", "tuning"):
            return
        device = self.chooser.device(inputs)
        cache = self.chooser.tuner(device).cache if device is not None else None
        if cache is not None:
            why = plan.peer_reason if not plan.launchers else plan.why
            if plan.graphed is not None:  # a kernel runs its captured calls: planned, and preloaded, as a kernel's
                entry = {"way": remembered.KERNEL}
            signature = remembered.text(plan.key, bool(self.params.names))
            remembered.remember(cache, self.op.name, signature, {**entry, "why": why})

    def remembered_signatures(self, device: int) -> dict[Any, dict[str, Any]]:
        """The signatures earlier processes remembered on this CUDA device, by plan key (read once;
        the plans of those the peer runs are made then, so that their first calls find them on
        tkreg.ops' fast path, as later calls do)."""
        known = self._remembered.get(device)
        if known is None:
            known = self._read_remembered(device)
            for other in self.siblings.values():
                if device not in other._remembered:
                    try:
                        other._read_remembered(device)
                    except Exception as e:  # that op's own first call reads them again and says why
                        log.debug("tkreg.ops.%s: remembered signatures not read ahead (%r)", other.op.name, e)
        return known

    def _read_remembered(self, device: int) -> dict[Any, dict[str, Any]]:
        """Read this op's remembered signatures on ``device`` (not read yet) and make the plans of
        the peer's."""
        cache = self.chooser.tuner(device).cache
        entries = cache.signatures(self.op.name) if cache is not None else {}
        known = self._remembered[device] = remembered.parse(entries, bool(self.params.names))
        room = PLAN_CACHE_SIZE - len(self._plans)
        for key, entry in known.items():
            if room <= 0:
                break
            if key not in self._plans:
                plan = self._recalled_plan(key, entry)
                if plan is not None:
                    self._plans[key] = plan
                    room -= 1
        return known

    def _recalled(self, inputs: Sequence[Any], key: Any) -> Plan | None:
        """The plan of a signature an earlier process remembered running the peer, made without
        planning; None where none did (or the inputs are not on a GPU, or a kernel runs it). The
        first call on a device reads what every op remembers there and preloads the signatures
        kernels run (:func:`.warming.preload`): this call's own may be among them."""
        device = self.chooser.device(inputs)
        if device is None:
            return None
        if device not in self._remembered:  # the first call on this device: read, then preload
            self.remembered_signatures(device)
            warming.preload(self.siblings or {self.op.name: self}, device)
        entry = self._remembered[device].get(key)
        if entry is None:
            return None
        return self._plans.get(key) or self._recalled_plan(key, entry)  # reading or preloading them may have made it

    def _recalled_plan(self, key: Any, entry: dict[str, Any]) -> Plan | None:
        """The plan of a remembered signature whose measured choice is the peer (None for others)."""
        if self.op.peer is None or entry.get("way") not in (remembered.FUNCTIONAL, remembered.WITH_INTERNAL):
            return None
        import torch

        has_params = bool(self.params.names)
        params = self.params.as_dict(key[-1] if has_params else self.params.defaults)
        plan = Plan(None, (), params, peer_reason=str(entry.get("why", "")), source="cache", key=key, autograd_peer=True)
        functional = self._functional_peer(params)
        if entry["way"] == remembered.FUNCTIONAL:
            self._set_run(plan, functional)
            return plan
        device = keys.tensor_specs(key, has_params)[0][3]
        try:
            internal = [(i, OutputLayout(tuple(shape), None if stride is None else tuple(stride), getattr(torch, dtype), device))
                        for i, shape, stride, dtype in entry.get("internal", ())]  # fmt: skip
        except (TypeError, ValueError):  # a damaged entry: plan the signature anew
            return None
        full = self._full_peer(params) if entry.get("full") and self.op.full_peer is not None else None
        self._peer_with_internal(plan, functional, internal, full, bool(entry.get("bare")))
        return plan

    def _functional_peer(self, params: dict[str, Any]) -> Callable[..., Any]:
        """The peer as torch code calls it (``out=None``: it returns its outputs), with nothing of
        tkreg's own in between: the peer itself where that is its default and there are no
        parameters, else one function that passes them by keyword (:func:`.binding.bound_call`:
        a partial's keywords cost a quarter of a microsecond a call).
        A peer whose signature cannot be read (a torch builtin such as ``torch.add``, the cheapest
        peer there is) is taken to default ``out`` to None, as torch's functions do; one that
        does not fails its first call here, and the plan then gives it outputs (``outputs_given``)."""
        peer = refs.resolve(self.op.peer)
        if self._peer_out_default is None:
            try:
                out = inspect.signature(peer).parameters.get("out")
                self._peer_out_default = (out is not None and out.default is None
                                          and out.kind is not inspect.Parameter.VAR_KEYWORD)  # fmt: skip
            except (TypeError, ValueError):  # a builtin without a signature
                self._peer_out_default = True
        if not params and self._peer_out_default:
            return peer
        # plans with the same parameter values share one bound call (each is a compiled function)
        key: tuple[Any, ...] | None = tuple((name, type(value), value) for name, value in params.items())
        try:
            bound = self._bound_peers.get(key)  # type: ignore[arg-type]
        except TypeError:  # an unhashable value: a call of its own
            bound = key = None
        if bound is None:
            bound = bound_call(peer, len(self.op.inputs), {"out": None, **params})
            if key is not None:
                if len(self._bound_peers) >= PLAN_CACHE_SIZE:  # bounded as the plans are
                    self._bound_peers.clear()
                self._bound_peers[key] = bound
        return bound

    def _set_run(self, plan: Plan, run: Callable[..., Any], returned: Callable[..., Any] | None = None) -> None:
        """Give ``plan`` its run (every output) and what tkreg.ops.<op> calls (the returned ones);
        where calls captured in a CUDA graph run another candidate, those while one is captured
        (:mod:`.capturing`)."""
        if returned is None:
            pick = self.pick
            if pick is None:
                returned = run
            else:
                eager = run

                def returned(*inputs: Any) -> Any:
                    return pick(eager(*inputs))

        if plan.graphed is not None:  # calls captured in a CUDA graph run another candidate
            first = plan.run is None  # the plan is being prepared: its graphed plan's first calls are to make
            capturing.track(plan, run, returned, self._warm_graphed if first else None)
        else:
            plan.run, plan.returned = run, returned

    def warn_peer(self, reason: str, what: str = "calls", stacklevel: int = 4) -> None:
        if self.op.peer is None or reason in self._warned:
            return
        self._warned.add(reason)
        # stacklevel: the caller of tkreg.ops.<op> when a new signature falls back (eager path)
        warnings.warn(
            f"tkreg.ops.{self.op.name} {what} its peer {self.op.peer_name}: {reason}", PeerFallbackWarning, stacklevel=stacklevel
        )

    # -- gradients -------------------------------------------------------------------------------
    def backward(
        self,
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        grad_outputs: Sequence[Any],
        values: tuple[Any, ...],
        needs: Sequence[bool],
    ) -> tuple[Any, ...]:
        """Gradients of the inputs the op lists in ``grads`` (in that order; None where ``needs``
        says no), given every output and the upstream gradient of each differentiable output."""
        key = keys.plan_key((*inputs, *outputs, *grad_outputs), values)
        plan = self._backward_plans.get(key) if key is not None else None
        if plan is None:
            plan = self.backward_plan(inputs, outputs, grad_outputs, values)
            if key is not None:
                if len(self._backward_plans) >= PLAN_CACHE_SIZE:
                    self._backward_plans.clear()
                self._backward_plans[key] = plan
        return plan.run(inputs, outputs, grad_outputs, tuple(needs))  # type: ignore[misc]

    def backward_plan(
        self, inputs: Sequence[Any], outputs: Sequence[Any], grad_outputs: Sequence[Any], values: tuple[Any, ...]
    ) -> BackwardPlan:
        """Decide how gradients of these tensors are computed (once per signature)."""
        params = self.params.as_dict(values or self.params.defaults)
        plan = BackwardPlan(None, (), params)
        if not self.op.grads:
            self._prepare_backward(plan)
            return plan
        if not self.registry.kernels(self.op.name, direction="backward"):
            plan.reasons.append(f"op {self.op.name!r} has no backward kernels")
            self._prepare_backward(plan)
            return plan
        view = self.form.kernel_view(inputs)
        unwritten = self._unwritten_outputs(inputs, values) if self.kernels_own_outputs else ""
        if unwritten:
            plan.unwritten = True
            plan.reasons.append(unwritten)
        elif not isinstance(view, KernelView):
            plan.reasons.append(view)
        elif view.selects:
            plan.reasons.append(f"{view.note or 'inputs taken once for every batch'}: their gradients are not views")
        else:
            try:
                layouts = self.form.output_layouts(inputs, view, params)
                kernels, ranking = self._backward_kernels(view, layouts, inputs, outputs, grad_outputs, plan.reasons)
                if not kernels and not all(is_dense_row_major(g) for g in grad_outputs):
                    # An upstream gradient no kernel reads as it is (the expanded ones of a sum(), say):
                    # one copy to a contiguous gradient costs less than the formula or the peer.
                    dense = [g.contiguous() for g in grad_outputs]
                    kernels, _ = self._backward_kernels(view, layouts, inputs, outputs, dense, [])
                    plan.dense_grads = bool(kernels)
            except RuntimeError as e:
                plan.reasons.append(f"the outputs or their gradients cannot be viewed as kernel inputs without a copy ({e})")
            else:
                plan.view, plan.outputs = view, layouts
                plan.launchers = [(k.name, self.deferred(k)) for k in kernels]
                if not kernels:
                    plan.reasons = [f"no backward kernel takes these inputs: {_rejections(ranking, plan.reasons)}"]
        self._prepare_backward(plan)
        return plan

    def _note_partial(self, plan: Plan) -> None:
        if plan.complete or plan.key is None:
            return
        if len(self._partial_keys) >= PARTIAL_KEYS_SIZE:
            self._partial_keys.clear()
            self._partial_forgotten = True
        self._partial_keys.add(plan.key)

    def _unwritten_outputs(self, inputs: Sequence[Any], values: tuple[Any, ...]) -> str:
        """Why the kernels' own outputs of the forward of these inputs may hold garbage; empty
        where the forward wrote them all: a kernel ran it (eagerly, or traced by torch.compile,
        which never traces a peer that leaves them unwritten), or a peer that returns them all."""
        key = keys.plan_key(inputs, values)
        own = ", ".join(o.name for o in self.op.outputs if not o.returned)
        if key is None or key in self._partial_keys:
            return f"the forward ran the peer {self.op.peer_name}, which leaves {own} unwritten"
        if self._partial_forgotten and key not in self._plans:
            return f"this process forgot which forwards left {own} unwritten (over {PARTIAL_KEYS_SIZE} signatures)"
        return ""

    def _backward_kernels(
        self,
        view: KernelView,
        layouts: Sequence[OutputLayout],
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        grad_outputs: Sequence[Any],
        skipped: list[str],
    ) -> tuple[list[Kernel], Ranking]:
        """The backward kernels that take these tensors as kernels see them, best first."""
        tensors = (
            *view.inputs(inputs),
            *(layout.kernel(o) for layout, o in zip(layouts, outputs)),
            *(layouts[i].kernel(g) for i, g in zip(self.differentiable, grad_outputs)),
        )
        ranking = self.registry.ranking(self.op.name, None, tensors, direction="backward")
        return self._without_writers(ranking.runnable, skipped), ranking

    def _prepare_backward(self, plan: BackwardPlan) -> None:
        if plan.launchers:
            plan.run = gradients.kernel_run(self.op, plan, self.grad_index, self.differentiable, self._prepare_backward)
            log.info("tkreg.ops.%s backward calls %s", self.op.name, plan.launchers[0][0])
        elif not self.op.grads:
            message = (f"tkreg.ops.{self.op.name} has no gradient: op {self.op.name!r} declares no differentiable inputs "
                       "(Op(grads=...) names none)")
            plan.run = gradients.raiser(message)
        elif self.op.backward is not None and not plan.unwritten:
            plan.run = gradients.formula_run(self.op, plan, self.grad_index)
            log.info("tkreg.ops.%s backward uses its formula: %s", self.op.name, "; ".join(plan.reasons))
        elif self.op.peer is not None:
            plan.run = gradients.peer_run(self.op, plan, self.grad_index, self.differentiable)
            self.warn_peer("; ".join([*plan.reasons, "no backward formula"]), what="differentiates through", stacklevel=2)
        else:
            message = (f"tkreg.ops.{self.op.name} has no gradient for these inputs: {'; '.join(plan.reasons)}; "
                       f"op {self.op.name!r} has no backward formula (Op(backward=...)) and no peer to differentiate")
            plan.run = gradients.raiser(message)

    # -- deciding at trace time ------------------------------------------------------------------
    def static_route(self, inputs: Sequence[Any], params: dict[str, Any] | None = None) -> Callable[..., Any] | None:
        """For tracing (FakeTensors, no addresses): the kernel a call of these inputs runs at any
        alignment, if its launcher is traceable (see tkreg.ops.traceable); else None, and the
        traced graph calls the op's run-time dispatch instead. Returns a callable of the inputs
        that returns every output."""
        values = self.params.values(params or {})
        view = self.form.kernel_view(inputs)
        if not isinstance(view, KernelView):
            return None
        try:
            kernel_inputs = view.inputs(inputs)
            metas = [TensorMeta.of(t) for t in kernel_inputs]
        except (RuntimeError, TypeError, ValueError):  # symbolic sizes: decide at run time
            return None
        kwargs = self.params.as_dict(values)
        peer_route = self._traced_peer(view, metas, kwargs)
        if peer_route is not None:
            return peer_route
        tops = []
        for aligned in (True, False):
            ranking = self.registry.ranking(self.op.name, None, [m.at(aligned) for m in metas])
            runnable = self._without_writers(ranking.runnable, [])
            tops.append(None if ranking.prefer_peer or not runnable else runnable[0])
        first, other = tops
        if first is None or other is None or first.name != other.name:
            return None
        launch = self.launcher(first)
        if not getattr(launch, TRACEABLE, False):
            return None
        form, several = self.form, self.several

        def traced(*inputs: Any) -> Any:
            layouts = form.output_layouts(inputs, view, kwargs, fake=True)
            outs = tuple(layout.empty() for layout in layouts)
            kernel_outs = tuple(layout.kernel(o) for layout, o in zip(layouts, outs))
            launch(*view.inputs(inputs), out=kernel_outs if several else kernel_outs[0], **kwargs)
            return outs if several else outs[0]

        return traced

    def _traced_peer(self, view: KernelView, metas: Sequence[TensorMeta], params: dict[str, Any]) -> Callable[..., Any] | None:
        """Where this GPU's measured choice for the bucket (aligned inputs) is the peer, or a kernel
        ahead of it by less than COMPILED_MARGIN or OPAQUE_CALL_US, the peer itself, traced: the compiler then sees
        torch's operations (and plans them as it plans the same code written with torch) instead
        of an opaque call."""
        device = self.chooser.device(metas)
        if device is None or self.op.peer is None or (self.kernels_own_outputs and self.op.full_peer is None):
            # a traced peer would leave the kernels' own outputs unwritten, with no plan to say so;
            # a full peer writes them all
            return None
        choice = self.chooser.known([m.at(True) for m in metas], params, device)
        if choice is None:
            return None
        if choice.winner != PEER:
            peer_us, winner_us = choice.times_us.get(PEER), choice.times_us.get(choice.winner)
            if not (isinstance(peer_us, float) and isinstance(winner_us, float)):
                return None
            if winner_us * COMPILED_MARGIN <= peer_us and peer_us - winner_us >= OPAQUE_CALL_US:
                return None  # a lead worth an opaque call
        if self.kernels_own_outputs:
            return self._traced_full_peer(view, params)
        peer, several = refs.resolve(self.op.peer), self.several

        def traced(*inputs: Any) -> Any:
            outs = as_tuple(peer(*inputs, out=None, **params))  # every output: the op returns them all
            return tuple(outs) if several else outs[0]

        return traced

    def _traced_full_peer(self, view: KernelView, params: dict[str, Any]) -> Callable[..., Any]:
        """The full peer, traced: every output, each as the op lays it out (a full peer that
        lays one out otherwise is a plugin's error, named here rather than traced wrong)."""
        full, form, name = self._full_peer(params), self.form, self.op.name

        def traced(*inputs: Any) -> Any:
            outs = as_tuple(full(*inputs))
            layouts = form.output_layouts(inputs, view, params, fake=True)
            if len(outs) != len(layouts) or any(
                tuple(t.shape) != tuple(layout.shape) or t.dtype != layout.dtype for t, layout in zip(outs, layouts)
            ):
                got = ", ".join(f"{tuple(t.shape)} {t.dtype}" for t in outs)
                want = ", ".join(f"{tuple(layout.shape)} {layout.dtype}" for layout in layouts)
                raise TypeError(f"op {name}: its full peer returned {got}; the op lays its outputs out as {want}")
            return tuple(outs)

        return traced

    def fake_outputs(self, inputs: Sequence[Any], params: dict[str, Any]) -> Any:
        """New outputs for traced inputs, as a call returns them (the run-time op's fake)."""
        outs = self.form.fake_outputs(inputs, self.params.as_dict(self.params.values(params)))
        return outs if self.several else outs[0]

    def describe(self, inputs: Sequence[Any], params: dict[str, Any] | None = None) -> str:
        """What a call with these inputs does and why (no launch); where a kernel runs them and
        the bucket's training choice is made, what a call that wants a gradient does."""
        values = self.params.values(params or {})
        plan = self.plan(inputs, values, tune=False)
        text = plan.describe(self.op.name)
        kept = self._plans.get(keys.plan_key(inputs, values))
        first = plan.launchers[0][0] if plan.launchers else None
        if kept is not None and kept.replayer is not None and kept.launchers and kept.launchers[0][0] == first:
            text += f". Launches: {kept.replayer.state}"
        device = self.chooser.device(inputs)
        if not plan.launchers or plan.view is None or device is None:
            return text
        training = self.chooser.training(plan.view.inputs(inputs), plan.params, device, None)
        if training is None:
            return text
        way = "the peer's own call" if training.winner == PEER else f"{plan.launchers[0][0]} and its backward"
        return f"{text}. A call that wants a gradient makes {way}: {training.describe()}"


def _picker(count: int, returned: tuple[int, ...]) -> Callable[[Any], Any] | None:
    """From an op's ``count`` outputs, the ones callers of tkreg.ops.<op> get (``returned``, their
    indices; None: all of them)."""
    if count == 1 or len(returned) == count:
        return None
    if len(returned) == 1:
        (index,) = returned
        return lambda outs: outs[index]
    return lambda outs: tuple([outs[i] for i in returned])


def _rejections(ranking: Ranking, skipped: Sequence[str] = ()) -> str:
    """Why no kernel runs: those skipped, then each rejected kernel with its reasons."""
    parts = [*skipped, *(f"{v.kernel.name} ({' | '.join(v.reasons)})" for v in ranking.verdicts if v.reasons)]
    return "; ".join(parts) or "the op has no kernels"


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
