"""The README's examples work as printed: its complete minimal plugin (copied from the page) passes
its generated items, and its registry commands and lookup snippet run on this machine. Examples
that need a GPU or an install say so beside them on the page."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

README = (Path(__file__).parents[1] / "README.md").read_text()
BLOCKS = re.findall(r"```[a-z]*\n(.*?)```", README, flags=re.S)
TKREG = str(Path(sys.executable).with_name("tkreg"))


def block(starting: str) -> str:
    found = [b for b in BLOCKS if b.startswith(starting)]
    assert len(found) == 1, f"the README has {len(found)} code blocks starting {starting!r}"
    return found[0]


def test_the_minimal_plugin_copied_from_the_readme_passes_its_items(pytester: pytest.Pytester,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    package = pytester.path / "my_kernels"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "plugin.py").write_text(block("import tkreg\n"))
    (package / "relu.py").write_text(block("import torch\nimport triton\n"))
    pytester.makeconftest("from my_kernels.plugin import tkreg_register_ops, tkreg_register_kernels  # noqa: F401\n")
    monkeypatch.setenv("TKREG_PLUGINS", "")  # the example alone
    monkeypatch.setenv("PYTHONPATH", f"{pytester.path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    result = pytester.runpytest_subprocess("--tkreg", "-m", "tkreg_correctness", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=8)  # what the README says the plugin gives: 8 correctness items


@pytest.mark.parametrize("line", [
    line.split("#")[0].strip() for line in block("tkreg list").splitlines() if line.strip()
])
def test_the_readme_registry_commands_run_as_printed(line: str) -> None:
    argv = shlex.split(line)
    assert argv[0] == "tkreg"
    done = subprocess.run([TKREG, *argv[1:]], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip()


def test_the_readme_lookup_snippet_runs_as_printed() -> None:
    code = block("import torch, tkreg\n\ntkreg.lookup")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
