"""Tune sum_row_tiled on the GPU: per benchmark shape and dtype, torch.sum, every sum_row kernel at
its own choice, and the tiled kernel over neighbouring tile sizes, warps and splits.

Prints GB/s (bytes read) and the fraction of a device copy ceiling measured in the same run;
writes JSON to $OUT/reductions_sweep.json. Budget: about two minutes on an H100.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from tkreg_reductions import tiled

from tkreg.core.loading import build_registry
from tkreg.testing.timing import DeviceTimer

SHAPES = [(16384, 16384), (65536, 1024), (4096, 131072), (1048576, 32), (32, 1048576)]
DTYPES = [torch.float32, torch.bfloat16]
REPS = 25
BUDGET_S = 200


def median_ms(timer: DeviceTimer, fn: Callable[[], Any]) -> float:
    for _ in range(3):
        fn()
    return statistics.median(timer.once(fn)[0] for _ in range(REPS))


def candidates(m: int, n: int, itemsize: int, sms: int) -> list[dict[str, int]]:
    """The launcher's choice and neighbours: for rows that take several column steps, the step
    width in bytes, rows per program, warps and pipeline stages; for rows that fit one step, the
    tile size and warps."""
    base = tiled.choose_config(m, n, itemsize, sms).__dict__
    out = [dict(base)]
    row_elems = 1 << max(0, (n - 1).bit_length())
    if n > base["BLOCK_N"]:
        for step_bytes, rows in ((4096, 2), (4096, 4), (4096, 8), (16384, 1), (16384, 2)):
            block_n = min(step_bytes // itemsize, row_elems)
            for warps in (8, 16):
                for stages in (1, 3):
                    out.append({**base, "BLOCK_N": block_n, "BLOCK_M": rows, "num_warps": warps, "NUM_STAGES": stages})
    else:
        for tile in (8192, 16384, 32768, 65536):
            for warps in (4, 8, 16):
                out.append({**base, "BLOCK_M": max(1, tile // itemsize // base["BLOCK_N"]), "num_warps": warps})
    if base["SPLIT"] > 1:
        for split in (base["SPLIT"] // 2, base["SPLIT"] * 2):
            if 1 <= split <= tiled.MAX_SPLIT:
                out.append({**base, "SPLIT": split})
    unique: list[dict[str, int]] = []
    for c in out:
        if c not in unique:
            unique.append(c)
    return unique


def copy_ceiling_gbps(timer: DeviceTimer) -> float:
    src = torch.empty(2 * 1024**3 // 4, device="cuda").normal_()
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / (median_ms(timer, lambda: dst.copy_(src)) / 1e3) / 1e9


def sweep_shape(timer: DeviceTimer, reg: Any, m: int, n: int, dtype: torch.dtype, ceiling: float) -> list[dict[str, Any]]:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    out = torch.empty(m, device="cuda", dtype=dtype)
    ref = x.double().sum(-1)
    nbytes = (m * n + m) * x.element_size()
    runs: dict[str, Callable[[], Any]] = {"torch.sum": lambda: torch.sum(x, dim=-1, out=out)}
    for verdict in reg.explain("sum_row", inputs=(x,)):
        if verdict.runs:
            launcher = verdict.kernel.load()
            runs[verdict.kernel.name] = lambda launcher=launcher: launcher(x, out=out)
    for i, config in enumerate(candidates(m, n, x.element_size(), sms)):
        runs[f"tiled#{i} {config}"] = lambda config=config: tiled.sum_row_tiled(x, out=out, **config)
    rows = []
    for name, fn in runs.items():
        row: dict[str, Any] = {"shape": f"{m}x{n}", "dtype": str(dtype)[6:], "run": name}
        try:
            out.fill_(float("nan"))
            fn()
            err = float(((out.double() - ref).abs() / (ref.abs() + 1)).max())
            ms = median_ms(timer, fn)
            gbps = nbytes / (ms / 1e3) / 1e9
            row.update(ms=ms, gbps=gbps, of_ceiling=gbps / ceiling, max_rel_err=err)
            print(f"{row['shape']:>12} {row['dtype']:8} {name[:70]:70} {gbps:7.0f} GB/s {gbps / ceiling:5.2f} err {err:.1e}")
        except Exception as e:  # one failing config must not end the sweep
            row["error"] = repr(e)[:300]
            print(f"{row['shape']:>12} {row['dtype']:8} {name[:70]:70} ERROR {row['error'][:120]}")
        rows.append(row)
    return rows


def main() -> None:
    start = time.time()
    timer = DeviceTimer()
    reg = build_registry()
    ceiling = copy_ceiling_gbps(timer)
    torch.cuda.empty_cache()
    print(f"copy ceiling {ceiling:.0f} GB/s ({torch.cuda.get_device_name()})")
    results: list[dict[str, Any]] = []
    for m, n in SHAPES:
        for dtype in DTYPES:
            if time.time() - start > BUDGET_S:
                print("budget spent; stopping")
                break
            results.extend(sweep_shape(timer, reg, m, n, dtype, ceiling))
            torch.cuda.empty_cache()
    with open(os.path.join(os.environ.get("OUT", "."), "reductions_sweep.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "ceiling_gbps": ceiling, "results": results}, f, indent=1)
    print(f"elapsed {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
