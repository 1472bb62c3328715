"""Shipping a ranking suite's data into the plugins: each op's rows in its own folder, named for
the GPU as tkreg.ops.walltime looks them up, and the ops that name no folder left out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tkreg.bench import shipping
from tkreg.ops import walltime


def _document() -> dict:
    rows = [{"op": op, "impl": impl, "dtype": "float32", "dims": {"M": 8, "N": 8}, "layout": "contiguous",
             "wall_us": 5.0, "device_us": 4.0, "host_us": 6.0}
            for op, impl in (("add", "add_triton"), ("add", "peer"), ("sum_row", "sum_row"), ("rms_norm", "peer"))]  # fmt: skip
    meta = {"device": "NVIDIA H200", "capability": "9.0", "date": "2026-11-30T01:45:03Z", "calls": walltime.CALLS_AS_TKREG,
            "not_timed": ["x"]}  # fmt: skip
    return {"kind": "ops_ranking", "meta": meta, "rows": rows, "notes": "how"}


def test_file_names_follow_the_device_name_vendor_included() -> None:
    assert shipping.file_name("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3.json"
    assert shipping.file_name("NVIDIA H200") == "nvidia-h200.json"
    with pytest.raises(ValueError, match="names no device"):
        shipping.file_name("")


def test_each_op_gets_its_own_rows_and_the_rest_are_named(tmp_path: Path) -> None:
    folders = {"add": tmp_path / "elementwise", "sum_row": tmp_path / "reductions"}
    written, left = shipping.ship(_document(), folders)
    assert written == [folders["add"] / "nvidia-h200.json", folders["sum_row"] / "nvidia-h200.json"]
    assert left == ["rms_norm"]
    add = walltime.load(str(written[0]))  # what tkreg.ops reads
    assert add.device == "NVIDIA H200" and add.calls == walltime.CALLS_AS_TKREG
    assert sorted(p.impl for p in add.points) == ["add_triton", "peer"] and {p.op for p in add.points} == {"add"}
    assert "not_timed" not in json.loads(written[0].read_text())["meta"]  # what the run found, not the data


def test_another_kind_of_file_and_bad_arguments_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="not a ranking data file: kind 'host_overhead'"):
        shipping.per_op({"kind": "host_overhead", "rows": []})
    assert shipping.main([]) == 2 and "usage: python -m tkreg.bench.shipping RANKING_FILE" in capsys.readouterr().err
    other = tmp_path / "host.json"
    other.write_text(json.dumps({"kind": "host_overhead", "meta": {}, "rows": []}))
    assert shipping.main([str(other)]) == 2
    assert "not a ranking data file" in capsys.readouterr().err
    assert shipping.main([str(tmp_path / "missing.json")]) == 2
