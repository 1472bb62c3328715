"""Host overhead of the add and sum_row launchers (issue #12, item 5), and a check that their fast
launch path (tkreg.launch.fastlaunch) computes exactly what the ordinary ``kernel[grid](...)`` path does.

Checks (one PASS/FAIL line each):
- every add and sum_row launcher, on odd shapes and layouts in each dtype: the fast path's output
  (calls after the first) is bit-identical to the ordinary path's (``fastlaunch.disabled()``),
  no call after the first took the ordinary path, and add equals the correctly rounded sum;
- bad CUDA inputs raise tkreg.InputError before any launch (and the GPU is fine afterwards);
- a registered launch hook sees every launch; a launch follows the current stream; a launch
  can be captured in a CUDA graph and replayed.
Timing at 256 x 256 fp32, host microseconds per call: 2000 calls queued then one synchronize (the
issue's measure: time to queue them, and with the synchronize), and one call with a synchronize
after each (median), for torch.add / torch.sum, a plain ``kernel[grid]`` launch, the same kernel
through a fastlaunch.Launcher and replayed from a CUDA graph, and every launcher with the fast
path (out given, out=None) and without it. Five rounds, median reported.

Writes $OUT/launch_overhead.json (timings) and $OUT/launch_overhead_checks.json (checks) with
tkreg.report.records; prints the table last. Budget: about 90 s on an H100, most of it compiling.

    python scripts/gpu/launch_overhead.py
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for plugin in ("elementwise", "tma_elementwise", "warp_specialized_add", "reductions"):
    sys.path.insert(0, str(ROOT / "plugins" / plugin))
sys.path.insert(0, str(ROOT))

CALLS = 2000  # queued calls per round (the measure)
SYNCED_CALLS = 300  # calls with a synchronize after each, per round
ROUNDS = 5
SHAPE = (256, 256)
TARGET_US = 20.0  # issue #12: every built-in launcher at most 20 us per call
checks: list[dict[str, Any]] = []


STARTED = time.perf_counter()


def check(name: str, ok: bool, detail: str = "") -> bool:
    checks.append({"check": name, "ok": bool(ok), "detail": detail})
    elapsed = time.perf_counter() - STARTED
    print(f"{'PASS' if ok else 'FAIL'}  [{elapsed:3.0f}s] {name}{'  ' + detail if detail else ''}", flush=True)
    return ok


def launchers() -> dict[str, dict[str, Callable[..., Any]]]:
    from tkreg_elementwise.add_triton import add_triton
    from tkreg_reductions.seed_kernels import sum_row, sum_row_blocked, sum_row_blocked_iterative
    from tkreg_reductions.tiled import sum_row_tiled
    from tkreg_tma_elementwise.add_tma import add_tma
    from tkreg_warp_specialized_add.add_ws import add_warp_specialized

    return {
        "add": {"add_triton": add_triton, "add_tma": add_tma, "add_warp_specialized": add_warp_specialized},
        "sum_row": {
            "sum_row": sum_row,
            "sum_row_blocked": sum_row_blocked,
            "sum_row_blocked_iterative": sum_row_blocked_iterative,
            "sum_row_tiled": sum_row_tiled,
        },
    }


def padded(m: int, n: int, pad: int, dtype: Any) -> Any:
    """An (m, n) view of rows ``pad`` elements long: not contiguous, yet TMA-legal when pad
    elements are a multiple of 16 bytes."""
    import torch

    return torch.randn(m, pad, device="cuda", dtype=dtype)[:, :n]


def add_cases() -> list[tuple[str, Any, Any]]:
    """(name, a, b): odd shapes, padded rows (TMA-legal, not contiguous), a transposed view (TMA
    kernels refuse it); every dtype, not every dtype with every shape (compile time)."""
    import torch

    f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16

    def rand(dtype: Any, *shape: int) -> Any:
        return torch.randn(*shape, device="cuda", dtype=dtype)

    cases = []
    for dtype in (f32, f16, bf16):
        cases.append(("333x520", rand(dtype, 333, 520), rand(dtype, 333, 520)))
    for dtype in (f32, bf16):
        cases.append(("257x129 in rows of 136", padded(257, 129, 136, dtype), padded(257, 129, 136, dtype)))
    cases.append(("1x4104", rand(f16, 1, 4104), rand(f16, 1, 4104)))
    cases.append(("129x257 transposed", rand(f32, 257, 129).t(), rand(f32, 257, 129).t()))
    return cases


def sum_cases() -> list[tuple[str, Any]]:
    """(name, x): odd row counts and lengths, a transposed view, a row sum split over programs."""
    import torch

    def rand(dtype: Any, *shape: int) -> Any:
        return torch.randn(*shape, device="cuda", dtype=dtype)

    return [
        ("37x1000", rand(torch.float32, 37, 1000)),
        ("37x1000", rand(torch.bfloat16, 37, 1000)),
        ("1025x33", rand(torch.float16, 1025, 33)),
        ("67x9 transposed", rand(torch.float32, 9, 67).t()),
        ("3x100000", rand(torch.float32, 3, 100000)),  # split in sum_row_tiled; whole-row kernels skip it
    ]


def fast_and_ordinary(fn: Callable[..., Any], inputs: tuple[Any, ...], new_out: Callable[[], Any]) -> tuple[Any, Any, int]:
    """(fast output, ordinary output, ordinary launches during the fast calls): the first call
    compiles and takes the ordinary path; the next two must not. Outputs start as NaN, so an
    element left unwritten fails the comparison."""
    import torch

    from tkreg import fastlaunch

    def poisoned() -> Any:
        return new_out().fill_(float("nan"))

    fn(*inputs, out=poisoned())
    before = fastlaunch.ordinary_launches()
    fast = poisoned()
    fn(*inputs, out=fast)
    fn(*inputs, out=fast)
    ordinary_calls = fastlaunch.ordinary_launches() - before
    with fastlaunch.disabled():
        plain = poisoned()
        fn(*inputs, out=plain)
    torch.cuda.synchronize()
    return fast, plain, ordinary_calls


def check_outputs() -> None:
    import torch
    from tkreg_elementwise.add_checks import new_output

    from tkreg import InputError

    kernels = launchers()
    for case, a, b in add_cases():
        label = f"{str(a.dtype).removeprefix('torch.')} {case}"
        want = (a.double() + b.double()).to(a.dtype)
        for name, fn in kernels["add"].items():
            try:
                fast, plain, ordinary = fast_and_ordinary(fn, (a, b), lambda a=a: new_output(a))
            except InputError as e:
                check(f"{name} {label}: refused", "transposed" in case and name != "add_triton", str(e)[:80])
                continue
            check(f"{name} {label}: fast == ordinary == exact sum, fast path taken",
                  torch.equal(fast, plain) and torch.equal(fast, want) and ordinary == 0, f"ordinary launches {ordinary}")
    for case, x in sum_cases():
        label = f"{str(x.dtype).removeprefix('torch.')} {case}"
        want = x.double().sum(dim=1)
        for name, fn in kernels["sum_row"].items():
            if case == "3x100000" and name in ("sum_row", "sum_row_blocked"):
                continue

            def new_sums(x: Any = x) -> Any:
                return torch.empty(x.shape[0], device="cuda", dtype=x.dtype)

            fast, plain, ordinary = fast_and_ordinary(fn, (x,), new_sums)
            error = ((fast.double() - want).abs() / want.abs().clamp_min(1.0)).max().item()
            tolerance = 1e-4 if x.dtype == torch.float32 else 2e-2  # a sanity bound; bit equality is the check
            check(f"{name} {label}: fast == ordinary, fast path taken",
                  torch.equal(fast, plain) and ordinary == 0 and error < tolerance,
                  f"ordinary launches {ordinary}, max rel error {error:.1e}")
    # out=None: a fresh output each call, same values
    a, b = (torch.randn(100, 64, device="cuda") for _ in range(2))
    for name, fn in kernels["add"].items():
        check(f"{name} out=None", torch.equal(fn(a, b), fn(a, b)) and torch.equal(fn(a, b), a + b))


def check_bad_inputs() -> None:
    import torch

    from tkreg import InputError

    kernels = launchers()
    f32 = {"device": "cuda", "dtype": torch.float32}
    a = torch.randn(64, 64, **f32)
    bad_add = {
        "float64": (a.double(), a.double(), {}),
        "shape mismatch": (a, torch.randn(64, 32, **f32), {}),
        "b on the CPU": (a, a.cpu(), {}),
        "out float16": (a, a, {"out": a.half()}),
        "out on the CPU": (a, a, {"out": a.cpu()}),
        "1-D": (a[0], a[0], {}),
    }
    bad_tma = {
        "misaligned base": (torch.randn(64 * 64 + 1, **f32)[1:].view(64, 64), a, {}),
        "rows of 33 floats": (torch.randn(64, 33, **f32), torch.randn(64, 33, **f32), {}),
        "transposed": (a.t(), a, {}),
    }
    for name, fn in kernels["add"].items():
        cases = {**bad_add, **(bad_tma if name != "add_triton" else {})}
        for case, (x, y, kw) in cases.items():
            try:
                fn(x, y, **kw)
                check(f"{name} refuses {case}", False, "no error")
            except InputError:
                check(f"{name} refuses {case}", True)
    x = torch.randn(32, 48, **f32)
    bad_sum = {
        "1-D": (x[0], {}),
        "int32": (x.int(), {}),
        "strided out": (x, {"out": torch.empty(64, **f32)[::2]}),
        "out of the wrong length": (x, {"out": torch.empty(31, **f32)}),
        "out on the CPU": (x, {"out": torch.empty(32)}),
    }
    for name, fn in kernels["sum_row"].items():
        for case, (t, kw) in bad_sum.items():
            try:
                fn(t, **kw)
                check(f"{name} refuses {case}", False, "no error")
            except InputError:
                check(f"{name} refuses {case}", True)
    torch.cuda.synchronize()
    check("the GPU is fine after the refusals", bool(torch.isfinite(torch.ones(1, device="cuda")).all()))


def check_hooks_streams_graphs() -> None:
    import torch
    import triton

    kernels = launchers()
    a, b = (torch.randn(*SHAPE, device="cuda") for _ in range(2))
    x = torch.randn(*SHAPE, device="cuda")
    every = [lambda fn=fn: fn(a, b, out=torch.empty_like(a)) for fn in kernels["add"].values()]
    every += [lambda fn=fn: fn(x, out=torch.empty(SHAPE[0], device="cuda")) for fn in kernels["sum_row"].values()]
    for call in every:
        call()  # compiled, fast path ready
    seen: list[Any] = []
    triton.knobs.runtime.launch_enter_hook.add(seen.append)
    try:
        for call in every:
            call()
    finally:
        triton.knobs.runtime.launch_enter_hook.remove(seen.append)
    # at 256 x 256 every launcher makes one launch (sum_row_tiled does not split)
    check("a launch hook sees every launch", len(seen) == len(every), f"{len(seen)} hook calls for {len(every)} launchers")

    # The fast path launches on the current stream: queued behind a long sleep on a side
    # stream, the add must see what that stream wrote before it.
    side = torch.cuda.Stream()
    for name, fn in kernels["add"].items():
        src, out = torch.zeros(*SHAPE, device="cuda"), torch.empty(*SHAPE, device="cuda")
        fn(src, b, out=out)
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(20_000_000)  # tens of milliseconds of GPU time
            src.fill_(1.0)
            fn(src, b, out=out)
        side.synchronize()
        check(f"{name} launches on the current stream", torch.equal(out, b + 1.0))

    # Captured in a CUDA graph and replayed on new data.
    for name, fn in kernels["add"].items():
        src, out = torch.randn(*SHAPE, device="cuda"), torch.empty(*SHAPE, device="cuda")
        fn(src, b, out=out)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn(src, b, out=out)
        src.copy_(torch.randn(*SHAPE, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        check(f"{name} captured in a CUDA graph", torch.equal(out, src + b))


def per_call_us(fn: Callable[[], Any]) -> dict[str, float]:
    """Host us per call: queued (CALLS calls, before the synchronize), with the synchronize, and
    with a synchronize after each call (median); medians over ROUNDS rounds."""
    import torch

    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    queued, waited, synced = [], [], []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(CALLS):
            fn()
        mid = time.perf_counter()
        torch.cuda.synchronize()
        end = time.perf_counter()
        queued.append((mid - start) / CALLS * 1e6)
        waited.append((end - start) / CALLS * 1e6)
        samples = []
        for _ in range(SYNCED_CALLS):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            samples.append((time.perf_counter() - t0) * 1e6)
        synced.append(statistics.median(samples))
    return {
        "queued_us": statistics.median(queued),
        "queued_min_us": min(queued),
        "queued_and_sync_us": statistics.median(waited),
        "synced_us": statistics.median(synced),
    }


def timing_rows() -> list[dict[str, Any]]:
    import torch
    from tkreg_elementwise.add_triton import add_contiguous_kernel
    from tkreg_reductions.seed_kernels import sum_row_kernel
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from tkreg import fastlaunch, tma

    m, n = SHAPE
    a, b, x = (torch.randn(m, n, device="cuda") for _ in range(3))
    out, sums = torch.empty_like(a), torch.empty(m, device="cuda")
    kernels = launchers()
    layout = tma.shared_layout([16, 256], a.dtype)
    add_launch = fastlaunch.Launcher(add_contiguous_kernel, BLOCK=1024, BF16_BY_HAND=False, num_warps=4)
    sum_launch = fastlaunch.Launcher(sum_row_kernel, BLOCK_N=256, num_warps=1)

    def plain_add() -> None:
        add_contiguous_kernel[(64,)](a, b, out, m * n, BLOCK=1024, BF16_BY_HAND=False, num_warps=4)

    def three_descriptors() -> list[Any]:
        return [TensorDescriptor.from_tensor(t, [16, 256], layout) for t in (a, b, out)]

    paths: list[tuple[str, str, Callable[[], Any]]] = [
        ("add", "torch.add(out=)", lambda: torch.add(a, b, out=out)),
        ("add", "plain kernel[grid]", plain_add),
        ("add", "fastlaunch.Launcher, same kernel", lambda: add_launch((64,), a, b, out, m * n)),
        ("add", "TensorDescriptor.from_tensor x3", three_descriptors),
        ("sum_row", "torch.sum(dim=1, out=)", lambda: torch.sum(x, dim=1, out=sums)),
        ("sum_row", "plain kernel[grid]", lambda: sum_row_kernel[(m,)](x, sums, m, n, n, 1, BLOCK_N=256, num_warps=1)),
        ("sum_row", "fastlaunch.Launcher, same kernel", lambda: sum_launch((m,), x, sums, m, n, n, 1)),
    ]
    graph = torch.cuda.CUDAGraph()
    plain_add()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        plain_add()
    paths.insert(2, ("add", "CUDA graph replay of that kernel", graph.replay))
    for name, fn in kernels["add"].items():
        paths.append(("add", name, lambda fn=fn: fn(a, b, out=out)))
        paths.append(("add", f"{name} out=None", lambda fn=fn: fn(a, b)))
        paths.append(("add", f"{name} ordinary launch", lambda fn=fn: fn(a, b, out=out)))
    for name, fn in kernels["sum_row"].items():
        paths.append(("sum_row", name, lambda fn=fn: fn(x, out=sums)))
        paths.append(("sum_row", f"{name} out=None", lambda fn=fn: fn(x)))
        paths.append(("sum_row", f"{name} ordinary launch", lambda fn=fn: fn(x, out=sums)))
    rows = []
    for op, path, fn in paths:
        if path.endswith("ordinary launch"):
            with fastlaunch.disabled():
                figures = per_call_us(fn)
        else:
            figures = per_call_us(fn)
        rows.append({"op": op, "path": path, "shape": f"{m}x{n}", "dtype": "fp32", **figures})
    grid = {r["op"]: r["queued_us"] for r in rows if r["path"] == "plain kernel[grid]"}
    for r in rows:
        name = r["path"]
        if name in kernels[r["op"]]:
            r["within_target"] = r["queued_us"] <= TARGET_US
            r["below_plain_kernel_grid"] = r["queued_us"] < grid[r["op"]]
            check(f"{name}: {r['queued_us']:.1f} us per call <= {TARGET_US:.0f} us", r["within_target"],
                  f"plain kernel[grid] {grid[r['op']]:.1f} us")
    return rows


def main() -> None:
    import torch

    from tkreg import records

    if not torch.cuda.is_available():
        sys.exit("launch_overhead.py needs a CUDA GPU")
    started = STARTED
    check_outputs()
    check_bad_inputs()
    check_hooks_streams_graphs()
    print(f"checks done in {time.perf_counter() - started:.0f} s", flush=True)
    rows = timing_rows()
    notes = ("host us per call at 256x256 fp32: queued = time to queue 2000 calls / 2000 (the issue's measure); "
             "queued_and_sync adds the final synchronize; synced = one call plus a synchronize (median of 300); "
             "medians over 5 rounds. 'ordinary launch' = the launcher with tkreg.launch.fastlaunch disabled.")
    records.save("launch_overhead", rows, notes=notes)
    records.save("launch_overhead_checks", checks)
    failed = [c["check"] for c in checks if not c["ok"]]
    for name in failed[:8]:
        print(f"FAILED: {name}")
    # One line per path; a launcher's line also shows its out=None and ordinary-launch figures.
    by_path = {(r["op"], r["path"]): r for r in rows}
    print(f"\n{torch.cuda.get_device_name()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"host us per call at {SHAPE[0]}x{SHAPE[1]} fp32 (median of {ROUNDS} rounds)")
    print(f"{'op':8s} {'path':33s} {'queued':>7s} {'+sync':>7s} {'synced':>7s} {'out=None':>9s} {'ordinary':>9s}")
    for r in rows:
        if r["path"].endswith((" out=None", " ordinary launch")):
            continue
        extra = [by_path.get((r["op"], f"{r['path']}{suffix}")) for suffix in (" out=None", " ordinary launch")]
        tail = "".join(f" {x['queued_us']:9.1f}" if x else f" {'':>9s}" for x in extra)
        print(f"{r['op']:8s} {r['path']:33s} {r['queued_us']:7.1f} {r['queued_and_sync_us']:7.1f} {r['synced_us']:7.1f}{tail}")
    print(f"{len(checks) - len(failed)} checks passed, {len(failed)} failed; {time.perf_counter() - started:.0f} s in all")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
