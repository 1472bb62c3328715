"""tkreg ops as PyTorch operators, through torch.library.

Each op gets operators with the schema ``(Tensor a, Tensor b, *, float eps=1e-06) -> Tensor``
(tensor arguments named as the op names its inputs, its parameters keyword-only with their
defaults; ``-> (Tensor, Tensor)`` where the op has several outputs):

- ``torch.ops.tkreg.<op>``, a ``triton_op``: what users and torch.compile see, returning every
  output, with autograd (see below). Called eagerly with plain tensors, its autograd kernel
  dispatches (:mod:`.dispatch`) at once (:func:`_call_eagerly`); a planned call that wants no
  gradient runs its plan from the packet's own ``__call__`` (:func:`_take_planned_packet_calls`).
  When torch.compile's AOT stage traces into it (FakeTensors: shapes and strides, no addresses),
  it asks :meth:`Dispatcher.static_route` whether the kernel is the same at every alignment and
  has a traceable launcher (one that launches through ``torch.library.wrap_triton``): then the
  trace holds that kernel's launch, which Inductor can see into. Otherwise the trace holds
- ``torch.ops.tkreg_dispatch.<op>``, a ``custom_op`` with a fake implementation: opaque to the
  compiler, it dispatches on the real tensors when the compiled graph runs, so a compiled graph
  calls the kernel an eager call of the same inputs calls.

Autograd: the forward saves the inputs and every output; the backward computes the gradients of
the inputs the op lists in ``grads`` (:meth:`Dispatcher.backward`: a backward kernel, else the
op's formula, else the peer; None for other inputs), with zeros for the upstream gradient of an
output nothing used. Eagerly it dispatches directly; traced, it calls
``torch.ops.tkreg_backward.<op>`` (``(Tensor[] tensors, bool[] needs, *, params) -> Tensor[]``,
opaque like the run-time operator), so compiled gradients run what eager ones run. An op that
declares no gradients raises NoGradientError when differentiated.

``tkreg.ops.<op>`` (:func:`entry_point`) returns the outputs the op marks ``returned``.

torch.library operators live for the whole process; installing another registry later re-uses
them and swaps the dispatcher they call (see :class:`Slot`).
"""

from __future__ import annotations

import inspect
import logging
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch.utils._python_dispatch import is_in_torch_dispatch_mode

from ..core import refs
from ..core.errors import InputError
from ..core.generated import generated
from ..core.specs import Op
from . import autocasting, fast_paths, keys, native
from .after_import import after_import
from .contexts import (
    autocast_on,
    has_tangents,
    no_autocast,
    transform_levels,
    transforms_active,
    unusual_layout,
    wants_gradient,
)
from .detours import PEER, RAISE, context_detour, layout_detour
from .dispatch import Dispatcher
from .fast_paths import PLAIN
from .forms import as_tuple
from .gradients import NoGradientError
from .training import NOT_TAKEN

log = logging.getLogger("tkreg.ops")

TRACED_NAMESPACE = "tkreg"
RUNTIME_NAMESPACE = "tkreg_dispatch"
BACKWARD_NAMESPACE = "tkreg_backward"
DISPATCH, DIFFERENTIABLE, TORCH = 0, 1, 2  # the ways tkreg.ops.<op> takes a call (see entry_point)


@dataclass
class Slot:
    """The dispatcher and the tkreg.ops callable an op's torch operators call right now, and the
    op's eager differentiable call (``apply(*inputs, params)``), where torch let it be made."""

    dispatcher: Dispatcher
    entry: Callable[..., Any] | None = None
    differentiable: Callable[..., Any] | None = None
    transformed: Callable[..., Any] | None = None  # the same under a torch.func transform (see _call_eagerly)


# op name -> (what its schema depends on, slot, torch.ops.tkreg.<op>.default)
_REGISTERED: dict[str, tuple[Any, Slot, Any]] = {}


def signature_of(op: Op, names: Sequence[str]) -> inspect.Signature:
    """The Python signature torch.library reads the schema from: an optional input is "Tensor?",
    and "Tensor? bias=None" where a call may leave it out (after the last required input)."""
    required = op.required_inputs if tuple(names) == op.inputs else len(names)
    parameters = [
        inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                          annotation=Optional[torch.Tensor] if n in op.optional else torch.Tensor,  # noqa: UP045
                          default=None if i >= required else inspect.Parameter.empty)
        for i, n in enumerate(names)
    ]
    parameters += [
        inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, annotation=p.kind, default=p.default) for p in op.params
    ]
    returns: Any = torch.Tensor if len(op.outputs) == 1 else tuple.__class_getitem__((torch.Tensor,) * len(op.outputs))
    return inspect.Signature(parameters, return_annotation=returns)


def torch_operator(dispatcher: Dispatcher) -> tuple[Slot, Any] | tuple[None, None]:
    """Register (or re-use) ``torch.ops.tkreg.<op>`` for this dispatcher's op; (None, None) when
    the op's name or inputs cannot make a torch operator (tkreg.ops.<op> still works, eagerly)."""
    op = dispatcher.op
    names = dispatcher.form.input_names
    if names is None or not op.name.isidentifier():
        dispatcher.no_operator = (f"its name {op.name!r} is not a Python identifier" if names is not None
                                  else "its calling contract does not name its inputs")  # fmt: skip
        return None, None
    schema_key = (names, op.optional, tuple((p.name, p.kind, p.default) for p in op.params), len(op.outputs))
    known = _REGISTERED.get(op.name)
    if known is not None and known[0] == schema_key:
        _, slot, overload = known
        slot.dispatcher = dispatcher
        return slot, overload
    slot = Slot(dispatcher)
    try:
        overload = _define(op, names, slot)
    except Exception as e:  # a torch without these APIs, or a name taken with another schema: eager calls only
        log.warning("tkreg.ops.%s: no torch operator (%s: %s); eager calls only", op.name, type(e).__name__, e)
        dispatcher.no_operator = f"torch would not define its operator ({type(e).__name__}: {e})"
        return None, None
    _REGISTERED[op.name] = (schema_key, slot, overload)
    return slot, overload


# What torch.ops.tkreg.<op> runs: real tensors (eager, or a compiled graph running) dispatch;
# FakeTensors take the static route, or the run-time operator. Defined from text, so it has no
# source file: triton_op reads a function's source to list the Triton kernels it names (this
# names none), and imports Inductor to parse it, about 1 s a process that never compiles pays.
_TRACED_BODY = """
def body(*inputs, **params):
    dispatcher = slot.dispatcher
    inputs = tuple(dispatcher.form.padded(inputs))  # torch leaves out trailing inputs at their default, None
    if all(t is None or type(t) in PLAIN for t in inputs):  # None: an absent optional input
        return dispatcher(*inputs, **params)
    route = dispatcher.static_route(inputs, params)
    return route(*inputs) if route is not None else runtime_overload(*inputs, **params)
"""


def _define(op: Op, names: tuple[str, ...], slot: Slot) -> Any:
    name = op.name
    signature = signature_of(op, names)
    count = len(names)

    def run_time(*inputs: Any, **params: Any) -> Any:
        return slot.dispatcher(*inputs, **params)

    run_time.__signature__ = signature  # type: ignore[attr-defined]
    runtime = torch.library.custom_op(f"{RUNTIME_NAMESPACE}::{name}", run_time, mutates_args=())
    runtime.register_fake(lambda *inputs, **params: slot.dispatcher.fake_outputs(slot.dispatcher.form.padded(inputs), params))
    runtime_overload = getattr(getattr(torch.ops, RUNTIME_NAMESPACE), name).default
    _take_plain_calls(runtime, runtime_overload, slot)

    body = generated(_TRACED_BODY, "body", {"slot": slot, "PLAIN": PLAIN, "runtime_overload": runtime_overload})
    body.__signature__ = signature  # type: ignore[attr-defined]
    traced = torch.library.triton_op(f"{TRACED_NAMESPACE}::{name}", body, mutates_args=())
    backward_overload = _define_backward(op, slot)

    def setup_context(ctx: Any, inputs: Sequence[Any], output: Any, keyword_only_inputs: dict[str, Any] | None = None) -> None:
        inputs = slot.dispatcher.form.padded(inputs)  # torch leaves out trailing inputs at their default, None
        specs = slot.dispatcher.op.outputs
        outs = tuple(output) if len(specs) > 1 else (output,)
        ctx.save_for_backward(*inputs, *outs)
        ctx.tkreg_params = dict(keyword_only_inputs or {})
        fixed = [t for t, spec in zip(outs, specs) if not spec.differentiable]
        if fixed:
            ctx.mark_non_differentiable(*fixed)

    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        dispatcher = slot.dispatcher
        if not dispatcher.op.grads:
            raise NoGradientError(
                f"tkreg.ops.{name} has no gradient: op {name!r} declares no differentiable inputs (Op(grads=...) names none)"
            )
        saved = ctx.saved_tensors
        inputs, outputs = saved[:count], saved[count:]
        result: list[Any] = [None] * count
        needs = tuple(ctx.needs_input_grad[i] for i in dispatcher.grad_index)
        if not any(needs):  # only inputs the op gives no gradient require one
            return tuple(result)
        grad_outputs = tuple(torch.zeros_like(outputs[i]) if grads[i] is None else grads[i] for i in dispatcher.differentiable)
        params = ctx.tkreg_params
        transforms = transforms_active()
        if torch.is_grad_enabled() and not transforms:  # create_graph=True: gradients differentiable again
            got = dispatcher.backward_with_graph(inputs, outputs, grad_outputs, dispatcher.params.values(params), needs)
        elif all(t is None or type(t) in PLAIN for t in (*saved, *grad_outputs)) and not transforms:
            got = dispatcher.backward(inputs, outputs, grad_outputs, dispatcher.params.values(params), needs)
        elif transforms:  # a torch.func transform's tensors: the run-time backward, per sample under a vmap
            with torch.no_grad():  # not differentiated again; torch's autograd kernel refuses these transforms
                got = backward_overload([*inputs, *outputs, *grad_outputs], list(needs), **params)
        else:  # traced: the run-time backward decides on the real tensors
            got = backward_overload([*inputs, *outputs, *grad_outputs], list(needs), **params)
        for i, g, need in zip(dispatcher.grad_index, got, needs):
            result[i] = g if need else None
        return tuple(result)

    traced.register_autograd(backward, setup_context=setup_context)
    packet = getattr(getattr(torch.ops, TRACED_NAMESPACE), name)
    overload = packet.default
    _cast_under_autocast(name, overload, slot)
    _call_eagerly(traced, overload, slot, setup_context, backward, runtime_overload)
    _take_planned_packet_calls(packet, slot)
    return overload


# torch.library registrations live as long as their Library object: these, as long as the process.
_AUTOCAST_LIBRARIES: list[Any] = []


def _cast_under_autocast(name: str, overload: Any, slot: Slot) -> None:
    """``torch.ops.tkreg.<op>``'s kernels for torch.autocast on CUDA and the CPU: the casts the op
    declares (Op.autocast, :mod:`.autocasting`), then the operator with that autocast key left out,
    as torch's own autocast kernels do; an op that declares none computes in its inputs' dtypes.
    torch.compile traces these kernels too, so a compiled call casts as an eager one."""
    library = torch.library.Library(TRACED_NAMESPACE, "IMPL")

    def kernel_for(device_type: str, key: str) -> Callable[..., Any]:
        left_out = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))

        def kernel(keyset: Any, *inputs: Any, **params: Any) -> Any:
            cast = autocasting.cast(inputs, device_type, slot.dispatcher.op.autocast_policy(device_type))
            with torch._C._ExcludeDispatchKeyGuard(left_out):
                return overload(*cast, **params)

        return kernel

    for device_type in ("cuda", "cpu"):
        key = "Autocast" + torch._C._dispatch_key_for_device(device_type)
        library.impl(name, kernel_for(device_type, key), key, with_keyset=True)
    _AUTOCAST_LIBRARIES.append(library)


def _call_eagerly(
    defined: Any, overload: Any, slot: Slot, setup_context: Callable[..., None], backward: Callable[..., Any],
    runtime: Any,
) -> None:
    """Give ``torch.ops.tkreg.<op>``'s autograd kernel a short way for eager calls.

    torch.library's own way into a custom op passes its autograd kernel, a redispatch below
    autograd and a backend wrapper, each a Python call from C++ (about 11 us per call on a CPU
    host where tkreg.ops.add costs 3.7). A call of plain tensors outside any trace or dispatch
    mode needs none of them: it dispatches at once, through an autograd.Function where a
    gradient is wanted. Everything else (FakeTensors, modes, subclasses, compiling) takes
    torch's own kernel, unchanged. Where this torch lacks the pieces, every call takes it.

    Under a torch.func transform (grad, jacrev, jvp, vmap of them) a call that wants a gradient
    takes a second autograd.Function, of the form those transforms require (a forward without
    ``ctx``, ``setup_context``, a generated vmap rule), which runs the run-time operator
    (``runtime``) forward and the run-time backward: torch batches those, calling them per
    sample, where a vmap is running. torch's own kernel refuses these transforms."""
    def forward(ctx: Any, *args: Any) -> Any:
        inputs, params = args[:-1], args[-1]
        output = slot.dispatcher(*inputs, **params)
        setup_context(ctx, inputs, output, params)
        return output

    def backward_call(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        return (*backward(ctx, *grads), None)

    # named so that a tensor's grad_fn says which op made it (tkreg_<op>Backward)
    EagerCall: Any = type(
        f"tkreg_{overload._opname}",
        (torch.autograd.Function,),
        {"forward": staticmethod(forward), "backward": staticmethod(backward_call)},
    )
    # autograd.Function.apply's Python layer only unwraps functorch's wrappers (about 2 us a
    # call): outside vmap and grad transforms the C apply under it does the same work.
    c_apply = getattr(torch._C._FunctionBase, "__dict__", {}).get("apply")
    plain_apply = c_apply.__get__(None, EagerCall) if c_apply is not None else EagerCall.apply

    def apply(*args: Any) -> Any:
        return EagerCall.apply(*args) if transforms_active() else plain_apply(*args)

    def transformed_forward(*args: Any) -> Any:
        return runtime(*args[:-1], **args[-1])

    def transformed_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        setup_context(ctx, inputs[:-1], output, inputs[-1])

    TransformedCall: Any = type(
        f"tkreg_{overload._opname}",
        (torch.autograd.Function,),
        {"forward": staticmethod(transformed_forward), "setup_context": staticmethod(transformed_setup),
         "backward": staticmethod(backward_call), "generate_vmap_rule": True},
    )  # fmt: skip
    if _take_plain_calls(defined, overload, slot, apply, transformed=True):
        slot.differentiable, slot.transformed = apply, TransformedCall.apply


def _take_plain_calls(defined: Any, overload: Any, slot: Slot, apply: Callable[..., Any] | None = None,
                      transformed: bool = False) -> bool:
    """Replace the operator's autograd kernel with one that sends a call of plain tensors, outside
    any trace or dispatch mode, straight to the dispatcher (through ``apply``, the op's
    autograd.Function, where a gradient is wanted); every other call takes torch's own kernel.
    With ``transformed``, a call that wants a gradient under a torch.func transform, which only
    tkreg.ops.<op> takes (its autograd.Function must be applied before torch's dispatcher),
    raises NoGradientError that says so.
    Also for the run-time operator a compiled graph calls, where it saves the same two Python
    calls from C++. False where this torch lacks the pieces."""
    import torch._library.autograd as torch_autograd

    try:
        standard = torch_autograd.make_autograd_impl(overload, defined)
    except (AttributeError, TypeError) as e:  # pragma: no cover - another torch's internals
        log.debug("%s: torch's own autograd kernel only (%s)", overload, e)
        return False

    def autograd_kernel(keyset: Any, *inputs: Any, **params: Any) -> Any:
        inputs = tuple(slot.dispatcher.form.padded(inputs))  # trailing optional inputs left out: None
        odd = unusual_layout(inputs)
        if odd is not None:
            raise InputError(f"torch.ops.tkreg.{overload._opname}: {odd}; tkreg's operators take strided tensors "
                             f"(tkreg.ops.{overload._opname} runs its peer for the others)")  # fmt: skip
        if autocast_on():  # the operator computes in its inputs' dtypes: a peer plan's call would cast
            with no_autocast():
                return autograd_kernel(keyset, *inputs, **params)
        way = way_of(inputs)
        if way == DISPATCH:
            return slot.dispatcher(*inputs, **params)
        if way == DIFFERENTIABLE and apply is not None:
            return apply(*inputs, params)
        if transformed and ((transforms_active() and (wants_gradient(inputs) or "Jvp" in transform_levels()))
                            or has_tangents(inputs)):
            raise NoGradientError(f"torch.ops.tkreg.{overload._opname} has no gradient under torch.func transforms (grad, "
                                  f"jacrev, jvp) or of dual tensors (forward-mode AD); tkreg.ops.{overload._opname} "
                                  "has them")  # fmt: skip
        return standard(keyset, *inputs, **params)

    names = slot.dispatcher.form.input_names
    arity = len(names) if names is not None else 0
    kernel = fast_paths.operator_call(arity, slot, autograd_kernel) if 1 <= arity <= keys.MAX_UNROLLED else autograd_kernel
    try:
        with warnings.catch_warnings():  # torch warns of any kernel replaced; replacing it is the point
            warnings.filterwarnings("ignore", message="(?s).*overriding a previously registered kernel")
            defined._lib.impl(overload._opname, kernel, "Autograd", with_keyset=True, allow_override=True)
    except Exception as e:  # pragma: no cover - another torch's internals: its own kernel stays
        log.debug("%s: torch's own autograd kernel only (%s)", overload, e)
        return False
    return True


def _take_planned_packet_calls(packet: Any, slot: Slot) -> None:
    """Let ``torch.ops.tkreg.<op>(...)`` take a planned call of plain tensors that wants no
    gradient straight to its plan, in Python.

    Through torch's dispatcher the same call crosses into C++ and back twice: the packet's call
    converts every argument, the Python autograd kernel gets them again, and its outputs go the
    same way back; on a host where tkreg.ops.layer_norm costs 12 us that is about 15 more, growing
    with the tensors (inputs and outputs) crossing. The packet's class becomes a subclass whose
    ``__call__`` begins as the autograd kernel does (:mod:`.fast_paths`) and runs the plan
    the kernel would run; any other call (another arity or keywords for inputs, a trace, a
    subclass, a mode, a gradient, an unplanned signature) takes the packet's own call, unchanged.
    The packet stays the object torch and torch.compile know (its overloads, its schema)."""
    names = slot.dispatcher.form.input_names
    arity = len(names) if names is not None else 0
    if not 1 <= arity <= keys.MAX_UNROLLED or not isinstance(packet, torch._ops.OpOverloadPacket):
        return
    call = fast_paths.packet_call(slot, arity)
    try:
        packet.__class__ = type(f"tkreg_{packet.__name__}_packet", (type(packet),), {"__call__": call})
    except TypeError as e:  # pragma: no cover - another torch's packet: its own call stays
        log.debug("%s: the packet's own call only (%s)", packet, e)


def _define_backward(op: Op, slot: Slot) -> Any:
    """``torch.ops.tkreg_backward.<op>``: the gradients (one per input in ``grads``; an empty
    tensor where ``needs`` says no), computed on real tensors when a compiled graph runs."""
    parameters = [
        # Tensor?[]: an absent optional input is None among them
        inspect.Parameter("tensors", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=list[Optional[torch.Tensor]]),  # noqa: UP045
        inspect.Parameter("needs", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=list[bool]),
    ]
    parameters += [
        inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, annotation=p.kind, default=p.default) for p in op.params
    ]
    signature = inspect.Signature(parameters, return_annotation=list[torch.Tensor])

    def split(tensors: Sequence[Any]) -> tuple[Sequence[Any], Sequence[Any], Sequence[Any]]:
        count, outputs = len(slot.dispatcher.form.input_names or ()), len(slot.dispatcher.op.outputs)
        return tensors[:count], tensors[count : count + outputs], tensors[count + outputs :]

    def gradients(tensors: list[Any], needs: list[bool], **params: Any) -> list[Any]:
        dispatcher = slot.dispatcher
        inputs, outputs, grad_outputs = split(tensors)
        got = dispatcher.backward(inputs, outputs, grad_outputs, dispatcher.params.values(params), needs)
        result: list[Any] = []
        present = [t for t in tensors if t is not None]
        for i, g, need in zip(dispatcher.grad_index, got, needs):
            result.append(_fresh(g, [*present, *result]) if need else _placeholder(inputs, i))
        return result

    def fake(tensors: list[Any], needs: list[bool], **params: Any) -> list[Any]:
        inputs = split(tensors)[0]
        grad_index = slot.dispatcher.grad_index
        return [inputs[i].new_empty(inputs[i].shape) if need else _placeholder(inputs, i) for i, need in zip(grad_index, needs)]

    def per_sample(info: Any, in_dims: tuple[Any, ...], tensors: list[Any], needs: list[bool], **params: Any) -> Any:
        """Under a vmap (a torch.func jacrev, or vmap of grad): one call per sample, stacked.
        torch makes no such rule for an op that takes a list of tensors."""
        samples = [defined([t if d is None else t.select(d, i) for t, d in zip(tensors, in_dims[0])], needs, **params)
                   for i in range(info.batch_size)]  # fmt: skip
        stacked = [torch.stack([sample[j] for sample in samples]) for j in range(len(samples[0]))]
        return stacked, [0] * len(stacked)

    gradients.__signature__ = signature  # type: ignore[attr-defined]
    defined = torch.library.custom_op(f"{BACKWARD_NAMESPACE}::{op.name}", gradients, mutates_args=())
    defined.register_fake(fake)
    defined.register_vmap(per_sample)
    return getattr(getattr(torch.ops, BACKWARD_NAMESPACE), op.name).default


def _placeholder(inputs: Sequence[Any], i: int) -> Any:
    """What the gradients' list holds for a gradient nobody asked for: an empty tensor (of input
    ``i``, or of the first input where ``i`` is an absent optional one)."""
    return (inputs[i] if inputs[i] is not None else inputs[0]).new_empty(0)


def _fresh(t: Any, others: Sequence[Any]) -> Any:
    """``t`` as a custom op may return it: contiguous, sharing memory with nothing it got or
    returned already (a formula may pass an upstream gradient on, or expand it)."""
    storage = t.untyped_storage().data_ptr()
    if t.is_contiguous() and all(o.untyped_storage().data_ptr() != storage for o in others):
        return t
    return t.clone(memory_format=torch.contiguous_format)


def way_of(inputs: Sequence[Any]) -> int:
    """How a call of these inputs is taken: TORCH, torch's own way through the operator (while
    compiling, for a tensor subclass, under a dispatch mode or a torch.func transform, whose
    wrapped tensors look plain but have no storage, for a dual tensor of forward-mode AD); else
    DIFFERENTIABLE where a plain tensor wants a gradient (the op's autograd.Function), and
    DISPATCH where none does (the dispatcher at once). tkreg.ops.<op> and the operators' autograd
    kernels ask alike."""
    if torch.compiler.is_compiling() or transforms_active() or has_tangents(inputs):
        return TORCH
    grad, wanted = torch.is_grad_enabled(), False
    for t in inputs:
        cls = type(t)
        if cls in PLAIN:
            if grad and t.requires_grad:
                wanted = True
        elif isinstance(t, torch.Tensor):
            return TORCH
    if is_in_torch_dispatch_mode():
        return TORCH
    return DIFFERENTIABLE if wanted else DISPATCH


def entry_point(dispatcher: Dispatcher, overload: Any, differentiable: Callable[..., Any] | None = None,
                transformed: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """``tkreg.ops.<op>``: plain tensors that need no autograd go straight to the dispatcher
    (the torch.library path costs several microseconds more per call), and those that want a
    gradient to the peer's own call where the peer runs them or a kernel leads it by little
    (:meth:`Dispatcher.through_peer_autograd`: torch's autograd then records torch's backward),
    else to the op's eager autograd.Function (``differentiable``, see :func:`_call_eagerly`);
    under torch.compile, tensor subclasses or a dispatch mode, the call goes through the torch
    operator.
    Returns the outputs the op marks ``returned`` (one tensor, or a tuple of them)."""
    op = dispatcher.op
    check_params = dispatcher.params.values

    pick = dispatcher.pick
    through_peer, without_operator = dispatcher.through_peer_autograd, dispatcher.without_operator

    def under_transforms(inputs: tuple[Any, ...], params: dict[str, Any]) -> Any:
        """A call under torch.func transforms: one grad (or jacrev) that wants a gradient takes
        the autograd.Function made for them, which runs the kernels; anything else (vmap, jvp,
        nested transforms, whose gradients would have to be differentiable) the peer's own call,
        torch's code, which every transform takes. Without a peer, a vmap goes through the
        operator (torch batches it per sample) and forward-mode AD is an error."""
        levels = transform_levels()
        if levels == ("Grad",) and transformed is not None and wants_gradient(inputs):
            got = transformed(*inputs, dispatcher.params.as_dict(dispatcher.params.values(params)))
            return got if pick is None else pick(got)
        if op.peer is not None:
            return dispatcher.peer_own_call(inputs, params, f"torch.func transforms ({', '.join(levels)}) take the peer's "
                                            "own code", "runs")  # fmt: skip
        if "Jvp" in levels:
            raise NoGradientError(f"tkreg.ops.{op.name} has no forward-mode gradient (torch.func.jvp, jacfwd, hessian) and "
                                  f"op {op.name!r} has no peer to compute one")  # fmt: skip
        return NOT_TAKEN

    padded = dispatcher.form.padded

    def slow(inputs: tuple[Any, ...], params: dict[str, Any]) -> Any:
        inputs = tuple(padded(inputs))  # trailing optional inputs left out: None
        detour = layout_detour(op, inputs)
        if detour is None and transforms_active():
            got = under_transforms(inputs, params)
            if got is not NOT_TAKEN:
                return got
        if detour is None:
            detour = context_detour(op, inputs)
        if detour is not None:  # explain states the same detour (Dispatcher.describe)
            if detour.way == PEER:
                return dispatcher.peer_own_call(inputs, params, detour.reason, "runs")
            if detour.way == RAISE:
                detour.raise_error()
            # CAST: as torch casts the peer, then the usual call with autocast off
            cast = detour.cast(inputs)
            with no_autocast():
                return dispatcher.entry(*cast, **params) if dispatcher.entry is not None else slow(cast, params)
        if overload is not None:
            way = way_of(inputs)
            if way != DISPATCH:
                if params:
                    check_params(params)  # the op's own message for a bad parameter, not the schema's
                if way == DIFFERENTIABLE and differentiable is not None:
                    got = through_peer(inputs, params, differentiable)  # the outputs callers get, where the peer runs
                    if got is not NOT_TAKEN:
                        return got
                    got = differentiable(*inputs, params)
                else:
                    got = overload(*inputs, **params)
                return got if pick is None else pick(got)
        elif way_of(inputs) == DIFFERENTIABLE:  # tkreg's autograd comes with the operator
            return without_operator(inputs, params, f"it has no torch operator: {dispatcher.no_operator}")
        got = dispatcher(*inputs, **params)
        return got if pick is None else pick(got)

    def traced(inputs: tuple[Any, ...], params: dict[str, Any]) -> Any:
        """A call torch.compile traces: straight to the torch operator, through as few Python
        frames as can be, since the compiled code guards on what each one reads."""
        if overload is None:
            return slow(inputs, params)
        if params:
            check_params(params)  # the op's own message for a bad parameter, not the schema's
        if op.peer is not None and autocast_on() and autocasting.policy_for(op, inputs)[1] is None:
            # an eager call is the peer's own here (see slow): the trace takes the same code
            got = refs.resolve(op.peer)(*inputs, out=None, **dispatcher.params.as_dict(check_params(params)))
            return dispatcher.returned_of(as_tuple(got))
        got = overload(*inputs, **params)
        return got if pick is None else pick(got)

    # The common call (plain tensors, no autograd, a signature already planned) finds its plan in
    # one pass over the inputs, building the dispatcher's own key: on launch-bound sizes the host's
    # work per call is what the caller waits for. A call torch.compile traces takes ``traced``.
    names = dispatcher.form.input_names
    arity = len(names) if names is not None else 0
    doc = f"tkreg op {op.name!r}: {op.description or 'see tkreg.ops.explain'}"
    # the callable's own signature: tensors positionally (as the fast path takes them), parameters by name
    shown = None
    if names is not None:
        schema = signature_of(op, names)
        shown = schema.replace(parameters=[p.replace(kind=inspect.Parameter.POSITIONAL_ONLY) if p.name in names else p
                                           for p in schema.parameters.values()])  # fmt: skip

    def python_call() -> Callable[..., Any]:
        if 1 <= arity <= keys.MAX_UNROLLED:
            call = fast_paths.unrolled_call(arity, dispatcher._plans, dispatcher.params, dispatcher.grad_index, slow, traced,
                                  dispatcher.form.optional, dispatcher.form.required)
        else:
            call = fast_paths.looped_call(dispatcher._plans, dispatcher.params.defaults, slow, traced)
        call.__name__ = call.__qualname__ = op.name
        call.__doc__ = doc
        if shown is not None:
            count = len(dispatcher.returned)
            returns = torch.Tensor if count == 1 else tuple.__class_getitem__((torch.Tensor,) * count)
            call.__signature__ = shown.replace(return_annotation=returns)  # type: ignore[attr-defined]
        return call

    if shown is not None and arity >= 1:
        builtin = _builtin_call(op.name, doc, shown, dispatcher, slow, traced, python_call)
        if builtin is not None:
            return builtin
    return python_call()


# What torch.compile runs in place of each builtin tkreg.ops.<op>, by number. Its polyfill reads it
# from here, a global, because the compiler inlines a polyfill without sources for its closure and
# cannot wrap what ``traced`` closes over from there.
_TRACED: dict[int, Callable[..., Any]] = {}


def _builtin_call(name: str, doc: str, signature: inspect.Signature, dispatcher: Dispatcher, slow: Callable[..., Any],
                  traced: Callable[..., Any], python_call: Callable[[], Callable[..., Any]]) -> Callable[..., Any] | None:
    """``tkreg.ops.<op>`` as one C++ builtin (:mod:`.native`, fast_call.cpp): the fast path of
    :func:`.fast_paths.unrolled_call` without a Python frame, for inputs of any number; anything
    else it passes to ``slow``. torch.compile does not run it: it inlines ``traced`` in its place
    (``torch.compiler.substitute_in_graph``, registered once the compiler is imported:
    :mod:`.after_import`). None where the extension is not in use, or where this torch cannot
    substitute a callable (the generated Python fast path serves then). Should the registration
    fail when the compiler is imported, ``python_call()`` (that fast path, which the compiler traces
    itself) becomes tkreg.ops.<op> from then on."""
    make = native.fast_caller()
    if make is None:
        return None
    params = dispatcher.params
    arity = len(signature.parameters) - len(params.names)
    bare = signature.replace(parameters=[p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()],
                             return_annotation=inspect.Signature.empty)  # fmt: skip
    graded = tuple(i in dispatcher.grad_index for i in range(arity))
    builtin = make(name, f"{name}{bare}\n--\n\n{doc}", dispatcher._plans.fast, slow, graded, tuple(params.names),
                   tuple(params.kinds), tuple(params.defaults), dispatcher._plans.epoch,
                   autocasting.policy_codes(dispatcher.op), dispatcher.form.required)  # fmt: skip

    number = len(_TRACED)
    _TRACED[number] = traced

    def polyfill(*inputs: Any, **values: Any) -> Any:
        return _TRACED[number](inputs, values)

    if not hasattr(torch.compiler, "substitute_in_graph"):  # another torch: the Python fast path, which it traces itself
        log.info("tkreg.ops.%s: the C++ call is not used (this torch.compile cannot substitute it)", name)
        return None

    def substitute(dynamo: Any) -> None:
        try:
            torch.compiler.substitute_in_graph(builtin, skip_signature_check=True)(polyfill)
        except Exception as e:
            from . import _replace_callable

            now = ("; tkreg.ops.<op> is the Python fast path from now on, which it traces (a reference taken "
                   "before still breaks the graph)") if _replace_callable(name, builtin, python_call()) else ""  # fmt: skip
            log.warning("tkreg.ops.%s: torch.compile cannot trace its C++ call (%s: %s)%s", name, type(e).__name__, e, now)

    after_import("torch._dynamo", substitute)  # importing the compiler costs a process that never compiles about 1 s
    return builtin
