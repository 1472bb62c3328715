"""The hooks a tkreg plugin implements. Each receives a ``register`` callback built by the core,
so plugins never touch registry internals; pluggy lets an implementation take a subset of the
arguments, so hooks can gain arguments later without breaking plugins."""

from __future__ import annotations

from collections.abc import Callable

import pluggy

PROJECT = "tkreg"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def tkreg_register_ops(register: Callable) -> None:
    """Call ``register(Op(...))`` for each op this plugin defines."""


@hookspec
def tkreg_register_schedulers(register: Callable) -> None:
    """Call ``register(Scheduler(...))`` for each tile scheduler this plugin provides."""


@hookspec
def tkreg_register_kernels(register: Callable) -> None:
    """Call ``register(Kernel(...))`` for each kernel this plugin provides."""


# Registration order: kernels are checked against every op and scheduler of every plugin.
STAGES = (
    ("tkreg_register_ops", "op"),
    ("tkreg_register_schedulers", "scheduler"),
    ("tkreg_register_kernels", "kernel"),
)
