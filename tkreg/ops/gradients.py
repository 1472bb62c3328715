"""How gradient calls of one signature run, once :class:`tkreg.ops.dispatch.Dispatcher` has decided
(per signature of inputs, outputs and upstream gradients): through a backward kernel, the op's
formula, autograd of its peer, or an error that says why there is none.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core import refs
from ..core.errors import InputError
from ..core.refs import keywords_of
from ..core.specs import Op
from .deferred import plan_launcher
from .forms import KernelView, OutputLayout, as_tuple

log = logging.getLogger("tkreg.ops")

# The keyword a backward formula names to learn which gradients are needed (it may return None
# for the others): a product's formula then skips the factor nobody asked a gradient of.
NEEDS_KEYWORD = "needs_input_grad"


class NoGradientError(RuntimeError):
    """A tkreg op was differentiated but has no way to compute the gradient asked for."""


@dataclass
class BackwardPlan:
    """What gradient calls of one signature do: backward kernels in order, else ``fallback``
    (the formula, the peer or the error), and why the kernels did not take them."""

    view: KernelView | None
    outputs: tuple[OutputLayout, ...]
    params: dict[str, Any]
    launchers: list[tuple[str, Callable[..., Any]]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    dense_grads: bool = False  # upstream gradients are copied to contiguous ones for the kernels
    unwritten: bool = False  # the forward left outputs unwritten: neither kernels nor the formula may read them
    run: Callable[..., tuple[Any, ...]] | None = None


def kernel_run(
    op: Op, plan: BackwardPlan, grad_index: tuple[int, ...], differentiable: tuple[int, ...],
    replan: Callable[[BackwardPlan], None],
) -> Callable[..., tuple[Any, ...]]:
    """Gradient calls through the plan's first backward kernel, with ``out=`` a tuple of new
    gradient tensors; one that refuses is dropped and ``replan`` makes the plan again."""
    import torch

    name, launch = plan.launchers[0]
    launch = plan_launcher(launch)
    plan.launchers[0] = (name, launch)
    view, layouts, params = plan.view, plan.outputs, plan.params
    assert view is not None
    grad_shapes = tuple(view.shapes[i] for i in grad_index)
    dense = plan.dense_grads
    empty = torch.empty

    def run(inputs: Sequence[Any], outputs: Sequence[Any], grad_outputs: Sequence[Any], needs: tuple[bool, ...]) -> Any:
        if dense:
            grad_outputs = [g.contiguous() for g in grad_outputs]
        # an absent optional input has no gradient: None in its place, for the kernel and the caller
        grads = tuple([None if inputs[i] is None else empty(inputs[i].shape, dtype=inputs[i].dtype, device=inputs[i].device)
                       for i in grad_index])  # fmt: skip
        try:
            launch(
                *view.inputs(inputs),
                *[layout.kernel(o) for layout, o in zip(layouts, outputs)],
                *[layouts[i].kernel(g) for i, g in zip(differentiable, grad_outputs)],
                out=tuple([g if s is None else g.view(s) for g, s in zip(grads, grad_shapes)]),
                **params,
            )
        except InputError as e:
            plan.launchers = [(n, f) for n, f in plan.launchers if n != name]
            plan.reasons.append(f"{name} refused them: {e}")
            log.info("tkreg.ops.%s: backward kernel %s refused these inputs (%s)", op.name, name, e)
            replan(plan)
            return plan.run(inputs, outputs, grad_outputs, needs)  # type: ignore[misc]
        return tuple([g if need else None for g, need in zip(grads, needs)])

    return run


def formula_run(op: Op, plan: BackwardPlan, grad_index: tuple[int, ...]) -> Callable[..., tuple[Any, ...]]:
    """Gradient calls through the op's formula (``Op(backward=...)``), asked for the gradients
    that are needed where it takes NEEDS_KEYWORD; zeros where it returns None for one."""
    import torch

    formula = refs.resolve(op.backward)
    keywords = keywords_of(formula)
    takes_needs = keywords is not None and NEEDS_KEYWORD in keywords
    params, count = plan.params, len(op.grads)

    def run(inputs: Sequence[Any], outputs: Sequence[Any], grad_outputs: Sequence[Any], needs: tuple[bool, ...]) -> Any:
        extra = {NEEDS_KEYWORD: needs} if takes_needs else {}
        grads = as_tuple(formula(tuple(inputs), tuple(outputs), tuple(grad_outputs), **params, **extra))
        if len(grads) != count:
            names = ", ".join(op.grads)
            raise TypeError(f"op {op.name}: its backward formula returned {len(grads)} gradient(s); it has {count} ({names})")
        zeros = torch.zeros_like
        pairs = zip(grads, grad_index, needs)
        return tuple([None if not need else zeros(inputs[i]) if g is None else g for g, i, need in pairs])

    return run


def peer_run(
    op: Op, plan: BackwardPlan, grad_index: tuple[int, ...], differentiable: tuple[int, ...], connected: bool = False
) -> Callable[..., tuple[Any, ...]]:
    """Gradient calls through autograd of the op's peer, which recomputes the forward.

    ``connected``: gradients that are themselves differentiable (a backward with
    ``create_graph=True``). Each input then enters through an alias of its own, still part of the
    caller's graph, so the gradient of one is the path through it alone (one input may be
    computed from another, x and x * w), and the gradients record their own graph. Otherwise the
    inputs enter as fresh leaves."""
    import torch

    peer = refs.resolve(op.peer)
    params = plan.params
    # the peer's outputs by the op's output index: every one, or those the op returns
    returned = [i for i, o in enumerate(op.outputs) if o.returned]

    def run(inputs: Sequence[Any], outputs: Sequence[Any], grad_outputs: Sequence[Any], needs: tuple[bool, ...]) -> Any:
        wanted = {i for i, need in zip(grad_index, needs) if need}
        with torch.enable_grad(), _autograd_dispatch():
            if connected:
                leaves = [x.view_as(x) if x is not None and x.requires_grad else x for x in inputs]
            else:
                leaves = [None if x is None else x.detach().requires_grad_(i in wanted) for i, x in enumerate(inputs)]
            outs = as_tuple(peer(*leaves, out=None, **params))
            position = {i: i for i in range(len(outs))} if len(outs) == len(op.outputs) else {
                i: n for n, i in enumerate(returned)}  # fmt: skip
            pairs = [(outs[position[i]], g) for i, g in zip(differentiable, grad_outputs)
                     if i in position and outs[position[i]].requires_grad]  # fmt: skip
            targets = [leaves[i] for i in grad_index if i in wanted]
            if targets and not pairs:  # zeros would be a wrong answer, not a gradient
                raise NoGradientError(f"tkreg.ops.{op.name}: autograd recorded nothing through the peer "
                                      f"{op.peer_name} here (is autograd off where this backward runs?)")
            got = iter(
                torch.autograd.grad([o for o, _ in pairs], targets, [g for _, g in pairs], create_graph=connected,
                                    allow_unused=True)
                if pairs and targets
                else [None] * len(targets)
            )
        result = []
        for i, need in zip(grad_index, needs):
            g = next(got) if need else None
            result.append(None if not need else torch.zeros_like(inputs[i]) if g is None else g)
        return tuple(result)

    return run


def _autograd_dispatch() -> Any:
    """Autograd on for a peer's recompute, also inside a custom operator's implementation: a
    compiled graph's backward runs ``torch.ops.tkreg_backward.<op>`` below autograd, where
    ``torch.enable_grad()`` alone records nothing (and every gradient would come out zero). Only
    the autograd keys are let back; everything else this thread excludes (autocast) stays out."""
    import contextlib

    import torch

    c = torch._C
    try:
        keys = c.DispatchKeySet(c.DispatchKey.AutogradFunctionality)
        for extra in (c.DispatchKey.AutogradOther, c.DispatchKey.AutogradNestedTensor):
            keys = keys | c.DispatchKeySet(extra)
        excluded = c._dispatch_tls_local_exclude_set()
        if not any(excluded.has(k) for k in (c.DispatchKey.AutogradFunctionality, c.DispatchKey.AutogradOther)):
            return contextlib.nullcontext()
        return c._ForceDispatchKeyGuard(c._dispatch_tls_local_include_set(), excluded - keys)
    except (AttributeError, TypeError):  # pragma: no cover - a torch without these: the check above reports it
        return contextlib.nullcontext()


def raiser(message: str) -> Callable[..., Any]:
    """Gradient calls that raise NoGradientError with ``message``."""
    def run(*args: Any) -> Any:
        raise NoGradientError(message)

    return run
