"""Ahead-of-time compile of the trace probe for one scheduler, for the CPU compile test."""

from __future__ import annotations

from tkreg import Scheduler
from tkreg.core.schedulers import gluon_impl
from tkreg.launch.aot import AotSpec

from .trace import trace_kernel

TRACE_SIGNATURE = {
    "out_ptr": "*i32",
    "M": "i32",
    "N": "i32",
    "BLOCK_M": "constexpr",
    "BLOCK_N": "constexpr",
    "SchedulerImpl": "constexpr",
}


def trace_aot(scheduler: str | Scheduler, BLOCK_M: int = 128, BLOCK_N: int = 256) -> AotSpec:
    constexprs = {"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "SchedulerImpl": gluon_impl(scheduler)}
    return AotSpec(trace_kernel, dict(TRACE_SIGNATURE), constexprs, {"num_warps": 1}, aligned=("out_ptr",))
