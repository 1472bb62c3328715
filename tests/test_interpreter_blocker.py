"""An environment whose numpy Triton 3.6's interpreter cannot run under: named, and its
interpreter items skipped with that reason rather than failed with numpy's error."""

from __future__ import annotations

import pytest

import tkreg
from tkreg.core import platform
from tkreg.core.platform import Platform, interpreter_blocker_for
from tkreg.testing import runners
from tkreg.testing.generation import ItemSpec


@pytest.mark.parametrize(
    ("triton", "numpy", "blocked"),
    [
        ("3.6.0", "2.3.5", False),
        ("3.6.0", "1.26.4", False),
        ("3.6.0", "2.4.0", True),
        ("3.6.0", "2.4.0rc1", True),
        ("3.6.1", "2.5.2", True),
        ("3.6.0", "10.0", True),
        ("3.7.0", "2.5.2", False),  # another triton: not known to fail
        ("3.6.0", None, False),  # no numpy: torch's own error says so
        (None, "2.5.2", False),
    ],
)
def test_the_blocker_names_numpy_from_2_4_under_triton_3_6(triton, numpy, blocked):
    reason = interpreter_blocker_for(triton, numpy)
    assert (reason is not None) is blocked
    if blocked:
        assert f"numpy {numpy}" in reason and "numpy<2.4" in reason and triton in reason


def test_the_installed_versions_decide():
    expected = interpreter_blocker_for(platform.installed_version("triton"), platform.installed_version("numpy"))
    assert platform.interpreter_blocker() == expected


@pytest.fixture
def interpreter_session(monkeypatch):
    monkeypatch.setattr(runners, "current", Platform.interpreter)
    monkeypatch.setattr(runners, "visible_gpus", list)
    return runners.Session(tkreg.default_registry(), 0, 10.0, [], None)


def test_interpreter_items_are_skipped_with_the_blocker_as_reason(interpreter_session, monkeypatch):
    item = ItemSpec("correctness", "sum_row", "sum_row", "float32")
    compile_item = ItemSpec("compile", "sum_row", "sum_row", "float32", arch="sm_90a")
    monkeypatch.setattr(runners, "interpreter_blocker", lambda: None)
    assert runners.skip_reason(interpreter_session, item) is None
    message = interpreter_blocker_for("3.6.0", "2.5.2")
    monkeypatch.setattr(runners, "interpreter_blocker", lambda: message)
    assert runners.skip_reason(interpreter_session, item) == message
    assert runners.skip_reason(interpreter_session, compile_item) is None  # compiling needs no interpreter


def test_the_tests_mark_follows_the_blocker():
    from tkreg.testing.markers import runs_the_interpreter

    blocker = platform.interpreter_blocker()
    assert runs_the_interpreter.args == (blocker is not None,)
    assert runs_the_interpreter.kwargs["reason"] == (blocker or "")
