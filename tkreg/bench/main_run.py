"""The ``main`` suite: the main job's benchmark items, as ``make run`` times them.

It runs ``pytest --tkreg --tkreg-bench -m tkreg_bench`` in a child process, from an empty folder
(so only the generated items run, none of a checkout's own tests), and keeps its
``--benchmark-json``: per item the device time (tkreg.testing.timing.DeviceTimer: CUPTI's span of
each call, L2 flushed), the wall time, the launcher's host time, throughput against the ceilings
measured in the same run, and the speed-up over the op's peer. pytest's output goes to a log, of
which the tail is printed when the run fails.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from ..core.registry import Registry
from .calls import Signature, bench_signatures, say
from .suites import Deadline, Measured, OutOfTime, SuiteFailed

PLUGIN = "tkreg.testing.pytest_plugin"
LOG_TAIL_LINES = 40
SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the tkreg package


def signatures(registry: Registry) -> list[Signature]:
    return [sig for op in registry.ops() for sig in bench_signatures(op)]


def plugin_installed() -> bool:
    """Whether pytest loads tkreg's plugin by itself (its pytest11 entry point)."""
    return any(ep.value == PLUGIN for ep in metadata.entry_points(group="pytest11"))


def pytest_command(json_path: Path, *, installed: bool, extra: str = "") -> list[str]:
    """The pytest command line; ``extra``: more pytest arguments, as a shell would split them
    (``--tkreg-op=<op>,...`` to time fewer ops)."""
    argv = [sys.executable, "-m", "pytest", "--tkreg", "--tkreg-bench", "-m", "tkreg_bench", "-p", "no:cacheprovider",
            "-q", "-rfE", f"--benchmark-json={json_path}", *shlex.split(extra)]  # fmt: skip
    return argv if installed else [*argv, "-p", PLUGIN]


def measure(deadline: Deadline, pytest_args: str = "") -> Measured:
    with tempfile.TemporaryDirectory(prefix="tkreg-bench-main-") as work:
        folder = Path(work)
        json_path, log_path = folder / "bench.json", folder / "pytest.log"
        argv = pytest_command(json_path, installed=plugin_installed(), extra=pytest_args)
        # A checkout that is importable but not installed still gives pytest the package.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SOURCE_ROOT), os.environ.get("PYTHONPATH")]))}
        shown = " ".join(shlex.quote(a) for a in ["python", *argv[1:]]).replace(str(json_path), "bench.json")
        say(f"main: {shown}")
        with open(log_path, "wb") as log:
            try:
                rc = subprocess.run(argv, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    timeout=max(1.0, deadline.left())).returncode  # fmt: skip
            except subprocess.TimeoutExpired:
                _print_tail(log_path)
                raise OutOfTime(f"pytest ran past the suite's {deadline.seconds:.0f} s") from None
        last = _last_line(log_path)
        if rc != 0 or not json_path.exists():
            _print_tail(log_path)
            raise SuiteFailed(f"pytest exit status {rc}: {last}")
        say(f"main: {last}")
        document = json.loads(json_path.read_text())
    return Measured(document=document, meta={"suite_command": shown, "outcome": last})


def _lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines()


def _last_line(path: Path) -> str:
    lines = [line.strip("= ") for line in _lines(path) if line.strip()]
    return lines[-1] if lines else "(no output)"


def _print_tail(path: Path) -> None:
    for line in _lines(path)[-LOG_TAIL_LINES:]:
        say(f"  | {line}")
