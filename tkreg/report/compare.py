"""A run against a baseline: per item, how its device time moved, and which items got slower than
a threshold (what `tkreg report --baseline` exits 1 on)."""

from __future__ import annotations

from dataclasses import dataclass

from .results import Result, Run

DEFAULT_THRESHOLD_PCT = 5.0


@dataclass(frozen=True)
class Change:
    base: Result
    new: Result

    @property
    def pct(self) -> float:
        """Change in device time, percent; positive is slower."""
        return (self.new.median_ms / self.base.median_ms - 1.0) * 100.0

    @property
    def wall_pct(self) -> float | None:
        if self.base.wall_ms is None or self.new.wall_ms is None:
            return None
        return (self.new.wall_ms / self.base.wall_ms - 1.0) * 100.0


@dataclass(frozen=True)
class Comparison:
    changes: list[Change]  # items in both runs, slowest change first
    added: list[Result]  # only in the new run
    removed: list[Result]  # only in the baseline
    threshold_pct: float

    @property
    def slower(self) -> list[Change]:
        return [c for c in self.changes if c.pct > self.threshold_pct]

    @property
    def faster(self) -> list[Change]:
        return [c for c in self.changes if c.pct < -self.threshold_pct]

    @property
    def regressed(self) -> bool:
        return bool(self.slower)


def compare(base: Run, new: Run, threshold_pct: float = DEFAULT_THRESHOLD_PCT) -> Comparison:
    """Pair items by (op, kernel, config, case, dtype); an item measured twice in one run keeps
    its last measurement."""
    if threshold_pct < 0:
        raise ValueError(f"threshold must be a percentage >= 0, got {threshold_pct}")
    old = {r.key: r for r in base.results}
    now = {r.key: r for r in new.results}
    changes = [Change(old[k], now[k]) for k in now if k in old]
    changes.sort(key=lambda c: c.pct, reverse=True)
    added = [now[k] for k in now if k not in old]
    removed = [old[k] for k in old if k not in now]
    return Comparison(changes, added, removed, threshold_pct)
