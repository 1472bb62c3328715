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

A dispatcher's other parts are mixins, each in a module of its own: how the peer is called
(:mod:`.peer_calls`), plans of signatures earlier processes remembered (:mod:`.recalling`), calls
that want a gradient and the backward plans, made per signature the same way (:mod:`.training`),
and decisions at trace time (:mod:`.tracing`). What a plan holds is in :mod:`.plans`.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from ..core.errors import InputError
from ..core.generated import GENERATED_FILE
from ..core.registry import Registry
from ..core.specs import Kernel, Op
from ..launch import triton_key
from . import capturing, choosing, keys, remembered, tuning, warming
from .choosing import Chooser, Decision, on_device_of, replayed_on_device_of
from .deferred import Deferred, plan_launcher
from .forms import Form, KernelView, form_for, outputs_allocator
from .gradients import BackwardPlan
from .measuring import PEER
from .peer_calls import PeerCalls
from .plans import PLAN_CACHE_SIZE, Params, Plan, picker, rejections
from .recalling import RememberedPlans
from .replaying import Replayer
from .tracing import Tracing
from .training import Training

log = logging.getLogger("tkreg.ops")

# Calls made ahead of a capture of the candidate captured calls run (the load, the recording, a replay).
WARM_CALLS = 3


def callers_level() -> int:
    """The ``stacklevel`` that makes a warning raised by this function's caller name the caller's
    own code: the first frame outward that is neither tkreg's nor torch's (nor a function tkreg
    generated). A call reaches a warning through paths of different depths (the C++ callable or
    Python, torch's operator, autograd's engine for a backward)."""
    import torch

    inside = (os.path.dirname(os.path.dirname(__file__)) + os.sep, os.path.dirname(torch.__file__) + os.sep)
    frame, level = sys._getframe(2), 2  # the frame that calls warnings.warn is level 1
    while frame is not None and (frame.f_code.co_filename.startswith(inside)
                                 or frame.f_code.co_filename.startswith(GENERATED_FILE)):  # fmt: skip
        frame, level = frame.f_back, level + 1
    # none in this thread (autograd's engine runs a CUDA backward in a thread of its own): the
    # line that warns
    return level if frame is not None else 2


class PeerFallbackWarning(UserWarning):
    """A tkreg op ran its peer (e.g. torch) because no registered kernel takes the inputs."""


class Dispatcher(PeerCalls, RememberedPlans, Training, Tracing):
    """Calls one op's best kernel (or its peer) for each input signature, forward and backward."""

    def __init__(self, registry: Registry, op: Op) -> None:
        self.registry = registry
        self.op = op
        self.form: Form = form_for(op)
        self.chooser = Chooser(registry, op, self.form)
        self.params = Params(op)
        self.several = len(op.outputs) > 1
        self.grad_index = tuple(op.inputs.index(g) for g in op.grads)
        self.arity = len(op.inputs)  # 0 where the op does not name its inputs
        self.differentiable = tuple(i for i, o in enumerate(op.outputs) if o.differentiable)
        # outputs only kernels compute (an rstd kept for the backward): a peer may not write them
        self.returned = tuple(i for i, o in enumerate(op.outputs) if o.returned)
        self.kernels_own_outputs = len(self.returned) < len(op.outputs)
        self.pick = picker(len(op.outputs), self.returned)
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
        self.entry: Callable[..., Any] | None = None  # tkreg.ops.<op> itself (tkreg.ops.install): what warming calls
        self.no_operator: str | None = None  # why the op has no torch operator, where it has none (library.torch_operator)
        self._peer_out_default: bool | None = None  # the peer's out= defaults to None (None: not asked yet)
        self._bound_peers: dict[tuple[Any, ...], Callable[..., Any]] = {}  # parameter values -> the peer bound to them
        self._replayable = frozenset(k.name for k in registry.kernels(op.name) if k.replayable)

    # -- the hot path -----------------------------------------------------------------------
    def __call__(self, *inputs: Any, **params: Any) -> Any:
        """Every output: one tensor, or a tuple where the op has several."""
        if len(inputs) < self.arity:  # trailing optional inputs left out: None
            inputs = tuple(self.form.padded(inputs))
        values = self.params.values(params) if params else self.params.defaults
        return self.planned(inputs, values).run(*inputs)  # type: ignore[misc]

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
        launch = plan_launcher(launch)
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

        def launch_into(inputs: Sequence[Any], outs: tuple[Any, ...]) -> None:
            kernel_outs = tuple([o if s is None else o.view(s) for o, s in zip(outs, kernel_shapes)])
            launch(*to_kernel(inputs), out=kernel_outs if several else kernel_outs[0], **params)

        where = getattr(inputs[0], "device", None) if inputs else None
        declined = None
        if getattr(where, "type", None) == "cuda" and torch.cuda.device_count() > 1:
            # Triton launches on the current device: inputs on another GPU must launch there. Only
            # the launcher's calls switch: a replay declines on any device but the one it was
            # recorded on, so a replayed call on the current device pays nothing for the switch
            # (entering torch.cuda.device costs a few microseconds a call); one from another GPU
            # switches, and replays there.
            run, launch_into = on_device_of(where, run), on_device_of(where, launch_into)
            declined = replayed_on_device_of(where, plan, run)

        install = functools.partial(self._set_run, plan)
        if name.split("[", 1)[0] not in self._replayable:
            install(run)
            return

        # A launch takes a kernel input by address: the caller's tensor has the same one as its view.
        plan.replayer = Replayer(
            self.op.name, name, install, run,
            allocate=new_outputs,
            launch_into=launch_into,
            tensors_of=(lambda inputs, outs: (*to_kernel(inputs), *outs)) if selects else None,
            several=several, returned=self.returned if self.pick is not None else None, declined=declined,
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
            reason = f"{note}no registered kernel takes these inputs: {rejections(ranking, skipped)}"
            return Plan(view, outputs, params, peer_reason=reason, fallback=True)
        decision = self.chooser.cached(kernels, self.deferred, kernel_inputs, params)
        if decision is None:
            ranking = self.registry.ranking(self.op.name, None, kernel_inputs)
            kernels = self._without_writers(ranking.runnable, [])
            if ranking.prefer_peer:
                prior = Decision([], ranking.peer_ranking, "prior")  # the plan says "faster for these inputs"
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
        plan.bucket = decision.bucket
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
            # before its first compile or load, which asks Triton for the key of its install
            triton_key.remember(tuning.cache_dir)
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

    def warn_peer(self, reason: str, what: str = "calls") -> None:
        if self.op.peer is None or reason in self._warned:
            return
        self._warned.add(reason)
        warnings.warn(
            f"tkreg.ops.{self.op.name} {what} its peer {self.op.peer_name}: {reason}", PeerFallbackWarning,
            stacklevel=callers_level(),
        )

    def describe(self, inputs: Sequence[Any], params: dict[str, Any] | None = None) -> str:
        """What a call with these inputs does and why (no launch); where a kernel runs them and
        the bucket's training choice is made, what a call that wants a gradient does."""
        from .contexts import no_autocast
        from .detours import CAST, context_detour, layout_detour

        values = self.params.values(params or {})
        inputs = self.form.padded(inputs)
        detour = layout_detour(self.op, inputs) or context_detour(self.op, inputs)  # as tkreg.ops.<op> takes the call
        if detour is not None and detour.way == CAST:
            cast = detour.cast(inputs)
            with no_autocast():
                return f"{detour.describe(self.op)}; then {self.describe(cast, params)}"
        if detour is not None:
            return detour.describe(self.op)
        plan = self.plan(inputs, values, tune=False)
        text = plan.describe(self.op.name)
        kept = self._plans.get(keys.plan_key(inputs, values))
        first = plan.launchers[0][0] if plan.launchers else None
        if kept is not None and kept.replayer is not None and kept.launchers and kept.launchers[0][0] == first:
            text += f". Launches: {kept.replayer.state}"
        device = self.chooser.device(inputs)
        if not plan.launchers or plan.view is None or device is None:
            return text
        training = self.chooser.training(plan.view.inputs(inputs), plan.params, device, None, plan.bucket)
        if training is None:
            return text
        way = "the peer's own call" if training.winner == PEER else f"{plan.launchers[0][0]} and its backward"
        return f"{text}. A call that wants a gradient makes {way}: {training.describe()}"
