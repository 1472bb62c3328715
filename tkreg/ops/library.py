"""tkreg ops as PyTorch operators, through torch.library.

Each op gets two operators with the schema ``(Tensor a, Tensor b, ...) -> Tensor`` (argument
names from the op's reference implementation):

- ``torch.ops.tkreg.<op>``, a ``triton_op``: what users and torch.compile see, with autograd where
  the op's form has a backward. Called with real tensors it dispatches (:mod:`.dispatch`). When
  torch.compile's AOT stage traces into it (FakeTensors: shapes and strides, no addresses), it
  asks :meth:`Dispatcher.static_route` whether the kernel is the same at every alignment and has
  a traceable launcher (one that launches through ``torch.library.wrap_triton``): then the trace
  holds that kernel's launch, which Inductor can see into. Otherwise the trace holds
- ``torch.ops.tkreg_dispatch.<op>``, a ``custom_op`` with a fake implementation: opaque to the
  compiler, it dispatches on the real tensors when the compiled graph runs, so a compiled graph
  calls the kernel an eager call of the same inputs calls.

torch.library operators live for the whole process; installing another registry later re-uses
them and swaps the dispatcher they call (see :class:`Slot`).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import is_in_torch_dispatch_mode

from .dispatch import Dispatcher
from .forms import argument_names

log = logging.getLogger("tkreg.ops")

TRACED_NAMESPACE = "tkreg"
RUNTIME_NAMESPACE = "tkreg_dispatch"
_PLAIN = (torch.Tensor, torch.nn.Parameter)


@dataclass
class Slot:
    """The dispatcher and the tkreg.ops callable an op's torch operators call right now."""

    dispatcher: Dispatcher
    entry: Callable[..., Any] | None = None


# op name -> (argument names, slot, torch.ops.tkreg.<op>.default)
_REGISTERED: dict[str, tuple[tuple[str, ...], Slot, Any]] = {}


def torch_operator(dispatcher: Dispatcher) -> tuple[Slot, Any] | tuple[None, None]:
    """Register (or re-use) ``torch.ops.tkreg.<op>`` for this dispatcher's op; (None, None) when
    the op's name or inputs cannot make a torch operator (tkreg.ops.<op> still works, eagerly)."""
    op = dispatcher.op
    names = argument_names(op)
    if names is None or not op.name.isidentifier():
        return None, None
    known = _REGISTERED.get(op.name)
    if known is not None and known[0] == names:
        _, slot, overload = known
        slot.dispatcher = dispatcher
        return slot, overload
    slot = Slot(dispatcher)
    try:
        overload = _define(op.name, names, slot)
    except Exception as e:  # a torch without these APIs: tkreg.ops.<op> still dispatches eagerly
        log.warning("tkreg.ops.%s: no torch operator (%s: %s); eager calls only", op.name, type(e).__name__, e)
        return None, None
    _REGISTERED[op.name] = (names, slot, overload)
    return slot, overload


def _define(name: str, names: tuple[str, ...], slot: Slot) -> Any:
    schema = "(" + ", ".join(f"Tensor {n}" for n in names) + ") -> Tensor"

    def run_time(*inputs: Any) -> Any:
        return slot.dispatcher(*inputs)

    runtime = torch.library.custom_op(f"{RUNTIME_NAMESPACE}::{name}", run_time, mutates_args=(), schema=schema)
    runtime.register_fake(lambda *inputs: slot.dispatcher.form.new_output(inputs))
    runtime_overload = getattr(getattr(torch.ops, RUNTIME_NAMESPACE), name).default

    def body(*inputs: Any) -> Any:
        dispatcher = slot.dispatcher
        if all(type(t) in _PLAIN for t in inputs):  # real tensors: eager, or a compiled graph running
            return dispatcher(*inputs)
        route = dispatcher.static_route(inputs)
        return route(*inputs) if route is not None else runtime_overload(*inputs)

    # triton_op infers the schema from the signature: one Tensor per input.
    parameters = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=torch.Tensor) for n in names]
    body.__signature__ = inspect.Signature(parameters, return_annotation=torch.Tensor)  # type: ignore[attr-defined]
    traced = torch.library.triton_op(f"{TRACED_NAMESPACE}::{name}", body, mutates_args=())
    if slot.dispatcher.form.differentiable:

        def setup_context(ctx: Any, inputs: Sequence[Any], output: Any) -> None:
            slot.dispatcher.form.save_for_backward(ctx, inputs, output)

        def backward(ctx: Any, grad: Any) -> Any:
            assert slot.entry is not None  # set by tkreg.ops.install before any call
            return slot.dispatcher.form.backward(ctx, grad, slot.entry)

        traced.register_autograd(backward, setup_context=setup_context)
    return getattr(getattr(torch.ops, TRACED_NAMESPACE), name).default


def entry_point(dispatcher: Dispatcher, overload: Any) -> Callable[..., Any]:
    """``tkreg.ops.<op>``: plain tensors that need no autograd go straight to the dispatcher
    (the torch.library path costs several microseconds more per call); under torch.compile,
    autograd, tensor subclasses or a dispatch mode, the call goes through the torch operator."""
    if overload is None:
        return dispatcher
    is_compiling = torch.compiler.is_compiling
    grad_enabled = torch.is_grad_enabled
    tensor, parameter = _PLAIN

    def needs_torch(inputs: Sequence[Any]) -> bool:
        grad = grad_enabled()
        for t in inputs:
            cls = type(t)
            if cls is tensor or cls is parameter:
                if grad and t.requires_grad:
                    return True
            elif isinstance(t, tensor):
                return True
        return is_in_torch_dispatch_mode()

    def call(*inputs: Any) -> Any:
        if is_compiling() or needs_torch(inputs):
            return overload(*inputs)
        return dispatcher(*inputs)

    call.__name__ = call.__qualname__ = dispatcher.op.name
    call.__doc__ = f"tkreg op {dispatcher.op.name!r}: {dispatcher.op.description or 'see tkreg.explain'}"
    return call
