"""Hook implementations: the tile schedulers this plugin registers (no torch, no triton here)."""

from __future__ import annotations

from collections.abc import Callable

import tkreg

SCHEDULERS = (
    tkreg.Scheduler(
        "persistent",
        gluon="tkreg_schedulers.gluon_impl:PersistentTileScheduler",
        model="tkreg_schedulers.model:persistent",
        description="each program takes one contiguous chunk of tile ids, tiles ordered down M first",
    ),
    tkreg.Scheduler(
        "grouped-1",
        gluon="tkreg_schedulers.gluon_impl:GROUPED_1",
        model="tkreg_schedulers.model:grouped_1",
        description="tile ids strided over programs; groups of 1 tile row, i.e. row-major tile order",
    ),
    tkreg.Scheduler(
        "grouped-8",
        gluon="tkreg_schedulers.gluon_impl:GROUPED_8",
        model="tkreg_schedulers.model:grouped_8",
        description="tile ids strided over programs; groups of 8 tile rows walked column by column (L2 reuse)",
    ),
)


@tkreg.hookimpl
def tkreg_register_schedulers(register: Callable[[tkreg.Scheduler], None]) -> None:
    for scheduler in SCHEDULERS:
        register(scheduler)
