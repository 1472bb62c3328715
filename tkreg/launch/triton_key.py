"""Triton's key of its own install, worked out once per install instead of once per process.

Triton names every compiled kernel in its cache by ``triton.runtime.cache.triton_key()``: a hash
of its compiler's, backends' and language's sources and of ``libtriton.so`` (about 400 MB). A
process pays that at its first compile or kernel load, 0.25 s on the CPU machine and 0.33 s of a
first kernel call's 0.47 s on an H200 host (2026-11-26), even where every kernel it runs is in
Triton's cache. :func:`remember` keeps the key in a file beside tkreg's tuning cache, filed under
a stamp of the very files the key hashes (each one's path, size and modification time), and hands
Triton that key while the stamp holds; a changed or reinstalled Triton gets a new stamp and its key
is worked out again. ``TKREG_TRITON_KEY=0`` leaves Triton's own function alone.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import sysconfig
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("tkreg.launch")

ENV_TRITON_KEY = "TKREG_TRITON_KEY"
FILE_NAME = "triton-key.json"
KEPT_STAMPS = 16  # installs the file remembers, the oldest dropped (a venv per project shares one cache)
# Where triton_key() reads, relative to the triton package (triton 3.6: runtime/cache.py itself,
# every module of these three packages, and the compiled library)
_SOURCE_TREES = ("compiler", "backends", "language")

_lock = threading.Lock()
_done: str | None = None  # what remember() did in this process (it does it once)


def remember(folder: Callable[[], Path]) -> str:
    """From now on Triton's key of its install comes from the folder ``folder()`` names when
    Triton first asks, where a file there has it for the install's stamp, else from Triton's own
    function, then written there; nothing is worked out before Triton asks (an interpreted kernel
    never does). Once per process; returns what it did: "handed over", "off"
    (``TKREG_TRITON_KEY=0``) or "unsupported" (a Triton whose key function is not the one this
    knows)."""
    global _done
    with _lock:
        if _done is None:
            _done = _hand_over(folder)
        return _done


def _hand_over(folder: Callable[[], Path]) -> str:
    if os.environ.get(ENV_TRITON_KEY, "1") == "0":
        return "off"
    try:
        import triton
        from triton.runtime import autotuner, cache
    except ImportError:
        return "unsupported"
    original = getattr(cache, "triton_key", None)
    if not callable(getattr(original, "cache_info", None)):  # not the lru-cached function of triton 3.x
        return "unsupported"
    package, version = Path(triton.__file__).parent, str(getattr(triton, "__version__", ""))

    @functools.lru_cache
    def triton_key() -> str:
        try:
            stamp = install_stamp(package, version)
        except OSError as e:  # a file of the install unreadable: Triton's own key
            log.debug("tkreg: no stamp of Triton's install (%s)", e)
            return original()
        path = folder() / FILE_NAME
        known = _read(path).get(stamp)
        if isinstance(known, str) and known:
            return known
        key = original()
        _write(path, stamp, key)
        return key

    cache.triton_key = triton_key
    if getattr(autotuner, "triton_key", None) is original:  # the autotuner imported it by name
        autotuner.triton_key = triton_key
    return "handed over"


def install_stamp(package: Path, version: str) -> str:
    """A digest of the path, size and modification time of every file Triton's key hashes."""
    files = [package / "runtime" / "cache.py"]
    for tree in _SOURCE_TREES:
        for root, dirs, names in os.walk(package / tree):
            dirs.sort()
            files += [Path(root) / name for name in sorted(names) if name.endswith(".py")]
    suffix = (sysconfig.get_config_var("EXT_SUFFIX") or ".so").split(".")[-1]
    files.append(package / "_C" / f"libtriton.{suffix}")
    digest = hashlib.sha256(f"{version}|{package}".encode())
    for file in files:
        info = file.stat()
        digest.update(f"|{file.relative_to(package)}:{info.st_size}:{info.st_mtime_ns}".encode())
    return digest.hexdigest()


def _read(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _write(path: Path, stamp: str, key: str) -> None:
    """Adds ``stamp``'s key to the file (a temporary file renamed over it: a reader sees the old
    file or the new one); an unwritable folder keeps nothing."""
    known = _read(path)
    if known.get(stamp) == key:
        return
    known.pop(stamp, None)
    known[stamp] = key  # newest last
    kept = dict(list(known.items())[-KEPT_STAMPS:])
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".triton-key-", delete=False) as f:
            temporary = f.name
            json.dump(kept, f)
        os.replace(temporary, path)
    except OSError as e:
        log.debug("tkreg: Triton's key not kept in %s (%s)", path, e)
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
