"""Resolve the ``scheduler`` parameter a persistent kernel's launcher receives."""

from __future__ import annotations

from typing import Any

from . import refs
from .specs import Scheduler


def resolve(scheduler: str | Scheduler) -> Scheduler:
    """A Scheduler spec from a spec or a registered name."""
    if isinstance(scheduler, Scheduler):
        return scheduler
    from .loading import default_registry

    return default_registry().scheduler(scheduler)


def gluon_impl(scheduler: str | Scheduler) -> Any:
    """The Gluon aggregate to pass as the kernel's SchedulerImpl constexpr."""
    return refs.resolve(resolve(scheduler).gluon)
