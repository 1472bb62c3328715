"""tkreg: a plugin-based registry of GPU kernels.

Plugins register ops, kernels and tile schedulers through ``@tkreg.hookimpl``; users ask which
kernels run where (``lookup``) and why the others do not (``explain``), and call the best kernel
for their inputs from a model (``tkreg.ops.<op>``). Importing tkreg imports neither torch nor
triton; ``tkreg.ops`` does when its ops are first built.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Any

from . import compat
from .core import contracts
from .core.capability import Capability
from .core.errors import InputError, RegistrationError, RequirementError, SpecError, TkregError, UnknownNameError
from .core.hookspecs import hookimpl
from .core.interface import Output, Param, Writes
from .core.platform import Platform
from .core.registry import Registry, Verdict
from .core.specs import CompileTarget, Cost, Kernel, Op, Requirements, Scheduler, Tolerance, case

__all__ = [
    "CompileTarget",
    "Cost",
    "InputError",
    "Kernel",
    "Op",
    "Output",
    "Param",
    "Platform",
    "RegistrationError",
    "Registry",
    "RequirementError",
    "Requirements",
    "Scheduler",
    "SpecError",
    "TkregError",
    "Tolerance",
    "UnknownNameError",
    "Verdict",
    "Writes",
    "case",
    "contracts",
    "default_registry",
    "explain",
    "hookimpl",
    "lookup",
    "ops",
    "reload",
]

__version__ = "0.1.0"
compat.install()


def default_registry() -> Registry:
    """The registry of installed plugins (entry points, filtered by TKREG_PLUGINS), built once,
    ranking kernels for concrete inputs by measured wall time where measurements exist."""
    from .core import loading
    from .ops.walltime import ensure_ranker

    registry = loading.default_registry()
    ensure_ranker(registry)
    return registry


def reload() -> Registry:
    """Forget the cached registry (and tkreg.ops built from it) and load the plugins again."""
    from .core import loading

    loading.forget_default_registry()
    built = sys.modules.get(f"{__name__}.ops")
    if built is not None:
        built.uninstall()
    return default_registry()


def lookup(op: str, capability: str | Capability | Platform | None = None, inputs: Sequence[Any] | None = None) -> list[Kernel]:
    """Kernels of ``op`` that run on ``capability`` (default: this machine's GPU, or the Triton
    interpreter when there is none) and accept ``inputs`` if given, best first."""
    return default_registry().lookup(op, capability, inputs)


def explain(op: str, capability: str | Capability | Platform | None = None, inputs: Sequence[Any] | None = None) -> list[Verdict]:
    """Like :func:`lookup`, with every kernel's verdict: reasons for rejections and rankings."""
    return default_registry().explain(op, capability, inputs)


def __getattr__(name: str) -> object:
    # tkreg.ops is imported on first use, so `import tkreg` stays light.
    if name == "ops":
        return importlib.import_module(f"{__name__}.ops")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
