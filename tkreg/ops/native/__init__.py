"""tkreg.ops' plan key and planned call in C++ (``plan_key.cpp``, ``fast_call.cpp``), where they
were built for the torch in use.

On a launch-bound call the host's work is what the caller waits for, and in Python the key a plan
is kept under (five fields per input tensor, :mod:`tkreg.ops.keys`) costs about as much as
torch's own dispatch. The extension reads the same fields from the tensors in one call, and runs
the whole planned call of ``tkreg.ops.<op>`` as one builtin.

It is built when tkreg is installed with torch importable in the build (``pip install
--no-build-isolation``, as ``make install`` does; see setup.py), against that torch. It is used
only where the torch imported now is the one it was built for; otherwise, where it was not built
(no C++ compiler, an isolated build), or where ``TKREG_NATIVE=0``, tkreg.ops builds its keys in
Python, with the same plans and results. ``tkreg doctor`` says which.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ...core import extensions

ENV = extensions.ENV


def plan_key() -> Callable[..., Any] | None:
    """``key(*tensors) -> bytes | None`` (see plan_key.cpp), or None where it is not in use."""
    module = _load()[0]
    return module.key if module is not None else None


def packer() -> Callable[[tuple[Any, ...]], bytes] | None:
    """``pack(fields) -> bytes``: what ``key`` returns for tensors whose Python key's flat fields
    are ``fields``; None where the C++ key is not in use."""
    module = _load()[0]
    return module.pack if module is not None else None


def fast_caller() -> Callable[..., Any] | None:
    """``fast_call(name, doc, table, slow, graded, names, kinds, defaults, epoch, autocast) -> builtin``:
    tkreg.ops.<op>'s planned call in C++ (see fast_call.cpp; ``autocast``: the op's policy codes on
    CUDA and the CPU, :data:`tkreg.ops.autocasting.POLICY_CODES`); None where the extension is not in use."""
    module = _load()[0]
    return getattr(module, "fast_call", None) if module is not None else None


def outputs_maker() -> Callable[..., Any] | None:
    """``outputs(layouts) -> allocate``: a plan's new outputs per call, made in C++ (see
    outputs.cpp); None where the extension is not in use."""
    module = _load()[0]
    return getattr(module, "outputs", None) if module is not None else None


def replayed_maker() -> Callable[..., Any] | None:
    """``replayed(allocate, replay, declined, at, picks) -> call``: a replayed plan's call, made in
    C++ (see replayed_call.cpp); None where the extension is not in use."""
    module = _load()[0]
    return getattr(module, "replayed", None) if module is not None else None


def reordered_maker() -> Callable[..., Any] | None:
    """``reordered(target, order) -> call``: ``call(*inputs)`` is ``target(*(inputs[i] for i in
    order))`` with no Python frame (see reordered_call.cpp); None where the extension is not in use."""
    module = _load()[0]
    return getattr(module, "reordered", None) if module is not None else None


def plans_changed() -> None:
    """A plan's ``returned`` or ``gradient_call`` was set: every planned call's memo starts over
    (see fast_call.cpp). Nothing where the extension is not in use."""
    module = _load()[0]
    if module is not None:
        module.plans_changed()


def status() -> str:
    """Whether the C++ key is in use, and if not, why: a line for ``tkreg doctor``."""
    return _load()[1]


@functools.cache  # loaded on first use: importing tkreg.ops imports no torch
def _load() -> tuple[Any, str]:
    module, status = extensions.load("tkreg.ops.native._plan_key", "plan keys are built in Python")
    if module is not None:
        import torch

        from ...core.signature import ALIGNMENT_CLASS_BYTES

        module.plain((torch.Tensor, torch.nn.Parameter), ALIGNMENT_CLASS_BYTES)
    return module, status
