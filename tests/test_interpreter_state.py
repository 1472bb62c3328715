"""language_restored puts triton.language back as it was, whatever a test (or the interpreter)
changed in it."""

from __future__ import annotations

import os
from pathlib import Path

import triton.language as tl
import triton.language.core as core

from tests.helpers import new_process
from tkreg.testing.interpreter_state import language_restored
from tkreg.testing.markers import runs_the_interpreter


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


PROBE = Path(__file__).parent / "fixtures" / "interpreter_state_probe.py"


def run_probe(mode: str) -> dict:
    """The probe in a fresh interpreter with TRITON_INTERPRET=1 (kernels must be defined under it)."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    return new_process([str(PROBE), mode], env)[1]


@runs_the_interpreter
def test_language_helpers_stay_correct_over_repeated_restored_runs_and_compiles_still_work() -> None:
    """A third-party kernel calling tl.max, tl.min, tl.argmax, tl.sum, tl.reduce, tl.cumsum,
    tl.sort and tl.where is right on every interpreted call, each wrapped as the pytest plugin
    wraps a test (once NameError: interpreter_semantic from the second call on), nothing stays
    patched, and compiles in the same process (plain Triton and a Gluon kernel) still work."""
    probe = run_probe("restored")
    assert probe["results"] == [True, True, True, True]
    assert probe["leaked"] == []
    assert probe["compile_error"] == ""


@runs_the_interpreter
def test_without_the_restore_the_interpreter_leaves_triton_language_patched() -> None:
    """The control: the leak language_restored exists for is real in this triton."""
    probe = run_probe("bare")
    assert probe["results"] == [True, True, True, True]
    assert set(probe["leaked"]) == {"arange", "full", "program_id"}
