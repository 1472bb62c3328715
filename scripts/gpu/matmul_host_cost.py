"""Host time per call of the matmul launchers (issue 12's target: at most 20 us at 256x256 on an
H100, where torch.matmul costs about 11 us), and a check that the fast launch path computes what the
JIT path does. About 20 s.

    python scripts/gpu/matmul_host_cost.py

For each launcher and case: one call through the JIT path (the launcher's first), one through the
fast path (its second), both compared with the float64 product (the op's tolerance) and with each
other (bit for bit); then CALLS calls back to back, wall clock, one synchronization at the end
(what a Python caller pays while the GPU keeps up: the kernels themselves are a few microseconds).
Prints PASS/FAIL per check and a table last; rows go to $OUT/matmul_host_cost.json.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for _plugin in ("matmul", "schedulers", "hopper_matmul", "blackwell_matmul"):
    sys.path.insert(0, str(ROOT / "plugins" / _plugin))
sys.path.insert(0, str(ROOT))

CALLS = 2000
REPEATS = 3  # the median of three rounds of CALLS calls
TARGET_US = 20.0
# (M, N, K, B layout, out given): the 256^3, a weight, a fresh output, and a decode shape
# whose pick is split-K (two launches: the matmul and the reduction).
CASES = ((256, 256, 256, "kn", True), (256, 256, 256, "nk", True), (256, 256, 256, "kn", False), (16, 4096, 4096, "nk", True))


def per_call_us(fn: Callable[[], Any]) -> float:
    import statistics

    import torch

    rounds = []
    for _ in range(REPEATS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - start) / CALLS * 1e6)
    return statistics.median(rounds)


def main() -> None:
    import torch
    from tkreg_matmul.op import TOLERANCES, tolerance_scale

    from tkreg import records

    launchers: dict[str, Callable[..., Any]] = {"torch.matmul": lambda a, b, out=None: torch.matmul(a, b, out=out)}
    from tkreg_matmul.triton_kernel import matmul_triton

    major, _ = torch.cuda.get_device_capability()
    if major == 9:
        from tkreg_hopper_matmul.launch import matmul_hopper_ws

        launchers["matmul_hopper_ws"] = matmul_hopper_ws
    if major == 10:
        from tkreg_blackwell_matmul.launcher import matmul_blackwell_ws

        launchers["matmul_blackwell_ws"] = matmul_blackwell_ws
    launchers["matmul_triton"] = matmul_triton
    rows, failures = [], 0
    g = torch.Generator(device="cuda").manual_seed(0)
    for M, N, K, layout, out_given in CASES:
        a = torch.randn(M, K, device="cuda", generator=g).bfloat16()
        b = torch.randn(K, N, device="cuda", generator=g).bfloat16()
        if layout == "nk":
            b = b.t().contiguous().t()
        ref = (a.double() @ b.double()).bfloat16().double()
        tol = TOLERANCES["bfloat16"]
        bound = tol.atol * tolerance_scale({"K": K}) + tol.rtol * ref.abs()
        label = f"{M}x{N}x{K} {layout} {'out=' if out_given else 'new out'}"
        for name, launch in launchers.items():
            outs = []
            for _ in range(2):  # the first call: JIT path (and compile); the second: fast path
                out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
                got = launch(a, b, out=out) if out_given else launch(a, b)
                torch.cuda.synchronize()
                outs.append(got)
            ok = all(bool(((o.double() - ref).abs() <= bound).all()) for o in outs) and torch.equal(outs[0], outs[1])
            failures += not ok
            print(f"{'PASS' if ok else 'FAIL'} {name} {label}: first and second call within tolerance and equal", flush=True)
            kwargs = {"out": torch.empty((M, N), device="cuda", dtype=torch.bfloat16)} if out_given else {}
            us = per_call_us(functools.partial(launch, a, b, **kwargs))
            rows.append({"launcher": name, "case": label, "M": M, "N": N, "K": K, "layout": layout, "out_given": out_given,
                         "host_us_per_call": us})  # fmt: skip
    records.save("matmul_host_cost", rows, notes=f"wall clock of {CALLS} calls then one synchronization, median of {REPEATS}")
    print(f"\n{'launcher':22s} {'case':28s} {'us/call':>8s}")
    for r in rows:
        verdict = "" if r["launcher"] == "torch.matmul" else ("PASS" if r["host_us_per_call"] <= TARGET_US else "FAIL")
        target = r["M"] == 256 and r["launcher"] != "torch.matmul"
        print(f"{r['launcher']:22s} {r['case']:28s} {r['host_us_per_call']:8.1f} {verdict if target else ''}")
    print(f"{'PASS' if failures == 0 else 'FAIL'}: {failures} correctness failures; target {TARGET_US} us at 256x256")


if __name__ == "__main__":
    main()
