"""Kernel launchers as a plan calls them: imported when first needed, and one at a time under
Triton's interpreter.

A plan lists fallbacks it may never run, and a cached choice of the peer runs no kernel at all,
while importing a kernel's module costs milliseconds (Triton reads each kernel's source when it
is decorated): a cold process with a warm tuning cache would pay that on its first call of every
op. A :class:`Deferred` stands in for a launcher until something calls it.

Triton 3.6's interpreter keeps the running kernel's grid and builder in process-wide state, so
two threads interpreting kernels at once fail or compute wrong answers ("x >= grid_dim[0]").
tkreg.ops therefore runs the launchers of its plans one at a time when the interpreter is on; on
a GPU they run as they are.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from ..core.platform import interpreter_on


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


# Reentrant: a launcher may call another op's tkreg.ops callable.
_INTERPRETING = threading.RLock()


def plan_launcher(launch: Callable[..., Any]) -> Callable[..., Any]:
    """What a plan's calls run: ``launch`` imported (:func:`loaded`) and, under the interpreter,
    called one at a time. (Tuning, which times kernels on GPUs only, calls :func:`loaded`.)"""
    launch = loaded(launch)
    if not interpreter_on() or getattr(launch, "_one_at_a_time", False):  # a GPU, or a plan made again from it
        return launch

    @functools.wraps(launch)
    def call(*args: Any, **kwargs: Any) -> Any:
        with _INTERPRETING:
            return launch(*args, **kwargs)

    call._one_at_a_time = True  # type: ignore[attr-defined]
    return call
