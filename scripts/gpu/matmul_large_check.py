"""Check matmul_hopper_ws on large problems, repeatedly, through each launch path.

The op's correctness cases are small (seconds under the interpreter); the benchmark items time
large problems without checking them. This checks the large ones: the launcher's own choice run
several times (a race shows as a result that changes between runs), the same config through the
ordinary JIT launch (a launch hook forces it) and under other schedulers, against the float64
product rounded once to the output dtype, with the output poisoned (NaN) before every run.
Prints one PASS/FAIL line per run and saves the rows (tkreg.report.records: "matmul_large_check").

    python scripts/gpu/matmul_large_check.py [--repeat N] [--hot]
"""

from __future__ import annotations

import argparse
import functools
import time
from typing import Any

SHAPES = ((16384, 4096, 14336, "kn"), (16384, 4096, 14336, "nk"), (8192, 8192, 8192, "kn"), (8192, 8192, 16384, "kn"),
          (4096, 4096, 4096, "nk"), (2048, 14336, 4096, "nk"))  # fmt: skip
SCHEDULERS = ("grouped-8", "persistent", "grouped-1")
HOT_MS = 100  # back-to-back work before a checked run in --hot mode


def operands(M: int, N: int, K: int, layout: str, dtype: Any, seed: int) -> tuple[Any, Any]:
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)

    def randn(*shape: int) -> Any:
        return torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(dtype)

    return randn(M, K), (randn(K, N) if layout == "kn" else randn(N, K).t())


def wrong(out: Any, ref: Any, K: int) -> tuple[int, int]:
    """(elements outside the op's tolerance, elements still NaN-poisoned)."""
    import torch
    from tkreg_matmul.op import TOLERANCES, tolerance_scale

    tol = TOLERANCES[str(out.dtype).removeprefix("torch.")]
    got = out.double()
    bad = ~((got - ref).abs() <= tol.atol * tolerance_scale({"K": K}) + tol.rtol * ref.abs())
    return int(bad.sum()), int(torch.isnan(got).sum())


def main() -> int:
    import torch
    import triton
    import triton.testing
    from tkreg_hopper_matmul.launch import _resolved, launch_plan, matmul_hopper_ws
    from tkreg_matmul.gluon_common import num_sms

    from tkreg import records

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of the launcher's own choice per case (default 3)")
    parser.add_argument("--hot", action="store_true",
                        help="before each checked run, what preceded the failures seen in matmul_suite.py on 2026-11-23: "
                        "cuBLAS into the same output timed with do_bench_cudagraph, and the run itself back to back "
                        "for about HOT_MS (default: off)")  # fmt: skip
    args = parser.parse_args()
    rows, failures, start = [], 0, time.monotonic()

    def hook(*_: Any, **__: Any) -> None:  # its presence sends every launch through kernel[grid]
        return None

    for dtype in (torch.bfloat16, torch.float16):
        for M, N, K, layout in SHAPES:
            a, b = operands(M, N, K, layout, dtype, seed=M + N + K)
            ref = (a.double() @ b.double()).to(dtype).double()
            out = torch.empty((M, N), dtype=dtype, device="cuda")
            plan = launch_plan(M, N, K, layout, num_sms(a.device), None, None)
            params = plan.config.params()
            # (label, keyword arguments of the call): the pick as the launcher makes it, then its
            # config under each scheduler.
            runs: list[tuple[str, dict[str, Any]]] = [(f"launcher #{i + 1}", {}) for i in range(args.repeat)]
            runs.append(("launcher, JIT path", {}))
            runs += [(f"pick's config, {s}", {"scheduler": s, **params}) for s in SCHEDULERS]
            for label, kwargs in runs:
                jit = "JIT" in label
                if jit:
                    triton.knobs.runtime.launch_enter_hook.add(hook)
                try:
                    if args.hot:
                        triton.testing.do_bench_cudagraph(functools.partial(torch.matmul, a, b, out=out), rep=HOT_MS)
                        for _ in range(max(1, int(HOT_MS / 2))):
                            matmul_hopper_ws(a, b, out=out, **kwargs)
                    out.fill_(float("nan"))
                    matmul_hopper_ws(a, b, out=out, **kwargs)
                    torch.cuda.synchronize()
                    bad, nan = wrong(out, ref, K)
                    error = ""
                except Exception as e:  # reported as a failure of this run
                    bad, nan, error = -1, -1, f"{type(e).__name__}: {e}"[:200]
                finally:
                    if jit:
                        triton.knobs.runtime.launch_enter_hook.remove(hook)
                ok = bad == 0
                failures += not ok
                case = f"{M}x{N}x{K} {layout} {str(dtype).removeprefix('torch.')}"
                detail = error or f"{bad} wrong, {nan} NaN of {out.numel()}"
                print(f"{'PASS' if ok else 'FAIL'} [{time.monotonic() - start:5.1f}s] {case} {label}: {detail}"
                      f" ({plan.config.BLOCK_M}x{plan.config.BLOCK_N}x{plan.config.BLOCK_K} s{plan.config.NUM_STAGES}"
                      f" c{plan.config.CONSUMERS} k{plan.split_k} {plan.scheduler})", flush=True)  # fmt: skip
                rows.append({"case": case, "run": label, "ok": ok, "wrong": bad, "nan": nan, "error": error,
                             "config": plan.config.params(), "scheduler": str(plan.scheduler)})  # fmt: skip
            a = b = ref = out = None  # free before the next case's operands
            _resolved.clear()
    records.save("matmul_large_check", rows, notes="matmul_hopper_ws on large problems, poisoned output, float64 reference")
    print(f"{len(rows) - failures} of {len(rows)} runs correct; {time.monotonic() - start:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
