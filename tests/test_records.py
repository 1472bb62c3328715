from __future__ import annotations

import gzip
import json

import pytest

from tkreg.report import records


def test_save_then_load_round_trips_rows_and_names_the_environment(tmp_path):
    path = records.save("demo", [{"shape": "1024x1024", "us": 12.5}], tmp_path, notes="n")
    document = records.load(path)
    assert path.name == "demo.json"
    assert document["kind"] == "demo"
    assert document["rows"] == [{"shape": "1024x1024", "us": 12.5}]
    assert document["notes"] == "n"
    for key in ("date", "command", "device", "python"):
        assert document["meta"][key]


def test_load_reads_gzip_and_rejects_a_file_without_the_envelope(tmp_path):
    good = tmp_path / "x.json.gz"
    good.write_bytes(gzip.compress(json.dumps({"kind": "k", "meta": {}, "rows": []}).encode()))
    assert records.load(good)["kind"] == "k"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="missing kind, meta"):
        records.load(bad)
