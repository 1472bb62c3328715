"""Host cost of one add launch on the GPU machine: on small inputs the launcher's Python work, not
the GPU, sets the pace (run 8: the Gluon adds read 110 GB/s at 1024^2, where torch.add reads 1350).

For torch.add, add_triton, add_tma and add_warp_specialized at 1024 x 1024 fp32: host
microseconds per call (CALLS calls queued without synchronizing), then a cProfile of the add_tma
launcher, heaviest functions first. Output to stdout and $OUT/add_host_cost.txt.

    python scripts/gpu/add_host_cost.py
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for plugin in ("elementwise", "tma_elementwise", "warp_specialized_add"):
    sys.path.insert(0, str(ROOT / "plugins" / plugin))
sys.path.insert(0, str(ROOT))

CALLS = 2000
SHAPE = (1024, 1024)


def per_call_us(fn: Callable[[], Any]) -> tuple[float, float]:
    """(host us per call, host + GPU us per call) over CALLS queued calls."""
    import torch

    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        fn()
    queued = time.perf_counter()
    torch.cuda.synchronize()
    done = time.perf_counter()
    return (queued - start) / CALLS * 1e6, (done - start) / CALLS * 1e6


def main() -> None:
    import torch
    from tkreg_elementwise.add_triton import add_triton
    from tkreg_tma_elementwise.add_tma import add_tma
    from tkreg_warp_specialized_add.add_ws import add_warp_specialized

    a, b = (torch.randn(*SHAPE, device="cuda") for _ in range(2))
    out = torch.empty_like(a)
    lines = [f"{torch.cuda.get_device_name()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {SHAPE} fp32"]
    for name, fn in (
        ("torch.add", lambda: torch.add(a, b, out=out)),
        ("add_triton", lambda: add_triton(a, b, out=out)),
        ("add_tma", lambda: add_tma(a, b, out=out)),
        ("add_warp_specialized", lambda: add_warp_specialized(a, b, out=out)),
    ):
        host, total = per_call_us(fn)
        lines.append(f"{name:22s} host {host:7.1f} us/call   host+GPU {total:7.1f} us/call")
        print(lines[-1], flush=True)

    profile = cProfile.Profile()
    profile.enable()
    for _ in range(CALLS):
        add_tma(a, b, out=out)
    profile.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(25)
    lines.append(text.getvalue())
    print(text.getvalue())
    (Path(os.environ.get("OUT", ".")) / "add_host_cost.txt").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
