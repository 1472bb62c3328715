"""Calls that want a gradient: the peer's own call, so that torch's autograd records torch's own
backward, where these inputs run the peer or training through it was measured the faster; else
the op's autograd.Function, whose backward is planned per signature of (inputs, outputs, upstream
gradients): the best backward kernel that takes them (launched with ``out=`` a tuple of new
gradient tensors), else the op's backward formula, else autograd through the peer (recomputed),
else a NoGradientError that says why. Mixed into :class:`.dispatch.Dispatcher`."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from ..core.errors import InputError
from ..core.registry import Ranking
from ..core.specs import Kernel
from . import capturing, gradients, keys
from .forms import KernelView, OutputLayout, as_tuple, is_dense_row_major
from .gradients import BackwardPlan
from .measuring import PEER
from .peer_calls import shapes_of
from .plans import PLAN_CACHE_SIZE, Plan, rejections
from .tuning import Candidate

log = logging.getLogger("tkreg.ops")

PARTIAL_KEYS_SIZE = 1 << 16  # forward signatures remembered as leaving outputs unwritten
NOT_TAKEN = object()  # Training.through_peer_autograd: the call is not the peer's own
# A call that wants a gradient through the op's autograd.Function costs the host about 120 us more
# than the peer's own autograd over the forward and its backward (a layer norm at 4096x4096 bf16 on
# an H200 host, 2026-11-26: 17 us forward, about 100 backward). Where a bucket's training choice
# is not measured (tuning off, a capture), a kernel's measured forward lead over the peer under a
# third of that (its backward, kernel or formula, taken to lead by at most twice as much) makes
# such a call the peer's own: training at launch-bound sizes runs at torch's speed.
AUTOGRAD_LEAD_US = 40.0


class Training:
    """A dispatcher's calls that want a gradient, and its backward plans."""

    def without_operator(self, inputs: Sequence[Any], params: dict[str, Any], reason: str) -> Any:
        """The outputs callers get, for a call that wants a gradient of an op that has no torch
        operator (``reason``), and with it no autograd of tkreg's: the peer's own call
        (:meth:`peer_own_call`). Raises NoGradientError where the op has no peer or no
        differentiable input: never outputs that silently drop the inputs' gradients."""
        op = self.op
        if op.peer is None or not op.grads:
            missing = "no peer to differentiate" if op.peer is None else "no differentiable inputs (Op(grads=...) names none)"
            raise gradients.NoGradientError(f"tkreg.ops.{op.name} cannot differentiate these inputs: {reason}, and op "
                                            f"{op.name!r} has {missing}")  # fmt: skip
        return self.peer_own_call(inputs, params, f"{reason}, so torch's autograd differentiates the peer's own call",
                                  "differentiates through")  # fmt: skip

    def peer_own_call(self, inputs: Sequence[Any], params: dict[str, Any], reason: str, what: str = "calls") -> Any:
        """The outputs callers get from the peer's own call, torch's code with nothing of tkreg's
        in between, which torch's autograd and torch.func's transforms take as any torch code,
        with a PeerFallbackWarning (``what``, ``reason``) once. An input the op gives no gradient
        gets none, as through the operator."""
        op = self.op
        graded = self.grad_index
        inputs = [t if i in graded or not getattr(t, "requires_grad", False) else t.detach() for i, t in enumerate(inputs)]
        functional = self._functional_peer(self.params.as_dict(self.params.values(params)))
        self.warn_peer(reason, what=what)
        try:
            got = as_tuple(functional(*inputs))
        except (RuntimeError, TypeError, ValueError) as e:  # a peer that takes out= only, say
            raise InputError(f"tkreg.ops.{op.name}: {reason}; and the peer {op.peer_name} failed: "
                             f"{type(e).__name__}: {e}") from e  # fmt: skip
        return self.returned_of(got)

    def returned_of(self, got: tuple[Any, ...]) -> Any:
        """What callers get of the peer's outputs ``got``: the returned ones where it gave every
        output; one tensor, or a tuple."""
        if len(got) == len(self.op.outputs) and len(self.returned) < len(got):
            got = tuple(got[i] for i in self.returned)
        return got[0] if len(got) == 1 else tuple(got)

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
            functional = self._peer_for_gradients(plan, inputs, differentiable)
            if functional is None:
                return NOT_TAKEN
            import torch

            try:
                raw = functional(*inputs)
            except torch.OutOfMemoryError:
                raise
            except (RuntimeError, TypeError, ValueError) as e:  # a peer that takes out= only, say
                log.debug("tkreg.ops.%s: gradients through the kernel (the peer's own call failed: %s)", op.name, e)
                return NOT_TAKEN
            got = self.returned_of(as_tuple(raw))
            layouts = [plan.outputs[i] for i in self.returned]
            outs = as_tuple(got)
            if len(outs) != len(layouts) or any(
                tuple(t.shape) != tuple(o.shape) or t.dtype != o.dtype for t, o in zip(outs, layouts)
            ):
                return NOT_TAKEN  # not the outputs a kernel gives: its plan's autograd.Function
            # a peer that returns the one tensor callers get is their call itself, with no frame of
            # tkreg's around it (0.5 us a matmul call on the CPU machine, 2026-12-04)
            bare = len(self.returned) == 1 and not isinstance(raw, (tuple, list))
            plan.gradient_call = functional if bare else self._peer_returning(functional)
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
        """The peer's own call, as torch code makes it (its direct torch call where the op names
        one), for calls of a kernel's plan that want a gradient, where training through it is the
        faster: the bucket's training choice, a forward and a backward each way timed on copies of
        the inputs (:meth:`_training_steps`),
        made now where tuning may time and nobody has. Without one (tuning off, a capture, no
        ``differentiable`` to time), where the forward's measured choice puts the kernel ahead
        by less than AUTOGRAD_LEAD_US. None otherwise: the kernel's way."""
        device = self.chooser.device(inputs)
        view = plan.view
        if device is None or view is None:
            return None
        kernel_inputs = view.inputs(inputs)
        choice = self.chooser.known(kernel_inputs, plan.params, device, plan.bucket)
        if choice is None:
            return None
        functional = self.torch_call(plan.params, shapes_of(inputs))
        steps = None
        if differentiable is not None:
            steps = functools.partial(self._training_steps, plan, inputs, self._peer_returning(functional), differentiable,
                                      plan.launchers[0][0])  # fmt: skip
        training = self.chooser.training(kernel_inputs, plan.params, device, steps, plan.bucket)
        if training is not None:
            return functional if training.winner == PEER else None
        peer_us, winner_us = choice.times_us.get(PEER), choice.times_us.get(choice.winner)
        if not (isinstance(peer_us, float) and isinstance(winner_us, float)) or peer_us - winner_us >= AUTOGRAD_LEAD_US:
            return None
        return functional

    def _peer_returning(self, functional: Callable[..., Any]) -> Callable[..., Any]:
        """The peer's own call ``functional``, giving what callers get (:meth:`returned_of`)."""
        returned_of = self.returned_of

        def peer_call(*inputs: Any) -> Any:
            return returned_of(as_tuple(functional(*inputs)))

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
        present = [(copy, t) for copy, t in zip(copies, inputs) if copy is not None]  # None: an absent optional input
        with torch.no_grad():
            for copy, t in present:
                copy.copy_(t)
        for copy, t in present:
            copy.requires_grad_(bool(getattr(t, "requires_grad", False)))
        wanting = [c for c, _ in present if c.requires_grad]
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

    def backward_with_graph(
        self, inputs: Sequence[Any], outputs: Sequence[Any], grad_outputs: Sequence[Any], values: tuple[Any, ...],
        needs: Sequence[bool],
    ) -> tuple[Any, ...]:
        """Gradients that can be differentiated again, for a backward that records its own graph
        (``create_graph=True``: a gradient penalty, a Hessian-vector product). A backward kernel's
        gradients would be constants to that second differentiation, which would silently miss
        their part, so: torch's autograd through the peer's own call on the inputs themselves,
        recorded; else the op's formula, torch code; else NoGradientError."""
        op, grads = self.op, self.grad_index
        plan = gradients.BackwardPlan(None, (), self.params.as_dict(values or self.params.defaults))
        if op.peer is not None:
            run = gradients.peer_run(op, plan, grads, self.differentiable, connected=True)
            return run(inputs, outputs, grad_outputs, tuple(needs))
        fixed = [o.name for o in op.outputs if not o.differentiable]
        if op.backward is not None and not fixed:
            return gradients.formula_run(op, plan, grads)(inputs, outputs, grad_outputs, tuple(needs))
        # a formula may read an output the op marks not differentiable (an rstd), a constant to
        # the next differentiation: its gradients would silently miss that output's part
        formula = (f"its backward formula may read {', '.join(fixed)}, which it marks not differentiable"
                   if op.backward is not None else "it has no backward formula")  # fmt: skip
        raise gradients.NoGradientError(f"tkreg.ops.{op.name} has no gradient that can be differentiated again "
                                        f"(create_graph=True): op {op.name!r} has no peer, {formula}, and its backward "
                                        "kernels' gradients are not differentiable")  # fmt: skip

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
                    plan.reasons = [f"no backward kernel takes these inputs: {rejections(ranking, plan.reasons)}"]
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
            self.warn_peer("; ".join([*plan.reasons, "no backward formula"]), what="differentiates through")
        else:
            message = (f"tkreg.ops.{self.op.name} has no gradient for these inputs: {'; '.join(plan.reasons)}; "
                       f"op {self.op.name!r} has no backward formula (Op(backward=...)) and no peer to differentiate")
            plan.run = gradients.raiser(message)
