"""Tile-schedule probe for the Gluon adds on an H100: runs of tiles_per_program consecutive tiles
per program, against torch.add in the same run.

Run 7 (this script's first version, notes/gpu-runs/2026-11-22-run7) tested four explanations for
the 0.96x torch.add ceiling of the persistent kernels at 32768^2: an unswizzled shared layout (one
TMA copy per tile instead of eight: +0.7%), a flat contiguous view (+0.4% at most), stores from
registers instead of TMA stores (no change) and one tile per program instead of a persistent grid:
1.001-1.004x torch.add fp32, 0.993-0.994x bf16. The kernels now take a run of tiles per program.
Run 8 (notes/gpu-runs/2026-11-22-run8) timed run lengths 1 to 64: 2 to 4 tiles per program with
as many load slots were best (16 x 256 fp32, 4 tiles, 4/2 slots: 1.005x fp32, 0.998x bf16);
8 and more fall back towards the persistent figure. This version (run 9) times the neighbours
of that choice, with 8 KB and 32 KB tiles, and a mid-size shape.

Every variant is first checked bit-exact on an odd shape; timings are triton.testing.do_bench
medians (L2 flushed before each repetition), in ROUNDS interleaved rounds so the noise between
rounds is visible next to the differences. JSON to $OUT/add_probe.json.

    python scripts/gpu/add_probe.py           # GPU
    python scripts/gpu/add_probe.py --plan    # no GPU: compile every variant for sm_90a
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for plugin in ("elementwise", "tma_elementwise", "warp_specialized_add"):
    sys.path.insert(0, str(ROOT / "plugins" / plugin))
sys.path.insert(0, str(ROOT))

from add_sweep import for_dtype  # noqa: E402  (this script's folder is on sys.path)

from tkreg import dtypes  # noqa: E402

ROUNDS = 2  # run 7's rounds agreed within 0.3%
WARMUP_MS, REP_MS = 25, 150
# (shape, dtypes): the record's large shape, an odd one, a small one where launch and fill count
SHAPES = (
    ((32768, 32768), ("float32", "bfloat16")),
    ((10000, 10008), ("float32", "bfloat16")),
    ((4096, 4096), ("float32",)),
    ((1024, 1024), ("float32",)),
)
CHECK_SHAPE = (1000, 2008)


def variants() -> list[tuple[str, Callable[..., Any], dict[str, Any]]]:
    """(label, launcher, fp32 config; "runN a/b": N tiles per program, a load and b store slots).
    16-bit dtypes double YBLOCK up to 256, then XBLOCK, so tiles keep their bytes."""
    from tkreg_tma_elementwise.add_tma import add_tma
    from tkreg_warp_specialized_add.add_ws import add_warp_specialized

    t, ws = add_tma, add_warp_specialized

    def tma(x: int, per: int, nb: int, ns: int, **kw: Any) -> dict[str, Any]:
        return dict(XBLOCK=x, YBLOCK=256, tiles_per_program=per, num_buffers=nb, num_store_buffers=ns, swizzle=0, **kw)

    def ws_(x: int, per: int, nb: int, ns: int) -> dict[str, Any]:
        return dict(XBLOCK=x, YBLOCK=256, tiles_per_program=per, num_load_buffers=nb, num_store_buffers=ns, swizzle=0)

    v: list[tuple[str, Callable[..., Any], dict[str, Any]]] = [
        ("tma default", t, {}),  # 16x256 run4 4/2, run 8's best
        ("tma 16x256 run3 3/2", t, tma(16, 3, 3, 2)),
        ("tma 16x256 run4 3/2", t, tma(16, 4, 3, 2)),
        ("tma 16x256 run4 4/1", t, tma(16, 4, 4, 1)),
        ("tma 16x256 run4 4/4", t, tma(16, 4, 4, 4)),
        ("tma 16x256 run6 4/2", t, tma(16, 6, 4, 2)),
        ("tma 16x256 run4 4/2 8 warps", t, tma(16, 4, 4, 2, num_warps=8)),
        ("tma 8x256 run2 2/1", t, tma(8, 2, 2, 1)),
        ("tma 8x256 run4 4/2", t, tma(8, 4, 4, 2)),
        ("tma 8x256 run8 8/2", t, tma(8, 8, 8, 2)),
        ("tma 32x256 run3 3/1", t, tma(32, 3, 3, 1)),
        ("ws default", ws, {}),
        ("ws 16x256 run3 3/2", ws, ws_(16, 3, 3, 2)),
        ("ws 8x256 run4 4/2", ws, ws_(8, 4, 4, 2)),
    ]
    return v


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", action="store_true", help="no GPU: compile every variant for sm_90a")
    if parser.parse_args().plan:
        plan()
        return
    import torch
    import triton.testing

    data: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "checks": [],
        "timing": [],
    }
    start = time.monotonic()

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - start:6.1f}s] {msg}", flush=True)

    def bench(fn: Callable[[], Any]) -> float:
        return triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS, return_mode="median")

    # 1. exactness of every variant on an odd shape, NaN-poisoned output
    for dtype in (torch.float32, torch.bfloat16):
        for label, fn, cfg in variants():
            a, b = (torch.randn(*CHECK_SHAPE, device="cuda", dtype=dtype) for _ in range(2))
            out = torch.full_like(a, float("nan"))
            try:
                fn(a, b, out=out, **for_dtype(cfg, a.element_size()))
                torch.cuda.synchronize()
                wrong: int | str = int((out != (a.double() + b.double()).to(dtype)).sum())
            except Exception as e:  # report and go on: one broken variant must not end the probe
                wrong = f"{type(e).__name__}: {str(e)[:300]}"
            data["checks"].append({"variant": label, "dtype": str(dtype), "wrong": wrong})
            if wrong:
                log(f"CHECK FAILED {label} {dtype}: {wrong}")
    log(f"checks: {sum(c['wrong'] == 0 for c in data['checks'])} of {len(data['checks'])} exact")
    broken = {(c["variant"], c["dtype"]) for c in data["checks"] if c["wrong"]}

    # 2. timing, interleaved rounds
    src = torch.randn(1 << 29, device="cuda")
    dst = torch.empty_like(src)
    for (m, n), names in SHAPES:
        for name in names:
            time_shape(data, m, n, getattr(torch, name), broken, (src, dst), bench, log)
            torch.cuda.empty_cache()
    (Path(os.environ.get("OUT", ".")) / "add_probe.json").write_text(json.dumps(data, indent=1))
    summarize(data)


def time_shape(
    data: dict[str, Any],
    m: int,
    n: int,
    dtype: Any,
    broken: set[tuple[str, str]],
    copy: tuple[Any, Any],
    bench: Callable[[Callable[[], Any]], float],
    log: Callable[[str], None],
) -> None:
    import torch
    from tkreg_elementwise.add_triton import add_triton

    src, dst = copy
    a, b = (torch.randn(m, n, device="cuda", dtype=dtype) for _ in range(2))
    out = torch.empty_like(a)
    nbytes = 3 * a.numel() * a.element_size()
    work: list[tuple[str, Callable[[], Any]]] = [
        ("copy 2 GiB", lambda: dst.copy_(src)),
        ("torch.add", lambda: torch.add(a, b, out=out)),
        ("add_triton default", lambda: add_triton(a, b, out=out)),
    ]
    for label, fn, cfg in variants():
        if (label, str(dtype)) not in broken:
            config = for_dtype(cfg, a.element_size())
            work.append((label, lambda f=fn, c=config: f(a, b, out=out, **c)))
    for rnd in range(ROUNDS):
        for label, fn in work:
            try:
                ms = bench(fn)
            except Exception as e:
                log(f"ERROR {label}: {str(e)[:300]}")
                continue
            size = 2 * src.numel() * 4 if label.startswith("copy") else nbytes
            data["timing"].append(
                {"shape": f"{m}x{n}", "dtype": str(dtype), "variant": label, "round": rnd, "ms": ms, "gbps": size / ms / 1e6}
            )
        log(f"{m}x{n} {dtype} round {rnd} done")


def summarize(data: dict[str, Any]) -> None:
    import statistics

    groups: dict[tuple[str, str], dict[str, list[float]]] = {}
    for r in data["timing"]:
        groups.setdefault((r["shape"], r["dtype"]), {}).setdefault(r["variant"], []).append(r["gbps"])
    for (shape, dtype), rows in groups.items():
        torch_gbps = statistics.median(rows.get("torch.add", [float("nan")]))
        print(f"\n{shape} {dtype}  (GB/s per round; ratio = median / torch.add median {torch_gbps:.0f})")
        for label, vals in rows.items():
            print(f"  {label:36s} {' '.join(f'{v:6.0f}' for v in vals)}   x torch {statistics.median(vals) / torch_gbps:.3f}")


def plan() -> None:
    """Compile every variant for sm_90a through the launchers' own aot path."""
    from tkreg_tma_elementwise.add_tma import KERNEL as TMA
    from tkreg_warp_specialized_add.add_ws import KERNEL as WS

    from tkreg.aot import compile_spec

    for label, _, cfg in variants():
        for dtype in ("float32", "bfloat16"):
            config = for_dtype(cfg, dtypes.ITEMSIZE[dtype])
            kernel = TMA if label.startswith("tma") else WS
            code = compile_spec(kernel.aot(dtype, config), "sm_90a")
            print(f"{label:28s} {dtype:9s} {kernel.resolve(dtype, config)} shared {code.shared} {code.resources[:8]}")


if __name__ == "__main__":
    main()
