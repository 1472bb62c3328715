"""Root conftest: lets `pytest --tkreg` work from a checkout where tkreg is importable but not
installed. When the package is installed, its pytest11 entry point registers the plugin and this
file registers nothing, so the plugin is never loaded twice."""

from __future__ import annotations

from importlib import metadata

_installed = any(ep.value == "tkreg.testing.pytest_plugin" for ep in metadata.entry_points(group="pytest11"))
pytest_plugins = [] if _installed else ["tkreg.testing.pytest_plugin"]
