"""Kernel launchers imported when first needed.

A plan lists fallbacks it may never run, and a cached choice of the peer runs no kernel at all,
while importing a kernel's module costs milliseconds (Triton reads each kernel's source when it
is decorated): a cold process with a warm tuning cache would pay that on its first call of every
op. A :class:`Deferred` stands in for a launcher until something calls it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


class Deferred:
    """A launcher imported on its first call (see :meth:`Dispatcher.deferred`)."""

    __slots__ = ("_fn", "_load")

    def __init__(self, load: Callable[[], Callable[..., Any]]) -> None:
        self._load = load
        self._fn: Callable[..., Any] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def resolve(self) -> Callable[..., Any]:
        if self._fn is None:
            self._fn = self._load()
        return self._fn


def loaded(launch: Callable[..., Any]) -> Callable[..., Any]:
    """``launch`` with a Deferred launcher (alone, or under a partial's config) imported, so that
    calls of a plan go to the launcher itself."""
    if isinstance(launch, Deferred):
        return launch.resolve()
    if isinstance(launch, functools.partial) and isinstance(launch.func, Deferred):
        return functools.partial(launch.func.resolve(), *launch.args, **launch.keywords)
    return launch
