"""The data envelope measurements are stored in, and the names of the data files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tkreg.report import records


def test_save_then_load_round_trips_rows_and_names_the_environment(tmp_path: Path) -> None:
    path = records.save("demo", [{"shape": "1024x1024", "us": 12.5}], tmp_path, notes="n")
    document = records.load(path)
    assert path.name == "demo.json"
    assert document["kind"] == "demo"
    assert document["rows"] == [{"shape": "1024x1024", "us": 12.5}]
    assert document["notes"] == "n"
    for key in ("date", "command", "device", "python", "tkreg"):
        assert document["meta"][key]


def test_load_reads_gzip_and_rejects_a_file_without_the_envelope(tmp_path: Path) -> None:
    good = tmp_path / "x.json.gz"
    good.write_bytes(gzip.compress(json.dumps({"kind": "k", "meta": {}, "rows": []}).encode()))
    assert records.load(good)["kind"] == "k"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="missing kind, meta"):
        records.load(bad)


def test_a_document_carries_meta_overrides_and_a_summary() -> None:
    document = records.document("timing_check", [{"a": 1}], notes="x", meta={"command": "tkreg bench timer"},
                                summary={"verdicts": ["PASS"]})  # fmt: skip
    assert document["meta"]["command"] == "tkreg bench timer" and document["summary"] == {"verdicts": ["PASS"]}
    assert "summary" not in records.document("k", [])


def test_write_replaces_the_file_at_once_and_leaves_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "d.json.gz"
    records.write(target, {"kind": "k", "meta": {}, "rows": [1]})
    first = target.read_bytes()
    records.write(target, {"kind": "k", "meta": {}, "rows": [1]})
    assert target.read_bytes() == first  # gzip without a timestamp: the same data, the same bytes
    records.write(target, {"kind": "k", "meta": {}, "rows": [2]})
    assert records.load(target)["rows"] == [2]
    assert [p.name for p in target.parent.iterdir()] == ["d.json.gz"]
    assert target.stat().st_mode & 0o044  # readable by others, as a file written by open() is


def test_data_file_names_carry_the_date_the_gpu_and_the_suite(tmp_path: Path) -> None:
    assert records.gpu_slug("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"
    assert records.gpu_slug("NVIDIA H200") == "h200"
    assert records.data_name("2026-11-23", "NVIDIA H100 80GB HBM3", "main", gz=True) == "2026-11-23-h100-80gb-hbm3-main.json.gz"
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        records.data_name("23.11.2026", "NVIDIA H200", "timer")
    with pytest.raises(ValueError, match="lower-case words"):
        records.data_name("2026-11-23", "NVIDIA H200", "two-words")
    parsed = records.DataFile.parse("benchmarks/data/2026-11-23-h100-80gb-hbm3-timer.json")
    assert parsed is not None and (parsed.date, parsed.gpu, parsed.suite) == ("2026-11-23", "h100-80gb-hbm3", "timer")
    assert records.DataFile.parse("2026-11-23-run16-timing_check.json") is None
    for name in ("2026-11-20-h200-host.json", "2026-11-23-h200-host.json", "2026-11-21-h200-main.json.gz", "notes.txt"):
        (tmp_path / name).write_text("{}")
    newest = records.latest(records.data_files(tmp_path))
    assert {suite: f.date for suite, f in newest["h200"].items()} == {"host": "2026-11-23", "main": "2026-11-21"}
