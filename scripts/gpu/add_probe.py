"""Why do the Gluon adds stop at 0.96x torch.add? One H100 run testing four explanations:

1. swizzle: the default NVMMA layout swizzles 128 bytes, which caps a TMA box at 128-byte rows,
   so a 16 x 256 fp32 tile takes 8 copies of 16 x 32 per tensor; unswizzled, it is one copy
   of 16 rows x 1 KB (register reads stay conflict-free: a quarter warp reads 128 contiguous bytes).
2. DRAM locality: a 2-D tile reads XBLOCK separate row pieces; on a contiguous tensor viewed as
   (numel / 256, 256), every tile is one contiguous span (timed on that view, same kernel).
3. TMA stores: the sum goes out from registers (16-byte st.global) instead of a shared round trip
   and a TMA store (an experimental kernel defined here, same loads and pipeline).
4. persistence: one tile per program, many programs per SM, as torch.add runs.

Every variant is first checked bit-exact on an odd shape; timings are triton.testing.do_bench
medians (L2 flushed before each repetition), repeated in ROUNDS interleaved rounds so the noise
between rounds is visible next to the differences. JSON to $OUT/add_probe.json.

    python scripts/gpu/add_probe.py           # GPU
    python scripts/gpu/add_probe.py --plan    # no GPU: compile every variant for sm_90a
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for plugin in ("elementwise", "tma_elementwise", "warp_specialized_add"):
    sys.path.insert(0, str(ROOT / "plugins" / plugin))
sys.path.insert(0, str(ROOT))

from tkreg_elementwise.tma_launch import persistent_grid, smem_layout  # noqa: E402
from tkreg_elementwise.tma_tiles import load_tiles, register_layout, take_tiles, tile_count, tile_origin  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import mbarrier  # noqa: E402

from tkreg import dtypes  # noqa: E402
from tkreg.tma import descriptor  # noqa: E402

ROUNDS = 3
WARMUP_MS, REP_MS = 25, 150
SHAPES = ((32768, 32768), (10000, 10008))
FLAT_WIDTH = 256  # the contiguous view's row: one TMA box wide


@gluon.jit(do_not_specialize=["M", "N"])
def add_tma_register_store_kernel(
    a_desc,
    b_desc,
    c_ptr,
    stride_cm,
    M,
    N,
    XBLOCK: gl.constexpr,
    YBLOCK: gl.constexpr,
    num_buffers: gl.constexpr,
    layout: gl.constexpr,
    EVICT_FIRST: gl.constexpr,
):
    """add_tma's loads and pipeline; the sum is stored from registers."""
    count, tiles_y = tile_count(M, N, XBLOCK, YBLOCK)
    dtype: gl.constexpr = a_desc.dtype
    a_bufs = gl.allocate_shared_memory(dtype, [num_buffers, XBLOCK, YBLOCK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [num_buffers, XBLOCK, YBLOCK], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [num_buffers, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(num_buffers):
        mbarrier.init(ready.index(s), count=1)
    for s in gl.static_range(num_buffers):
        load_tiles(a_desc, b_desc, a_bufs, b_bufs, ready, s, s, count, tiles_y, XBLOCK, YBLOCK)
    rows0 = gl.arange(0, XBLOCK, layout=gl.SliceLayout(1, layout))
    cols0 = gl.arange(0, YBLOCK, layout=gl.SliceLayout(0, layout))
    for i in range(count):
        a, b, slot = take_tiles(a_bufs, b_bufs, ready, i, layout)
        load_tiles(a_desc, b_desc, a_bufs, b_bufs, ready, slot, i + num_buffers, count, tiles_y, XBLOCK, YBLOCK)
        xoff, yoff = tile_origin(i, tiles_y, XBLOCK, YBLOCK)
        rows = xoff + rows0
        cols = yoff + cols0
        ptrs = c_ptr + rows.to(gl.int64)[:, None] * stride_cm + cols[None, :]
        c = a + b
        if (xoff + XBLOCK <= M) & (yoff + YBLOCK <= N):
            if EVICT_FIRST:
                gl.store(ptrs, c, eviction_policy="evict_first")
            else:
                gl.store(ptrs, c)
        else:
            gl.store(ptrs, c, mask=(rows < M)[:, None] & (cols < N)[None, :])
    for s in gl.static_range(num_buffers):
        mbarrier.invalidate(ready.index(s))


def register_store_add(a: Any, b: Any, out: Any, **config: Any) -> Any:
    dtype = dtypes.name_of(a.dtype)
    cfg = {"swizzle": 0, "ctas_per_sm": 1, "num_warps": 4, "evict_first": False, **config}
    block = [cfg["XBLOCK"], cfg["YBLOCK"]]
    layout = smem_layout(dtype, cfg)
    da, db = descriptor(a, block, "a", layout), descriptor(b, block, "b", layout)
    m, n = a.shape
    add_tma_register_store_kernel[persistent_grid(a, cfg)](
        da,
        db,
        out,
        out.stride(0),
        m,
        n,
        XBLOCK=cfg["XBLOCK"],
        YBLOCK=cfg["YBLOCK"],
        num_buffers=cfg["num_buffers"],
        layout=register_layout(dtypes.ITEMSIZE[dtype], cfg["YBLOCK"], cfg["num_warps"]),
        EVICT_FIRST=cfg["evict_first"],
        num_warps=cfg["num_warps"],
    )
    return out


def flat(t: Any) -> Any:
    return t.view(-1, FLAT_WIDTH)


def variants() -> list[tuple[str, Callable[..., Any], dict[str, Any], bool]]:
    """(label, launcher, fp32 config, on the flat view). 16-bit dtypes double YBLOCK up to 256,
    then XBLOCK, so tiles keep their bytes."""
    from tkreg_tma_elementwise.add_tma import add_tma
    from tkreg_warp_specialized_add.add_ws import add_warp_specialized

    t, ws, rs = add_tma, add_warp_specialized, register_store_add

    def tile(x: int, nb: int, ns: int, **kw: Any) -> dict[str, Any]:
        return dict(XBLOCK=x, YBLOCK=256, num_buffers=nb, num_store_buffers=ns, swizzle=0, **kw)

    def ws_tile(x: int, nb: int, ns: int) -> dict[str, Any]:
        return dict(XBLOCK=x, YBLOCK=256, num_load_buffers=nb, num_store_buffers=ns, swizzle=0)

    def rs_tile(x: int, nb: int, **kw: Any) -> dict[str, Any]:
        return dict(XBLOCK=x, YBLOCK=256, num_buffers=nb, **kw)

    one_tile = 1 << 20  # ctas_per_sm so large that the grid is one program per tile
    v: list[tuple[str, Callable[..., Any], dict[str, Any], bool]] = [
        ("tma default (swizzle 128)", t, {}, False),
        ("tma 16x256 swz0", t, tile(16, 4, 2), False),
        ("tma 8x256 swz0 8 slots", t, tile(8, 8, 2), False),
        ("tma 32x256 swz0 3 slots", t, tile(32, 3, 1), False),
        ("tma 16x256 swz0 6 slots", t, tile(16, 6, 1), False),
        ("tma 8x256 swz0 2 ctas/sm", t, tile(8, 4, 2, ctas_per_sm=2), False),
        ("tma 8x256 swz0 one tile/program", t, tile(8, 1, 1, ctas_per_sm=one_tile), False),
        ("tma 32x256 swz0 one tile/program", t, tile(32, 1, 1, ctas_per_sm=one_tile), False),
        ("flat tma 16x256 swz0", t, tile(16, 4, 2), True),
        ("flat tma 32x256 swz0 3 slots", t, tile(32, 3, 1), True),
        ("flat tma 16x256 swz128", t, {**tile(16, 4, 2), "swizzle": 128}, True),
        ("regstore 16x256 swz0", rs, rs_tile(16, 4), False),
        ("regstore 16x256 swz0 evict_first", rs, rs_tile(16, 4, evict_first=True), False),
        ("regstore 8x256 swz0 8 slots", rs, rs_tile(8, 8), False),
        ("regstore 16x256 swz0 8 warps", rs, rs_tile(16, 4, num_warps=8), False),
        ("regstore 16x256 swz128", rs, rs_tile(16, 4, swizzle=128), False),
        ("flat regstore 16x256 swz0", rs, rs_tile(16, 4), True),
        ("ws default (swizzle 128)", ws, {}, False),
        ("ws 16x256 swz0", ws, ws_tile(16, 5, 2), False),
        ("ws 8x256 swz0 8 slots", ws, ws_tile(8, 8, 3), False),
    ]
    return v


def for_dtype(config: dict[str, Any], itemsize: int) -> dict[str, Any]:
    c = dict(config)
    if "YBLOCK" in c and itemsize == 2:
        if c["YBLOCK"] * 2 <= 256:
            c["YBLOCK"] *= 2
        else:
            c["XBLOCK"] *= 2
    return c


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", action="store_true", help="no GPU: compile every variant for sm_90a")
    if parser.parse_args().plan:
        plan()
        return
    import torch
    import triton.testing

    out_dir = Path(os.environ.get("OUT", "."))
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

    # 1. exactness of every variant on an odd shape (flat ones on a flat-viewable shape)
    for dtype in (torch.float32, torch.bfloat16):
        for label, fn, cfg, is_flat in variants():
            shape = (333, 4096) if is_flat else (1000, 2008)
            a, b = (torch.randn(*shape, device="cuda", dtype=dtype) for _ in range(2))
            out = torch.full_like(a, float("nan"))
            try:
                args = (flat(a), flat(b), flat(out)) if is_flat else (a, b, out)
                fn(*args, **for_dtype(cfg, a.element_size()))
                torch.cuda.synchronize()
                wrong = int((out != (a.double() + b.double()).to(dtype)).sum())
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
    for m, n in SHAPES:
        for dtype in (torch.float32, torch.bfloat16):
            if (m, n) == SHAPES[0] or dtype == torch.float32:
                time_shape(data, m, n, dtype, broken, (src, dst), bench, log)
                torch.cuda.empty_cache()
    (out_dir / "add_probe.json").write_text(json.dumps(data, indent=1))
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
    for label, fn, cfg, is_flat in variants():
        if (label, str(dtype)) in broken or (is_flat and a.numel() % FLAT_WIDTH):
            continue
        args = (flat(a), flat(b), flat(out)) if is_flat else (a, b, out)
        config = for_dtype(cfg, a.element_size())
        work.append((label, lambda f=fn, c=config, x=args: f(*x, **c)))
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
    """Compile every variant for sm_90a through the launchers' own aot path where they have one."""
    from tkreg_tma_elementwise.add_tma import KERNEL as TMA
    from tkreg_warp_specialized_add.add_ws import KERNEL as WS

    from tkreg.aot import compile_spec

    for label, fn, cfg, _ in variants():
        for dtype in ("float32", "bfloat16"):
            c = for_dtype(cfg, dtypes.ITEMSIZE[dtype])
            spec = register_store_aot(dtype, c) if fn is register_store_add else (TMA if "tma" in label else WS).aot(dtype, c)
            code = compile_spec(spec, "sm_90a")
            stores = sorted(set(re.findall(r"\b(?:STG|UTMASTG)[.\w]*", code.sass)))
            print(f"{label:36s} {dtype}: shared {code.shared} {code.resources[:30]} {stores}")


def register_store_aot(dtype: str, config: dict[str, Any]) -> Any:
    from tkreg.aot import AotSpec
    from tkreg.tma import TRITON_TYPE, descriptor_signature

    cfg = {"swizzle": 0, "num_warps": 4, "evict_first": False, **config}
    desc = descriptor_signature(dtype, [cfg["XBLOCK"], cfg["YBLOCK"]], smem_layout(dtype, cfg))
    consts = {
        "XBLOCK": cfg["XBLOCK"],
        "YBLOCK": cfg["YBLOCK"],
        "num_buffers": cfg["num_buffers"],
        "layout": register_layout(dtypes.ITEMSIZE[dtype], cfg["YBLOCK"], cfg["num_warps"]),
        "EVICT_FIRST": cfg["evict_first"],
    }
    signature = {
        "a_desc": desc,
        "b_desc": desc,
        "c_ptr": f"*{TRITON_TYPE[dtype]}",
        "stride_cm": "i32",
        "M": "i32",
        "N": "i32",
        **dict.fromkeys(consts, "constexpr"),
    }
    return AotSpec(
        fn=add_tma_register_store_kernel,
        signature=signature,
        constexprs=consts,
        options={"num_warps": cfg["num_warps"]},
        aligned=("c_ptr", "stride_cm"),
    )


if __name__ == "__main__":
    main()
