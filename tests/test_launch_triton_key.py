"""Triton's key of its install, kept beside tkreg's cache (tkreg.launch.triton_key): worked out
once, read by later processes while the install's files are unchanged, worked out again when
they change; Triton's own function where it is off or unknown."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest

triton = pytest.importorskip("triton")
from triton.runtime import autotuner, cache  # noqa: E402

from tests.helpers import new_process  # noqa: E402
from tkreg.launch import triton_key  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Triton's key function replaced by one that counts its calls (under both names it has),
    remember() not yet done in this process, and a fixed stamp of the install."""
    calls: list[str] = []
    _later_process(monkeypatch, calls)
    monkeypatch.setattr(triton_key, "install_stamp", lambda package, version: "stamp-1")
    monkeypatch.delenv(triton_key.ENV_TRITON_KEY, raising=False)
    return calls


def _later_process(monkeypatch: pytest.MonkeyPatch, calls: list[str]) -> None:
    """What a new process starts with: Triton's own function, nothing remembered yet."""

    @functools.lru_cache
    def fake_key() -> str:
        calls.append("computed")
        return "key-of-this-install"

    monkeypatch.setattr(cache, "triton_key", fake_key)
    monkeypatch.setattr(autotuner, "triton_key", fake_key)
    monkeypatch.setattr(triton_key, "_done", None)


def test_the_key_is_worked_out_once_and_read_by_later_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counted: list[str]
) -> None:
    asked: list[Path] = []
    folder = tmp_path / "cache"
    assert triton_key.remember(lambda: asked.append(folder) or folder) == "handed over"
    assert asked == [] and counted == []  # nothing before Triton asks
    assert cache.triton_key() == "key-of-this-install" and autotuner.triton_key is cache.triton_key
    assert counted == ["computed"] and asked == [folder]
    assert json.loads((folder / triton_key.FILE_NAME).read_text()) == {"stamp-1": "key-of-this-install"}
    assert triton_key.remember(lambda: folder) == "handed over" and cache.triton_key() == "key-of-this-install"
    assert counted == ["computed"]  # once per process

    _later_process(monkeypatch, counted)
    triton_key.remember(lambda: folder)
    assert cache.triton_key() == "key-of-this-install" and counted == ["computed"]  # read, not worked out
    assert [p.name for p in folder.iterdir()] == [triton_key.FILE_NAME]  # no temporary file left


def test_a_changed_install_gets_its_key_worked_out_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counted: list[str]
) -> None:
    triton_key.remember(lambda: tmp_path)
    cache.triton_key()
    _later_process(monkeypatch, counted)
    monkeypatch.setattr(triton_key, "install_stamp", lambda package, version: "stamp-2")
    triton_key.remember(lambda: tmp_path)
    assert cache.triton_key() == "key-of-this-install" and counted == ["computed", "computed"]
    kept = json.loads((tmp_path / triton_key.FILE_NAME).read_text())
    assert list(kept) == ["stamp-1", "stamp-2"]
    monkeypatch.setattr(triton_key, "KEPT_STAMPS", 2)
    for n in (3, 4):
        _later_process(monkeypatch, counted)
        monkeypatch.setattr(triton_key, "install_stamp", lambda package, version, n=n: f"stamp-{n}")
        triton_key.remember(lambda: tmp_path)
        cache.triton_key()
    assert list(json.loads((tmp_path / triton_key.FILE_NAME).read_text())) == ["stamp-3", "stamp-4"]  # the newest


def test_off_unknown_unreadable_or_unwritable_leaves_triton_its_own_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counted: list[str]
) -> None:
    own = cache.triton_key
    monkeypatch.setenv(triton_key.ENV_TRITON_KEY, "0")
    assert triton_key.remember(lambda: tmp_path) == "off" and cache.triton_key is own
    monkeypatch.delenv(triton_key.ENV_TRITON_KEY)
    monkeypatch.setattr(triton_key, "_done", None)
    monkeypatch.setattr(cache, "triton_key", lambda: "no cache_info")  # not the function this knows
    assert triton_key.remember(lambda: tmp_path) == "unsupported"

    _later_process(monkeypatch, counted)
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # the folder cannot be made: the key is still Triton's
    triton_key.remember(lambda: blocked / "cache")
    assert cache.triton_key() == "key-of-this-install" and counted == ["computed"]

    def unreadable(package: Path, version: str) -> str:
        raise PermissionError("no")

    _later_process(monkeypatch, counted)
    monkeypatch.setattr(triton_key, "install_stamp", unreadable)
    triton_key.remember(lambda: tmp_path)
    assert cache.triton_key() == "key-of-this-install" and counted == ["computed", "computed"]
    assert not (tmp_path / triton_key.FILE_NAME).exists()


def test_the_stamp_moves_with_any_file_the_key_hashes(tmp_path: Path) -> None:
    package = tmp_path / "triton"
    files = ["runtime/cache.py", "compiler/compiler.py", "backends/nvidia/driver.py", "language/core.py",
             f"_C/libtriton.{triton_key.sysconfig.get_config_var('EXT_SUFFIX').split('.')[-1]}"]  # fmt: skip
    for name in files:
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text("x")
    first = triton_key.install_stamp(package, "3.6.0")
    assert triton_key.install_stamp(package, "3.6.0") == first
    assert triton_key.install_stamp(package, "3.6.1") != first
    driver = package / "backends/nvidia/driver.py"
    os.utime(driver, ns=(driver.stat().st_atime_ns, driver.stat().st_mtime_ns + 1000))
    second = triton_key.install_stamp(package, "3.6.0")
    assert second != first
    (package / "language/extra.py").write_text("y")  # a new module
    assert triton_key.install_stamp(package, "3.6.0") != second


_KEY = """
import json, sys
sys.path.insert(0, {root!r})
from pathlib import Path
from triton.runtime import cache
original = cache.triton_key
if {remember}:
    from tkreg.launch import triton_key
    triton_key.remember(lambda: Path({folder!r}))
key = cache.triton_key()
print(json.dumps({{"key": key, "original_computed": original.cache_info().currsize}}))
"""


def _key_in_new_process(folder: Path, remember: bool) -> Any:
    code = _KEY.format(root=str(ROOT), remember=remember, folder=str(folder))
    env = {k: v for k, v in os.environ.items() if k != triton_key.ENV_TRITON_KEY}
    return new_process(["-c", code], env, timeout=300)[1]


def test_a_later_process_reads_the_very_key_triton_works_out(tmp_path: Path) -> None:
    own = _key_in_new_process(tmp_path, remember=False)
    first = _key_in_new_process(tmp_path, remember=True)
    later = _key_in_new_process(tmp_path, remember=True)
    assert own["key"] == first["key"] == later["key"] and own["key"].startswith(triton.__version__)
    assert first["original_computed"] == 1  # the first process worked it out
    assert later["original_computed"] == 0  # the later one read it
