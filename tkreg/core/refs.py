"""Lazy references "package.module:attribute", so specs import neither torch nor triton."""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any, Union

Ref = Union[str, Callable[..., Any]]

_REF_PATTERN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def is_valid(ref: object) -> bool:
    return callable(ref) or (isinstance(ref, str) and bool(_REF_PATTERN.match(ref)))


def resolve(ref: Ref) -> Any:
    """Import the module of a "pkg.mod:attr" reference and return the attribute."""
    if not isinstance(ref, str):
        return ref
    module_name, _, attr_path = ref.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    return obj


def describe(ref: Ref | None) -> str:
    if ref is None:
        return "-"
    if isinstance(ref, str):
        return ref
    return f"{getattr(ref, '__module__', '?')}:{getattr(ref, '__qualname__', repr(ref))}"


@functools.lru_cache(maxsize=512)
def keywords_of(fn: Any) -> frozenset[str] | None:
    """The keyword names ``fn`` takes (None: any, it has ``**kwargs``)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return frozenset()
    if any(p.kind == p.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def accepted(fn: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    """The params ``fn`` names (all of them when it takes **kwargs): input factories and output
    allocators need not take every parameter of their op."""
    try:
        names = keywords_of(fn)
    except TypeError:  # an unhashable callable: read its signature each time
        names = keywords_of.__wrapped__(fn)
    return dict(params) if names is None else {k: v for k, v in params.items() if k in names}
