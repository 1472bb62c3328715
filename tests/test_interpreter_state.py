"""language_restored puts triton.language back as it was, whatever a test (or the interpreter)
changed in it."""

from __future__ import annotations

import triton.language as tl
import triton.language.core as core

from tkreg.interpreter_state import language_restored


def test_replaced_added_and_class_attributes_are_restored() -> None:
    arange, add = core.arange, core.tensor.__add__
    with language_restored():
        core.arange = tl.arange = lambda *a, **k: None  # as the interpreter's patches do
        core.tensor.__add__ = lambda self, other: None
        core._tkreg_added = True
    assert core.arange is arange and tl.arange is arange
    assert core.tensor.__add__ is add
    assert not hasattr(core, "_tkreg_added")


def test_restores_after_an_exception_too() -> None:
    full = core.full
    try:
        with language_restored():
            core.full = None
            raise RuntimeError("a failing test")
    except RuntimeError:
        pass
    assert core.full is full
