"""Lazy references "package.module:attribute", so specs import neither torch nor triton."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
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
