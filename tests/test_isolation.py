"""Fault isolation, end to end: `pytest --tkreg` runs in a subprocess, as a user runs it, with the
fault plugin (tests/fault_plugin: not installed, loaded through the run's conftest) beside the
installed add op and add_triton. A crash or a hang fails only its own item; every correct item
passes; the run ends promptly and leaves no process behind."""

from __future__ import annotations

import os
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tkreg.testing.markers import runs_the_interpreter

pytest_plugins = ["pytester"]
# Every run here is of a machine without a GPU (CUDA_VISIBLE_DEVICES empty): the faults and the
# messages are the interpreter's, so the interpreter must be able to run.
pytestmark = runs_the_interpreter

FAULT_PLUGIN = Path(__file__).parent / "fault_plugin"
LANG_PLUGIN = (Path(__file__).parent / "fixtures" / "lang_plugin.py").read_text()
FAULTY_ON_CPU = "add_fault_kill,add_fault_blocked,add_fault_segfault"
TIMEOUT_S = 3


def processes_tagged(tag: str) -> list[int]:
    """Live processes whose environment carries ``tag`` (the run's runners inherit it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if tag.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.fixture
def faults(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> tuple[pytest.Pytester, str]:
    """A pytester directory whose conftest loads the fault plugin; of the installed plugins only
    `elementwise` (the add op and add_triton) loads."""
    tag = f"tkreg-isolation-{uuid.uuid4().hex}"
    monkeypatch.setenv("TKREG_PLUGINS", "elementwise")
    monkeypatch.setenv("TKREG_ISOLATION_TAG", tag)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    pytester.makeconftest(
        f"import sys\nsys.path.insert(0, {str(FAULT_PLUGIN)!r})\nfrom tkreg_faults.plugin import tkreg_register_kernels  # noqa\n"
    )
    return pytester, tag


def test_crashes_and_hangs_fail_only_their_own_items(faults: tuple[pytest.Pytester, str]) -> None:
    pytester, tag = faults
    selection = "1x8 or 257x136-padded"  # two cases: 12 add_triton items (3 dtypes x 2 configs), 2 per fault
    start = time.monotonic()
    result = pytester.runpytest_subprocess(
        "--tkreg",
        f"--tkreg-kernel=add_triton,{FAULTY_ON_CPU}",
        "-m",
        "tkreg_correctness",
        "-k",
        selection,
        f"--tkreg-timeout={TIMEOUT_S}",
        "--junitxml=junit.xml",
        "-v",
    )
    elapsed = time.monotonic() - start
    result.assert_outcomes(passed=12, failed=6)
    result.stdout.fnmatch_lines_random(
        [
            "*::add_triton[[]bf16-257x136-padded-BLOCK=1024-num_warps=4[]] PASSED*",
            "*::add_fault_kill[[]fp32-1x8[]] FAILED*",
            "*::add_fault_blocked[[]fp32-257x136-padded[]] FAILED*",
            f"*add_fault_blocked[[]fp32[]] (kernel add_fault_blocked, case 1x8, dtype float32, config {{}}, seed *"
            f"did not finish within {TIMEOUT_S} s; its runner process (the Triton interpreter) was killed and replaced*",
            "*add_fault_kill[[]fp32[]] (kernel add_fault_kill, case 1x8,*the runner process running it*killed by SIGKILL*",
            "*add_fault_segfault[[]fp32[]]*killed by SIGSEGV*",
            "*Fatal Python error: Segmentation fault*",  # the runner's log: faulthandler's stack
            "*in add_fault_segfault*",
        ]
    )
    # Two hangs, each at most TIMEOUT_S, plus the run's own work; generous for a loaded CI machine.
    assert elapsed < 2 * TIMEOUT_S + 90, f"the run took {elapsed:.0f} s"
    time.sleep(0.5)
    assert processes_tagged(tag) == [], "runner processes outlived the run"
    # junit XML names every failed item under its own id.
    cases = ET.parse(pytester.path / "junit.xml").getroot().iter("testcase")
    failed = sorted(c.get("name") for c in cases if c.find("failure") is not None)
    assert failed == sorted(
        f"{k}[fp32-{c}]" for k in FAULTY_ON_CPU.split(",") for c in ("1x8", "257x136-padded")
    ), failed


def test_last_failed_reruns_just_the_faulty_items(faults: tuple[pytest.Pytester, str]) -> None:
    pytester, _ = faults
    args = ("--tkreg", "--tkreg-kernel=add_triton,add_fault_kill", "-m", "tkreg_correctness", "-k", "1x8")
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=6, failed=1)
    rerun = pytester.runpytest_subprocess(*args, "--lf", "-v")
    assert {k: v for k, v in rerun.parseoutcomes().items() if k != "deselected"} == {"failed": 1}
    rerun.stdout.fnmatch_lines(["*rerun previous 1 failure*", "*::add_fault_kill[[]fp32-1x8[]] FAILED*"])


def test_a_kernel_using_triton_language_helpers_passes_every_interpreted_item(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tl.max, tl.min, tl.argmax, tl.sum, tl.reduce, tl.cumsum, tl.sort, tl.where: in runner
    processes, and in the pytest process itself (--tkreg-in-process, where the plugin restores
    triton.language after every test; that restore once broke every item after the first)."""
    monkeypatch.setenv("TKREG_PLUGINS", "")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    pytester.makeconftest(LANG_PLUGIN)
    for extra in ((), ("--tkreg-in-process",)):
        result = pytester.runpytest_subprocess("--tkreg", "-m", "tkreg_correctness", *extra)
        result.assert_outcomes(passed=4)


def test_runner_logs_are_deleted_after_a_passing_run_and_kept_after_a_failure(faults: tuple[pytest.Pytester, str]) -> None:
    pytester, _ = faults
    temp = pytester.path / "tmp"  # TMPDIR of inner runs (the root conftest), where the pool makes its directory
    common = ("--tkreg", "-m", "tkreg_correctness", "-k", "1x8")
    pytester.runpytest_subprocess(*common, "--tkreg-kernel=add_triton").assert_outcomes(passed=6)
    assert sorted(p.name for p in temp.glob("tkreg-runners-*")) == []
    failing = pytester.runpytest_subprocess(*common, "--tkreg-kernel=add_triton,add_fault_kill")
    failing.assert_outcomes(passed=6, failed=1)
    kept = sorted(temp.glob("tkreg-runners-*"))
    assert len(kept) == 1 and any(kept[0].glob("runner-*.log"))
    failing.stdout.fnmatch_lines([f"runner logs of this run (kept because items failed): {kept[0]}"])
