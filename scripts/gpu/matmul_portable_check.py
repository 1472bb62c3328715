"""matmul_triton on a GPU (budget about 30 s, compiles included): correctness of every config on the
op's default cases in fp16 and bf16, then one timing each at 8192^3 bf16 for the launcher's
candidate configs next to torch.matmul. Prints a table and writes matmul_portable_check.json to $OUT.
"""

from __future__ import annotations

import json
import os
import time

BUDGET_S = 30.0
CHECK_BUDGET_S = 18.0  # correctness stops starting new checks after this; timings need the rest
BENCH_SIZE = 8192
WARMUP_MS, REP_MS = 25, 100  # do_bench windows: about 40 runs of a 2 ms matmul after warm-up


def main() -> None:
    import torch
    import triton.testing
    from tkreg_matmul.configs import CANDIDATES, describe, pick_config
    from tkreg_matmul.op import cost
    from tkreg_matmul.triton_kernel import matmul_triton

    from tkreg.harness import run_check
    from tkreg.loading import build_registry

    start = time.monotonic()
    registry = build_registry()
    kernel = registry.kernel("matmul_triton")
    cases = registry.op("matmul").cases_in("default")
    result: dict = {"device": torch.cuda.get_device_name(), "checks": [], "timings": []}

    print(f"{'config':44s} {'case':22s} {'dtype':9s} result")
    for config in kernel.configs:
        label = describe(config)
        for case in cases:
            for dtype in ("float16", "bfloat16"):
                if time.monotonic() - start > CHECK_BUDGET_S:
                    print(f"{label:44s} {case.id:22s} {dtype:9s} not run (time budget)")
                    continue
                try:
                    check = run_check(registry, kernel, case, dtype, dict(config), seed=11, device="cuda")
                    ok, detail = check.comparison.ok, "" if check.comparison.ok else check.comparison.report(check.context)
                except Exception as e:  # one broken config must not stop the others
                    ok, detail = False, f"{type(e).__name__}: {e}"
                result["checks"].append({"config": label, "case": case.id, "dtype": dtype, "ok": ok, "detail": detail})
                if not ok:
                    print(f"{label:44s} {case.id:22s} {dtype:9s} FAIL {detail.splitlines()[0] if detail else ''}")
    failed = sum(not c["ok"] for c in result["checks"])
    print(f"correctness: {len(result['checks']) - failed} passed, {failed} failed  [{time.monotonic() - start:.1f}s]")

    gen = torch.Generator(device="cuda").manual_seed(0)
    n = BENCH_SIZE
    a = torch.randn(n, n, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(n, n, device="cuda", generator=gen).to(torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    flops = cost({"M": n, "N": n, "K": n}, 2).flops
    picked = pick_config(n, n, n, a.device)
    runs = {"torch.matmul": lambda: torch.matmul(a, b, out=c)}
    for config in CANDIDATES:
        label = describe(config) + (" (picked)" if config == picked else "")
        runs[label] = lambda config=config: matmul_triton(a, b, out=c, **config)
    print(f"\n{'8192^3 bf16':44s} {'ms':>8s} {'TFLOP/s':>8s} {'vs torch':>8s}")
    peer_ms = None
    for label, fn in runs.items():
        if time.monotonic() - start > BUDGET_S - 2:
            print(f"{label:44s} not timed (time budget)")
            continue
        try:
            ms = triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS, return_mode="median")
        except Exception as e:
            print(f"{label:44s} FAILED {type(e).__name__}: {e}")
            result["timings"].append({"config": label, "error": f"{type(e).__name__}: {e}"})
            continue
        peer_ms = ms if peer_ms is None else peer_ms
        tflops = flops / ms * 1e-9
        print(f"{label:44s} {ms:8.3f} {tflops:8.1f} {peer_ms / ms:8.2f}")
        result["timings"].append({"config": label, "ms": ms, "tflops": tflops, "vs_torch": peer_ms / ms})

    elapsed = time.monotonic() - start
    result["elapsed_s"] = elapsed
    out_dir = os.environ.get("OUT", ".")
    with open(os.path.join(out_dir, "matmul_portable_check.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(f"elapsed {elapsed:.1f}s")


if __name__ == "__main__":
    main()
