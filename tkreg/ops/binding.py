"""A callable with keywords fixed, cheaper per call than ``functools.partial``.

A plan that runs an op's peer calls it as torch code does, with the op's parameters by keyword
(``peer(x, weight, out=None, eps=1e-06)``). ``functools.partial`` with keywords builds and merges
a dict on every call; a launch-bound norm on a GPU host is over by a few tenths of a microsecond
as it is. :func:`bound_call` writes one small function instead, of the op's arity with the
keywords spelled out (the dispatcher makes one per parameter values and shares it between the
plans that use them). On the 2-core CPU machine (2026-11-27, a peer that returns at once, best
of nine x 300,000 calls, with a test run on the other core): 194 ns a call against 429 for the
partial and 134 for the call written out by hand.

:func:`reordered_call` is a plan's direct call of the torch function a peer would make for its
signature (``Op.peer_direct``): the inputs reordered, in C++ where the extension is built.
"""

from __future__ import annotations

import functools
import keyword
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core.generated import generated


def bound_call(target: Callable[..., Any], arity: int, keywords: Mapping[str, Any]) -> Callable[..., Any]:
    """``target(*inputs, **keywords)`` for exactly ``arity`` positional inputs. Like a partial it
    carries ``func`` and ``keywords``. A partial where a keyword is no identifier (it could not
    be spelled out) or there are no inputs."""
    keywords = dict(keywords)
    if arity < 1 or not all(name.isidentifier() and not keyword.iskeyword(name) for name in keywords):
        return functools.partial(target, **keywords)
    inputs = ", ".join(f"t{i}" for i in range(arity))
    given = "".join(f", {name}=_k{i}" for i, name in enumerate(keywords))
    scope = {"_target": target, **{f"_k{i}": value for i, value in enumerate(keywords.values())}}
    call: Any = generated(f"def call({inputs}, /):\n    return _target({inputs}{given})\n", "call", scope)
    call.func, call.keywords = target, keywords
    name = getattr(target, "__name__", type(target).__name__)
    call.__name__ = call.__qualname__ = f"{name}_bound"
    call.__doc__ = f"{name}(*inputs, {', '.join(f'{k}={v!r}' for k, v in keywords.items())})"
    return call


def reordered_call(target: Callable[..., Any], order: Sequence[int], arity: int) -> Callable[..., Any]:
    """``call(*inputs)`` is ``target(*(inputs[i] for i in order))`` for exactly ``arity`` inputs:
    a peer plan's direct torch call (Op.peer_direct). A builtin with no Python frame where the
    C++ extension is in use (reordered_call.cpp), else one small function written out."""
    from . import native

    order = tuple(order)
    if not all(isinstance(i, int) and 0 <= i < arity for i in order):
        raise ValueError(f"an order of input positions below {arity}, got {order!r}")
    make = native.reordered_maker()
    if make is not None:
        return make(target, order)
    inputs = ", ".join(f"t{i}" for i in range(arity))
    picked = ", ".join(f"t{i}" for i in order)
    call: Any = generated(f"def call({inputs}, /):\n    return _target({picked})\n", "call", {"_target": target})
    name = getattr(target, "__name__", type(target).__name__)
    call.__name__ = call.__qualname__ = f"{name}_reordered"
    return call
