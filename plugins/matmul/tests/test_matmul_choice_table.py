"""Measured choice tables: the JSON format GPU scripts write and launchers read, and the look-up."""

from __future__ import annotations

import json
import math

import pytest
from tkreg_matmul.choice_table import LAYOUT_DISTANCE, Entry, Table, packaged_table, parse_table

ROW = {
    "M": 2048,
    "N": 4096,
    "K": 4096,
    "layout": "nk",
    "params": {"BLOCK_M": 128, "SPLIT_K": 1},
    "scheduler": "grouped-8",
    "measured": {"ms": 0.101, "cublas_ms": 0.1},
}


def test_entries_round_trip_through_json():
    meta = {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-24T10:00:00Z"}
    document = {"kind": "hopper_choice", "meta": meta, "entries": [ROW]}
    table = parse_table(json.loads(json.dumps(document)), "hopper_choice")
    assert table.entries == (Entry(2048, 4096, 4096, "nk", {"BLOCK_M": 128, "SPLIT_K": 1}, "grouped-8", ROW["measured"]),)
    assert table.to_json() == document
    assert table.provenance() == "NVIDIA H100 80GB HBM3, 2026-11-24"


def test_parse_refuses_other_files_and_incomplete_rows():
    with pytest.raises(ValueError, match="expected a 'hopper_choice' table, got kind 'triton_choice'"):
        parse_table({"kind": "triton_choice", "entries": []}, "hopper_choice")
    with pytest.raises(ValueError, match="lacks params"):
        parse_table({"kind": "hopper_choice", "entries": [{"M": 1, "N": 1, "K": 1, "layout": "kn"}]}, "hopper_choice")


def test_distance_adds_log2_size_ratios_and_the_layout():
    entry = Entry.from_json(ROW)
    assert entry.distance(2048, 4096, 4096, "nk") == 0
    assert entry.distance(1024, 4096, 8192, "nk") == pytest.approx(2.0)
    assert entry.distance(2048, 4096, 4096, "kn") == LAYOUT_DISTANCE
    assert entry.distance(3000, 4096, 4096, "nk") == pytest.approx(math.log2(3000 / 2048))


def test_nearest_takes_the_closest_entry_first_listed_on_ties():
    a = Entry(16, 4096, 4096, "nk", {"x": 1})
    b = Entry(2048, 4096, 4096, "nk", {"x": 2})
    c = Entry(2048, 4096, 4096, "nk", {"x": 3})
    table = Table("t", (a, b, c))
    assert table.nearest(1500, 4096, 4096, "nk")[0] is b
    assert table.nearest(32, 4096, 4096, "kn") == (a, pytest.approx(1 + LAYOUT_DISTANCE))
    assert Table("t").nearest(1, 1, 1, "kn") is None


def test_a_package_without_its_table_has_an_empty_one():
    assert packaged_table("tkreg_matmul", "no_such_table.json", "triton_choice") == Table("triton_choice")
