"""Each `tkreg bench` suite runs in a child process and leaves its data file only when it finished:
the envelope it writes, and what is left (nothing) after a suite that fails, hangs or runs out
of time. The suites here are fakes: a module written for the test, on the child's PYTHONPATH."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tkreg.bench import child, main_run
from tkreg.bench.runner import execute
from tkreg.bench.suites import Deadline, Measured, OutOfTime, Suite, SuiteFailed
from tkreg.report import records

FAKES = '''
import time
from tkreg.bench.suites import Measured, SuiteFailed

def ok(deadline, rows="2"):
    return Measured(kind="fake", rows=[{"i": i, "us": 1.5 * i} for i in range(int(rows))], notes="two rows",
                    summary={"checks": ["PASS"]}, meta={"extra": "yes"})

def fails(deadline):
    raise SuiteFailed("the GPU said no")

def crashes(deadline):
    raise ZeroDivisionError("a bug")

def hangs(deadline):
    time.sleep(600)  # a kernel that never ends: it checks no deadline

def slow(deadline):
    while True:
        deadline.check("the next measurement")
        time.sleep(0.05)
'''


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "fake_suites.py").write_text(FAKES)
    root = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), root, os.environ.get("PYTHONPATH", "")])}


def fake(entry: str) -> Suite:
    return Suite("fake", "a fake suite", f"fake_suites:{entry}", 30.0)


def left_over(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_a_finished_suite_leaves_its_envelope_with_the_command_and_the_environment(tmp_path: Path, env: dict[str, str]) -> None:
    final = tmp_path / "out" / records.data_name("2026-11-23", "NVIDIA H100 80GB HBM3", "fake")
    outcome = execute(fake("ok"), final, 30.0, "tkreg bench fake --out out", env=env)
    assert outcome.ok and outcome.path == final, outcome
    assert left_over(final.parent) == [final.name]  # the staging folder is gone
    document = records.load(final)
    assert document["kind"] == "fake" and document["rows"] == [{"i": 0, "us": 0.0}, {"i": 1, "us": 1.5}]
    assert document["notes"] == "two rows" and document["summary"] == {"checks": ["PASS"]}
    meta = document["meta"]
    assert meta["command"] == "tkreg bench fake --out out" and meta["suite"] == "fake" and meta["extra"] == "yes"
    for key in ("date", "device", "python", "tkreg"):
        assert meta[key], key


@pytest.mark.parametrize(("entry", "status", "said"), [("fails", "failed", "FAILED: the GPU said no"),
                                                       ("crashes", "failed", "ZeroDivisionError: a bug")])  # fmt: skip
def test_a_suite_that_fails_leaves_no_file(tmp_path: Path, env: dict[str, str], capfd: pytest.CaptureFixture[str],
                                           entry: str, status: str, said: str) -> None:  # fmt: skip
    final = tmp_path / "out" / "2026-11-23-h200-fake.json"
    outcome = execute(fake(entry), final, 30.0, "tkreg bench", env=env)
    assert outcome.status == status and outcome.path is None
    assert left_over(final.parent) == []
    captured = capfd.readouterr()
    assert said in captured.out + captured.err


def test_a_suite_stuck_past_its_limit_is_stopped_and_leaves_no_file(tmp_path: Path, env: dict[str, str]) -> None:
    final = tmp_path / "out" / "2026-11-23-h200-fake.json"
    start = time.monotonic()
    outcome = execute(fake("hangs"), final, 1.0, "tkreg bench", env=env, kill_margin_s=0.5, grace_s=5.0)
    assert outcome.status == "timed out" and "stopped after 1 s" in outcome.detail
    assert time.monotonic() - start < 10.0
    assert left_over(final.parent) == []


def test_a_suite_that_runs_out_of_its_time_says_so(tmp_path: Path, env: dict[str, str],
                                                   capfd: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    final = tmp_path / "out" / "2026-11-23-h200-fake.json"
    outcome = execute(fake("slow"), final, 1.0, "tkreg bench", env=env)
    assert outcome.status == "failed" and left_over(final.parent) == []
    assert "ran out before the next measurement" in capfd.readouterr().out


def test_options_reach_the_suite_and_a_step_without_a_file_writes_none(tmp_path: Path, env: dict[str, str]) -> None:
    final = tmp_path / "out" / "2026-11-23-h200-fake.json"
    assert execute(fake("ok"), final, 30.0, "tkreg bench", options={"rows": "5"}, env=env).ok
    assert len(records.load(final)["rows"]) == 5
    outcome = execute(fake("ok"), None, 30.0, "tkreg bench", env=env)  # the warm-up step: no file
    assert outcome.ok and outcome.path is None and left_over(final.parent) == [final.name]


def test_envelope_of_a_finished_document_adds_the_meta() -> None:
    finished = Measured(document={"benchmarks": [], "datetime": "x"}, meta={"outcome": "206 passed"})
    done = child.envelope("main", finished, "tkreg bench")
    assert done["benchmarks"] == [] and done["meta"]["outcome"] == "206 passed" and done["meta"]["command"] == "tkreg bench"
    rows = child.envelope("timer", Measured(rows=[{"a": 1}]), "c")
    assert rows["kind"] == "timer" and rows["rows"] == [{"a": 1}] and rows["meta"]["suite"] == "timer"


def test_the_deadline_names_what_it_stopped() -> None:
    deadline = Deadline(0.0)
    with pytest.raises(OutOfTime, match=r"0 s ran out before the matmul cases"):
        deadline.check("the matmul cases")
    assert issubclass(OutOfTime, SuiteFailed)
    assert Deadline(100.0).left() > 99.0


def test_the_main_suite_runs_the_benchmark_items_and_keeps_their_json(tmp_path: Path) -> None:
    argv = main_run.pytest_command(tmp_path / "bench.json", installed=True)
    assert argv[:3] == [sys.executable, "-m", "pytest"]
    assert {"--tkreg", "--tkreg-bench"} <= set(argv) and argv[argv.index("-m", 3) + 1] == "tkreg_bench"
    assert f"--benchmark-json={tmp_path / 'bench.json'}" in argv and "-p" in argv
    assert main_run.pytest_command(tmp_path / "b.json", installed=False)[-2:] == ["-p", main_run.PLUGIN]
    narrowed = main_run.pytest_command(tmp_path / "b.json", installed=True, extra="--tkreg-op=add,sum_row --tkreg-bench-ms 50")
    assert narrowed[-3:] == ["--tkreg-op=add,sum_row", "--tkreg-bench-ms", "50"]
