"""Measured choice: which implementation of an op is fastest for a bucket of input shapes, timed
on the caller's GPU and kept on disk.

tkreg.ops asks :class:`Tuner` for the choice of a call's bucket. A bucket is the op with its
kernel inputs' named dims rounded up to two sizes per octave (1..8 exact, then 12, 16, 24, 32,
48, ...), the dtypes, the layout, the alignment class and the parameters: coarse enough that a
model's shapes tune in seconds, fine enough that the fastest stays the fastest inside it. The
first call of a new bucket times every candidate (each kernel that takes the inputs, with each
config it offers for tuning, and the op's peer) on the caller's own inputs, writing only into
fresh outputs, and keeps the fastest; the choice is saved under the cache directory, in a file
per op keyed by the device, the driver and the torch, triton, tkreg and plugin versions, as
Triton's autotuner keys its cache. A later process with the same key pays nothing.

How candidates are timed: :mod:`.measuring`; the file of choices: :mod:`.tuning_cache`.

Environment: ``TKREG_TUNE=0`` never times (the cache, else the prior: the registry's ranking);
``TKREG_TUNE_BUDGET_S`` bounds the seconds one bucket may spend (default 10: compiles dominate);
``TKREG_CACHE_DIR`` moves the cache (default ``$XDG_CACHE_HOME/tkreg`` or ``~/.cache/tkreg``).
"""

from __future__ import annotations

import datetime
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .measuring import PEER, fastest, fastest_replayed, measure
from .tuning_cache import Choice, TuningCache

ENV_TUNE = "TKREG_TUNE"
ENV_BUDGET = "TKREG_TUNE_BUDGET_S"
ENV_CACHE = "TKREG_CACHE_DIR"
DEFAULT_BUDGET_S = 10.0


def enabled() -> bool:
    return os.environ.get(ENV_TUNE, "1").strip().lower() not in ("0", "off", "false", "no")


def budget_s() -> float:
    try:
        return float(os.environ.get(ENV_BUDGET, DEFAULT_BUDGET_S))
    except ValueError:
        return DEFAULT_BUDGET_S


def cache_dir() -> Path:
    chosen = os.environ.get(ENV_CACHE)
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tkreg"


def bucket_size(n: int) -> int:
    """The bucket a size falls in: exact up to 8, then the next of 12, 16, 24, 32, 48, 64, ..."""
    if n <= 8:
        return n
    power = 1 << (n - 1).bit_length()
    three_quarters = power * 3 // 4
    return three_quarters if n <= three_quarters else power


def bucket_floor(n: int) -> int:
    """The largest size below ``n``'s bucket (:func:`bucket_size`): its sizes are those above this,
    up to ``bucket_size(n)`` (n - 1 for the exact sizes up to 8)."""
    top = bucket_size(n)
    if top <= 8:
        return n - 1
    return top * 3 // 4 if top & (top - 1) == 0 else top * 2 // 3  # 16 -> 12, 12 -> 8, 24 -> 16


def bucket_key(dims: Mapping[str, int], *qualifiers: str) -> str:
    """A readable key: "M<=12,N<=4096,K<=4096|bfloat16|a row, b col|aligned|eps=1e-05"."""
    sizes = ",".join(f"{k}<={bucket_size(v)}" for k, v in dims.items())
    return "|".join((sizes, *(q for q in qualifiers if q)))


@dataclass(frozen=True)
class Candidate:
    """One way to run a call: a kernel with a config (or the launcher's own choice, {}), or the peer."""

    kernel: str | None  # None: the peer
    config: Any = ()  # a mapping, kept as sorted items so candidates can key dicts

    def __post_init__(self) -> None:
        items = self.config.items() if isinstance(self.config, Mapping) else self.config
        object.__setattr__(self, "config", tuple(items))

    @property
    def label(self) -> str:
        if self.kernel is None:
            return PEER
        if not self.config:
            return self.kernel
        return self.kernel + "[" + ",".join(f"{k}={v}" for k, v in self.config) + "]"


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Tuner:
    """Choices for one op: from this process's memory, the cache, or timing (one bucket at a time
    per op, so concurrent first calls of a bucket time it once)."""

    def __init__(self, op: str, cache: TuningCache | None) -> None:
        self.op = op
        self.cache = cache
        self._memory: dict[str, Choice] = {}
        self._lock = threading.Lock()

    def known(self, bucket: str) -> Choice | None:
        choice = self._memory.get(bucket)
        if choice is None and self.cache is not None:
            choice = self.cache.get(self.op, bucket)
            if choice is not None:
                self._memory[bucket] = choice
        return choice

    def choose(self, bucket: str, candidates: Mapping[Candidate, Callable[[], Any]], shape: str, device: str,
               clock: Any = None, exclusive: bool = True, graphs: bool = True) -> Choice | None:
        """The bucket's choice, timing the candidates if nobody has; None if none could be timed.
        ``exclusive``: time under the op's lock, so concurrent first calls of a bucket time it
        once. A training step is timed without it (``exclusive=False``): its backward may run
        on autograd's device thread and call the op again (a formula's products), whose new
        buckets that thread then times; two threads may then both time one bucket, and the later
        write stands. ``graphs``: also choose for calls captured in CUDA graphs (fastest_replayed)."""
        choice = self.known(bucket)
        if choice is not None:
            return choice
        if not exclusive:
            return self._timed(bucket, candidates, shape, device, clock, graphs)
        with self._lock:
            choice = self.known(bucket)
            if choice is not None:
                return choice
            return self._timed(bucket, candidates, shape, device, clock, graphs)

    def _timed(self, bucket: str, candidates: Mapping[Candidate, Callable[[], Any]], shape: str, device: str,
               clock: Any, graphs: bool) -> Choice | None:
        by_label = {c.label: c for c in candidates}
        host: dict[str, float] = {}
        gpu: dict[str, float] = {}
        replayed: dict[str, float | str] = {}
        times = measure({c.label: call for c, call in candidates.items()}, budget_s(), clock, host=host, device=gpu,
                        replayed=replayed if graphs else None)
        winner = fastest(times, host, gpu)
        if winner is None:
            return None
        picked = by_label[winner]
        graphed = fastest_replayed(replayed, winner)
        alternative = by_label[graphed] if graphed is not None and graphed != winner else None
        choice = Choice(bucket, winner, picked.kernel, dict(picked.config), times, device, now(), shape,
                        host_us={k: round(v, 2) for k, v in host.items()}, device_us={k: round(v, 2) for k, v in gpu.items()},
                        replayed_us={k: round(v, 2) if isinstance(v, float) else v for k, v in replayed.items()},
                        graphed=alternative.label if alternative else "",
                        graphed_kernel=alternative.kernel if alternative else None,
                        graphed_config=dict(alternative.config) if alternative else {})
        self._memory[bucket] = choice
        if self.cache is not None:
            try:
                self.cache.put(self.op, choice)
            except OSError:  # a read-only home: the choice still holds for this process
                pass
        return choice

    def forget(self) -> None:
        self._memory.clear()
