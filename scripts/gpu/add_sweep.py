"""The add kernels on an H100: exact correctness of every config, then a timing grid next to
torch.add and a copy ceiling measured in the same run.

Run from the repository root, plugins installed or not (their directories go on sys.path):

    python scripts/gpu/add_sweep.py          # on the GPU, budget 120 s, compiles included
    python scripts/gpu/add_sweep.py --plan   # no GPU: validate and AOT-compile every grid config

Sections (elapsed time printed after each):
1. correctness, bit-exact against the float64 reference rounded to the dtype: every registered
   config of add_triton, add_tma and add_warp_specialized (plus each kernel's launcher default)
   in fp32, fp16 and bf16 on the seeds' shapes (1000x2000, 4000x120), an odd TMA-legal shape
   (257x136) and 16-byte padded rows (33x33); add_triton also on a transposed input; then every
   timing-grid config once on the odd shape.
2. timing, per bench shape (32768^2 first, then 10000x10008, 1024^2) x {fp32, bf16}: a
   device-to-device copy (the ceiling), torch.add, add_triton's candidates, and the grids of
   add_tma / add_warp_specialized configs. triton.testing.do_bench medians; do_bench zeroes a
   256 MiB buffer before every rep, so each rep starts with a cold L2 (which matters at 1024^2).
   GB/s counts three tensors; "ceil" is the fraction of the copy's GB/s.

A config that fails is reported and skipped; a launch that hangs ends the run after writing what
was measured (the GPU context is lost). Timing stops early when the budget runs short.
JSON goes to $OUT/add_sweep.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for plugin in ("elementwise", "tma_elementwise", "warp_specialized_add"):
    sys.path.insert(0, str(ROOT / "plugins" / plugin))
sys.path.insert(0, str(ROOT))
# Compiles dominate the budget: keep them between runs in an ignored folder of the checkout.
os.environ.setdefault("TRITON_CACHE_DIR", str(ROOT / "build" / "triton-cache"))

from tkreg_elementwise import add_op  # noqa: E402
from tkreg_elementwise.add_triton import add_triton  # noqa: E402
from tkreg_elementwise.plugin import ADD_TRITON  # noqa: E402
from tkreg_tma_elementwise.plugin import ADD_TMA  # noqa: E402
from tkreg_warp_specialized_add.plugin import ADD_WARP_SPECIALIZED  # noqa: E402

from tkreg import harness  # noqa: E402
from tkreg.core.specs import case  # noqa: E402

BUDGET_S = 120.0
RESERVE_S = 8.0  # start no new timing when less than this is left
HANG_S = 20.0  # a launch that has not finished after this long is a deadlock
WARMUP_MS, REP_MS = 20, 60
COPY_BYTES = 2 << 30  # the ceiling: a 2 GiB device-to-device copy (read + write counted)
SEED_SHAPES = ((1000, 2000), (4000, 120))
CHECK_CASES = (*(case(M=m, N=n) for m, n in SEED_SHAPES), case(M=257, N=136), case(M=33, N=33, variant="padded"))
TRANSPOSED = case(M=257, N=136, variant="transposed")
GRID_CHECK = case(M=257, N=136)
BENCH_SHAPES = ((32768, 32768), (10000, 10008), (1024, 1024))
BENCH_DTYPES = ("float32", "bfloat16")
DTYPES = ("float32", "float16", "bfloat16")

# Candidates in float32 elements; 16-bit dtypes get the same bytes (YBLOCK doubled, or XBLOCK
# once YBLOCK is at TMA's 256). Shared memory: (2 x load slots + store slots) x tile <= 227 KiB.
TRITON_GRID = ({"BLOCK": 1024, "num_warps": 4}, {"BLOCK": 2048, "num_warps": 4}, {"BLOCK": 4096, "num_warps": 8},
               {"BLOCK": 8192, "num_warps": 8})
# Runs 2-3 (persistent kernels) landed at 0.93-0.96x torch.add at 32768^2; runs 7-9
# (a one-off probe, findings in notes/tuning.md) found the tile schedule responsible. The grids bracket run 9's choice.
_TMA_KEYS = ("XBLOCK", "YBLOCK", "num_buffers", "num_store_buffers", "num_warps", "tiles_per_program", "swizzle")
TMA_GRID = tuple(
    dict(zip(_TMA_KEYS, v))
    for v in (
        (64, 128, 3, 1, 4, 16, 128),  # the first default (swizzled), long runs
        (16, 256, 4, 2, 4, 4, 0),  # run 8's best
        (16, 256, 2, 1, 4, 2, 0),
        (32, 256, 1, 1, 4, 1, 0),  # one tile per program
        (8, 256, 4, 2, 4, 4, 0),
        (16, 256, 4, 2, 4, 16, 0),
    )
)
WS_GRID = tuple(
    dict(zip(("XBLOCK", "YBLOCK", "num_load_buffers", *_TMA_KEYS[3:]), v))
    for v in (
        (64, 128, 3, 1, 4, 16, 128),  # the seed's benchmark buffers, swizzled, long runs
        (16, 256, 4, 2, 4, 4, 0),
        (16, 256, 2, 1, 4, 2, 0),
        (8, 256, 4, 2, 4, 4, 0),
    )
)


def for_dtype(config: dict[str, Any], itemsize: int) -> dict[str, Any]:
    """A float32 candidate with tiles of the same bytes for ``itemsize``."""
    scaled = dict(config)
    factor = 4 // itemsize
    if "YBLOCK" in scaled and factor > 1:
        if scaled["YBLOCK"] * factor <= 256:
            scaled["YBLOCK"] *= factor
        else:
            scaled["XBLOCK"] *= factor
    return scaled


class Sweep:
    def __init__(self) -> None:
        self.start = time.monotonic()
        self.data: dict[str, Any] = {"correctness": [], "timing": [], "errors": [], "sections": {}}

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return BUDGET_S - self.elapsed()

    def section(self, name: str) -> None:
        self.data["sections"][name] = round(self.elapsed(), 1)
        print(f"[{self.elapsed():6.1f} s] {name}", flush=True)

    def error(self, what: str, exc: BaseException) -> None:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        self.data["errors"].append({"what": what, "error": text})
        print(f"  ERROR {what}: {text[:400]}", flush=True)
        if isinstance(exc, (harness.KernelTimeout, harness.DeviceWedged)):
            self.dump()
            raise SystemExit(f"{what} hung; the GPU context is lost, stopping")

    def dump(self) -> Path:
        self.data["elapsed_s"] = round(self.elapsed(), 1)
        out = Path(os.environ.get("OUT", ".")) / "add_sweep.json"
        out.write_text(json.dumps(self.data, indent=1))
        return out


def wait(what: str) -> None:
    """Wait for the GPU without blocking in the driver, so a deadlock becomes KernelTimeout."""
    harness.wait("cuda", HANG_S, what)


def kernels() -> list[tuple[Any, Callable[..., Any]]]:
    from tkreg_tma_elementwise.add_tma import add_tma
    from tkreg_warp_specialized_add.add_ws import add_warp_specialized

    return [(ADD_TRITON, add_triton), (ADD_TMA, add_tma), (ADD_WARP_SPECIALIZED, add_warp_specialized)]


def check(sweep: Sweep, name: str, launcher: Callable[..., Any], c: Any, dtype: str, config: dict[str, Any]) -> None:
    import torch

    what = f"{name} {c.id} {dtype} {config}"
    try:
        gen = torch.Generator(device="cuda").manual_seed(len(sweep.data["correctness"]))
        a, b = add_op.make_inputs(c, getattr(torch, dtype), gen, "cuda")
        out = add_op.make_output(a, b).fill_(float("nan"))
        launcher(a, b, out=out, **config)
        wait(what)
        want = (a.double() + b.double()).to(a.dtype)  # the correctly rounded sum
        wrong = int((out != want).sum())  # NaN poison left unwritten counts as wrong
        sweep.data["correctness"].append({"kernel": name, "case": c.id, "dtype": dtype, "config": config, "wrong": wrong})
        if wrong:
            first = (out != want).nonzero()[:3].tolist()
            print(f"  WRONG {what}: {wrong} of {out.numel()} elements, first at {first}", flush=True)
    except Exception as e:
        sweep.error(what, e)


def run_correctness(sweep: Sweep) -> None:
    sweep.section("correctness: every registered config, every dtype")
    for spec, launcher in kernels():
        for config in unique((*spec.configs, {})):
            for dtype in DTYPES:
                cases = (*CHECK_CASES, TRANSPOSED) if spec is ADD_TRITON else CHECK_CASES
                for c in cases:
                    check(sweep, spec.name, launcher, c, dtype, config)
    sweep.section("correctness: timing-grid configs on 257x136")
    for spec, launcher, grid in grids():
        for dtype in BENCH_DTYPES:
            for config in unique(for_dtype(c, 4 if dtype == "float32" else 2) for c in grid):
                check(sweep, spec.name, launcher, GRID_CHECK, dtype, config)
    checks = sweep.data["correctness"]
    print(f"  {sum(r['wrong'] == 0 for r in checks)} of {len(checks)} checks exact, {len(sweep.data['errors'])} errors")


def grids() -> Iterable[tuple[Any, Callable[..., Any], tuple[dict[str, Any], ...]]]:
    launchers = dict((spec.name, fn) for spec, fn in kernels())
    yield ADD_TRITON, launchers["add_triton"], TRITON_GRID
    yield ADD_TMA, launchers["add_tma"], TMA_GRID
    yield ADD_WARP_SPECIALIZED, launchers["add_warp_specialized"], WS_GRID


def bench(fn: Callable[[], Any]) -> float:
    import triton.testing

    return triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS, return_mode="median")


def timed(sweep: Sweep, row: dict[str, Any], fn: Callable[[], Any], nbytes: int) -> float | None:
    what = f"{row['kernel']} {row['shape']} {row['dtype']} {row.get('config', '')}"
    try:
        fn()
        wait(what)
        ms = bench(fn)
    except Exception as e:
        sweep.error(what, e)
        return None
    row.update(ms=round(ms, 5), gbps=round(nbytes / ms / 1e6, 1))
    sweep.data["timing"].append(row)
    return ms


def run_timing(sweep: Sweep) -> None:
    import torch

    sweep.section("timing: copy ceiling")
    ceiling = sweep.data["copy_gbps"] = copy_ceiling(sweep)
    for m, n in BENCH_SHAPES:
        for dtype in BENCH_DTYPES:
            if sweep.left() < RESERVE_S:
                print(f"  budget short: skipping {m}x{n} {dtype}")
                continue
            sweep.section(f"timing: {m}x{n} {dtype}")
            time_shape(sweep, m, n, dtype)
            torch.cuda.empty_cache()
    for row in sweep.data["timing"]:
        if ceiling:
            row["ceil"] = round(row["gbps"] / ceiling, 3)


def copy_ceiling(sweep: Sweep) -> float | None:
    """GB/s of a device-to-device copy (bytes read + written): what a memory-bound kernel can reach."""
    import torch

    src = torch.randn(COPY_BYTES // 4, device="cuda")
    dst = torch.empty_like(src)
    row = {"kernel": "copy", "shape": "2GiB", "dtype": "float32"}
    return row["gbps"] if timed(sweep, row, lambda: dst.copy_(src), 2 * COPY_BYTES) else None


def time_shape(sweep: Sweep, m: int, n: int, dtype: str) -> None:
    """torch.add, then every kernel's launcher default and grid, on fresh random (m, n) inputs."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(m + n)
    a, b = (torch.randn(m, n, device="cuda", dtype=getattr(torch, dtype), generator=gen) for _ in range(2))
    out = torch.empty_like(a)
    nbytes = add_op.cost({"M": m, "N": n}, a.element_size()).bytes
    shape = f"{m}x{n}"
    peer = timed(sweep, {"kernel": "torch.add", "shape": shape, "dtype": dtype}, lambda: torch.add(a, b, out=out), nbytes)
    for spec, launcher, grid in grids():
        for config in unique(for_dtype(c, a.element_size()) for c in ({}, *grid)):
            if sweep.left() < RESERVE_S:
                return
            row = {"kernel": spec.name, "shape": shape, "dtype": dtype, "config": config}
            ms = timed(sweep, row, lambda f=launcher, c=config: f(a, b, out=out, **c), nbytes)
            if ms and peer:
                row["vs_torch"] = round(peer / ms, 3)


def unique(configs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Configs in order, each once (two float32 candidates can scale to one 16-bit config)."""
    seen: list[dict[str, Any]] = []
    for c in configs:
        if c not in seen:
            seen.append(c)
    return seen


def summarize(sweep: Sweep) -> None:
    """Best config per kernel x shape x dtype, next to torch.add."""
    best: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in sweep.data["timing"]:
        key = (row["shape"], row["dtype"], row["kernel"])
        if key not in best or row["ms"] < best[key]["ms"]:
            best[key] = row
    sweep.data["best"] = list(best.values())
    print(f"\ncopy ceiling {sweep.data.get('copy_gbps')} GB/s")
    print(f"{'shape':12s} {'dtype':9s} {'kernel':21s} {'ms':>8s} {'GB/s':>7s} {'ceil':>5s} {'x torch':>7s}  config")
    for (shape, dtype, kernel), row in sorted(best.items()):
        print(
            f"{shape:12s} {dtype:9s} {kernel:21s} {row['ms']:8.4f} {row['gbps']:7.0f} {row.get('ceil', 0):5.2f} "
            f"{row.get('vs_torch', 1.0):7.3f}  {row.get('config', '')}"
        )
    for row in sweep.data["timing"]:
        if row.get("config") == {}:
            print(f"  default {row['kernel']:21s} {row['shape']:12s} {row['dtype']:9s} {row['gbps']:7.0f} GB/s "
                  f"x torch {row.get('vs_torch', 0):.3f}")


def plan() -> None:
    """No GPU: every grid config must resolve and compile (sm_90a) with its code checks."""
    from tkreg.launch.aot import compile_and_check

    count = 0
    for spec, _, grid in grids():
        for dtype in BENCH_DTYPES:
            for config in unique(for_dtype(c, 4 if dtype == "float32" else 2) for c in grid):
                check_, code = compile_and_check(spec, spec.targets[-1 if spec is ADD_TRITON else 0], dtype, config)
                count += 1
                status = "ok" if check_.ok else f"MISSING {check_.missing_ptx + check_.missing_sass}"
                print(f"{spec.name:21s} {dtype:9s} {config} shared={code.shared} {code.resources[:22]} {status}")
    print(f"{count} grid configs compiled")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", action="store_true", help="no GPU: validate and compile every grid config (default: run)")
    if parser.parse_args().plan:
        plan()
        return
    import torch

    sweep = Sweep()
    sweep.data["device"] = torch.cuda.get_device_name()
    sweep.data["versions"] = {"torch": torch.__version__, "triton": __import__("triton").__version__}
    run_correctness(sweep)
    run_timing(sweep)
    summarize(sweep)
    sweep.section("done")
    print(f"wrote {sweep.dump()}")


if __name__ == "__main__":
    main()
