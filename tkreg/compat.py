"""Module paths of earlier releases, kept working for plugins written against them.

tkreg's modules once sat side by side in ``tkreg/``; they now live in subpackages named after
their part (core, launch, testing, ops, report). A plugin that imports ``tkreg.inputs`` or names
``"tkreg.inputs:tma_inputs_reasons"`` as a requirement gets the module at its new home, the same
module object, so its state (caches, settings a test changes) is shared. The same finder makes
``import tkreg.contracts`` (the attribute plugins use) an import that works. New code should import
the new paths; nothing here warns, because a plugin that works must not start printing.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

# old module name -> where it lives now
MOVED: dict[str, str] = {
    f"tkreg.{name}": f"tkreg.{part}.{name}"
    for part, names in {
        "core": ("capability", "contracts", "dtypes", "errors", "hookspecs", "loading", "platform", "refs", "registry",
                 "schedulers", "signature", "specs", "tolerances"),
        "launch": ("aot", "fastlaunch", "inputs", "tma"),
        "testing": ("aot_worker", "checking", "cupti", "generation", "harness", "interpreter_state", "jobs", "pool",
                    "pytest_plugin", "runner_process", "runners", "timing"),
        "ops": ("walltime",),
        "report": ("record", "record_tables", "records"),
    }.items()
    for name in names
}


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers imports of an old path with the module at its new path."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED[spec.name])
        spec.loader_state = module.__spec__
        return module

    def get_code(self, fullname: str) -> object:
        """What ``python -m tkreg.<old name>`` runs: the module at its new home, as __main__ (run
        under its own name, so its relative imports resolve)."""
        return compile(f"import runpy\nrunpy.run_module({MOVED[fullname]!r}, run_name='__main__', alter_sys=True)\n",
                       f"<{fullname}, moved to {MOVED[fullname]}>", "exec")

    def is_package(self, fullname: str) -> bool:
        return False

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamped the old name's spec on the module: give it back its own, so
        # reloading and tracebacks keep seeing where the code lives.
        module.__spec__ = module.__spec__.loader_state


def install() -> None:
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
