"""`tkreg bench` without a GPU: its help and list, argument errors, the file names it would write,
the budget that stops starting suites, and the clear refusal (exit status 2) where there is no GPU."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tkreg.bench import cli
from tkreg.bench.runner import Outcome
from tkreg.bench.suites import SUITES, by_name
from tkreg.core.platform import Platform

ROOT = Path(__file__).resolve().parents[1]


def bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tkreg.bench", *args], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, **(env or {})})  # fmt: skip


def args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(argv)


def test_without_a_gpu_it_says_so_and_exits_2() -> None:
    result = bench("timer", env={"CUDA_VISIBLE_DEVICES": ""})  # no device visible, on any machine
    assert result.returncode == 2
    assert "no CUDA GPU here" in result.stderr and "--list" in result.stderr
    assert result.stdout == ""


def test_help_and_list_work_without_a_gpu() -> None:
    listed = bench("--list", env={"CUDA_VISIBLE_DEVICES": ""})
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()[: len(SUITES)]] == [s.name for s in SUITES]
    helped = bench("--help")
    assert helped.returncode == 0 and "--budget-s" in helped.stdout and "--limit SUITE=S" in helped.stdout
    via_tkreg = subprocess.run([sys.executable, "-m", "tkreg.cli", "bench", "--list"], capture_output=True, text=True, cwd=ROOT,
                               timeout=120)  # fmt: skip
    assert via_tkreg.returncode == 0 and via_tkreg.stdout == listed.stdout


def test_bad_arguments_are_named_before_anything_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(args("timer", "nope"), "tkreg bench", ["timer", "nope"]) == 2
    assert "unknown suite 'nope' (known: main, timer, host, linear, dispatch, ranking)" in capsys.readouterr().err
    assert cli.run(args("--limit", "timer=soon"), "tkreg bench", []) == 2
    assert "'soon' is not a number" in capsys.readouterr().err
    assert cli.run(args("--limit", "warp=5"), "tkreg bench", []) == 2
    assert "SUITE one of main, timer" in capsys.readouterr().err
    assert cli.run(args("--budget-s", "0"), "tkreg bench", []) == 2


def test_limits_default_per_suite_and_take_overrides() -> None:
    limits = cli.limits(["timer=30", "warm=10"])
    assert limits["timer"] == 30.0 and limits["warm"] == 10.0 and limits["main"] == SUITES[0].limit_s
    with pytest.raises(ValueError, match="must be positive"):
        cli.limits(["host=-1"])


def test_suites_run_in_the_order_named_once_each() -> None:
    assert [s.name for s in by_name([])] == ["main", "timer", "host", "linear", "dispatch", "ranking"]
    assert [s.name for s in by_name(["ranking", "timer", "ranking"])] == ["ranking", "timer"]


def test_each_suite_writes_one_file_named_by_date_gpu_and_suite(tmp_path: Path) -> None:
    steps = cli.plan(by_name([]), tmp_path, "2026-11-23", "NVIDIA H100 80GB HBM3")
    assert [p.name for _, p in steps] == [
        "2026-11-23-h100-80gb-hbm3-main.json.gz",
        "2026-11-23-h100-80gb-hbm3-timer.json",
        "2026-11-23-h100-80gb-hbm3-host.json",
        "2026-11-23-h100-80gb-hbm3-linear.json",
        "2026-11-23-h100-80gb-hbm3-dispatch.json",
        "2026-11-23-h100-80gb-hbm3-ranking.json",
    ]
    assert all(p.parent == tmp_path for _, p in steps)
    assert cli.plan(by_name(["timer"]), tmp_path, "2026-11-24", "NVIDIA H200")[0][1].name == "2026-11-24-h200-timer.json"


def test_the_budget_stops_starting_suites_and_the_exit_status_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """A fake GPU and fake suites: the first takes 30 s of a 40 s budget, so the next is not started."""
    clock = [0.0]
    calls: list[tuple[str, float, str]] = []
    given: list[dict[str, str] | None] = []

    def fake_execute(suite, final, limit_s, command, options=None, env=None):  # type: ignore[no-untyped-def]
        calls.append((suite.name, limit_s, command))
        given.append(options)
        clock[0] += 30.0
        return Outcome(suite.name, "ok", 30.0, final)

    monkeypatch.setattr(cli, "current", lambda: Platform.cuda("9.0", "NVIDIA H100 80GB HBM3"))
    monkeypatch.setattr(cli, "execute", fake_execute)
    monkeypatch.setattr(cli.time, "monotonic", lambda: clock[0])
    argv = ["timer", "host", "--out", str(tmp_path), "--budget-s", "40", "--no-warm"]
    assert cli.run(args(*argv), "tkreg bench", argv) == 1
    assert [(name, limit) for name, limit, _ in calls] == [("timer", 40.0)]  # min(its 90 s, the budget left)
    assert calls[0][2] == f"tkreg bench timer host --out {tmp_path} --budget-s 40 --no-warm"
    out = capsys.readouterr().out
    assert "host     not run" in out and "10 s of the budget left" in out
    calls.clear()
    clock[0] = 0.0
    assert cli.run(args("timer", "--budget-s", "400", "--out", str(tmp_path)), "tkreg bench", []) == 0
    assert [name for name, _, _ in calls] == ["warm", "timer"]  # compiling ahead comes first
    assert given[-2] == {"suites": "timer"}  # what the warm-up step compiles
    calls.clear()
    clock[0] = 0.0
    argv = ["main", "timer", "--no-warm", "--pytest-args=--tkreg-op=add", "--out", str(tmp_path)]
    assert cli.run(args(*argv), "tkreg bench", argv) == 0
    assert given[-2:] == [{"pytest_args": "--tkreg-op=add"}, None]  # only the main suite runs pytest
