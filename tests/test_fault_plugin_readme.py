"""The isolation example of tests/fault_plugin/README.md works as printed: the command, run from the
repository root as a user runs it, gives the counts the README states; without the fault plugin
loaded, the same selection is a usage error naming the fault kernels. The README's counts are those
of a machine without a GPU, so every run here sees none (CUDA_VISIBLE_DEVICES empty) and needs the
interpreter."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tkreg.testing.markers import runs_the_interpreter

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "tests" / "fault_plugin" / "README.md"
pytestmark = runs_the_interpreter
KEPT_LOGS = re.compile(r"runner logs of this run \(kept because items failed\): (\S+)")


def documented_command() -> str:
    """The README's full isolation command: the code line that selects kernels."""
    (line,) = [ln for ln in README.read_text().splitlines() if ln.startswith("PYTHONPATH=") and "--tkreg-kernel=" in ln]
    return line


def run(command: str) -> subprocess.CompletedProcess[str]:
    """``command`` in a shell at the repository root, with this environment's bin first on PATH
    (what `. .venv/bin/activate` does), every installed plugin loaded and no GPU."""
    env = {k: v for k, v in os.environ.items() if k not in ("TKREG_PLUGINS", "PYTHONPATH")}
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    result = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    kept = KEPT_LOGS.search(result.stdout)
    if kept:  # the run keeps its runners' logs because items failed: on purpose here
        shutil.rmtree(kept.group(1), ignore_errors=True)
    return result


def test_the_documented_isolation_command_gives_the_documented_counts() -> None:
    text = README.read_text()
    assert "ends with `3 failed, 6 passed`" in text
    result = run(documented_command() + " -p no:cacheprovider")
    assert result.returncode == pytest.ExitCode.TESTS_FAILED, result.stdout[-3000:] + result.stderr
    assert re.search(r"^=+ 3 failed, 6 passed, \d+ deselected in ", result.stdout, re.MULTILINE), result.stdout[-3000:]
    for kernel in ("add_fault_kill", "add_fault_blocked", "add_fault_segfault"):
        assert f"FAILED tkreg/add::{kernel}[fp32-1x8]" in result.stdout


def test_without_the_plugin_loaded_the_fault_kernels_are_unknown() -> None:
    words = shlex.split(documented_command())
    assert words[:5] == ["PYTHONPATH=tests/fault_plugin", "pytest", "tests/fault_plugin", "-p", "tkreg_faults.plugin"]
    bare = shlex.join([*words[1:3], *words[5:], "-p", "no:cacheprovider"])  # no PYTHONPATH, no -p tkreg_faults.plugin
    result = run(bare)
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout[-3000:] + result.stderr
    assert "ERROR: --tkreg-kernel: unknown kernels 'add_fault_kill', 'add_fault_blocked', 'add_fault_segfault'" in result.stderr
