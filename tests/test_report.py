"""tkreg report: plots and tables from stored H100 benchmark JSON, and the regression compare."""

from __future__ import annotations

import copy
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tkreg.report import compare, load_run, write_report

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data"
RUN11 = DATA / "2026-11-22-run11-bench.json.gz"  # every op, pytest --tkreg --tkreg-bench on an H100
RUN12 = DATA / "2026-11-22-run12-bench.json.gz"  # the add op
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def tkreg_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tkreg.cli", *args], capture_output=True, text=True, timeout=300)


def slowed(document: dict, kernel: str, factor: float) -> dict:
    """A copy of a pytest-benchmark document with one kernel's device times scaled."""
    document = copy.deepcopy(document)
    for bench in document["benchmarks"]:
        if bench["extra_info"]["kernel"] == kernel:
            bench["extra_info"]["median_ms"] *= factor
            bench["stats"] = {k: v * factor if isinstance(v, float) else v for k, v in bench["stats"].items()}
    return document


def decoded_png(path: Path) -> tuple[int, int]:
    """(height, width) of a PNG that matplotlib can read back; fails on anything else."""
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_SIGNATURE, path
    pixels = matplotlib.image.imread(path)
    return pixels.shape[0], pixels.shape[1]


def test_report_from_a_stored_h100_run_has_plots_per_op_and_the_full_table(tmp_path: Path) -> None:
    report = write_report(RUN11, tmp_path)
    run = load_run(RUN11)
    assert run.ops() == ["add", "matmul", "sum_row"]
    for op in run.ops():
        throughput, vs_peer = tmp_path / f"{op}-throughput.png", tmp_path / f"{op}-vs-peer.png"
        for png in (throughput, vs_peer):
            height, width = decoded_png(png)
            assert height >= 300 and width >= 600, (png, height, width)
    assert sorted(p.name for p in report.plots) == sorted(f"{op}-{k}.png" for op in run.ops() for k in ("throughput", "vs-peer"))
    text = report.markdown.read_text()
    assert "NVIDIA H100 80GB HBM3" in text and "2026-11-22" in text
    assert "Ceiling measured in the same run: 3021 GB/s" in text and "760 TFLOP/s" in text
    for op in run.ops():
        assert f"## {op}" in text and f"![{op}: {op}-throughput]({op}-throughput.png)" in text
    # one table row per item, with its device time, throughput, fraction of the ceiling, speed-up and host time
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| kernel") and "---" not in line]
    assert len(rows) == len(run.results) == 218  # the passed items of run 11
    assert "| sum_row_blocked | - | 1048576x32 | bf16 | 34.4 | 2012 GB/s | 67% | 6.47x | 66 |" in text


def test_a_run_compared_with_itself_exits_0(tmp_path: Path) -> None:
    result = tkreg_cli("report", str(RUN12), "--baseline", str(RUN12), "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "36 items compared" in result.stdout and "0 slower than 5%" in result.stdout
    assert decoded_png(tmp_path / "changes.png")[0] > 0
    assert "0 slower than 5%" in (tmp_path / "report.md").read_text()


def test_one_kernel_25_percent_slower_exits_1_and_names_every_slowed_item(tmp_path: Path) -> None:
    base = json.loads(gzip.decompress(RUN12.read_bytes()))
    new = tmp_path / "new.json"
    new.write_text(json.dumps(slowed(base, "add_tma", 1.25)))
    result = tkreg_cli("report", str(new), "--baseline", str(RUN12), "--out", str(tmp_path / "out"))
    assert result.returncode == 1, result.stdout + result.stderr
    slowed_lines = [line for line in result.stdout.splitlines() if "SLOWER" in line]
    cases, dtypes = ("32768x32768", "1024x1024", "10000x10008"), ("fp32", "fp16", "bf16")
    expected = {f"add/add_tma {case} {dtype}" for case in cases for dtype in dtypes}
    assert {line.split("  ")[-1] for line in slowed_lines} == expected
    assert all("+25.0%" in line for line in slowed_lines)
    text = (tmp_path / "out" / "report.md").read_text()
    assert "9 slower than 5%" in text and "- `add/add_tma 1024x1024 fp16`: +25.0%" in text
    # above the threshold it passes
    lenient = tkreg_cli("report", str(new), "--baseline", str(RUN12), "--threshold", "30", "--out", str(tmp_path / "o2"))
    assert lenient.returncode == 0


def test_compare_names_items_only_in_one_run_and_flags_faster_ones() -> None:
    base = json.loads(gzip.decompress(RUN12.read_bytes()))
    new = slowed(base, "add_triton", 0.8)
    new["benchmarks"] = [b for b in new["benchmarks"] if b["extra_info"]["kernel"] != "add_warp_specialized"]
    comparison = compare(load_run(base), load_run(new), threshold_pct=5)
    assert not comparison.regressed
    assert len(comparison.removed) == 9 and not comparison.added
    assert {c.new.kernel for c in comparison.faster} == {"add_triton"}
    assert all(c.pct == pytest.approx(-20.0) for c in comparison.faster)


def test_session_rows_with_wall_time_get_a_wall_column(tmp_path: Path) -> None:
    """write_report takes the extra_info rows a pytest session collected (what --tkreg-report
    hands it), and shows wall time beside device time when the rows carry it."""
    document = json.loads(gzip.decompress(RUN12.read_bytes()))
    rows = [dict(b["extra_info"], wall_ms=b["extra_info"]["median_ms"] + 0.08) for b in document["benchmarks"]]
    report = write_report(rows, tmp_path)
    text = report.markdown.read_text()
    assert "| kernel | config | case | dtype | device time (us) | wall time (us) |" in text
    assert "| add_tma | - | 1024x1024 | fp32 | 9.8 | 89.8 |" in text
    assert "the benchmark rows of a tkreg pytest session" in text


def test_bad_input_is_an_error_not_a_report(tmp_path: Path) -> None:
    missing = tkreg_cli("report", str(tmp_path / "none.json"), "--out", str(tmp_path / "o"))
    assert missing.returncode == 2 and "No such file" in missing.stderr
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"kind": "x", "rows": []}))
    wrong = tkreg_cli("report", str(other), "--out", str(tmp_path / "o"))
    assert wrong.returncode == 2 and "not a pytest-benchmark JSON" in wrong.stderr
    with pytest.raises(ValueError, match="threshold"):
        compare(load_run(RUN12), load_run(RUN12), threshold_pct=-1)


def test_listing_does_not_import_matplotlib() -> None:
    code = "import sys, tkreg.cli, tkreg.report; print('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
