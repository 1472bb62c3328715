"""The benchmark record is built from stored data: `python -m tkreg.report.record` turns the template's
directives into tables (and plots), and `--check` fails when BENCHMARKS.md is out of date."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tkreg.report import load_run, records
from tkreg.report.record import build, parse
from tkreg.report.record_tables import cell, speedup_table

ROOT = Path(__file__).resolve().parents[1]
RUN11 = "benchmarks/data/2026-11-22-run11-bench.json.gz"
HOPPER_DEFAULT = dict(BLOCK_M="128", BLOCK_N="256", NUM_STAGES="3", CONSUMERS="2", PINGPONG="False", EPILOGUE_SPLIT="1")


def record_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tkreg.report.record", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=300)


def test_the_committed_record_is_what_its_template_and_data_build() -> None:
    result = record_cli("--check")
    assert result.returncode == 0, result.stdout + result.stderr
    text = (ROOT / "BENCHMARKS.md").read_text()
    assert "python -m tkreg.report.record" in text.splitlines()[0]  # the command is named in the file
    for png in ROOT.glob("benchmarks/plots/*.png"):
        assert png.read_bytes()[:4] == b"\x89PNG"


def test_check_fails_when_a_stored_figure_changes(tmp_path: Path) -> None:
    data = tmp_path / "run.json"
    raw = json.loads(gzip.decompress((ROOT / RUN11).read_bytes()))
    data.write_text(json.dumps(raw))
    template = tmp_path / "template.md"
    template.write_text(f"# r\n\n{{{{ best {data} op=sum_row }}}}\n")
    out = tmp_path / "RECORD.md"
    assert record_cli("--template", str(template), "--out", str(out), "--plots", str(tmp_path / "p")).returncode == 0
    assert record_cli("--template", str(template), "--out", str(out), "--check").returncode == 0
    for bench in raw["benchmarks"]:
        if bench["extra_info"]["kernel"] == "sum_row_blocked":
            bench["extra_info"]["gbps"] *= 1.5
    data.write_text(json.dumps(raw))
    stale = record_cli("--template", str(template), "--out", str(out), "--check")
    assert stale.returncode == 1 and "out of date" in stale.stderr


def test_a_records_envelope_is_rendered_with_its_device_date_and_command(tmp_path: Path) -> None:
    data = tmp_path / "d"
    placed = records.save("launch_overhead", [{"kernel": "add_tma", "host_us": 77.04, "ok": True}], data, notes="line one")
    records.save("isolation", [{"mode": "subprocess", "wall_s": 12.3456}], data, meta={"device": "NVIDIA H100 80GB HBM3"})
    template = tmp_path / "t.md"
    template.write_text(f"## Host\n\n{{{{ record {placed} }}}}\n\n## Rest\n\n{{{{ records {tmp_path / 'd'} }}}}\n")
    text = build(template, tmp_path / "OUT.md", tmp_path / "plots")
    host, rest = text.split("## Rest")
    assert "*launch_overhead*:" in host and "command: `" in host and "date: " in host
    assert "| kernel | host_us | ok |" in host and "| add_tma | 77.04 | yes |" in host and "> line one" in host
    # the directory listing leaves out what a record line placed, and renders the rest
    assert "launch_overhead" not in rest
    assert "### isolation" in rest and "device: NVIDIA H100 80GB HBM3" in rest and "| subprocess | 12.35 |" in rest


def test_directive_errors_name_the_template_line(tmp_path: Path) -> None:
    template = tmp_path / "t.md"
    template.write_text(f"text\n{{{{ table {ROOT / RUN11} op=nope }}}}\n")
    with pytest.raises(ValueError, match=r"t\.md:2: .*no results for op 'nope' \(it has add, matmul, sum_row\)"):
        build(template, tmp_path / "o.md", tmp_path)
    template.write_text(f"{{{{ frobnicate {ROOT / RUN11} }}}}\n")
    with pytest.raises(ValueError, match="unknown directive 'frobnicate'"):
        build(template, tmp_path / "o.md", tmp_path)
    template.write_text(f"{{{{ speedups {ROOT / RUN11} op=matmul }}}}\n")
    with pytest.raises(ValueError, match="needs kernel="):
        build(template, tmp_path / "o.md", tmp_path)
    assert parse("a line with {{ braces }} inside") is None


def test_speedups_keep_only_the_named_config_and_summarise_per_variant() -> None:
    results = load_run(ROOT / RUN11).of_op("matmul")
    text = speedup_table(results, "matmul_hopper_ws", "scheduler", HOPPER_DEFAULT)
    rows = {tuple(c.strip() for c in line.strip("|").split("|")[:2]): line for line in text.splitlines()[2:]}
    assert set(rows) == {(d, s) for d in ("bf16", "fp16") for s in ("grouped-1", "grouped-8", "persistent")}
    assert rows[("bf16", "persistent")].rstrip().endswith("| 1.003 | 0.97 |")
    assert "8192x8192x16384" in text.splitlines()[0]


def test_cells_keep_four_significant_digits_and_show_containers_as_json() -> None:
    assert [cell(v) for v in (1.0599, 0.0095, 1.0, 760123.4, 3, None, float("nan"), {"a": 1})] == [
        "1.060", "0.009500", "1.000", "760123", "3", "-", "-", '{"a":1}'
    ]
