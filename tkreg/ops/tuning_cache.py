"""The tuning cache: measured choices on disk, one JSON file per op in a folder per environment
(the device, the driver, the torch, triton, tkreg and plugin versions), and beside them the
signatures each op planned (:mod:`.remembered`). Readers load a file once; writers merge under a
file lock and replace the file atomically."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Bumped when the file layout or the timing behind its choices (:mod:`.measuring`) changes; older
# files are ignored.
# 3: rounds sized after a replayed kernel's recorded call (choices of 2 could favour the peer).
# 4: the leaders and the peer sit twice (choices of 3 could rest on one held-back sitting).
# 5: ties broken by host and GPU time together (choices of 4 broke them by host time alone).
# 6: a choice for calls captured in CUDA graphs (choices of 5 had none: captures ran the eager one).
# 7: buckets keep their inputs' rows class (a choice of 6 held for rows on and off 16 bytes alike).
FORMAT = 7


@dataclass(frozen=True)
class Choice:
    """The outcome of timing one bucket: the winner, every candidate's time per call (us; a
    string says why a candidate was not timed), where and when, and on which shape."""

    bucket: str
    winner: str
    kernel: str | None
    config: dict[str, Any]
    times_us: dict[str, float | str]
    device: str
    measured_at: str
    shape: str
    source: str = "tuning"  # tuning (this process timed it), cache (read from disk), prior
    host_us: dict[str, float] = field(default_factory=dict)  # each timed candidate's host time per call
    device_us: dict[str, float] = field(default_factory=dict)  # GPU time per call, where timed alone
    # time per call replayed from a CUDA graph, where timed (a string: why it could not be captured)
    replayed_us: dict[str, float | str] = field(default_factory=dict)
    # the fastest replayed, where it is not the winner: what a call captured in a CUDA graph runs
    # ("" where that is the winner, or nothing was replayed)
    graphed: str = ""
    graphed_kernel: str | None = None
    graphed_config: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        timed = sorted(((v, k) for k, v in self.times_us.items() if isinstance(v, float)))
        listing = ", ".join(f"{k} {v:.1f} us{self._detail(k)}" for v, k in timed)
        untimed = "; ".join(f"{k}: {v}" for k, v in self.times_us.items() if not isinstance(v, float))
        where = f"measured on {self.device} at {self.measured_at} on shape {self.shape}"
        origin = {"cache": "from the tuning cache", "tuning": "timed in this process", "prior": "prior"}[self.source]
        text = f"{self.winner} fastest for bucket {self.bucket} ({origin}; {where}): {listing}"
        if self.graphed:
            winner = self.replayed_us.get(self.winner)
            against = f"{winner:.1f}" if isinstance(winner, float) else f"{self.winner} {winner or 'not replayed'}"
            graphed = self.replayed_us.get(self.graphed)
            ran = f"{graphed:.1f} us a call" if isinstance(graphed, float) else "timing not kept"
            text += f"; a call captured in a CUDA graph runs {self.graphed}, the fastest replayed ({ran} against {against})"
        return f"{text}; not timed: {untimed}" if untimed else text

    def _detail(self, label: str) -> str:
        parts = [f"{what} {figures[label]:.1f}" for what, figures in (("host", self.host_us), ("GPU", self.device_us))
                 if label in figures]  # fmt: skip
        return f" ({', '.join(parts)})" if parts else ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("source")
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Choice:
        return cls(**{**data, "source": "cache"})


def environment_digest(environment: Mapping[str, str]) -> str:
    text = json.dumps(dict(environment), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class TuningCache:
    """Choices on disk, one JSON file per op under a folder per environment digest. Readers load a
    file once; writers merge under a file lock and replace the file atomically, so concurrent
    processes never lose each other's choices or read a half-written file."""

    def __init__(self, directory: Path, environment: Mapping[str, str]) -> None:
        self.environment = dict(environment)
        self.folder = Path(directory) / "tuning" / environment_digest(environment)
        self._loaded: dict[str, dict[str, Choice]] = {}
        self._lock = threading.Lock()

    def path(self, op: str) -> Path:
        return self.folder / f"{op}.json"

    def get(self, op: str, bucket: str) -> Choice | None:
        with self._lock:
            if op not in self._loaded:
                self._loaded[op] = self._read(op)
            return self._loaded[op].get(bucket)

    def put(self, op: str, choice: Choice) -> None:
        with self._lock:
            self.folder.mkdir(parents=True, exist_ok=True)
            with _file_lock(self.path(op).with_suffix(".lock")):
                merged = self._read(op)
                merged[choice.bucket] = choice
                choices = {b: c.to_json() for b, c in sorted(merged.items())}
                self._replace(op, self.path(op), {"choices": choices}, indent=1)
            self._loaded[op] = merged

    def signatures(self, op: str) -> dict[str, dict[str, Any]]:
        """The signatures of ``op`` remembered in this environment (:mod:`.remembered`)."""
        document = self._document(self.signatures_path(op))
        entries = document.get("signatures") if document else None
        return dict(entries) if isinstance(entries, dict) else {}

    def add_signatures(self, op: str, entries: Mapping[str, dict[str, Any]], limit: int) -> None:
        """Merge ``entries`` into the remembered signatures of ``op``: each goes last (the file
        keeps them least recently planned first), and beyond ``limit`` the first ones go."""
        with self._lock:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self.signatures_path(op)
            with _file_lock(path.with_suffix(".lock")):
                merged = self.signatures(op)
                for signature, entry in entries.items():
                    merged.pop(signature, None)
                    merged[signature] = entry
                merged = dict(list(merged.items())[max(0, len(merged) - limit):])
                self._replace(op, path, {"signatures": merged})

    def _replace(self, op: str, path: Path, content: dict[str, Any], indent: int | None = None) -> None:
        """Write a file of this environment whole: a temporary file beside it, then renamed over
        it, so a reader never sees half of one (the caller holds the file lock)."""
        document = {"format": FORMAT, "environment": self.environment, **content}
        fd, temporary = tempfile.mkstemp(dir=self.folder, prefix=f".{op}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(document, f, indent=indent)
        os.replace(temporary, path)

    def signatures_path(self, op: str) -> Path:
        return self.folder / f"{op}.signatures.json"

    def _document(self, path: Path) -> dict[str, Any] | None:
        """A file of this environment, or None (missing, unreadable, another format or environment)."""
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(document, dict) or document.get("format") != FORMAT or document.get("environment") != self.environment:
            return None
        return document

    def _read(self, op: str) -> dict[str, Choice]:
        document = self._document(self.path(op))
        if document is None:  # none yet, or unreadable: tune again rather than fail a call
            return {}
        try:
            return {b: Choice.from_json(c) for b, c in document.get("choices", {}).items()}
        except TypeError:
            return {}


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    import fcntl

    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
