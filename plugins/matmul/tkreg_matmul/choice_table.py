"""Measured choice tables: for each shape of a benchmark suite, the parameters measured fastest there,
and the look-up a launcher makes for the problem in front of it.

A table is a JSON file in a plugin package, written from GPU measurements (notes/tuning.md, "Tables built from measurements"
writes ``$OUT/<kind>.json``) and copied into the package as it is::

    {"kind": "hopper_choice", "meta": {"device": ..., "date": ..., "command": ...},
     "entries": [{"M": 4096, "N": 14336, "K": 4096, "layout": "nk",
                  "params": {...}, "scheduler": "grouped-8", "measured": {...}}, ...]}

``params`` are the launcher's keyword arguments, ``scheduler`` the tile order (None where the kernel
has none); ``measured`` is for the reader (times, the runner-up) and the launcher ignores it.

Which entry applies to a problem (:meth:`Table.nearest`): the entry at the smallest distance, where
the distance adds |log2| of the ratio of each size (M, N, K) to the entry's and ``LAYOUT_DISTANCE``
when B's layout differs. Launchers take an entry only within a distance they state, and check it
against their model where the shape is not the measured one.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

# A different B layout costs as much as a factor 2 in one size: the best tile can change with it
# (the B block's shape and swizzle differ), but less than with the problem's size.
LAYOUT_DISTANCE = 1.0


@dataclass(frozen=True)
class Entry:
    M: int
    N: int
    K: int
    layout: str
    params: Mapping[str, Any]
    scheduler: str | None = None
    measured: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> Entry:
        missing = [k for k in ("M", "N", "K", "layout", "params") if k not in row]
        if missing:
            raise ValueError(f"choice table entry {row!r} lacks {', '.join(missing)}")
        return cls(
            int(row["M"]), int(row["N"]), int(row["K"]), str(row["layout"]), dict(row["params"]), row.get("scheduler"),
            dict(row.get("measured", {})),
        )  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {"M": self.M, "N": self.N, "K": self.K, "layout": self.layout, "params": dict(self.params)}
        if self.scheduler is not None:
            row["scheduler"] = self.scheduler
        if self.measured:
            row["measured"] = dict(self.measured)
        return row

    @property
    def shape(self) -> str:
        return f"{self.M}x{self.N}x{self.K} {self.layout}"

    def distance(self, M: int, N: int, K: int, layout: str) -> float:
        sizes = sum(abs(math.log2(x / e)) for x, e in ((M, self.M), (N, self.N), (K, self.K)))
        return sizes + (LAYOUT_DISTANCE if layout != self.layout else 0.0)


@dataclass(frozen=True)
class Table:
    kind: str
    entries: tuple[Entry, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)

    def nearest(self, M: int, N: int, K: int, layout: str) -> tuple[Entry, float] | None:
        """The entry nearest to the problem and its distance (None for an empty table); ties go to
        the entry listed first."""
        best: tuple[Entry, float] | None = None
        for entry in self.entries:
            d = entry.distance(M, N, K, layout)
            if best is None or d < best[1]:
                best = (entry, d)
        return best

    def provenance(self) -> str:
        """Where the table's figures come from, for a pick's explanation."""
        device = self.meta.get("device", "unknown device")
        date = str(self.meta.get("date", "undated"))[:10]
        return f"{device}, {date}"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "meta": dict(self.meta), "entries": [e.to_json() for e in self.entries]}


def parse_table(document: Mapping[str, Any], kind: str) -> Table:
    """A table from its JSON document; ValueError if it is another kind of file."""
    if document.get("kind") != kind:
        raise ValueError(f"expected a {kind!r} table, got kind {document.get('kind')!r}")
    return Table(kind, tuple(Entry.from_json(r) for r in document.get("entries", ())), dict(document.get("meta", {})))


@functools.cache
def packaged_table(package: str, filename: str, kind: str) -> Table:
    """The table a plugin ships (read once per process); an empty table where the file is absent."""
    path = resources.files(package).joinpath(filename)
    if not path.is_file():
        return Table(kind)
    return parse_table(json.loads(path.read_text()), kind)
