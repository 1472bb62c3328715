"""Functions defined from tkreg's own source templates: the plan keys and fast paths of tkreg.ops
and a recording's replay, written out for one arity or one set of launches because a call made
millions of times pays for every loop and lookup a general function would do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def generated(text: str, name: str, scope: dict[str, Any]) -> Callable[..., Any]:
    """The function ``name`` defined by ``text`` in a namespace holding ``scope``."""
    namespace = dict(scope)
    exec(compile(text, f"<tkreg generated {name}>", "exec"), namespace)  # our own template, never outside text
    return namespace[name]
