"""The tkreg command, on plugin distributions installed the way a user installs them."""

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
    line = next(ln for ln in result.stdout.splitlines() if "toy_negate_hopper" in ln)
    assert line.split()[:3] == ["toy_negate", "toy_negate_hopper", "toy"]
    assert line.rstrip().endswith("yes")


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
    doctor = tkreg_cli("doctor", env=env)
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


def test_info_shows_requirements_cases_and_tolerances(site: Path) -> None:
    result = tkreg_cli("info", "toy_negate_hopper", "--capability", "10.0", "--json", env=env_with(site, "toy"))
    info = json.loads(result.stdout)
    assert info["plugin"] == "toy (tkreg-toy-dist 1.2.3)"
    assert info["requirements"]["arch"] == "sm_90a"
    assert info["runs on capability 10.0"] == "no: needs sm_90a (capability 9.0); this device is 10.0"
    assert info["op cases"] == {"5": ["default", "full"]}
    assert info["op tolerances"] == {"float32": {"atol": 0.0, "rtol": 0.0}}


def test_unknown_kernel_is_a_clear_error(site: Path) -> None:
    result = tkreg_cli("info", "nope", env=env_with(site, "toy"))
    assert result.returncode == 2
    assert "unknown kernel 'nope'; known kernels: toy_negate_hopper" in result.stderr


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
