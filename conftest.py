"""Root conftest: lets `pytest --tkreg` work from a checkout where tkreg is importable but not
installed. When the package is installed, its pytest11 entry point registers the plugin and this
file registers nothing, so the plugin is never loaded twice.

It also keeps the test suite's inner runs from leaving files behind: runs that fail on purpose keep
their runner logs (as a user's failing run should), in the system's temp directory unless told
otherwise."""

from __future__ import annotations

import tempfile
from importlib import metadata

import pytest

_installed = any(ep.value == "tkreg.testing.pytest_plugin" for ep in metadata.entry_points(group="pytest11"))
pytest_plugins = [] if _installed else ["tkreg.testing.pytest_plugin"]


@pytest.fixture(autouse=True)
def _inner_runs_keep_temp_files_under_pytester(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that runs pytest through pytester gets a temp directory inside pytester's own, which
    pytest removes with its other old temp directories."""
    if "pytester" in request.fixturenames:
        temp = request.getfixturevalue("pytester").path / "tmp"
        temp.mkdir(exist_ok=True)
        monkeypatch.setenv("TMPDIR", str(temp))  # inner runs in subprocesses
        monkeypatch.setattr(tempfile, "tempdir", str(temp))  # inner runs in this process
