"""The GPU's own start and end of each kernel, memset and memcpy, from CUPTI (through
torch.profiler), and the per-repetition spans the device timer reads from them.

Why CUPTI: CUDA events on a stream time the stream, and a kernel on a stream starts 2-6 us after
the kernel before it ends (its launch, and on Hopper the switch of shared-memory layout for a
kernel that needs one); events cannot leave that out wherever they are put (H100, 2026-11-23;
notes/tuning.md, "The device timer"). CUPTI stamps each activity when it starts and ends on the GPU, as
Nsight Systems shows it. Only torch's profiler is used (no extra package): its raw Kineto events,
without the per-event Python objects ``prof.events()`` would build.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Kineto leaves CUPTI attached after a trace unless told to tear it down, and an attached CUPTI
# adds its callbacks' cost to every later launch: a 1024^2 add's launcher went from 11.6 to
# 20.2 us per call after the first trace (H100, 2026-11-23), which every wall time
# measured later in the same process would carry.
TEARDOWN_ENV = "TEARDOWN_CUPTI"


class TraceError(RuntimeError):
    """CUPTI could not trace, or what it traced does not have the expected shape."""


@dataclass(frozen=True)
class Activity:
    """One kernel, memset or memcpy as the GPU ran it (nanoseconds on CUPTI's clock)."""

    name: str
    start_ns: int
    end_ns: int


class KernelTrace:
    """Records the GPU activities of the work queued between :meth:`start` and :meth:`stop`
    (call stop only once the GPU has finished that work)."""

    def __init__(self) -> None:
        self._profile: Any = None

    def start(self) -> None:
        self._profile = start_profile()

    def stop(self) -> list[Activity]:
        """The activities, ordered by their start on the GPU."""
        if self._profile is None:
            raise TraceError("CUPTI trace was not started")
        import torch

        profile, self._profile = self._profile, None
        try:
            profile.stop()
            events = profile.profiler.kineto_results.events()
            gpu = torch.autograd.DeviceType.CUDA
            found = [Activity(e.name(), e.start_ns(), e.end_ns()) for e in events if e.device_type() == gpu]
        except Exception as e:
            raise TraceError(f"CUPTI trace could not be read: {type(e).__name__}: {e}") from e
        return sorted(found, key=lambda a: (a.start_ns, a.end_ns))


def start_profile() -> Any:
    """A started torch.profiler session that records GPU activities only and detaches CUPTI when it
    stops (unless the environment already says otherwise about TEARDOWN_CUPTI)."""
    os.environ.setdefault(TEARDOWN_ENV, "1")
    try:
        from torch.profiler import ProfilerActivity, profile

        session = profile(activities=[ProfilerActivity.CUDA])
        session.start()
    except Exception as e:  # no Kineto, no CUPTI, or a profiler already running in this process
        raise TraceError(f"CUPTI trace could not start: {type(e).__name__}: {e}") from e
    return session


def names(activities: Sequence[Activity]) -> tuple[str, ...]:
    return tuple(a.name for a in activities)


def span_ms(activities: Sequence[Activity]) -> float:
    """From the first activity's start to the last one's end (ms): the GPU time of a call, gaps
    between its own kernels included (a caller pays them), the gap before its first kernel not."""
    return (max(a.end_ns for a in activities) - min(a.start_ns for a in activities)) / 1e6


def repetitions(
    activities: Sequence[Activity],
    reps: int,
    before: tuple[str, ...],
    after: tuple[str, ...] = (),
    ignore: frozenset[str] = frozenset(),
) -> list[list[Activity]]:
    """Split the trace of ``reps`` repetitions, each ``before`` (the L2 flush's activities by name),
    the call's own activities, then ``after``, into each repetition's call activities.

    Activities named in ``ignore`` (holds) are dropped first; fewer than ``reps`` activities queued
    before the repetitions are left out from the front. The call's activity count is what is left
    per repetition, so a call may launch anything, fills included, but every repetition must start
    with ``before`` and end with ``after`` at the same places: else TraceError, naming what was seen."""
    if reps <= 0:
        raise TraceError(f"{reps} repetitions")
    kept = [a for a in activities if a.name not in ignore]
    per_rep, lead = divmod(len(kept), reps)
    calls = per_rep - len(before) - len(after)
    found = _framed(kept[lead:], reps, calls, before, after) if calls > 0 else None
    if found is None:
        shown = ", ".join(dict.fromkeys(a.name[:60] for a in kept)) or "none"
        raise TraceError(
            f"CUPTI saw {len(kept)} activities, which do not split into {reps} repetitions of "
            f"{len(before)} flush + the call + {len(after)} flush activities (names: {shown})"
        )
    return found


def _framed(
    kept: Sequence[Activity], reps: int, calls: int, before: tuple[str, ...], after: tuple[str, ...]
) -> list[list[Activity]] | None:
    per_rep = len(before) + calls + len(after)
    out = []
    for i in range(reps):
        rep = kept[i * per_rep : (i + 1) * per_rep]
        head, call, tail = rep[: len(before)], rep[len(before) : len(before) + calls], rep[len(before) + calls :]
        if names(head) != before or names(tail) != after:
            return None
        out.append(list(call))
    return out
