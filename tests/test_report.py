"""tkreg report: plots and tables from stored H100 benchmark JSON, and the regression compare."""

from __future__ import annotations

import copy
import dataclasses
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tkreg.report import compare, load_run, write_report

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data"
MAIN = DATA / "2026-11-23-h100-80gb-hbm3-main.json.gz"  # every op: `make run` on an H100
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def tkreg_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tkreg.cli", *args], capture_output=True, text=True, timeout=300)


def main_run() -> dict:
    return json.loads(gzip.decompress(MAIN.read_bytes()))


def add_run() -> dict:
    """The stored run's add op: 3 kernels and the peer on 3 cases x 3 dtypes (36 items, 9 peers)."""
    document = main_run()
    document["benchmarks"] = [b for b in document["benchmarks"] if b["extra_info"]["op"] == "add"]
    return document


@pytest.fixture
def add_file(tmp_path: Path) -> Path:
    path = tmp_path / "add.json.gz"
    path.write_bytes(gzip.compress(json.dumps(add_run()).encode()))
    return path


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
    report = write_report(MAIN, tmp_path)
    run = load_run(MAIN)
    assert run.ops() == ["add", "matmul", "sum_row"]
    for op in run.ops():
        throughput, vs_peer = tmp_path / f"{op}-throughput.png", tmp_path / f"{op}-vs-peer.png"
        for png in (throughput, vs_peer):
            height, width = decoded_png(png)
            assert height >= 300 and width >= 600, (png, height, width)
    assert sorted(p.name for p in report.plots) == sorted(f"{op}-{k}.png" for op in run.ops() for k in ("throughput", "vs-peer"))
    text = report.markdown.read_text()
    assert "NVIDIA H100 80GB HBM3" in text and "2026-11-23" in text
    assert "Ceiling measured in the same run: 3027 GB/s" in text and "725 TFLOP/s" in text
    for op in run.ops():
        assert f"## {op}" in text and f"![{op}: {op}-throughput]({op}-throughput.png)" in text
    # one table row per item, with its device time, throughput, fraction of the ceiling, speed-up and host time
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| kernel") and "---" not in line]
    assert len(rows) == len(run.results) == 206  # the passed benchmark items of the run
    assert "| sum_row_blocked | - | 16384x16384 | bf16 | 178.3 | 181.3 | 3011 GB/s | 99% | 1.06x | 25 |" in text


def test_a_run_compared_with_itself_exits_0(tmp_path: Path, add_file: Path) -> None:
    result = tkreg_cli("report", str(add_file), "--baseline", str(add_file), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "36 items compared" in result.stdout and "27 kernel items, 0 slower than 5% (relative gate)" in result.stdout
    assert decoded_png(tmp_path / "out" / "changes.png")[0] > 0
    assert "0 slower than 5%" in (tmp_path / "out" / "report.md").read_text()


def test_one_kernel_25_percent_slower_exits_1_and_names_every_slowed_item(tmp_path: Path, add_file: Path) -> None:
    new = tmp_path / "new.json"
    new.write_text(json.dumps(slowed(add_run(), "add_tma", 1.25)))
    result = tkreg_cli("report", str(new), "--baseline", str(add_file), "--out", str(tmp_path / "out"))
    assert result.returncode == 1, result.stdout + result.stderr
    slowed_lines = [line for line in result.stdout.splitlines() if "SLOWER" in line]
    cases, dtypes = ("32768x32768", "1024x1024", "10000x10008"), ("fp32", "fp16", "bf16")
    expected = {f"add/add_tma {case} {dtype}" for case in cases for dtype in dtypes}
    assert {line.split("  ")[-1] for line in slowed_lines} == expected
    assert all("SLOWER +25.0% vs peer (device time " in line and "+25.0%; peer +0.0%)" in line for line in slowed_lines)
    text = (tmp_path / "out" / "report.md").read_text()
    assert "9 slower than 5%" in text and "- `add/add_tma 1024x1024 fp16`: +25.0% vs peer (device time 4.5 -> 5.7 us" in text
    # above the threshold it passes
    lenient = tkreg_cli("report", str(new), "--baseline", str(add_file), "--threshold", "30", "--out", str(tmp_path / "o2"))
    assert lenient.returncode == 0


def test_compare_names_items_only_in_one_run_and_flags_faster_ones() -> None:
    base = add_run()
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
    rows = [b["extra_info"] for b in add_run()["benchmarks"]]
    without = [{k: v for k, v in row.items() if k != "wall_ms"} for row in rows]
    assert "wall time (us)" not in write_report(without, tmp_path / "a").markdown.read_text()
    with_wall = [dict(row, wall_ms=row["median_ms"] + 0.08) for row in without]
    text = write_report(with_wall, tmp_path / "b").markdown.read_text()
    assert "| kernel | config | case | dtype | device time (us) | wall time (us) |" in text
    assert "| add_tma | - | 1024x1024 | fp32 | 6.5 | 86.5 |" in text
    assert "the benchmark rows of a tkreg pytest session" in text


def test_bad_input_is_an_error_not_a_report(tmp_path: Path) -> None:
    missing = tkreg_cli("report", str(tmp_path / "none.json"), "--out", str(tmp_path / "o"))
    assert missing.returncode == 2 and "No such file" in missing.stderr
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"kind": "x", "rows": []}))
    wrong = tkreg_cli("report", str(other), "--out", str(tmp_path / "o"))
    assert wrong.returncode == 2 and f"tkreg: error: {other}: not a pytest-benchmark JSON (no 'benchmarks' list)" in wrong.stderr
    with pytest.raises(ValueError, match="threshold"):
        compare(load_run(MAIN), load_run(MAIN), threshold_pct=-1)


def test_listing_does_not_import_matplotlib() -> None:
    code = "import sys, tkreg.cli, tkreg.report; print('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def scaled(document: dict, factor: float) -> dict:
    """Every item (kernels and peers) slower by ``factor``: what a slower machine does."""
    document = copy.deepcopy(document)
    for bench in document["benchmarks"]:
        bench["extra_info"]["median_ms"] *= factor
    return document


def test_report_help_exits_0() -> None:
    result = tkreg_cli("report", "--help")
    assert result.returncode == 0, result.stderr
    assert "growth counted as slower, in % (default: 5)" in " ".join(result.stdout.split())
    assert "--gate {relative,absolute}" in result.stdout


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("truncated.json.gz", MAIN.read_bytes()[:5000], "the gzip stream ends early (a truncated file?)"),
        ("plain.json.gz", b'{"benchmarks": []}', "not gzip-compressed, although its name ends in .gz"),
        ("cut.json", b'{"benchmarks": [{"name": "x", ', "not valid JSON: Expecting property name enclosed in double quotes "
         "at line 1 column 31 (the file ends early: truncated?)"),
        ("list.json", b"[1, 2]", "benchmark 0: expected an object, got a JSON int"),
        ("nostats.json", b'{"benchmarks": [{"name": "t"}]}',
         "benchmark 0 (t): neither extra_info['median_ms'] nor stats['median']"),
        ("missing.json", None, "cannot read it: No such file or directory"),
    ],
)  # fmt: skip
def test_unreadable_input_exits_2_naming_the_file(tmp_path: Path, name: str, content: bytes | None, problem: str) -> None:
    """As the run or as the baseline: exit 2 (never 1, a regression), the file and what is wrong
    with it, no traceback, and nothing written."""
    bad = tmp_path / name
    if content is not None:
        bad.write_bytes(content)
    for args in ([str(bad)], [str(MAIN), "--baseline", str(bad)]):
        out = tmp_path / f"out-{len(args)}"
        result = tkreg_cli("report", *args, "--out", str(out))
        assert result.returncode == 2, result.stdout + result.stderr
        assert result.stderr.strip() == f"tkreg: error: {bad}: {problem}"
        assert not out.exists()


def test_machine_drift_is_shown_apart_and_fails_only_the_absolute_gate(tmp_path: Path, add_file: Path) -> None:
    """Every item, peers included, 16.7% slower: the machine moved, no kernel did."""
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(scaled(add_run(), 1.167)))
    result = tkreg_cli("report", str(slow), "--baseline", str(add_file), "--out", str(tmp_path / "rel"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "27 kernel items, 0 slower than 5% (relative gate)" in result.stdout
    assert "machine drift: the peers moved by +16.7% (median of 9), not counted as slower" in result.stdout
    assert "SLOWER" not in result.stdout
    text = (tmp_path / "rel" / "report.md").read_text()
    assert "- Machine drift: the peers, timed beside the kernels, moved by +16.7% (median of 9)" in text
    (row,) = [line for line in text.splitlines() if line.startswith("| add/peer-torch.add 1024x1024 fp16 |")]
    assert [cell.strip() for cell in row.split("|")[4:9]] == ["+16.7%", "(peer)", "-", "+0.0%", "drift"]  # the wall time stayed
    absolute = tkreg_cli("report", str(slow), "--baseline", str(add_file), "--gate", "absolute", "--out", str(tmp_path / "abs"))
    assert absolute.returncode == 1
    slower = [line for line in absolute.stdout.splitlines() if "SLOWER" in line]
    assert len(slower) == 27 and not [line for line in slower if "peer-" in line]  # the peers are drift, never SLOWER
    assert all("+16.7% absolute" in line for line in slower)


def test_a_kernel_slower_than_its_peer_fails_the_relative_gate_despite_drift(tmp_path: Path, add_file: Path) -> None:
    """The machine 10% slower, add_tma 37.5% slower (25% more than the drift): only add_tma."""
    new = tmp_path / "new.json"
    new.write_text(json.dumps(slowed(scaled(add_run(), 1.1), "add_tma", 1.25)))
    result = tkreg_cli("report", str(new), "--baseline", str(add_file), "--out", str(tmp_path / "out"))
    assert result.returncode == 1
    slower = [line for line in result.stdout.splitlines() if "SLOWER" in line]
    assert len(slower) == 9 and all(line.split("  ")[-1].startswith("add/add_tma ") for line in slower)
    assert all("SLOWER +25.0% vs peer (device time " in line and ", +37.5%; peer +10.0%)" in line for line in slower)
    comparison = compare(load_run(add_file), load_run(json.loads(new.read_text())))
    tma = next(c for c in comparison.changes if c.new.kernel == "add_tma")
    assert tma.relative_pct == pytest.approx(25.0) and tma.pct == pytest.approx(37.5) and tma.peer_pct == pytest.approx(10.0)


def test_without_the_peer_in_both_runs_items_are_judged_on_their_own_change(tmp_path: Path) -> None:
    base = add_run()
    base["benchmarks"] = [b for b in base["benchmarks"] if not b["extra_info"]["kernel"].startswith("peer-")]
    comparison = compare(load_run(base), load_run(scaled(add_run(), 1.1)))
    assert len(comparison.slower) == 27 and len(comparison.judged_absolute) == 27
    assert all(c.basis("relative") == "absolute" and c.pct == pytest.approx(10.0) for c in comparison.slower)
    report = write_report(scaled(add_run(), 1.1), tmp_path, baseline=base, threshold_pct=5)
    assert report.regressed
    assert "- 27 kernel items have no peer timed in both runs: judged on their own change." in report.markdown.read_text()
    with pytest.raises(ValueError, match="gate must be one of relative, absolute, got 'fuzzy'"):
        compare(load_run(base), load_run(base), gate="fuzzy")


def with_mode(document: dict, mode: str, params: dict) -> list[dict]:
    """The document's rows as a tkreg session hands them over, with a mode and parameters."""
    return [dict(b["extra_info"], mode=mode, params=params) for b in document["benchmarks"]]


def test_backward_and_parameter_results_are_reported_and_compared_apart(tmp_path: Path) -> None:
    forward = [b["extra_info"] for b in add_run()["benchmarks"]]  # no mode: forward, as older runs are
    backward = with_mode(add_run(), "bwd", {"eps": 1e-06, "causal": True})
    run = load_run(forward + backward)
    assert run.sections() == [("add", "fwd", ""), ("add", "bwd", "eps=1e-06,causal=True")]
    report = write_report(forward + backward, tmp_path / "r")
    text = report.markdown.read_text()
    assert "\n## add\n" in text and "\n## add bwd eps=1e-06,causal=True\n" in text
    assert (tmp_path / "r" / "add-throughput.png").exists()
    assert (tmp_path / "r" / "add-bwd-eps_1e-06_causal_True-vs-peer.png").exists()
    # a backward item pairs with its own baseline, never with the forward item of the same kernel and case
    slower_bwd = [dict(r, median_ms=r["median_ms"] * 1.5) if r["kernel"] == "add_tma" else r for r in backward]
    comparison = compare(load_run(forward + backward), load_run(forward + slower_bwd))
    assert len(comparison.changes) == 72 and {c.new.mode for c in comparison.slower} == {"bwd"}
    assert comparison.slower[0].new.label.endswith(" bwd eps=1e-06,causal=True")
    assert all(c.relative_pct == pytest.approx(50.0) for c in comparison.slower)


def test_vs_peer_plot_has_labelled_ticks_around_1x() -> None:
    from tkreg.report.plots import speedup_figure

    results = load_run(add_run()).results
    for low, high in ((0.8, 1.6), (0.3, 12.0)):
        spread = [r for r in results if r.speedup is not None]
        span = [low + (high - low) * i / (len(spread) - 1) for i in range(len(spread))]
        shifted = [dataclasses.replace(r, speedup=s) for r, s in zip(spread, span)]
        fig = speedup_figure(shifted)
        fig.canvas.draw()
        (ax,) = fig.axes
        bottom, top = ax.get_ylim()
        labels = [t.get_text() for t in ax.get_yticklabels() if bottom <= t.get_position()[1] <= top and t.get_text()]
        assert len(labels) >= 4 and "1x" in labels, labels
        assert all(label.endswith("x") for label in labels)
        assert bottom <= low and top >= high


def test_changes_plot_names_stay_clear_of_the_titles() -> None:
    from matplotlib.transforms import Bbox

    from tkreg.report.plots import changes_figure

    comparison = compare(load_run(MAIN), load_run(slowed(main_run(), "matmul_hopper_ws", 1.3)))
    fig = changes_figure(comparison)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    named = 0
    for ax in fig.axes:
        title = ax.title.get_window_extent(renderer)
        names = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
        named += len(names)
        assert not any(Bbox.intersection(title, name) for name in names)
        assert all(name.y1 < ax.get_window_extent(renderer).y0 for name in names)  # under the bars
    assert named > 0
    page = fig.bbox
    assert all(t.get_window_extent(renderer).y0 >= page.y0 for ax in fig.axes for t in ax.get_xticklabels())
