"""The suites ``tkreg bench`` runs, and the contract between a suite and the runner.

A suite is a measuring function, ``measure(deadline) -> Measured``, named by a lazy reference
("module:function"), so listing the suites imports neither torch nor triton. The runner calls it
in a child process of its own (tkreg.bench.child) with a time limit, and keeps its data file
only if it returns; a suite that cannot finish raises (SuiteFailed, OutOfTime, anything else).
Nothing here imports torch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


class SuiteFailed(RuntimeError):
    """A suite could not measure what it measures (its message says why); it writes no file."""


class OutOfTime(SuiteFailed):
    """A suite's time limit ran out before it had measured everything."""


class Deadline:
    """The time a suite has left. Suites call :meth:`check` before each piece of work, so one that
    runs out fails with a message instead of being killed."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def check(self, what: str) -> None:
        if self.left() <= 0:
            raise OutOfTime(f"the suite's {self.seconds:.0f} s ran out before {what}")


@dataclass
class Measured:
    """What a suite hands the runner: an envelope's parts (tkreg.report.records), or a finished
    JSON document (the main suite's pytest-benchmark JSON); ``meta`` adds to the environment the
    runner records."""

    kind: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: str = ""
    summary: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    document: dict[str, Any] | None = None


@dataclass(frozen=True)
class Suite:
    name: str  # a lower-case word: it ends the data file's name
    summary: str  # one line for `tkreg bench --list`
    entry: str  # "module:function", the measuring function
    limit_s: float  # default time limit (seconds)
    gz: bool = False  # the data file is gzip-compressed (large JSON)
    warm: str = ""  # "module:function" listing the input signatures the suite runs, compiled ahead


SUITES: tuple[Suite, ...] = (
    Suite("main", "the main job's benchmark items: pytest --tkreg --tkreg-bench -m tkreg_bench (pytest-benchmark JSON)",
          "tkreg.bench.main_run:measure", 300.0, gz=True, warm="tkreg.bench.main_run:signatures"),
    Suite("timer", "tkreg's device timer against CUPTI's kernel durations and triton's do_bench on a few kernels",
          "tkreg.bench.timer:measure", 120.0, warm="tkreg.bench.timer:signatures"),
    Suite("host", "host time per call on small inputs: torch, each launcher, tkreg.ops, torch.ops.tkreg, lookup",
          "tkreg.bench.host:measure", 60.0, warm="tkreg.bench.host:signatures"),
    Suite("linear", "ops with a linear contract on model shapes, both B layouts: tkreg.ops and each kernel's own "
          "choice against the peer", "tkreg.bench.linear:measure", 150.0, warm="tkreg.bench.linear:signatures"),
    Suite("dispatch", "tkreg.ops' measured choice on random shapes against the fastest kernel or peer, a cold process, "
          "CUDA graphs, torch.compile and a training step", "tkreg.bench.dispatch:measure", 240.0),
    Suite("ranking", "wall, device and host time of every kernel and peer per signature: tkreg.ops' ranking data",
          "tkreg.bench.ranking:measure", 150.0, warm="tkreg.bench.ranking:signatures"),
)
# Compiling every kernel variant the selected suites need, in parallel, before the first suite:
# the suites then time warm kernels instead of compiling one variant after another.
WARM = Suite("warm", "compile what the selected suites run, in parallel processes (writes no file)",
             "tkreg.bench.warm:measure", 90.0)  # fmt: skip


def by_name(names: list[str]) -> list[Suite]:
    """The named suites in the order given (all of them for no names); ValueError names the known ones."""
    known = {s.name: s for s in SUITES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown suite {', '.join(map(repr, unknown))} (known: {', '.join(known)})")
    return [known[n] for n in dict.fromkeys(names)] if names else list(SUITES)
