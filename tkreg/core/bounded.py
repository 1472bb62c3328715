"""Bounded caches: dicts that keep their newest entries, for what a launch path keeps per input
(descriptors, bound launches, plans by shape) without growing with every new shape or address."""

from __future__ import annotations

from typing import Any, TypeVar

V = TypeVar("V")
_NONE = object()


def put(table: dict[Any, Any], key: Any, value: V, limit: int) -> V:
    """``table[key] = value``, first dropping the oldest entry where ``table`` already holds
    ``limit``; returns ``value``. Another thread may drop or add entries meanwhile: the table then
    holds one more or one fewer for a while, and nothing fails."""
    if len(table) >= limit:
        table.pop(next(iter(table), _NONE), None)
    table[key] = value
    return value
