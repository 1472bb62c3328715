"""A run against a baseline: per item, how its device time moved, and which items got slower than
a threshold (what `tkreg report --baseline` exits 1 on).

Two runs on "the same" machine rarely are: clocks, drivers, neighbours and thermal state move
every item together. The op's peer (torch's own call) is timed beside the kernels on the same
case and GPU, so its change measures that drift. Each kernel's change relative to its peer, its
time over the peer's in this run against the same ratio in the baseline, is what the kernel
itself did; the relative gate (the default) judges that, and the peers' own changes are reported
as drift, never as regressions. Where an item's peer was not timed in both runs, its own change
is all there is, and it is judged on that (the absolute gate judges every item that way).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from .results import Result, Run

DEFAULT_THRESHOLD_PCT = 5.0
GATES = ("relative", "absolute")
DEFAULT_GATE = "relative"


@dataclass(frozen=True)
class Change:
    """One item in both runs, with its peer on the same case in each run where timed."""

    base: Result
    new: Result
    base_peer: Result | None = None
    new_peer: Result | None = None

    @property
    def pct(self) -> float:
        """Change in device time, percent; positive is slower."""
        return (self.new.median_ms / self.base.median_ms - 1.0) * 100.0

    @property
    def wall_pct(self) -> float | None:
        if self.base.wall_ms is None or self.new.wall_ms is None:
            return None
        return (self.new.wall_ms / self.base.wall_ms - 1.0) * 100.0

    @property
    def kind(self) -> str:
        """One of "kernel" (what a gate judges), "peer" (its change is the machine's drift), "rival"."""
        return "rival" if self.new.is_rival else "peer" if self.new.is_peer else "kernel"

    @property
    def is_drift(self) -> bool:
        """The peer's own change: the machine's drift, not a kernel's doing."""
        return self.kind == "peer"

    @property
    def peer_pct(self) -> float | None:
        """How the peer of the same case moved (the drift this item saw), percent."""
        if self.is_drift or self.base_peer is None or self.new_peer is None:
            return None
        return (self.new_peer.median_ms / self.base_peer.median_ms - 1.0) * 100.0

    @property
    def relative_pct(self) -> float | None:
        """Change of the item's time over its peer's (this run's ratio against the baseline's),
        percent; positive is slower. None for a peer, or where the peer is not in both runs."""
        if self.is_drift or self.base_peer is None or self.new_peer is None:
            return None
        now = self.new.median_ms / self.new_peer.median_ms
        before = self.base.median_ms / self.base_peer.median_ms
        return (now / before - 1.0) * 100.0

    def gated_pct(self, gate: str) -> float | None:
        """The change a gate judges: relative to the peer where the relative gate can, else the
        item's own; None for a peer (drift never fails a gate)."""
        if self.kind != "kernel":
            return None
        relative = self.relative_pct if gate == "relative" else None
        return self.pct if relative is None else relative

    def basis(self, gate: str) -> str:
        """What gated_pct measured: "vs peer" or "absolute"; "drift" for a peer, "rival" for a rival."""
        if self.kind != "kernel":
            return "drift" if self.is_drift else "rival"
        return "vs peer" if gate == "relative" and self.relative_pct is not None else "absolute"


@dataclass(frozen=True)
class Comparison:
    changes: list[Change]  # items in both runs: kernels (the largest gated change first), rivals, peers
    added: list[Result]  # only in the new run
    removed: list[Result]  # only in the baseline
    threshold_pct: float
    gate: str = DEFAULT_GATE

    @property
    def kernels(self) -> list[Change]:
        """Changes of kernels (what the gate judges), without the peers and rivals."""
        return [c for c in self.changes if c.kind == "kernel"]

    @property
    def drift(self) -> list[Change]:
        """The peers' own changes: how much the machine moved between the runs."""
        return [c for c in self.changes if c.is_drift]

    @property
    def median_drift_pct(self) -> float | None:
        return statistics.median(c.pct for c in self.drift) if self.drift else None

    @property
    def slower(self) -> list[Change]:
        return [c for c in self.kernels if (c.gated_pct(self.gate) or 0.0) > self.threshold_pct]

    @property
    def faster(self) -> list[Change]:
        return [c for c in self.kernels if (c.gated_pct(self.gate) or 0.0) < -self.threshold_pct]

    @property
    def judged_absolute(self) -> list[Change]:
        """Kernels the gate judged on their own change (the absolute gate, or no peer in both runs)."""
        return [c for c in self.kernels if c.basis(self.gate) == "absolute"]

    @property
    def regressed(self) -> bool:
        return bool(self.slower)


KIND_ORDER = {"kernel": 0, "rival": 1, "peer": 2}


def _order(change: Change, gate: str) -> tuple[int, float]:
    """Kernels, then rivals, then peers; within each the largest slow-down first."""
    gated = change.gated_pct(gate)
    return (KIND_ORDER[change.kind], -(change.pct if gated is None else gated))


def compare(base: Run, new: Run, threshold_pct: float = DEFAULT_THRESHOLD_PCT, gate: str = DEFAULT_GATE) -> Comparison:
    """Pair items by (op, kernel, config, case, dtype, mode, params); an item measured twice in
    one run keeps its last measurement. ``gate``: "relative" judges each kernel's change against
    its peer's where both runs timed the peer (else its own change), "absolute" its own change."""
    if threshold_pct < 0:
        raise ValueError(f"threshold must be a percentage >= 0, got {threshold_pct}")
    if gate not in GATES:
        raise ValueError(f"gate must be one of {', '.join(GATES)}, got {gate!r}")
    old = {r.key: r for r in base.results}
    now = {r.key: r for r in new.results}
    old_peers = {r.point: r for r in base.results if r.is_peer and not r.is_rival}
    new_peers = {r.point: r for r in new.results if r.is_peer and not r.is_rival}
    changes = [Change(old[k], now[k], old_peers.get(now[k].point), new_peers.get(now[k].point)) for k in now if k in old]
    changes.sort(key=lambda c: _order(c, gate))
    added = [now[k] for k in now if k not in old]
    removed = [old[k] for k in old if k not in now]
    return Comparison(changes, added, removed, threshold_pct, gate)
