"""The benchmark record is built from stored data: `python -m tkreg.report.record` shows the newest
data of each suite per GPU, `--check` fails when BENCHMARKS.md is out of date, and `--run` shows an
older run."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tkreg.report import records
from tkreg.report.record import build, parse, prune_plots
from tkreg.report.record_tables import cell, dispatch_table, host_table, linear_table, ranking_table, timer_table

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"
MAIN = DATA / "2026-11-23-h100-80gb-hbm3-main.json.gz"
TEMPLATE = ROOT / "benchmarks" / "template.md"


def record_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tkreg.report.record", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=300)


def main_run(tmp: Path, date: str, device: str, scale: float = 1.0) -> Path:
    """A main-suite file of ``device`` on ``date``: the stored run, every throughput times ``scale``."""
    document = json.loads(gzip.decompress(MAIN.read_bytes()))
    document["meta"] = {**document["meta"], "device": device, "date": f"{date}T12:00:00Z"}
    for bench in document["benchmarks"]:
        for key in ("gbps", "tflops"):
            if key in bench["extra_info"]:
                bench["extra_info"][key] *= scale
    return records.write(tmp / records.data_name(date, device, "main", gz=True), document)


def test_the_committed_record_is_what_its_template_and_data_build() -> None:
    result = record_cli("--check")
    assert result.returncode == 0, result.stdout + result.stderr
    text = (ROOT / "BENCHMARKS.md").read_text()
    assert "python -m tkreg.report.record" in text.splitlines()[0]  # the command is named in the file
    assert len(text.encode()) <= 60_000
    # a record, not a diary: no run numbers, no issue numbers
    assert not re.search(r"\brun \d+|\bruns \d+|issues? #\d+|#\d+\b", text, re.IGNORECASE)
    linked = re.findall(r"\]\((benchmarks/plots/[^)]+\.png)\)", text)
    assert linked and sorted(linked) == sorted(f"benchmarks/plots/{p.name}" for p in (ROOT / "benchmarks/plots").glob("*.png"))
    for png in linked:
        assert (ROOT / png).read_bytes()[:4] == b"\x89PNG"


def test_each_gpu_gets_its_newest_data_and_a_new_gpu_appears_by_itself(tmp_path: Path) -> None:
    data = tmp_path / "data"
    main_run(data, "2026-11-20", "NVIDIA H100 80GB HBM3", scale=0.5)  # older: not shown
    main_run(data, "2026-11-23", "NVIDIA H100 80GB HBM3")
    template = tmp_path / "t.md"
    block = "{{ per-gpu }}\n{{ device }}\n\n{{ suite main }}\n\n{{ suite timer }}\n{{ end }}\n"
    template.write_text(f"# r\n\n{{{{ contents }}}}\n\n{block}")
    text, plots = build(template, tmp_path / "R.md", tmp_path / "plots", write_plots=False, data_dir=data)
    assert text.count("\n## ") == 1 and "## NVIDIA H100 80GB HBM3" in text
    assert "2026-11-23-h100-80gb-hbm3-main.json.gz" in text and "2026-11-20" not in text
    assert re.search(r"\| 32768x32768 \| fp32 \| 3053 \(\d+%\) \| 3079 \(\d+%; 1\.01x\) \|", text)  # the newer run's figures
    assert "No `timer` data for this GPU" in text and "tkreg bench timer" in text
    assert {p.name for p in plots} >= {f"2026-11-23-h100-80gb-hbm3-add-{kind}.png" for kind in ("throughput", "vs-peer")}
    main_run(data, "2026-11-24", "NVIDIA H200")
    text, _ = build(template, tmp_path / "R.md", tmp_path / "plots", write_plots=False, data_dir=data)
    assert text.index("## NVIDIA H100 80GB HBM3") < text.index("## NVIDIA H200")
    assert "- [NVIDIA H200](#nvidia-h200): main 2026-11-24" in text


def test_an_op_with_a_suite_of_its_own_is_a_summary_in_the_main_section(tmp_path: Path) -> None:
    data = tmp_path / "data"
    main_run(data, "2026-11-23", "NVIDIA H100 80GB HBM3")
    template = tmp_path / "t.md"
    template.write_text("{{ per-gpu }}\n{{ suite main }}\n{{ end }}\n")
    alone, _ = build(template, tmp_path / "R.md", None, data_dir=data)
    assert re.search(r"\| 8192x8192x4096 \| bf16 \| 662 \(\d+%\) \| 755 \(\d+%; 1\.14x\) \|", alone)
    shutil.copy(DATA / "2026-11-23-h100-80gb-hbm3-linear.json.gz", data)
    beside, _ = build(template, tmp_path / "R.md", None, data_dir=data)
    assert "| 8192x8192x4096 | bf16 |" not in beside and "Per case: the `linear` suite's table below." in beside
    assert "Over the peer, geometric mean: matmul_hopper_ws 0.999x (lowest 0.82x, 40 cases)" in beside
    assert "| 32768x32768 | fp32 | 3053 (" in beside  # the other ops keep their tables


def test_check_fails_when_a_stored_figure_changes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    main_run(data, "2026-11-23", "NVIDIA H100 80GB HBM3")
    template = tmp_path / "template.md"
    template.write_text("# r\n\n{{ per-gpu }}\n{{ suite main }}\n{{ end }}\n")
    out, plots = tmp_path / "RECORD.md", tmp_path / "p"
    common = ("--template", str(template), "--out", str(out), "--plots", str(plots), "--data", str(data))
    assert record_cli(*common).returncode == 0
    assert record_cli(*common, "--check").returncode == 0
    main_run(data, "2026-11-23", "NVIDIA H100 80GB HBM3", scale=1.5)
    stale = record_cli(*common, "--check")
    assert stale.returncode == 1 and "out of date" in stale.stderr
    assert record_cli(*common).returncode == 0
    next(plots.glob("*.png")).unlink()  # a plot the record links to is gone
    missing = record_cli(*common, "--check")
    assert missing.returncode == 1 and "missing plot" in missing.stdout


def test_writing_the_record_deletes_the_plots_it_no_longer_references(tmp_path: Path) -> None:
    data, plots = tmp_path / "data", tmp_path / "plots"
    plots.mkdir()
    (plots / "2020-01-01-old-add-throughput.png").write_bytes(b"\x89PNG old")
    main_run(data, "2026-11-23", "NVIDIA H100 80GB HBM3")
    template = tmp_path / "t.md"
    template.write_text("{{ per-gpu }}\n{{ suite main }}\n{{ end }}\n")
    _, made = build(template, tmp_path / "R.md", plots, write_plots=False, data_dir=data)
    for png in made:
        png.write_bytes(b"\x89PNG")
    assert [p.name for p in prune_plots(plots, made)] == ["2020-01-01-old-add-throughput.png"]
    assert sorted(plots.glob("*.png")) == sorted(made)


def test_run_shows_an_older_date_or_one_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    main_run(data, "2026-11-20", "NVIDIA H100 80GB HBM3", scale=0.5)
    main_run(data, "2026-11-23", "NVIDIA H100 80GB HBM3")
    common = ("--template", str(TEMPLATE), "--data", str(data))
    older = record_cli(*common, "--run", "2026-11-20")
    assert older.returncode == 0, older.stderr
    assert "2026-11-20-h100-80gb-hbm3-main.json.gz" in older.stdout and "2026-11-23" not in older.stdout
    assert "| 32768x32768 | fp32 | 1527 (" in older.stdout  # half the stored figures
    assert "![" not in older.stdout  # plots only where --plots names a folder
    one = record_cli(*common, "--run", str(DATA / "2026-11-23-h100-80gb-hbm3-timer.json"), "--out", str(tmp_path / "t.md"))
    assert one.returncode == 0, one.stderr
    shown = (tmp_path / "t.md").read_text()
    assert shown.startswith("# timer: NVIDIA H100 80GB HBM3, 2026-11-23") and "| cuBLAS bf16 8192x8192x4096 | compute |" in shown
    unknown = record_cli(*common, "--run", "2019-01-01")
    assert unknown.returncode == 2 and "dates there: 2026-11-20, 2026-11-23" in unknown.stderr


def test_directive_errors_name_the_template_line(tmp_path: Path) -> None:
    template = tmp_path / "t.md"
    template.write_text(f"text\n{{{{ table {MAIN} op=nope }}}}\n")
    with pytest.raises(ValueError, match=r"t\.md:2: .*no results for op 'nope' \(it has add, matmul, sum_row\)"):
        build(template, tmp_path / "o.md", tmp_path, data_dir=tmp_path)
    template.write_text(f"{{{{ frobnicate {MAIN} }}}}\n")
    with pytest.raises(ValueError, match="unknown directive 'frobnicate'"):
        build(template, tmp_path / "o.md", tmp_path, data_dir=tmp_path)
    template.write_text(f"{{{{ best {MAIN} }}}}\n")
    with pytest.raises(ValueError, match="needs op="):
        build(template, tmp_path / "o.md", tmp_path, data_dir=tmp_path)
    template.write_text("{{ suite timer }}\n")
    with pytest.raises(ValueError, match=r"t\.md:1: directive suite belongs between \{\{ per-gpu \}\}"):
        build(template, tmp_path / "o.md", tmp_path, data_dir=tmp_path)
    template.write_text("{{ per-gpu }}\n{{ device }}\n")
    with pytest.raises(ValueError, match="without"):
        build(template, tmp_path / "o.md", tmp_path, data_dir=tmp_path)
    assert parse("a line with {{ braces }} inside") is None
    assert parse("{{ suite timer }}") == ("suite", ["timer"])


def test_a_records_envelope_is_rendered_with_its_device_date_and_command(tmp_path: Path) -> None:
    placed = records.save("launch_overhead", [{"kernel": "add_tma", "host_us": 77.04, "ok": True}], tmp_path, notes="line one")
    template = tmp_path / "t.md"
    template.write_text(f"## Host\n\n{{{{ record {placed} }}}}\n")
    text, _ = build(template, tmp_path / "OUT.md", tmp_path / "plots", data_dir=tmp_path)
    assert f"Data: `{placed}`, measured " in text and "by `" in text
    assert "| kernel | host_us | ok |" in text and "| add_tma | 77.04 | yes |" in text and "> line one" in text


def test_suite_tables_read_the_suites_rows() -> None:
    timer = {"rows": [{"workload": "torch.add 1024x1024 fp32", "bound": "memory", "round": 0, "tkreg_ms": 0.0062,
                       "cupti_ms": 0.0061, "tkreg_over_cupti": 1.0164, "stream_ms": 0.0078, "do_bench_ms": 0.0099,
                       "wall_ms": 0.01, "source": "CUPTI"}],
             "summary": {"verdicts": ["PASS short kernels: tkreg within 5 us of CUPTI (1 workloads)"],
                         "costs": {"workload": "w", "host_us_before_cupti": 12.0, "host_us_after_cupti": 10.9, "reps": 100,
                                   "with_cupti_s": 0.041, "without_cupti_s": 0.028, "copy_gbps_eager": 3027.0,
                                   "copy_gbps_graph": 2288.0}}}  # fmt: skip
    text = timer_table(timer)
    assert "| torch.add 1024x1024 fp32 | memory | 0 | 0.0062 | 0.0061 | 1.0164 | 0.0078 | 0.0099 | 0.0100 | CUPTI |" in text
    assert "- PASS short kernels" in text and "3027 GB/s queued by the caller" in text and "41 ms traced" in text
    host = {"rows": [{"op": "add", "path": "torch.add (the peer), output given", "shape": "256x256", "dtype": "float32",
                      "peer": True, "us_per_call": 8.0, "host_us": 6.0},
                     {"op": "add", "path": "tkreg.ops.add", "shape": "256x256", "dtype": "float32", "peer": False,
                      "us_per_call": 20.0, "host_us": 19.5}]}  # fmt: skip
    shown = host_table(host)
    assert "| add 256x256 fp32 | torch.add (the peer), output given | 8.0 | 6.0 | 1.00x |" in shown  # op and input once
    assert "|  | tkreg.ops.add | 20.0 | 19.5 | 2.50x |" in shown  # older rows: one peer row
    alike = [("torch.add (the peer), output given", True, False, 8.0),
             ("torch.add (the peer), output allocated", True, True, 10.0),
             ("add_triton, output given", False, False, 12.0), ("tkreg.ops.add", False, True, 13.0)]
    host = {"rows": [{"op": "add", "path": p, "peer": peer, "allocates": a, "us_per_call": us} for p, peer, a, us in alike]}
    text = host_table(host)
    assert "|  | add_triton, output given | 12.0 | - | 1.50x |" in text  # against the peer's given output
    assert "|  | tkreg.ops.add | 13.0 | - | 1.30x |" in text  # against torch's own call
    graded = [("torch.add (the peer), gradient wanted", True, 20.0), ("tkreg.ops.add, gradient wanted", False, 25.0)]
    host["rows"] += [{"op": "add", "path": p, "peer": peer, "allocates": True, "grad": True, "us_per_call": us}
                     for p, peer, us in graded]  # fmt: skip
    host["summary"] = {"add": {"ops_over_torch": 1.3, "operator_extra_us": 2.5, "grad_ops_over_torch": 1.25}}
    text = host_table(host)
    assert "|  | tkreg.ops.add, gradient wanted | 25.0 | - | 1.25x |" in text  # against the peer's, graded
    assert "|  | tkreg.ops.add | 13.0 | - | 1.30x |" in text  # still against the ungraded call
    assert "add 1.30x (operator +2.5 us; 1.25x with a gradient wanted)." in text
    assert "plan key" not in text  # older data did not say which key was used
    host["summary"]["plan_key"] = "in use (built for torch 2.11.0+cu130)"
    assert "tkreg.ops' plan key (C++ or Python, see tkreg.ops.native): in use (built for torch 2.11.0+cu130)." in host_table(host)
    figures = [("bfloat16", "cuBLAS", 27.0, 1.0, True), ("bfloat16", "tkreg.ops", 24.5, 0.9, True),
               ("float16", "cuBLAS", 27.0, 1.0, True), ("float16", "tkreg.ops", 33.0, 1.25, False)]  # fmt: skip
    linear = {"rows": [{"op": "mm", "M": 16, "N": 4096, "K": 4096, "layout": "nk", "dtype": d, "impl": impl, "ms": 0.01,
                        "tflops": t, "vs_cublas": v, "ok": ok} for d, impl, t, v, ok in figures]}  # fmt: skip
    text = linear_table(linear)
    assert "| 16x4096x4096 | nk | 27 / 27 | 0.90 / 1.25! |" in text
    assert "- tkreg.ops: geometric mean bf16 0.900x (lowest 0.90x, 1 cases); fp16 1.250x" in text
    ranking = {"rows": [{"op": "add", "impl": impl, "dtype": "float32", "dims": {"M": m, "N": m}, "layout": "contiguous",
                         "wall_us": wall} for m, impl, wall in [(1024, "peer", 10.0), (1024, "add_tma", 8.0),
                                                                (4096, "peer", 50.0), (4096, "add_tma", 60.0)]]}  # fmt: skip
    assert "| add | fp32 | 2 | add_tma 1, peer 1 | 1.02x |" in ranking_table(ranking)  # sqrt(10/8 * 50/60)
    dispatch = {"summary": {"seed": 1}, "rows": [
        {"check": "training", "tokens": 2048, "tkreg_us": 2300.0, "torch_us": 2277.0, "ratio": 0.99},
        {"check": "row_training", "op": "layer_norm", "shape": "4096x4096", "tkreg_us": 110.0, "torch_us": 99.0, "ratio": 0.9},
        {"check": "row_training", "op": "rms_norm", "shape": "16384x4096", "error": "RuntimeError: no"},
        {"check": "compiled_mlp", "tokens": 16, "tkreg_us": 150.0, "torch_compile_us": 147.0, "ratio": 0.98,
         "tkreg_graphs_us": 120.0, "torch_graphs_us": 121.2, "graphs_ratio": 1.01, "eager_tkreg_us": 140.0,
         "eager_torch_us": 140.0, "same_code": True},
        {"check": "compiled_mlp", "tokens": 4096, "error": "RuntimeError: no", "same_code": False}]}  # fmt: skip
    text = dispatch_table(dispatch)
    assert "| Llama MLP block, 16 tokens, torch.compile | 150.0 | 147.0 | 0.980 |" in text
    assert "| Llama MLP block, 16 tokens, torch.compile reduce-overhead | 120.0 | 121.2 | 1.010 |" in text
    assert "the same code for the block through tkreg.ops as for torch's at 16 tokens (1 of 2 block sizes)." in text
    assert "| 2-layer MLP training step, 2048 tokens | 2300.0 | 2277.0 | 0.990 |" in text
    dispatch["rows"].append({"check": "training", "tokens": 2048, "tkreg_us": 2000.0, "torch_us": 2010.0, "ratio": 1.005,
                             "autocast": "bfloat16"})
    said = "| 2-layer MLP training step, 2048 tokens, float32 weights under autocast(bfloat16) | 2000.0 | 2010.0 | 1.005 |"
    assert said in dispatch_table(dispatch)
    assert "| layer_norm forward and backward, 4096x4096 | 110.0 | 99.0 | 0.900 |" in text and "rms_norm" not in text
    dispatch["rows"].append({"check": "training", "tokens": 256, "tkreg_us": 465.5, "torch_us": 441.9, "ratio": 0.9493,
                             "ratio_quartiles": [0.9412, 1.1034]})
    with_rounds = dispatch_table(dispatch)
    assert "| 2-layer MLP training step, 256 tokens | 465.5 | 441.9 | 0.949 (0.94-1.10) |" in with_rounds
    assert "torch / tkreg (by round: quartiles)" in with_rounds and "by round" not in text  # older rows: the ratio alone
    cold = [(False, "peer", 30.0, 20.0, 50.0, 20.0), (False, "add_triton", 3000.0, 20.0, 30.0, 20.0),
            (True, "peer", 30.0, 20.0, 30.0, 20.0)]  # fmt: skip
    dispatch = {"summary": {"seed": 1}, "rows": [
        {"check": "cold", "warmed": w, "runs": runs, "first_us": f, "warm_us": warm, "torch_first_us": tf, "torch_warm_us": tw,
         "timing_calls": 0} for w, runs, f, warm, tf, tw in cold]}  # fmt: skip
    text = dispatch_table(dispatch)
    model, warmed = "tkreg.ops, calling each shape as a model would", "tkreg.ops, after tkreg.ops.warm()"
    assert f"| {model} | a kernel runs | 1 | 0 | - | 150.0x | 150x to 150x |" in text  # older records: no same-work call
    assert f"| {model} | the peer runs | 1 | 1 | - | 1.5x | 1.5x to 1.5x |" in text
    assert f"| {warmed} | the peer runs | 1 | 1 | - | 1.5x | 1.5x to 1.5x |" in text and f"| {warmed} | a kernel" not in text
    # torch's own first calls, of the process calling shapes as a model would: 50/20 and 30/20
    assert "| torch's own first call, just before tkreg's | every shape | 2 | 1 | - | 2.5x | 1.5x to 2.5x |" in text
    assert "Each tkreg first call came right after the peer's own first and warm calls of the shape." in text
    assert "after the same work is one" not in text and "at the point of tkreg's first call" not in text
    after = [(90.0, 40.0), (3000.0, 40.0), (30.0, 25.0)]  # tkreg's warm call after the peer's, the peer's after tkreg's
    for row, (tkreg_after, torch_after) in zip(dispatch["rows"], after):
        row.update(warm_after_peer_us=tkreg_after, torch_warm_after_tkreg_us=torch_after)
    text = dispatch_table(dispatch)
    assert f"| {model} | the peer runs | 1 | 1 | 1 of 1 | 1.5x | 1.5x to 1.5x |" in text  # 30 against 90
    assert f"| {model} | a kernel runs | 1 | 0 | 1 of 1 | 150.0x | 150x to 150x |" in text  # 3000 against 3000
    assert "| torch's own first call, just before tkreg's | every shape | 2 | 1 | 2 of 2 | 2.5x | 1.5x to 2.5x |" in text
    assert "preloaded" not in text and "loaded 2" not in text  # older records do not say
    assert "each also one sample" not in text  # older records kept no warm calls' spread
    assert "A warm call after the same work is one right after ten of the peer's calls, as the first call was" in text
    for row, over in zip(dispatch["rows"], (0, 3, 1)):
        row.update(warm_over_2x=over, warm_calls=10)
    assert "each also one sample, 4 of 30 took over twice their shape's median." in dispatch_table(dispatch)
    dispatch["rows"][0]["preload"] = {"signatures": 2, "left": 1, "seconds": 0.5}
    said = "as a model would (its first call, the process's first through tkreg.ops, loaded 2 remembered kernel signatures"
    assert f"{said} ahead in 0.5 s, 1 left to their first calls) made 0 timing calls." in dispatch_table(dispatch)
    dispatch["rows"].append({"check": "cold", "warmed": False, "error": "the cold process did not finish within 16 s"})
    said_failed = "The cold process calling each shape as a model would gave no figures: the cold process did not finish"
    assert said_failed in dispatch_table(dispatch)
    dispatch["rows"] = [r for r in dispatch["rows"] if "error" not in r]
    assert "gave no figures" not in dispatch_table(dispatch)
    only_failed = {"summary": {"seed": 1}, "rows": [{"check": "cold", "warmed": True, "error": "crashed"}]}
    assert "The cold process after tkreg.ops.warm() gave no figures: crashed." in dispatch_table(only_failed)
    assert "| calls |" not in dispatch_table(only_failed)  # no table of nothing
    dispatch["rows"][2]["warm_s"] = 4.0
    assert "after tkreg.ops.warm() (tkreg.ops.warm() took 4.0 s, installing tkreg.ops included) made" in dispatch_table(dispatch)
    for row in dispatch["rows"]:
        row.update(install_s=2.5, **({"warm_s": 1.25} if row["warmed"] else {}))
    text = dispatch_table(dispatch)
    said = said.replace("model would (", "model would (installing tkreg.ops took 2.5 s; ")
    assert f"{said} ahead in 0.5 s, 1 left to their first calls) made 0 timing calls" in text
    assert "after tkreg.ops.warm() (installing tkreg.ops took 2.5 s; tkreg.ops.warm() took 1.25 s) made 0 timing calls" in text
    assert "Replayed from CUDA graphs" not in dispatch_table(dispatch)  # older records replayed nothing
    for row, (tkreg_after, torch_after) in zip(dispatch["rows"], after):  # the order records make now
        del row["warm_after_peer_us"], row["torch_warm_after_tkreg_us"]
        row.update(peers_first=True, warm_after_same_work_us=tkreg_after, torch_warm_after_same_work_us=torch_after)
    text = dispatch_table(dispatch)
    assert f"| {model} | a kernel runs | 1 | 0 | 1 of 1 | 150.0x | 150x to 150x |" in text
    assert "| torch's own first call, in a pass before tkreg's | every shape | 2 | 1 | 2 of 2 | 2.5x | 1.5x to 2.5x |" in text
    assert "The peer's own first and warm calls of every shape came first, in a pass of their own" in text
    assert "right after ten of the previous shape's calls, as each first call came right after" in text
    assert "Each tkreg first call came right after the peer's" not in text and "ten of the peer's calls" not in text
    assert "at the point of tkreg's first call" not in text and "from the driver" not in text  # older records
    for row, here, allocs in zip(dispatch["rows"], (35.0, 50.0, 90.0), (0, 1, 0)):  # what records keep now
        row.update(torch_at_same_point_us=here, device_allocs=allocs)
    text = dispatch_table(dispatch)
    # of the model process's rows only: 35/20 within 2x, 50/20 over; the warmed process's 90 is not read
    assert "| torch's own call at the point of tkreg's first call | every shape | 2 | 1 | - | 2.5x | 1.8x to 2.5x |" in text
    said = "Of the 1 tkreg first calls over 2x a warm call as a model would call them, torch's was over 2x there too on 1."
    assert said in text
    assert "1 of the 3 tkreg first calls took memory from the driver" in text
    assert "In that process" not in text and "The host's part" not in text  # records before either was kept
    # rows 0-1: the model process, row 2 the warmed one; each process's first call is left out of the host's part
    same_process, hosts = ((25.0, 10.0), (30.0, 20.0), (None, None)), ((9.0, 5.0), (14.0, 6.0), (8.0, 5.0))
    for row, same, host in zip(dispatch["rows"], same_process, hosts):
        row.update(first_after_torch_at_same_point_us=same[0], warm_in_same_point_process_us=same[1],
                   first_host_us=host[0], warm_host_us=host[1])  # fmt: skip
    text = dispatch_table(dispatch)
    assert "In that process, tkreg's first call right after torch's was within 2x of a warm call on 1 of 2." in text
    assert "a warm call (median; the process's first left out): 8.0 of 2980.0 us calling each shape as a model would." in text
    assert "calls of the previous shape, made after" not in text  # records before the model's work was kept
    for row in dispatch["rows"]:
        row["model_work_calls"] = 3
    text = dispatch_table(dispatch)
    assert "then tkreg's, each first call (in either pass) right after 3 calls of the previous shape, made after its warm" in text
    assert "as each first call came right after calls of the previous shape (median of three)" in text
    assert "as a model of torch's alone" not in text  # torch's call there came after tkreg's calls
    dispatch["rows"][1]["torch_at_same_point_after"] = "peer"
    said = "right before tkreg's first call of the shape, after 3 of torch's own calls of the previous shape, as a model"
    assert f"{said} of torch's alone makes them. Of the 1 tkreg first calls" in dispatch_table(dispatch)
    assert "after tkreg.ops' calls of the previous shape" not in dispatch_table(dispatch)  # before the fourth process
    for row, after_tkreg in zip(dispatch["rows"], (30.0, 46.0, 99.0)):  # the warmed process's 99 is not read
        row["torch_after_tkreg_at_same_point_us"] = after_tkreg
    text = dispatch_table(dispatch)
    there = "| torch's own call there, after tkreg.ops' calls of the previous shape | every shape"
    assert f"{there} | 2 | 1 | - | 2.3x | 1.5x to 2.3x |" in text
    said = "the work tkreg's first call came after: of the 1 tkreg first calls over 2x, torch's was over 2x there too on 1."
    assert said in text
    assert "Where the peer runs" not in text  # no host time of torch's call there
    for row, runs, host in zip(dispatch["rows"], ("peer", "peer", "peer"), (4.0, 10.0, 1.0)):
        row.update(runs=runs, torch_after_tkreg_at_same_point_host_us=host)
    said = "Where the peer runs, tkreg's first call took +4.0 us of host time over torch's call there (median of 1 shapes"
    assert f"{said}, the process's first left out; +4.0 to +4.0)." in dispatch_table(dispatch)  # row 0 preloads, row 2 warmed

    replays = [("peer", "k", {"tkreg.ops": 2.0, "peer": 2.0, "k": 6.0}), ("k", "k", {"tkreg.ops": 5.0, "peer": 5.5, "k": 5.0})]
    dispatch["rows"] = [{"check": "pick", "op": "add", "ratio": 1.0, "chosen": chosen, "graphed_us": us, "graph_chosen": graphed,
                         "graph_ratio": min(v for k, v in us.items() if k != "tkreg.ops") / us["tkreg.ops"], "graph_pass": True}
                        for graphed, chosen, us in replays]  # fmt: skip
    text = dispatch_table(dispatch)
    assert "tkreg.ops was within 5% of the fastest replayed on 2 of 2 shapes (geomean 1.000)" in text
    assert "a captured call ran another candidate than an eager one on 1." in text
    assert "The eager choice, replayed, would have been within 5% on 1 of 2 (geomean 0.577)." in text  # sqrt(2/6 * 1)
    dispatch["rows"] = [{"check": "graph", "op": "add", "same_bits": True, "runs": "add_triton"},
                        {"check": "graph", "op": "matmul", "same_bits": False, "runs": "peer"}]  # fmt: skip
    said = "a tuned call captured and replayed gave the bits of an eager call of what it ran for add (add_triton) (1 of 2 ops)."
    assert said in dispatch_table(dispatch)
    del dispatch["rows"][1]["runs"]  # an older record
    assert "gave the eager call's bits for add (1 of 2 ops)." in dispatch_table(dispatch)


def test_the_end_to_end_misses_are_named_with_their_spread_by_round() -> None:
    def pick(shape: str, ratio: float, **extra: object) -> dict[str, object]:
        return {"check": "pick", "op": "rms_norm", "shape": shape, "dtype": "float32", "ratio": ratio,
                "pass": ratio >= 0.95, "chosen": "k", **extra}  # fmt: skip

    dispatch = {"summary": {"seed": 1}, "rows": [pick("1x1", 1.0), pick("2x2", 0.9), pick("3x3", 0.8)]}
    said = "tkreg.ops over 5% behind the fastest, fastest / tkreg.ops: rms_norm 3x3 float32 (k chosen, 0.800); rms_norm 2x2"
    assert said in dispatch_table(dispatch) and "1x1" not in dispatch_table(dispatch).partition("over 5% behind")[2]
    dispatch["rows"][1]["ratio_quartiles"] = [0.88, 1.02]
    said = "(by round: quartiles): rms_norm 3x3 float32 (k chosen, 0.800); rms_norm 2x2 float32 (k chosen, 0.900 (0.88-1.02))."
    assert said in dispatch_table(dispatch)
    dispatch["rows"] = [pick("1x1", 1.0)]
    assert "over 5% behind" not in dispatch_table(dispatch)


def test_other_shapes_of_tuned_buckets_are_counted_where_they_timed_nothing() -> None:
    def sibling(ratio: float, choice: float, **extra: object) -> dict[str, object]:
        return {"check": "bucket", "op": "add", "ratio": ratio, "pass": ratio >= 0.95, "choice_pass": choice >= 0.95,
                "same_bucket": True, "timing_calls": 0, **extra}  # fmt: skip

    rows = [sibling(1.0, 1.0), sibling(0.81, 0.8), sibling(0.5, 0.5, timing_calls=3),
            sibling(0.5, 0.5, same_bucket=False), {"check": "bucket", "op": "add", "error": "RuntimeError: no"}]  # fmt: skip
    text = dispatch_table({"summary": {"seed": 1}, "rows": rows})
    assert "another shape of 4 buckets (every size over 8 redrawn within it) found the first shape's choice" in text
    assert "and timed nothing on 2;" in text  # one was timed, one fell in another bucket
    assert "for its own inputs on 1 of 2 (geomean 0.900), the choice called directly on 1." in text
    rows[1]["odd_width"] = True
    assert "the choice called directly on 1 (of them 1 of an odd width, 0 within 5%)." in dispatch_table({"rows": rows})
    rows[3].update(own_bucket=True, ratio=0.97, **{"pass": True})  # the one of another bucket: the winner refused it
    text = dispatch_table({"summary": {"seed": 1}, "rows": rows})
    said = "width, 0 within 5%); 1 (0 of odd widths, rows off 16 bytes; 1 refused by their bucket's winner) were timed"
    assert f"{said} in a bucket of their own, 1 of them then within 5%." in text
    rows[3]["odd_width"] = True  # another rows class: a bucket of its own
    text = dispatch_table({"summary": {"seed": 1}, "rows": rows})
    assert "width, 0 within 5%); 1 of odd widths (rows off 16 bytes: another bucket) were timed in a bucket of their own" in text
    assert "Inside the buckets" not in dispatch_table({"summary": {}, "rows": rows[-1:]})  # no figures, no paragraph


def test_an_older_run_shows_each_launchers_pick_without_its_configuration_sweep() -> None:
    document = records.load(DATA / "2026-11-23-h100-80gb-hbm3-linear.json.gz")
    text = linear_table(document)
    assert "matmul_hopper_ws x cuBLAS (bf16/fp16)" in text and "| 3000x5000x2000 | kn |" in text
    assert "- matmul_hopper_ws: geometric mean bf16 1.000x" in text


def test_cells_keep_four_significant_digits_and_show_containers_as_json() -> None:
    assert [cell(v) for v in (1.0599, 0.0095, 1.0, 760123.4, 3, None, float("nan"), {"a": 1})] == [
        "1.060", "0.009500", "1.000", "760123", "3", "-", "-", '{"a":1}'
    ]


def test_the_stored_data_follows_the_naming_scheme() -> None:
    names = [p.name for p in DATA.iterdir()]
    assert names and all(records.DataFile.parse(n) is not None for n in names), names
    suites = {records.DataFile.parse(n).suite for n in names}
    assert suites >= {"main", "timer", "host", "linear", "ranking"}


def test_a_copy_of_the_data_builds_the_same_record(tmp_path: Path) -> None:
    """The record depends on the data and the template only, not on the folder it is built in."""
    for name in ("benchmarks/data", "benchmarks/template.md"):
        source, target = ROOT / name, tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target)
    shutil.copy(ROOT / "BENCHMARKS.md", tmp_path / "BENCHMARKS.md")
    result = record_cli("--check", cwd=tmp_path)
    assert result.returncode == 1 and "missing plot" in result.stdout  # text equal; the plots were not copied
    assert "@@" not in result.stdout


def test_the_data_line_names_a_host_of_several_gpus_and_not_one_of_one() -> None:
    from tkreg.report.record_tables import source_line

    meta = {"date": "2026-11-29T13:10:12Z", "command": "python -m tkreg.bench dispatch", "torch": "2.11.0"}
    assert "host of" not in source_line("d.json", {**meta, "gpus": "1"})
    assert "host of" not in source_line("d.json", meta)  # data from before the count was kept
    assert source_line("d.json", {**meta, "gpus": "2"}) == (
        "Data: `d.json`, measured 2026-11-29 13:10:12 UTC on a host of 2 GPUs by `python -m tkreg.bench dispatch`"
        " (torch 2.11.0).")
