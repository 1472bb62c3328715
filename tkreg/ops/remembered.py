"""Signatures a later process knows before its first call of them.

Planning a new signature costs a few hundred microseconds of Python (the contract's checks, the
views, the registry's requirements, the bucket's choice), and the first launch of a Triton kernel
in a process loads it (milliseconds; the first of all once hashed Triton itself, about 0.3 s, which
:mod:`tkreg.launch.triton_key` now keeps beside the cache).
A process with a warm tuning cache would pay that on the first call of every shape. So every
signature whose plan follows a measured choice is remembered beside the cache, in the
environment the cache is kept for: its key as plain data (:func:`tkreg.ops.keys.to_json`) and
what the plan does:

- ``way`` "functional" or "with_internal": the measured choice is the op's peer, and how it is
  called. Nothing in such a plan depends on more than the signature and the environment, so a
  later process runs the peer on the signature's first call without planning it.
- ``way`` "kernel": a kernel runs it. A later process plans it as usual (from the cached choice,
  timing nothing); :func:`tkreg.ops.warm`, and within a budget the process's first call on the
  GPU (:func:`tkreg.ops.warming.preload`), replay it ahead, so that its first call finds the plan
  made and the kernel loaded.

Entries are collected while a process runs and written when it exits, least recently planned
first, merged under the cache's file lock (:meth:`tkreg.ops.tuning_cache.TuningCache.add_signatures`),
so no call pays for a write.
"""

from __future__ import annotations

import atexit
import json
import logging
import threading
from typing import Any

from . import keys

log = logging.getLogger("tkreg.ops")

# Per op and environment: beyond it, the least recently planned are forgotten (a signature a peer
# runs is recalled without planning, so it ages until planned again). An op's first call in
# a process reads them all (about 40 us each on the CPU machine: parsed keys, and the plans of the
# peer's), so the bound keeps that under a fifth of a second; the plan cache holds as many.
ENTRIES_MAX = 4096
KERNEL, FUNCTIONAL, WITH_INTERNAL = "kernel", "functional", "with_internal"  # an entry's "way"

_pending: dict[tuple[int, str], tuple[Any, dict[str, dict[str, Any]]]] = {}
_lock = threading.Lock()
_registered = False


def text(key: tuple[Any, ...], has_params: bool) -> str:
    """A plan key as the stable text entries are kept under: the same in every process."""
    return json.dumps(keys.to_json(key, has_params), sort_keys=True, separators=(",", ":"))


def parse(entries: dict[str, dict[str, Any]], has_params: bool) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Entries read from the cache, by the plan key each names (unreadable ones left out)."""
    found: dict[tuple[Any, ...], dict[str, Any]] = {}
    for signature, entry in entries.items():
        try:
            found[keys.from_json(json.loads(signature), has_params)] = entry
        except (ValueError, TypeError) as e:  # another tkreg's format, or a damaged entry: plan it anew
            log.debug("a remembered signature left out (%s): %s", e, signature[:200])
    return found


def remember(cache: Any, op: str, signature: str, entry: dict[str, Any]) -> None:
    """Keep ``entry`` for ``signature`` of ``op``; written to ``cache`` when the process exits."""
    global _registered
    with _lock:
        _pending.setdefault((id(cache), op), (cache, {}))[1][signature] = entry
        if not _registered:
            atexit.register(flush)
            _registered = True


def flush() -> None:
    """Write what this process remembered (called at exit; a read-only cache keeps nothing)."""
    with _lock:
        pending = list(_pending.items())
        _pending.clear()
    for (_, op), (cache, entries) in pending:
        try:
            cache.add_signatures(op, entries, ENTRIES_MAX)
        except OSError:
            pass
