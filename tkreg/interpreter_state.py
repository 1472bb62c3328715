"""Undo what triton's CPU interpreter leaves behind in ``triton.language``.

triton 3.6's interpreter swaps parts of ``triton.language`` for its own functions while a kernel
runs. The swaps made for a jitted helper the kernel calls (``InterpretedFunction.__call__``) are
never undone: after interpreted runs of add_triton, sum_row and matmul_triton,
``triton.language.core.arange``, ``full`` and ``program_id`` stay patched (checked 2026-11-22). A
Gluon or Triton compile later in the same process then meets interpreter functions; in CI that
broke the scheduler trace-probe compiles on one pytest-xdist worker. The pytest plugin wraps every
test in :func:`language_restored` while the interpreter is active.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
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
        for target, before in saved:
            now = vars(target)
            for name, value in before.items():
                if now.get(name, _MISSING) is not value:
                    setattr(target, name, value)
            for name in [n for n in now if n not in before]:
                delattr(target, name)
