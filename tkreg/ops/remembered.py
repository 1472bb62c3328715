"""Signatures a later process runs without planning.

Planning a new signature costs a few hundred microseconds of Python (the contract's checks, the
views, the registry's requirements, the bucket's choice): a process with a warm tuning cache pays
that on the first call of every shape, more than ten times a warm call. Where a plan's answer is
the op's peer, measured faster for the bucket, nothing in it depends on more than the signature
and the environment the tuning cache is kept for. So such plans are remembered beside the cache:
the signature's text, the way the peer is called and why. A later process in the same environment
runs the peer on the first call of a remembered signature at once.

Entries are collected while a process runs and written when it exits, merged under the cache's
file lock (:meth:`tkreg.ops.tuning.TuningCache.add_signatures`), so no call pays for a write.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

ENTRIES_MAX = 50_000  # per op and environment: beyond it, new signatures are planned each process

_pending: dict[tuple[int, str], tuple[Any, dict[str, dict[str, Any]]]] = {}
_lock = threading.Lock()
_registered = False


def text(key: Any) -> str:
    """A signature key (dtypes, torch.Size shapes, strides, devices, alignment classes and the
    parameter values) as stable text: the same in every process."""
    return repr(key)


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
