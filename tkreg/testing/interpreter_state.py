"""Undo what triton's CPU interpreter leaves behind in ``triton.language``.

triton 3.6's interpreter swaps parts of ``triton.language`` for its own functions while a kernel
runs. The swaps made for a jitted helper the kernel calls (``InterpretedFunction.__call__``) are
never undone: after interpreted runs of the built-in add, row-sum and matmul kernels,
``triton.language.core.arange``, ``full`` and ``program_id`` stay patched (checked 2026-11-22). A
Gluon or Triton compile later in the same process then meets interpreter functions; in CI that
broke the scheduler trace-probe compiles on one pytest-xdist worker. The pytest plugin wraps every
test in :func:`language_restored` while the interpreter is active.

One thing the interpreter adds must stay: the first time it runs a jitted function, its
``FunctionRewriter`` copies the interpreter module's globals (``interpreter_semantic``, ...) into
that function's module and caches the rewritten function, so they are never copied again. Removing
them (as this module once did) broke every later interpreted call of ``tl.max``, ``tl.sum``,
``tl.sort``, ... (the jitted helpers in triton.language.standard) with ``NameError: name
'interpreter_semantic' is not defined``. Names added with exactly the interpreter's own objects
are therefore kept; they are new names only, so no compile path ever looks them up.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

MODULES = ("triton.language", "triton.language.core", "triton.language.math", "triton.language.standard")
CLASSES = ("tensor", "tensor_descriptor_base")  # classes in triton.language.core the interpreter patches
_MISSING = object()


def _targets() -> list[Any]:
    modules = [sys.modules[name] for name in MODULES if name in sys.modules]
    core = sys.modules.get("triton.language.core")
    classes = [getattr(core, name) for name in CLASSES if core is not None and isinstance(getattr(core, name, None), type)]
    return [*modules, *classes]


@contextmanager
def language_restored() -> Iterator[None]:
    """Put every attribute of triton.language's modules (and the tensor classes) back as it was on
    entry, whatever ran inside; a no-op while triton.language is not imported."""
    saved = [(target, dict(vars(target))) for target in _targets()]
    try:
        yield
    finally:
        rewriter_globals = _interpreter_globals()
        for target, before in saved:
            now = vars(target)
            for name, value in before.items():
                if now.get(name, _MISSING) is not value:
                    setattr(target, name, value)
            for name in [n for n in now if n not in before]:
                if rewriter_globals.get(name, _MISSING) is not now[name]:
                    delattr(target, name)


def _interpreter_globals() -> Mapping[str, Any]:
    """What the interpreter's FunctionRewriter copies into a jitted function's module (read only)."""
    module = sys.modules.get("triton.runtime.interpreter")
    return vars(module) if module is not None else {}
