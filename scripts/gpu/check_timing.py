"""Cross-check tkreg's device timer against triton.testing.do_bench on the same work (GPU only).

Both flush L2 between repetitions and read CUDA events; their medians should agree within a few
percent for kernels well above launch overhead. Prints one line per workload.
"""

from __future__ import annotations

import statistics

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
    try:
        from tkreg_elementwise.add_triton import add_triton  # the portable add, if installed

        work["add_triton 16384^2 fp32"] = lambda: add_triton(a, b, out=c)
    except ImportError as e:
        print(f"add_triton not checked: {e}")
    print(f"{'workload':36s} {'tkreg ms':>10s} {'do_bench ms':>12s} {'ratio':>7s}")
    for name, fn in work.items():
        ours = statistics.median(timer.measure(fn))
        theirs = triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")
        print(f"{name:36s} {ours:10.4f} {theirs:12.4f} {ours / theirs:7.3f}")


if __name__ == "__main__":
    main()
