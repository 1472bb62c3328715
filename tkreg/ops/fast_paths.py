"""The Python fast paths tkreg generates per op, as source: ``tkreg.ops.<op>`` where the C++
call is not in use (:func:`unrolled_call`, :func:`looped_call`), and the planned run the torch
operators' autograd kernel (:func:`operator_call`) and ``torch.ops.tkreg.<op>``'s own ``__call__``
(:func:`packet_call`) begin with. Each is one function per op, its inputs named and its key spelled
out, because on a launch-bound call a loop, a list and nested tuples are a fifth of what the
dispatch costs the host."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.autograd import forward_ad
from torch.utils._python_dispatch import is_in_torch_dispatch_mode

from ..core.generated import generated
from . import keys, native
from .contexts import autocast_on, transforms_active

if TYPE_CHECKING:
    from .library import Slot

PLAIN = (torch.Tensor, torch.nn.Parameter)  # the tensor types a fast path takes

MISSING_INPUT = object()  # an input a call did not pass (the generated fast path's default)

# tkreg.ops.<op> for an op of a known arity: the fast path with the inputs as named parameters
# and the key as one expression (tkreg.ops.keys.source). A trace takes ``traced``. A call that
# wants a gradient, of a signature whose first such call found it the peer's own
# (Plan.gradient_call), makes that call at once. Anything else unusual (a missing or
# extra input, a tensor subclass, an unplanned signature, a dispatch mode, a gradient through the
# op's autograd.Function) takes ``slow(inputs, params)``.
_UNROLLED = """
def call({defaults}, /, *rest, **params):
    if is_compiling():
        return traced(tuple([t for t in ({names},) if t is not MISSING]) + rest, params)
    if {no_params}not rest and {plain}:
        try:
            plan = plans.get(({key}{values}))
        except RuntimeError:  # a tensor without strides or sizes (sparse, nested): the checked path
            plan = None
        if plan is not None and not in_mode():
            if not (grad_enabled() and ({wanted})):
                return plan.returned({names})
            if plan.gradient_call is not None and not ({ungraded}):
                return plan.gradient_call({names})
    return slow(tuple([t for t in ({names},) if t is not MISSING]) + rest, params)
"""
# An op with parameters keys its plans by their values too: a call that gives them (a model's
# eps) finds its plan on the fast path as well, every one named with a value of its declared type
# read inline, anything else through the op's own checks (a bad one raises its TypeError).
_VALUES = ", ({given}) if len(params) == {count} and {typed} else values(params) if params else defaults"


# A call of plain tensors that wants no gradient, outside a trace or a dispatch mode, of a signature
# already planned: every output, from the same key tkreg.ops.<op> builds. The torch operator's
# autograd kernel and its packet's __call__ both begin with it (:func:`_planned_run`).
_PLANNED_RUN = """\
if {plain} and not is_compiling() and not (grad_enabled() and ({wanted})):
    try:
        plan = slot.dispatcher._plans{table}.get(({key}{values}))
    except RuntimeError:  # a tensor without strides or sizes (sparse, nested): the checked path
        plan = None
    if plan is not None and not in_mode():
        return plan.run({names})
"""

# The torch operators' autograd kernel (torch passes every input but trailing ones left at their
# default, None, and every parameter with its declared type). ``other`` takes what the planned run
# does not.
_OPERATOR = """
def kernel(keyset, {parameters}, /, **params):
{planned}
    return other(keyset, {names}, **params)
"""

# ``torch.ops.tkreg.<op>``'s own __call__ (:func:`packet_call`; tkreg.ops.library swaps it in). Inputs come
# positionally, as many as the op has; anything else is the packet's own call.
_PACKET = """
def packet_call(self, /, *args, **params):
{pad}    if len(args) == {arity}:
        {names}, = args
{planned}
    return self._op(*args, **params)
"""
# Trailing optional inputs a call left out (``matmul(a, b)`` without its bias): None in their place,
# so such a call takes the planned run too, not torch's dispatcher (which costs it microseconds).
_PAD = """    if {required} <= len(args) < {arity}:
        args = (*args, *(None,) * ({arity} - len(args)))
"""


def _planned_run(names: Sequence[str], params: Any, indent: int, optional: frozenset[int] = frozenset()) -> str:
    """:data:`_PLANNED_RUN` for inputs named ``names``, indented to sit in a generated function."""
    return textwrap.indent(_PLANNED_RUN.format(**_fields(names, params, optional)), " " * indent)


def _wants(names: Sequence[str], positions: Sequence[int], optional: frozenset[int]) -> str:
    """Whether any of these inputs wants a gradient, as source ("False" for none); an optional
    input may be None."""
    each = [f"({names[i]} is not None and {names[i]}.requires_grad)" if i in optional else f"{names[i]}.requires_grad"
            for i in positions]  # fmt: skip
    return " or ".join(each) or "False"


def _fields(names: Sequence[str], params: Any, optional: frozenset[int] = frozenset()) -> dict[str, str]:
    """What the generated fast paths spell out for inputs named ``names``: with the C++ key
    (:mod:`.native`, which also checks that every input is a plain tensor), the plan table's
    plans by packed key (``fast``); else the Python key (:func:`keys.source`) and the table itself."""
    joined = ", ".join(names)
    fields = {"names": joined, "wanted": _wants(names, range(len(names)), optional), "values": _values_source(params.names)}
    if native.plan_key() is not None:
        return {**fields, "plain": "True", "key": f"native_key({joined})", "table": ".fast"}
    # The Python key reads data_ptr(), which a torch.func transform's wrapped tensor lacks, and
    # strides and sizes, which sparse and nested tensors lack (the templates catch that and take
    # the checked path); it holds nothing of a dual tensor's tangent or of torch.autocast. The C++
    # key refuses all of these.
    plain = " and ".join(f"({n} is None or type({n}) in PLAIN)" if i in optional else f"type({n}) in PLAIN"
                         for i, n in enumerate(names))  # fmt: skip
    return {**fields, "plain": f"{plain} and not transforms_active() and forward_ad._current_level < 0 and not autocast_on()",
            "key": keys.source(names, optional), "table": ""}  # fmt: skip


def _scope(params: Any) -> dict[str, Any]:
    """The names the generated fast paths read."""
    return {"MISSING": MISSING_INPUT, "PLAIN": PLAIN, "ABSENT": keys.ABSENT, "is_compiling": torch.compiler.is_compiling,
            "grad_enabled": torch.is_grad_enabled, "in_mode": is_in_torch_dispatch_mode, "transforms_active": transforms_active,
            "forward_ad": forward_ad, "autocast_on": autocast_on,
            "defaults": params.defaults, "values": params.values, "native_key": native.plan_key(),
            **{f"KIND{i}": kind for i, kind in enumerate(params.kinds)}}  # fmt: skip


def unrolled_call(arity: int, plans: keys.PlanTable, params: Any, graded: Sequence[int], slow: Callable[..., Any],
                   traced: Callable[..., Any], optional: frozenset[int] = frozenset(),
                   required: int | None = None) -> Callable[..., Any]:
    names = [f"t{i}" for i in range(arity)]
    required = arity if required is None else required  # inputs from here on may be left out: None
    # an input the op gives no gradient that wants one: the slow path's own error, or None
    ungraded = _wants(names, [i for i in range(arity) if i not in graded], optional)
    fields = _fields(names, params, optional)
    text = _UNROLLED.format(
        defaults=", ".join(f"{n}={'None' if i >= required else 'MISSING'}" for i, n in enumerate(names)),
        no_params="" if params.names else "not params and ",
        ungraded=ungraded, **fields,
    )
    table = plans.fast if fields["table"] else plans  # the table the key _fields spells is kept in
    return generated(text, "call", {**_scope(params), "plans": table, "slow": slow, "traced": traced})


def operator_call(arity: int, slot: Slot, other: Callable[..., Any]) -> Callable[..., Any]:
    """An operator's autograd kernel (:data:`_OPERATOR`); the plans are those of the dispatcher
    the slot holds at each call (installing another registry swaps it; the schema, and with it the
    parameters, stays)."""
    params, form = slot.dispatcher.params, slot.dispatcher.form
    names = [f"t{i}" for i in range(arity)]
    # torch passes the inputs a call gave: the trailing optional ones it left out are None
    parameters = ", ".join(f"{n}=None" if i >= form.required else n for i, n in enumerate(names))
    text = _OPERATOR.format(names=", ".join(names), parameters=parameters,
                            planned=_planned_run(names, params, 4, form.optional))  # fmt: skip
    return generated(text, "kernel", {**_scope(params), "slot": slot, "other": other})


def _values_source(names: Sequence[str]) -> str:
    """The key's parameter values in the generated fast path ("" for an op without parameters)."""
    if not names:
        return ""
    given = "".join(f"p{i}, " for i in range(len(names)))
    typed = " and ".join(f"type(p{i} := params.get({n!r}, MISSING)) is KIND{i}" for i, n in enumerate(names))
    return _VALUES.format(given=given, count=len(names), typed=typed)


def looped_call(plans: dict[Any, Any], defaults: tuple[Any, ...], slow: Callable[..., Any],
                 traced: Callable[..., Any]) -> Callable[..., Any]:
    """The fast path for an op of many (or unnamed) inputs (calls that give parameters take the
    slow path here)."""
    is_compiling, grad_enabled = torch.compiler.is_compiling, torch.is_grad_enabled

    def call(*inputs: Any, **params: Any) -> Any:
        if is_compiling():
            return traced(inputs, params)
        # a transform's tensors have no data_ptr() for the key; a dual tensor's tangent, autocast not in it
        if not params and not transforms_active() and forward_ad._current_level < 0 and not autocast_on():
            grad = grad_enabled()
            for t in inputs:
                if type(t) not in PLAIN or (grad and t.requires_grad):
                    break
            else:
                key = keys.tensors_key(inputs)
                plan = plans.get((*key, defaults) if key is not None and defaults else key)
                if plan is not None and not is_in_torch_dispatch_mode():
                    return plan.returned(*inputs)
        return slow(inputs, params)

    return call


def packet_call(slot: Slot, arity: int) -> Callable[..., Any]:
    """``torch.ops.tkreg.<op>``'s own ``__call__`` for an op of ``arity`` named inputs
    (:data:`_PACKET`): the planned run first, then the packet's own call."""
    form, params = slot.dispatcher.form, slot.dispatcher.params
    inputs = [f"t{i}" for i in range(arity)]
    planned = _planned_run(inputs, params, 8, form.optional)
    pad = _PAD.format(required=form.required, arity=arity) if form.required < arity else ""
    text = _PACKET.format(arity=arity, names=", ".join(inputs), planned=planned, pad=pad)
    return generated(text, "packet_call", {**_scope(params), "slot": slot})
