"""Cross-check tkreg's device timer against triton.testing.do_bench on the same work (GPU only).

Both flush L2 between repetitions and read CUDA events; their medians should agree within a few
percent for kernels well above launch overhead. For short kernels behind slow launchers they
should not: do_bench then counts the launcher's host time, tkreg's timer (which holds the GPU
before each repetition) should not. The third column is the kernel's own duration as CUPTI
records it (torch.profiler), the reference for both. Prints one line per workload.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch
import triton.testing

from tkreg.timing import DeviceTimer


def main() -> None:
    timer = DeviceTimer()
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(16384, 16384, device="cuda", generator=gen)
    b = torch.randn(16384, 16384, device="cuda", generator=gen)
    c = torch.empty_like(a)
    s = torch.empty(16384, device="cuda")
    m = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16, generator=gen)
    n = torch.randn(4096, 8192, device="cuda", dtype=torch.bfloat16, generator=gen)
    o = torch.empty(8192, 8192, device="cuda", dtype=torch.bfloat16)
    work = {
        "torch.add 16384^2 fp32": lambda: torch.add(a, b, out=c),
        "torch.sum(dim=1) 16384^2 fp32": lambda: torch.sum(a, dim=1, out=s),
        "torch.matmul 8192x8192x4096 bf16": lambda: torch.matmul(m, n, out=o),
    }
    x, y = (torch.randn(1024, 1024, device="cuda", generator=gen) for _ in range(2))
    z = torch.empty_like(x)
    work["torch.add 1024^2 fp32"] = lambda: torch.add(x, y, out=z)
    try:  # the add plugins, if installed
        from tkreg_elementwise.add_triton import add_triton
        from tkreg_tma_elementwise.add_tma import add_tma

        work["add_triton 16384^2 fp32"] = lambda: add_triton(a, b, out=c)
        work["add_tma 16384^2 fp32"] = lambda: add_tma(a, b, out=c)
        work["add_triton 1024^2 fp32"] = lambda: add_triton(x, y, out=z)
        work["add_tma 1024^2 fp32"] = lambda: add_tma(x, y, out=z)
    except ImportError as e:
        print(f"add kernels not checked: {e}")
    print(f"{'workload':36s} {'tkreg ms':>10s} {'do_bench ms':>12s} {'ratio':>7s} {'CUPTI ms':>10s}")
    for name, fn in work.items():
        ours = statistics.median(timer.measure(fn))
        theirs = triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")
        print(f"{name:36s} {ours:10.4f} {theirs:12.4f} {ours / theirs:7.3f} {kernel_ms(timer, fn):>10s}")


def kernel_ms(timer: DeviceTimer, fn: Callable[[], Any], reps: int = 30) -> str:
    """Median duration of the work's own kernels per call as CUPTI records them, the flush's
    fill kernels left out; "n/a" when the profiler cannot say."""
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                timer.flush()
                fn()
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        ours = [e.time_range.elapsed_us() for e in kernels if "Fill" not in e.name and "fill" not in e.name]
        if len(ours) % reps:
            return f"n/a ({len(ours)} kernels)"
        per_call = [sum(ours[i : i + len(ours) // reps]) for i in range(0, len(ours), len(ours) // reps)]
        return f"{statistics.median(per_call) / 1e3:.4f}"
    except Exception as e:  # a diagnostic column: say why it is missing, keep the others
        return f"n/a ({type(e).__name__})"


if __name__ == "__main__":
    main()
