"""Run one suite in a child process with a time limit, and keep its data file only when it
finished: the child writes into a private folder beside the destination, and the file is moved
into place (one rename) after the child exits with status 0. A child that fails or outlives its
limit is stopped (SIGINT to its process group, so pytest can end its runners; SIGKILL after a
grace period) and the folder goes, with whatever was half written in it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .suites import Suite

# Past its limit a child gets this long to end on SIGINT (pytest stops its runners) before SIGKILL.
STOP_GRACE_S = 15.0
# The child checks its own deadline and fails with a message; the runner's kill comes this much
# later, for a child stuck where it cannot check (a kernel that never ends).
KILL_MARGIN_S = 10.0


@dataclass(frozen=True)
class Outcome:
    suite: str
    status: str  # "ok", "failed", "timed out" or "not run"
    seconds: float = 0.0
    path: Path | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def describe(self) -> str:
        where = f" -> {self.path}" if self.path else ""
        detail = f" ({self.detail})" if self.detail else ""
        return f"{self.suite:8s} {self.status:9s} {self.seconds:6.0f} s{where}{detail}"


def child_command(suite: Suite, staged: Path | None, limit_s: float, command: str,
                  options: dict[str, str] | None = None) -> list[str]:  # fmt: skip
    argv = [sys.executable, "-m", "tkreg.bench.child", "--entry", suite.entry, "--suite", suite.name,
            "--seconds", f"{limit_s:.1f}", "--command", command]  # fmt: skip
    if staged is not None:
        argv += ["--out", str(staged)]
    for key, value in (options or {}).items():
        argv += ["--option", f"{key}={value}"]
    return argv


def execute(suite: Suite, final: Path | None, limit_s: float, command: str, options: dict[str, str] | None = None,
            env: dict[str, str] | None = None, kill_margin_s: float = KILL_MARGIN_S,
            grace_s: float = STOP_GRACE_S) -> Outcome:  # fmt: skip
    """Run ``suite`` for at most ``limit_s`` seconds (stopped ``kill_margin_s`` later if it has not
    ended by itself); its data file ends up at ``final`` (None: the suite writes none) only if it
    finished."""
    start = time.monotonic()
    if final is not None:
        final.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=".tkreg-bench-", dir=final.parent)) if final is not None else None
    staged = folder / final.name if folder is not None and final is not None else None
    try:
        argv = child_command(suite, staged, limit_s, command, options)
        # Its own process group: one signal reaches the child and what it started (pytest's runners).
        proc = subprocess.Popen(argv, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=limit_s + kill_margin_s)
        except subprocess.TimeoutExpired:
            _stop(proc, grace_s)
            return Outcome(suite.name, "timed out", time.monotonic() - start, detail=f"stopped after {limit_s:.0f} s")
        except BaseException:  # Ctrl-C here: the child, in a session of its own, did not see it
            _stop(proc, grace_s)
            raise
        seconds = time.monotonic() - start
        if rc != 0:
            return Outcome(suite.name, "failed", seconds, detail=f"exit status {rc}")
        if staged is None or final is None:
            return Outcome(suite.name, "ok", seconds)
        if not staged.exists():
            return Outcome(suite.name, "failed", seconds, detail="the suite wrote no data file")
        os.replace(staged, final)
        return Outcome(suite.name, "ok", seconds, final)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _stop(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGINT to the child's process group; after a grace period (or once the child is gone),
    SIGKILL to whatever of the group is left."""
    for sig in (signal.SIGINT, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
