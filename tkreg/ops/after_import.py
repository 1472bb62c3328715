"""Run a function once a module is imported: at once where it already is, else right after its
import finishes, whoever imports it.

tkreg.ops tells torch's compiler how to trace its C++ callables (``torch.compiler.substitute_in_graph``),
and that call imports the compiler itself: Dynamo, Inductor and SymPy, most of a second on a host
with warm caches and several on one without. A process that only calls tkreg.ops eagerly never
needs it, and one that compiles imports it anyway, so the registration waits for that import.
"""

from __future__ import annotations

import importlib
import importlib.abc
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

log = logging.getLogger("tkreg.ops")

_lock = threading.Lock()
_waiting: dict[str, list[Callable[[ModuleType], None]]] = {}  # module name -> functions to run after its import


def after_import(name: str, then: Callable[[ModuleType], None]) -> None:
    """Call ``then(module)`` once module ``name`` is imported. Where it is already (or another
    thread is importing it), that is now, in this thread; else in the thread that imports it,
    right after the module's own code ran. An exception ``then`` raises is logged, never raised
    into that import."""
    with _lock:
        pending = name not in sys.modules
        if pending:
            _waiting.setdefault(name, []).append(then)
            _ensure_finder()
    if pending and name in sys.modules:  # another thread's import found the module before the finder was in
        with _lock:
            waiting = _waiting.get(name, [])
            pending = then not in waiting  # else its loader took it, and runs it
            if not pending:
                waiting.remove(then)
    if not pending:
        _run(then, importlib.import_module(name))  # waits for an import another thread is making


def _ensure_finder() -> None:
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def _run(then: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        then(module)
    except Exception as e:  # one failing registration must not fail the caller's import
        log.warning(
            "tkreg.ops: after importing %s, %s failed: %s: %s",
            module.__name__,
            getattr(then, "__qualname__", then),
            type(e).__name__,
            e,
        )


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a module someone waits on, it asks the finders after it and
    hands back their spec with a loader that runs the waiting functions after the module's code."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname not in _waiting:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _ThenLoader(spec.loader, fullname)
                return spec
        return None


class _ThenLoader(importlib.abc.Loader):
    """The module's own loader, then the waiting functions. The module keeps its own loader as
    ``__loader__``, so nothing later sees this one."""

    def __init__(self, loader: Any, name: str) -> None:
        self.loader = loader
        self.name = name

    def create_module(self, spec: Any) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)  # a failed import leaves the functions waiting for the next try
        with _lock:
            waiting = _waiting.pop(self.name, [])
            if not _waiting:  # nothing left to wait for: later imports skip the finder
                sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _Finder)]
        for then in waiting:
            _run(then, module)

    def __getattr__(self, name: str) -> Any:  # resources and the like: the module's own loader
        return getattr(self.loader, name)
