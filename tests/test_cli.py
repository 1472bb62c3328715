"""The tkreg command, on plugin distributions installed the way a user installs them: what it prints,
within 100 columns unless --wide, and the exit status a script relies on."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def tkreg_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tkreg.cli", *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with the toy and the broken plugin distributions pip-installed into it (built
    from private copies: pip writes build/ beside the sources, and test workers run in parallel)."""
    root = tmp_path_factory.mktemp("dists")
    target = root / "site"
    for dist in ("toy_dist", "broken_dist"):
        source = shutil.copytree(FIXTURES / dist, root / dist)
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
        subprocess.run([*pip, "--target", str(target), str(source)], check=True, timeout=300)
    return target


def env_with(site: Path, plugins: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TKREG_PLUGINS"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    if plugins is not None:
        env["TKREG_PLUGINS"] = plugins
    return env


def test_an_installed_out_of_tree_plugin_is_listed(site: Path) -> None:
    result = tkreg_cli("list", "--capability", "9.0", env=env_with(site, "toy"))
    assert result.returncode == 0, result.stderr
    assert "platform: capability 9.0" in result.stdout
    lines = result.stdout.splitlines()
    at = next(i for i, ln in enumerate(lines) if "toy_negate_hopper" in ln)
    assert lines[at].split() == ["toy_negate", "toy_negate_hopper", "toy", "yes"]
    assert lines[at + 1] == "    requires: sm_90a (9.0)"
    wide = tkreg_cli("list", "--capability", "9.0", "--wide", env=env_with(site, "toy"))
    line = next(ln for ln in wide.stdout.splitlines() if "toy_negate_hopper" in ln)
    assert line.split()[:3] == ["toy_negate", "toy_negate_hopper", "toy"]
    assert "sm_90a" in line and line.rstrip().endswith("yes")


def test_list_says_why_a_kernel_does_not_run(site: Path) -> None:
    result = tkreg_cli("list", "--capability", "8.0", "--json", env=env_with(site, "toy"))
    (row,) = json.loads(result.stdout)["kernels"]
    assert row["runs"] is False
    assert row["why_not"] == "needs sm_90a (capability 9.0); this device is 8.0"


def test_a_plugin_that_fails_to_import_is_named_and_the_rest_still_list(site: Path) -> None:
    env = env_with(site, "toy,broken")
    listing = tkreg_cli("list", env=env)
    assert listing.returncode == 0
    assert "toy_negate_hopper" in listing.stdout
    assert "1 plugin problem(s)" in listing.stderr
    doctor = tkreg_cli("doctor", "--wide", env=env)
    assert doctor.returncode == 1
    assert (
        "broken (tkreg-broken-dist 0.0.1): import: ImportError: tkreg_broken_dist needs a library that is not installed"
        in doctor.stdout
    )
    assert "toy (tkreg-toy-dist 1.2.3): 1 kernel(s)" in doctor.stdout


def test_empty_plugin_selection_lists_nothing(site: Path) -> None:
    result = tkreg_cli("list", env=env_with(site, ""))
    assert result.returncode == 0
    assert "no kernels registered (TKREG_PLUGINS='')" in result.stdout


def test_doctor_reports_versions_and_the_interpreter(site: Path) -> None:
    result = tkreg_cli("doctor", env=env_with(site, "toy"))
    assert result.returncode == 0, result.stdout
    assert "device: no GPU: Triton interpreter" in result.stdout or "device: NVIDIA" in result.stdout
    for dist in ("python", "torch", "triton", "pluggy"):
        assert f"\n{dist} " in "\n" + result.stdout
    key_line = next(line for line in result.stdout.splitlines() if line.startswith("tkreg.ops plan key: "))
    assert key_line.startswith(("tkreg.ops plan key: C++ (built", "tkreg.ops plan key: Python (the C++ key is not built"))


def test_info_shows_requirements_cases_and_tolerances(site: Path) -> None:
    result = tkreg_cli("info", "toy_negate_hopper", "--capability", "10.0", "--json", env=env_with(site, "toy"))
    info = json.loads(result.stdout)
    assert info["plugin"] == "toy (tkreg-toy-dist 1.2.3)"
    assert info["requirements"]["arch"] == "sm_90a"
    assert info["runs on capability 10.0"] == "no: needs sm_90a (capability 9.0); this device is 10.0"
    assert info["op cases"] == {"5": ["default", "full"]}
    assert info["op tolerances"] == {"float32": {"atol": 0.0, "rtol": 0.0}}


def test_info_on_an_op_shows_how_its_kernels_are_called() -> None:
    """A plugin author adding a kernel to an installed op reads its calling interface here."""
    result = tkreg_cli("info", "rms_norm", "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["op inputs"] == ["x", "weight (optional: may be None)"] and info["op gradients"] == ["x", "weight"]
    assert info["op params"][0].startswith("eps=1e-06 (tests: ")
    assert info["op outputs"] == ["y (the case dtype)", "rstd (float32, kept for the backward)"]
    assert "rms_norm_bwd_triton (backward)" in info["kernels"] and info["op contract"] == "rows"
    kernel = json.loads(tkreg_cli("info", "rms_norm_bwd_triton", "--json").stdout)
    assert kernel["direction"].startswith("backward") and kernel["op inputs"] == ["x", "weight (optional: may be None)"]


def test_info_on_an_op_names_the_gpus_its_prior_was_measured_on() -> None:
    """Where tkreg.ops does not time calls it ranks by the op's shipped wall-time data: info says
    for which GPUs, when, and how the candidates were called."""
    measured = json.loads(tkreg_cli("info", "sum_row", "--json").stdout)["op wall-time data (the prior)"]
    assert any(line.startswith("NVIDIA H200 (2026-11-30; called as tkreg.ops calls them; ") for line in measured), measured
    assert any(line.startswith("NVIDIA H100 80GB HBM3 (2026-11-23; launchers called directly; ") for line in measured)
    unmeasured = json.loads(tkreg_cli("info", "rms_norm", "--json").stdout)["op wall-time data (the prior)"]
    assert unmeasured.startswith("none: kernels rank by priority and score")


def test_unknown_kernel_is_a_clear_error(site: Path) -> None:
    result = tkreg_cli("info", "nope", env=env_with(site, "toy"))
    assert result.returncode == 2
    assert "unknown kernel 'nope'; known kernels: toy_negate_hopper" in result.stderr
    typo = tkreg_cli("info", "toy_negate_hoper", env=env_with(site, "toy"))
    assert typo.returncode == 2
    expected = "unknown kernel 'toy_negate_hoper' (did you mean 'toy_negate_hopper'?); known kernels: toy_negate_hopper"
    assert typo.stderr == f"tkreg: error: {expected}\n"


def test_listing_imports_neither_torch_nor_triton(site: Path) -> None:
    code = (
        "import sys, tkreg.cli; tkreg.cli.main(['list', '--capability', '9.0']); "
        "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env_with(site, None), timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_a_reader_that_goes_away_gets_no_traceback() -> None:
    """`tkreg list | head -1`: the read end is closed before tkreg writes (it loads the plugins
    first), so its first write fails with a broken pipe; it must end quietly."""
    proc = subprocess.Popen([sys.executable, "-m", "tkreg.cli", "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


def test_an_unknown_plugin_in_tkreg_plugins_is_named_with_the_installed_ones(site: Path) -> None:
    """Nothing known: an error (exit 2) before any plugin loads; one typo among known names: a
    warning naming it and the closest installed plugin, and the rest still list."""
    nothing = tkreg_cli("list", env=env_with(site, "nonexistent"))
    assert nothing.returncode == 2, nothing.stdout + nothing.stderr
    error = " ".join(nothing.stderr.split())  # unwrapped
    assert "tkreg: error: TKREG_PLUGINS='nonexistent': unknown plugin 'nonexistent'; installed plugins: " in error
    assert "broken, " in error and "toy" in error and "elementwise" in error
    assert "no plugin loaded (unset TKREG_PLUGINS to load all)" in error
    assert nothing.stdout == ""
    typo = tkreg_cli("list", "--wide", env=env_with(site, "toy,brokn"))
    assert typo.returncode == 0, typo.stderr
    assert "tkreg: warning: TKREG_PLUGINS='toy,brokn': unknown plugin 'brokn' (did you mean 'broken'?); installed plugins:" in (
        typo.stderr
    )
    assert "toy_negate_hopper" in typo.stdout
    info = tkreg_cli("info", "toy_negate_hopper", env=env_with(site, "nonexistent"))
    assert info.returncode == 2 and "unknown plugin 'nonexistent'" in info.stderr


def test_doctor_lists_the_installed_plugins_and_an_unknown_name(site: Path) -> None:
    result = tkreg_cli("doctor", "--wide", env=env_with(site, "toy,tyo"))
    assert result.returncode == 1, result.stdout
    lines = result.stdout.splitlines()
    assert "  toy (tkreg-toy-dist 1.2.3): 1 kernel(s)" in lines
    assert "  broken (tkreg-broken-dist 0.0.1): not loaded (TKREG_PLUGINS leaves it out)" in lines
    assert any(line.startswith("plugins installed (") and line.endswith(", 1 loaded):") for line in lines)
    assert "plugin problems (1):" in lines
    assert any("TKREG_PLUGINS='toy,tyo': unknown plugin 'tyo' (did you mean 'toy'?)" in line for line in lines)
    clean = tkreg_cli("doctor", env=env_with(site, "toy"))
    assert clean.returncode == 0 and "plugin problems: none" in clean.stdout


def test_list_info_and_doctor_fit_100_columns_unless_wide() -> None:
    """On every installed plugin (the matmul kernels have the longest requirements and configs)."""
    env = {k: v for k, v in os.environ.items() if k != "TKREG_PLUGINS"}
    for command in (["list"], ["info", "matmul_hopper_ws"], ["doctor"]):
        result = tkreg_cli(*command, env=env)
        assert result.returncode == 0, result.stderr
        widest = max(len(line) for line in result.stdout.splitlines())
        assert widest <= 100, (command, widest)
        full = tkreg_cli(*command, "--wide", env=env)
        assert full.returncode == 0, full.stderr
        if command[0] != "doctor":  # doctor's lines are short here; the others are not
            assert max(len(line) for line in full.stdout.splitlines()) > 100, command
    listing = tkreg_cli("list", "--wide", "--json", env=env)
    kernels = len(json.loads(listing.stdout)["kernels"])
    wide = tkreg_cli("list", "--wide", env=env).stdout.splitlines()
    assert len(wide) == kernels + 2  # the platform, the header, one line per kernel
    info = tkreg_cli("info", "matmul_hopper_ws", env=env).stdout
    assert "\nop cases:\n  default, full: " in info  # a line per case set, not per case
    assert "\n  sm_90a:\n    ptx: " in info


def test_a_bug_exits_3_with_its_traceback_never_1(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """1 means "a kernel got slower" to a CI gate; a crash must not read as one."""
    import tkreg.cli

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(tkreg.cli, "build_registry", broken)
    assert tkreg.cli.main(["list"]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: a bug" in err
    assert "tkreg: internal error (a bug, not a result); exit status 3" in err
