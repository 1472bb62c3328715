"""matmul_hopper_ws on an H100: correctness of every config, then a timing grid against cuBLAS.

Run from the repository root with the plugins installed (or not: their directories are put on
sys.path; nothing here needs the entry-point registry):

    python scripts/gpu/hopper_matmul_sweep.py            # on the H100, about 120 s
    python scripts/gpu/hopper_matmul_sweep.py --plan     # no GPU: check and AOT-compile every config

Sections (elapsed time printed after each; budget 180 s, compiles included):
1. correctness: the default config and the launcher's own choice, every scheduler, fp16 and bf16,
   on the seed's shapes (208x416x304, 2000x1000x2000) and odd ones (partial tiles, K < BLOCK_K,
   one row); then every grid config once on an odd shape. Compared with an fp32 torch.matmul.
2. timing, M = N = 8192, K = 512 ... 16384: cuBLAS (torch.matmul) and the default config in fp16
   and bf16, the default with every scheduler (bf16), the grid of configs (bf16), TFLOP/s and
   ratio to cuBLAS from triton.testing.do_bench medians (it flushes L2 before every rep); the
   default and cuBLAS also through CUDA graphs, to show host overhead at small K.
3. heuristic: the launcher's candidate tiles against cuBLAS on mid-size shapes, to check choose().

A config that fails is reported and skipped; a kernel that hangs ends the run after writing what
was measured (the GPU context is lost). JSON goes to $OUT/hopper_matmul_sweep.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for plugin in ("matmul", "schedulers", "hopper_matmul"):
    sys.path.insert(0, str(ROOT / "plugins" / plugin))
sys.path.insert(0, str(ROOT))

from tkreg_hopper_matmul.config import CANDIDATES, DEFAULT, HopperConfig  # noqa: E402
from tkreg_hopper_matmul.plugin import DEEP_RING, PINGPONG  # noqa: E402
from tkreg_schedulers.plugin import SCHEDULERS  # noqa: E402

BUDGET_S = 180.0
RESERVE_S = 20.0  # stop starting new grid configs when less than this is left
HANG_S = 20.0  # a launch that has not finished after this long is a deadlock
GRAPH_MAX_K = 1024  # also time through CUDA graphs up to this K, where host overhead could show
M = N = 8192
KS = (512, 1024, 2048, 4096, 8192, 16384)
WARMUP_MS, REP_MS = 25, 100
SEED_SHAPES = ((208, 416, 304), (2000, 1000, 2000))
ODD_SHAPES = ((333, 520, 40), (1, 72, 1000), (1031, 776, 1000))  # K < BLOCK_K; one row; partial tiles
GRID_CHECK_SHAPE = (1031, 776, 1000)
HEURISTIC_SHAPES = ((1024, 1024, 8192), (2048, 2048, 4096), (4096, 4096, 4096), (2048, 8192, 2048))
SCHEDULER = {s.name: s for s in SCHEDULERS}
DEFAULT_SCHEDULER = "persistent"

# The grid (bf16, persistent order): the default and its alternatives. Names are for the table.
GRID: dict[str, HopperConfig] = {
    "default 128x256x64 s3": DEFAULT,
    "deep ring s4 split2": DEEP_RING,
    "k32 s6": replace(DEFAULT, BLOCK_K=32, NUM_STAGES=6),
    "k32 s8 split2": replace(DEFAULT, BLOCK_K=32, NUM_STAGES=8, EPILOGUE_SPLIT=2),
    "s4 split4": replace(DEFAULT, NUM_STAGES=4, EPILOGUE_SPLIT=4),
    "producer 40 regs": replace(DEFAULT, PRODUCER_REGS=40),
    "pingpong 64x256 s4": PINGPONG,
    "pingpong 128x128 s5": replace(DEFAULT, BLOCK_M=128, BLOCK_N=128, NUM_STAGES=5, PINGPONG=True),
    "coop 256x128 s3": replace(DEFAULT, BLOCK_M=256, BLOCK_N=128),
    "coop 256x128 s4 split2": replace(DEFAULT, BLOCK_M=256, BLOCK_N=128, NUM_STAGES=4, EPILOGUE_SPLIT=2),
}


class Hung(RuntimeError):
    pass


class Sweep:
    def __init__(self) -> None:
        self.start = time.monotonic()
        self.result: dict[str, Any] = {"correctness": [], "timing": [], "heuristic": [], "errors": []}

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def section(self, name: str) -> None:
        print(f"--- {name} (elapsed {self.elapsed():.1f} s)", flush=True)

    def error(self, what: str, exc: BaseException) -> None:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        print(f"FAILED {what}: {text}", flush=True)
        self.result["errors"].append({"what": what, "error": text})

    def dump(self) -> Path:
        self.result["elapsed_s"] = round(self.elapsed(), 1)
        out = Path(os.environ.get("OUT", ".")) / "hopper_matmul_sweep.json"
        out.write_text(json.dumps(self.result, indent=1))
        return out


def wait(what: str) -> None:
    """Wait for the GPU without blocking in the driver, so a deadlock becomes an exception."""
    import torch

    done = torch.cuda.Event()
    done.record()
    start = time.monotonic()
    while not done.query():
        if time.monotonic() - start > HANG_S:
            raise Hung(f"{what} did not finish within {HANG_S:.0f} s")
        time.sleep(1e-4)


def tolerance(K: int, dtype: Any) -> tuple[float, float]:
    """(atol, rtol) against an fp32 torch.matmul: the op's error argument (tkreg_matmul.op) for
    the kernel's fp32 summation, doubled for the reference's own, plus one rounding of the output."""
    from tkreg_matmul.op import TOLERANCES, tolerance_scale

    tol = TOLERANCES[str(dtype).removeprefix("torch.")]
    return 2 * tol.atol * tolerance_scale({"K": K}), tol.rtol


def check(out: Any, ref32: Any, K: int) -> dict[str, Any]:
    import torch

    atol, rtol = tolerance(K, out.dtype)
    got = out.float()
    err = (got - ref32).abs()
    bad = ~(err <= atol + rtol * ref32.abs())  # NaN (unwritten poison) counts as bad
    return {
        "ok": not bool(bad.any()),
        "bad": int(bad.sum()),
        "max_abs_err": float(torch.nan_to_num(err, nan=math.inf).max()),
        "atol": atol,
    }


def randn(shape: tuple[int, ...], dtype: Any, gen: Any) -> Any:
    import torch

    return torch.randn(shape, device="cuda", dtype=torch.float32, generator=gen).to(dtype)


def run_correctness(sweep: Sweep) -> None:
    import torch
    from tkreg_hopper_matmul.launch import matmul_hopper_ws

    gen = torch.Generator(device="cuda").manual_seed(0)
    cases = [(shape, name, None) for shape in SEED_SHAPES + ODD_SHAPES for name in SCHEDULER]
    cases += [(GRID_CHECK_SHAPE, DEFAULT_SCHEDULER, label) for label in GRID]
    for dtype in (torch.float16, torch.bfloat16):
        for (m, n, k), sched, label in cases:
            if label is not None and dtype != torch.bfloat16:
                continue
            a, b = randn((m, k), dtype, gen), randn((k, n), dtype, gen)
            ref32 = a.float() @ b.float()
            variants = {"default": asdict(DEFAULT), "launcher choice": {}} if label is None else {label: asdict(GRID[label])}
            for variant, params in variants.items():
                what = f"{variant} {m}x{n}x{k} {sched} {str(dtype)[6:]}"
                out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
                try:
                    matmul_hopper_ws(a, b, out=out, scheduler=SCHEDULER[sched], **params)
                    wait(what)
                    row = {"what": what, **check(out, ref32, k)}
                except Hung:
                    raise
                except Exception as e:  # report any failure and go on
                    sweep.error(what, e)
                    continue
                sweep.result["correctness"].append(row)
                if not row["ok"]:
                    print(f"WRONG {what}: {row}", flush=True)
    rows = sweep.result["correctness"]
    failed = len(sweep.result["errors"])
    print(f"correctness: {sum(r['ok'] for r in rows)}/{len(rows)} within tolerance; {failed} runs raised", flush=True)


def bench(fn: Callable[[], Any], graph: bool = False) -> float:
    import triton.testing

    if graph:
        return triton.testing.do_bench_cudagraph(fn, rep=REP_MS, return_mode="median")
    return triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS, return_mode="median")


def timed(sweep: Sweep, row: dict[str, Any], fn: Callable[[], Any], flops: float, graph: bool = False) -> float | None:
    what = f"{row['name']} K={row['K']} {row['dtype']}" + (" graph" if graph else "")
    try:
        fn()
        wait(what)
        ms = bench(fn, graph)
    except Hung:
        raise
    except Exception as e:  # report any failure and go on
        sweep.error(what, e)
        return None
    row.update(ms=ms, tflops=flops / ms * 1e-9, graph=graph)
    return ms


def timing_work() -> list[tuple[str, Any, HopperConfig, str]]:
    """(name, dtype, config, scheduler): the default in both dtypes, then bf16 only: the default
    with the other schedulers and the grid."""
    import torch

    return [
        ("default", torch.float16, DEFAULT, DEFAULT_SCHEDULER),
        ("default", torch.bfloat16, DEFAULT, DEFAULT_SCHEDULER),
        *((f"default {s}", torch.bfloat16, DEFAULT, s) for s in SCHEDULER if s != DEFAULT_SCHEDULER),
        *((name, torch.bfloat16, config, DEFAULT_SCHEDULER) for name, config in GRID.items() if config != DEFAULT),
    ]


def time_one_k(sweep: Sweep, K: int, dtype: Any, skipped: set[str]) -> None:
    import torch
    from tkreg_hopper_matmul.launch import matmul_hopper_ws

    gen = torch.Generator(device="cuda").manual_seed(K)
    flops = 2.0 * M * N * K
    a, b = randn((M, K), dtype, gen), randn((K, N), dtype, gen)
    c = torch.empty((M, N), device="cuda", dtype=dtype)
    short = str(dtype).removeprefix("torch.")
    peer = partial(torch.matmul, a, b, out=c)
    cublas = {"name": "cublas", "K": K, "dtype": short}
    ref = timed(sweep, cublas, peer, flops)
    sweep.result["timing"].append(cublas)
    ref_graph = None
    if K <= GRAPH_MAX_K:
        graph_row = {"name": "cublas graph", "K": K, "dtype": short}
        ref_graph = timed(sweep, graph_row, peer, flops, graph=True)
        sweep.result["timing"].append(graph_row)
    for name, wdtype, config, sched in timing_work():
        if wdtype != dtype or name in skipped:
            continue
        if sweep.elapsed() > BUDGET_S - RESERVE_S:
            print(f"budget: skipping {name} from K={K} on", flush=True)
            skipped.add(name)
            continue
        row = {"name": name, "K": K, "dtype": short, "scheduler": sched, "params": asdict(config)}
        call = partial(matmul_hopper_ws, a, b, out=c, scheduler=SCHEDULER[sched], **asdict(config))
        ms = timed(sweep, row, call, flops)
        if ms is None:
            skipped.add(name)  # failed once: do not spend the budget on it again
        elif ref is not None:
            row["ratio"] = ref / ms
        sweep.result["timing"].append(row)
        if name == "default" and K <= GRAPH_MAX_K:
            graph_row = {"name": "default graph", "K": K, "dtype": short, "scheduler": sched}
            ms = timed(sweep, graph_row, call, flops, graph=True)
            if ms is not None and ref_graph is not None:
                graph_row["ratio"] = ref_graph / ms
            sweep.result["timing"].append(graph_row)


def run_timing(sweep: Sweep) -> None:
    import torch

    skipped: set[str] = set()
    for K in KS:
        for dtype in (torch.float16, torch.bfloat16):
            time_one_k(sweep, K, dtype, skipped)
        print(f"K={K} done (elapsed {sweep.elapsed():.1f} s)", flush=True)


def run_heuristic(sweep: Sweep) -> None:
    import torch
    from tkreg_hopper_matmul.launch import matmul_hopper_ws

    gen = torch.Generator(device="cuda").manual_seed(2)
    for m, n, k in HEURISTIC_SHAPES:
        if sweep.elapsed() > BUDGET_S - RESERVE_S / 2:
            print("budget: heuristic section cut short", flush=True)
            break
        a, b = randn((m, k), torch.bfloat16, gen), randn((k, n), torch.bfloat16, gen)
        c = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
        flops = 2.0 * m * n * k
        base = {"M": m, "N": n, "K": k, "dtype": "bfloat16"}
        cublas = {**base, "name": "cublas"}
        ref = timed(sweep, cublas, partial(torch.matmul, a, b, out=c), flops)
        sweep.result["heuristic"].append(cublas)
        for i, config in enumerate((*CANDIDATES, None)):
            params = asdict(config) if config is not None else {}
            row = {**base, "name": f"candidate {i}" if config is not None else "launcher choice", "params": params}
            ms = timed(sweep, row, partial(matmul_hopper_ws, a, b, out=c, **params), flops)
            if ms is not None and ref is not None:
                row["ratio"] = ref / ms
            sweep.result["heuristic"].append(row)


def summarize(sweep: Sweep) -> None:
    rows = [r for r in sweep.result["timing"] if "tflops" in r and not r.get("graph")]
    names = list(dict.fromkeys(r["name"] for r in rows))
    print(f"\nM = N = {M}, do_bench median; TFLOP/s (ratio to cuBLAS)")
    print(f"{'config':28s} {'dtype':9s}" + "".join(f"{'K=' + str(k):>15s}" for k in KS) + f"{'geomean':>9s}{'min':>7s}")
    summary = {}
    for name in names:
        for dtype in ("float16", "bfloat16"):
            mine = {r["K"]: r for r in rows if r["name"] == name and r["dtype"] == dtype}
            if not mine:
                continue
            cells = []
            for k in KS:
                r = mine.get(k)
                if r is None:
                    cells.append(f"{'-':>15s}")
                else:
                    ratio = f"({r['ratio']:.2f})" if "ratio" in r else ""
                    cells.append(f"{r['tflops']:8.0f}{ratio:>7s}")
            ratios = [mine[k]["ratio"] for k in KS if k in mine and "ratio" in mine[k]]
            geo = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else float("nan")
            low = min(ratios) if ratios else float("nan")
            if ratios:
                summary[f"{name} {dtype}"] = {"geomean_ratio": geo, "min_ratio": low, "n": len(ratios)}
            print(f"{name:28s} {dtype:9s}" + "".join(cells) + f"{geo:9.3f}{low:7.3f}")
    sweep.result["summary"] = summary
    graphs = [r for r in sweep.result["timing"] if r.get("graph") and "tflops" in r]
    if graphs:
        print("\nCUDA graphs (host overhead removed): TFLOP/s (ratio to cuBLAS in a graph)")
        for r in graphs:
            ratio = f" ({r['ratio']:.2f})" if "ratio" in r else ""
            print(f"  {r['name']:14s} {r['dtype']:9s} K={r['K']:<6d} {r['tflops']:6.0f}{ratio}")
    if sweep.result["heuristic"]:
        print("\nheuristic shapes (bf16): TFLOP/s (ratio to cuBLAS)")
        for r in sweep.result["heuristic"]:
            if "tflops" in r:
                ratio = f" ({r['ratio']:.2f})" if "ratio" in r else ""
                print(f"  {r['M']}x{r['N']}x{r['K']} {r['name']:16s} {r['tflops']:7.0f}{ratio}")


def plan() -> None:
    """No GPU: validate every config and AOT-compile each for sm_90a (bf16, default scheduler)."""
    from tkreg_hopper_matmul.launch import aot

    from tkreg.aot import compile_spec
    from tkreg.capability import arch

    start = time.monotonic()
    for name, config in {**GRID, **{f"candidate {i}": c for i, c in enumerate(CANDIDATES)}}.items():
        spec = aot(arch("sm_90a"), "bfloat16", {**asdict(config), "scheduler": SCHEDULER[DEFAULT_SCHEDULER]})
        code = compile_spec(spec, "sm_90a")
        spills = " SPILLS" if ("LDL" in code.sass or "STL" in code.sass) else ""
        print(f"{name:28s} smem~{config.smem_bytes(2):7d} {code.resources.split(' SHARED')[0]}{spills}")
    print(f"plan compiled in {time.monotonic() - start:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", action="store_true", help="no GPU: check and compile every config (default: run)")
    args = parser.parse_args()
    if args.plan:
        plan()
        return
    import torch
    import triton

    sweep = Sweep()
    props = torch.cuda.get_device_properties(0)
    sweep.result["device"] = {
        "name": props.name,
        "sms": props.multi_processor_count,
        "torch": torch.__version__,
        "triton": triton.__version__,
    }
    print(f"{props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}, triton {triton.__version__}")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 references must be true fp32
    try:
        for name, step in (("correctness", run_correctness), ("timing", run_timing), ("heuristic", run_heuristic)):
            sweep.section(name)
            step(sweep)
    except Hung as e:
        sweep.error("hang", e)
        print(f"JSON: {sweep.dump()}")
        summarize(sweep)
        os._exit(3)  # the GPU context is stuck; exiting normally would block on it
    summarize(sweep)
    print(f"\nJSON: {sweep.dump()}  elapsed {sweep.elapsed():.1f} s")


if __name__ == "__main__":
    main()
