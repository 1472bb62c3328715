"""The matmul suite on an H100: correctness of every Hopper config, then the launchers' picks against
cuBLAS and against the other candidates on every benchmark shape, and the measured choice tables.

    python scripts/gpu/matmul_suite.py            # on the H100: about 4-5 minutes, compiles included
    python scripts/gpu/matmul_suite.py --plan     # no GPU: the cases, candidates, counts and estimate

Sections (elapsed time printed after each; the budget, 330 s by default, stops new timings in time):
0. compile: every kernel variant the run needs, in parallel worker processes that call the real
   launchers on small inputs of the same specialization (triton's on-disk cache then serves the
   main process).
1. correctness (PASS/FAIL per line): matmul_hopper_ws with every registered config x scheduler x B
   layout, and with its own choice, on odd shapes (one row, partial tiles, K tails, a split-K slice
   that ends past K), fp16 and bf16 for the choice; matmul_triton with every candidate config on
   both layouts. Reference: float64 on the GPU, output poisoned with NaN, the op's tolerance.
2. timing (device time by tkreg.testing.timing.DeviceTimer, median, as the benchmark items measure it: L2
   flushed before each call, so the weight comes from DRAM as in a model's forward pass, where
   every layer's weights differ; cross-checked by do_bench_cudagraph, which leaves L2 hot, for
   cuBLAS and the pick): on each benchmark case of the
   matmul op (the Llama-3-8B projections in both layouts, 3000x5000x2000, 8192^2 x K) and on the
   projections at M = 64, in bf16 and
   fp16: cuBLAS (torch.matmul on the same tensors: a weight's transposed view is cuBLAS's TN case),
   the Hopper launcher's pick (also checked against float64), and the candidates: every tile with
   the K split the model ranks best for it, pruned where the model estimates it PRUNE x slower than
   its best, grouped-8; the model's top two also with the other schedulers; at M <= 128 every
   64-row tile with 1, 2, 4 and 8 K slices as well (fp16: the pick and the two fastest bf16
   configs). matmul_triton (bf16): its pick and the model's next two.
3. the table: TFLOP/s and ratio to cuBLAS per case, layout and dtype, the pick, the best config and
   the pick's distance from it; geometric means; the misses against the issue's goals
   (M >= 256: 0.95x cuBLAS, M <= 128: 0.9x, the pick within 3% of the best).

Writes to $OUT (default ./out): matmul_suite.json (every measurement, tkreg.report.records envelope),
hopper_choice.json and triton_choice.json: the choice tables in the launchers' format (copy them to
plugins/hopper_matmul/tkreg_hopper_matmul/choice.json and plugins/matmul/tkreg_matmul/triton_choice.json;
a second run then times the measured picks).
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for _plugin in ("matmul", "schedulers", "hopper_matmul"):
    sys.path.insert(0, str(ROOT / "plugins" / _plugin))
sys.path.insert(0, str(ROOT))

from tkreg_hopper_matmul import choice as hopper_choice  # noqa: E402
from tkreg_hopper_matmul import model as hopper_model  # noqa: E402
from tkreg_hopper_matmul.config import REGISTERED, TILES, HopperConfig, effective_split_k  # noqa: E402
from tkreg_matmul import configs as triton_configs  # noqa: E402
from tkreg_matmul.choice_table import Entry, Table  # noqa: E402

BUDGET_S = 480.0
RESERVE_S = 25.0  # past BUDGET_S - RESERVE_S only cuBLAS and the picks are timed
HANG_S = 30.0
REP_MS = 10  # do_bench_cudagraph (the cross-check): 10 graph replays of about REP_MS each
TIMER_MS = 40.0  # DeviceTimer: device time of the measured repetitions per timing
WARMUP_MS = 3.0  # DeviceTimer's warm-up per timing (the compile workers already ran every variant)
SMALL_M = 128  # up to here, the 64-row tiles are timed with several K splits
SMALL_M_SPLITS = (1, 2, 4, 8)
H100_SMS = 132
PRUNE = 1.6  # candidates the model estimates this much slower than its best are not timed
SCHEDULERS = ("persistent", "grouped-1", "grouped-8")
MAIN_SCHEDULER = hopper_choice.MODEL_SCHEDULER
SCHEDULER_TIE = 0.01  # a table entry keeps MAIN_SCHEDULER unless another is more than 1% faster
CHECK_SHAPES = ((1, 72, 296), (333, 520, 1000), (1031, 776, 4104))
DTYPES = ("bfloat16", "float16")
SHORT = {"bfloat16": "bf16", "float16": "fp16"}
LAYOUT_OF_VARIANT = {"": "kn", "weight": "nk"}
GOAL_LARGE, GOAL_SMALL, GOAL_PICK = 0.95, 0.90, 0.03


# -- what to run ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    M: int
    N: int
    K: int
    layout: str

    @property
    def label(self) -> str:
        return f"{self.M}x{self.N}x{self.K} {self.layout}"

    @property
    def flops(self) -> float:
        return 2.0 * self.M * self.N * self.K


@dataclass(frozen=True)
class Candidate:
    kernel: str  # "hopper" or "triton"
    params: tuple[tuple[str, Any], ...]  # () = the launcher's own choice
    scheduler: str | None = None

    @property
    def is_pick(self) -> bool:
        return not self.params

    def label(self) -> str:
        if self.is_pick:
            return f"{self.kernel} pick"
        p = dict(self.params)
        if self.kernel == "hopper":
            c = HopperConfig.from_params(p)
            kind = "pp" if c.PINGPONG else f"c{c.CONSUMERS}"
            epi = f" e{c.EPILOGUE_SPLIT}" if c.EPILOGUE_SPLIT > 1 else ""
            return f"{c.BLOCK_M}x{c.BLOCK_N}x{c.BLOCK_K} s{c.NUM_STAGES} {kind}{epi} k{c.SPLIT_K} {self.scheduler}"
        return triton_configs.describe(p)


def hopper(config: HopperConfig, scheduler: str) -> Candidate:
    return Candidate("hopper", tuple(asdict(config).items()), scheduler)


def triton(config: dict[str, Any]) -> Candidate:
    return Candidate("triton", tuple(config.items()))


def suite_cases() -> list[Case]:
    """The matmul op's benchmark cases, plus M = 64 (decode with a larger batch, one of the issue's
    targets, not among the op's benchmark token counts) for each Llama projection in both layouts."""
    from tkreg_matmul.plugin import LLAMA_NK

    from tkreg.core.loading import build_registry

    op = build_registry().op("matmul")
    cases = [Case(c["M"], c["N"], c["K"], LAYOUT_OF_VARIANT[c.variant]) for c in op.cases_in("bench")]
    return cases + [Case(64, n, k, layout) for n, k in LLAMA_NK for layout in ("kn", "nk")]


def hopper_pick(case: Case) -> tuple[HopperConfig, str]:
    pick = hopper_choice.choose(case.M, case.N, case.K, case.layout, H100_SMS)
    return replace(pick.config, SPLIT_K=effective_split_k(case.K, pick.config)), pick.scheduler


def hopper_candidates(case: Case) -> list[Candidate]:
    """Every tile with its best K split by the model, those within PRUNE of the best estimate (at
    least three), grouped-8; the model's top two with the other schedulers too."""
    ranked = hopper_model.ranked(case.M, case.N, case.K, TILES, H100_SMS)
    best_s = ranked[0][0].seconds
    per_tile: dict[tuple, tuple[float, HopperConfig]] = {}
    for estimate, config in ranked:
        key = replace(config, SPLIT_K=1)
        per_tile.setdefault(key, (estimate.seconds, config))
    kept = sorted(per_tile.values(), key=lambda item: item[0])
    configs = [c for i, (s, c) in enumerate(kept) if i < 3 or s <= PRUNE * best_s]
    out = [hopper(c, MAIN_SCHEDULER) for c in configs]
    out += [hopper(c, s) for c in configs[:2] for s in SCHEDULERS if s != MAIN_SCHEDULER]
    if case.M <= SMALL_M:  # memory-bound: the model ranks these close; measure rather than trust it
        for tile in TILES:
            if tile.BLOCK_M != 64:
                continue
            for split in SMALL_M_SPLITS:
                config = replace(tile, SPLIT_K=effective_split_k(case.K, replace(tile, SPLIT_K=split)))
                if not config.problems() and hopper(config, MAIN_SCHEDULER) not in out:
                    out.append(hopper(config, MAIN_SCHEDULER))
    # The launcher's pick as explicit parameters too, so a table entry never loses to a pruned list.
    pick = hopper(*hopper_pick(case))
    return out if pick in out else [*out, pick]


def triton_pick(case: Case) -> dict[str, Any]:
    return triton_configs.choose(case.M, case.N, case.K, case.layout, H100_SMS)


def triton_candidates(case: Case) -> list[Candidate]:
    """The model's three fastest configs (the pick is timed as well, as the launcher runs it)."""
    ranked = sorted(triton_configs.CANDIDATES, key=lambda c: triton_configs.estimate(case.M, case.N, case.K, c, H100_SMS))
    out = [triton(dict(c)) for c in ranked[:3]]
    pick = triton(triton_pick(case))
    return out if pick in out else [*out, pick]


# -- inputs, checks, timing ------------------------------------------------------------------------
def make_operands(M: int, N: int, K: int, layout: str, dtype: Any, seed: int) -> tuple[Any, Any]:
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)

    def randn(*shape: int) -> Any:
        return torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(dtype)

    a = randn(M, K)
    b = randn(K, N) if layout == "kn" else randn(N, K).t()
    return a, b


def check(out: Any, a: Any, b: Any) -> tuple[bool, str]:
    """Against the float64 product rounded once to the output dtype, with the op's tolerance
    (tkreg_matmul.op explains it); NaN (the poison of unwritten elements) fails."""
    import torch
    from tkreg_matmul.op import TOLERANCES, tolerance_scale

    K = a.shape[1]
    tol = TOLERANCES[str(out.dtype).removeprefix("torch.")]
    ref = (a.double() @ b.double()).to(out.dtype).double()
    err = (out.double() - ref).abs()
    bad = ~(err <= tol.atol * tolerance_scale({"K": K}) + tol.rtol * ref.abs())
    count = int(bad.sum())
    if count == 0:
        return True, ""
    unwritten = int(torch.isnan(out).sum())
    worst = float(torch.nan_to_num(err, nan=math.inf).max())
    return False, f"{count} of {out.numel()} wrong ({unwritten} NaN), max err {worst:.3g}"


class Hung(RuntimeError):
    pass


def wait(what: str) -> None:
    """Wait for the GPU without blocking in the driver, so a deadlock becomes an exception."""
    import torch

    done = torch.cuda.Event()
    done.record()
    start = time.monotonic()
    while not done.query():
        if time.monotonic() - start > HANG_S:
            raise Hung(f"{what} did not finish within {HANG_S:.0f} s")
        time.sleep(1e-4)


def launcher(candidate: Candidate) -> Callable[..., Any]:
    if candidate.kernel == "hopper":
        from tkreg_hopper_matmul.launch import matmul_hopper_ws

        return matmul_hopper_ws
    from tkreg_matmul.triton_kernel import matmul_triton

    return matmul_triton


def call_for(candidate: Candidate, a: Any, b: Any, out: Any) -> Callable[[], Any]:
    fn = launcher(candidate)
    kwargs = dict(candidate.params)
    if candidate.scheduler is not None:
        kwargs["scheduler"] = candidate.scheduler
    return lambda: fn(a, b, out=out, **kwargs)


@functools.cache
def device_timer() -> Any:
    from tkreg.testing.timing import DeviceTimer

    return DeviceTimer(target_ms=TIMER_MS, warmup_ms=WARMUP_MS)


def device_ms(fn: Callable[[], Any]) -> float:
    """Median device time (ms) by the benchmark items' timer: L2 flushed before each call."""
    return statistics.median(device_timer().measure(fn))


def cudagraph_ms(fn: Callable[[], Any]) -> float:
    """The cross-check: triton.testing.do_bench_cudagraph's median (no L2 flush between calls)."""
    import triton.testing

    return triton.testing.do_bench_cudagraph(fn, rep=REP_MS, return_mode="median")


# -- the run ---------------------------------------------------------------------------------------
@dataclass
class Run:
    budget_s: float
    start: float = field(default_factory=time.monotonic)
    rows: list[dict[str, Any]] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def late(self) -> bool:
        return self.elapsed() > self.budget_s - RESERVE_S

    def section(self, name: str) -> None:
        print(f"--- {name} (elapsed {self.elapsed():.0f} s)", flush=True)

    def error(self, what: str, exc: BaseException) -> None:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[-1]
        print(f"ERROR {what}: {text}", flush=True)
        self.errors.append({"what": what, "error": text})


def compile_tasks(cases: list[Case]) -> list[dict[str, Any]]:
    """Every variant the run compiles, as launcher calls on small inputs of the same specialization.
    Hopper: the descriptors' types and the constexprs decide the kernel, not the sizes, except that
    a split-K config needs enough K steps to stay split. matmul_triton: the JIT specializes sizes on
    divisibility by 16 (and the launcher's ALIGN on 8), so the stand-in sizes keep both."""

    def proxy(x: int) -> int:
        return 64 if x % 16 == 0 else 24 if x % 8 == 0 else 33

    tasks: dict[tuple, dict[str, Any]] = {}

    def add(candidate: Candidate, layout: str, dtype: str, shape: tuple[int, int, int], exact: bool = False) -> None:
        params = dict(candidate.params)
        if candidate.kernel == "hopper":
            key_params = {**params, "SPLIT_K": min(params.get("SPLIT_K", 1), 2)}
            shape = (64, 64, 1024)
            key = ("hopper", tuple(sorted(key_params.items())), candidate.scheduler, layout, dtype)
        else:
            if not exact:
                shape = (proxy(shape[0]), proxy(shape[1]), proxy(shape[2]))
            key = ("triton", candidate.params, layout, dtype, shape)
        tasks.setdefault(key, {"candidate": candidate, "layout": layout, "dtype": dtype, "shape": shape})

    for config in REGISTERED:
        for scheduler in SCHEDULERS:
            for layout in ("kn", "nk"):
                add(hopper(config, scheduler), layout, "bfloat16", (64, 64, 1024))
    for M, N, K in CHECK_SHAPES:
        for layout in ("kn", "nk"):
            check_case = Case(M, N, K, layout)
            for dtype in DTYPES:
                add(hopper(*hopper_pick(check_case)), layout, dtype, (M, N, K))
                add(triton(triton_pick(check_case)), layout, dtype, (M, N, K), exact=True)
            for config in triton_configs.CANDIDATES:
                add(triton(dict(config)), layout, "bfloat16", (M, N, K), exact=True)
    for case in cases:
        config, scheduler = hopper_pick(case)
        for dtype in DTYPES:
            add(hopper(config, scheduler), case.layout, dtype, (case.M, case.N, case.K))
        for candidate in hopper_candidates(case):
            add(candidate, case.layout, "bfloat16", (case.M, case.N, case.K))
        shape = (case.M, case.N, case.K)
        for candidate in [triton(triton_pick(case)), *triton_candidates(case)]:
            add(candidate, case.layout, "bfloat16", shape)
    return list(tasks.values())


def compile_worker(tasks: list[dict[str, Any]]) -> list[str]:
    """In a worker process: run each task's launcher once (compiling it into triton's cache)."""
    import torch

    problems = []
    for task in tasks:
        candidate, (M, N, K) = task["candidate"], task["shape"]
        what = f"{candidate.label()} {M}x{N}x{K} {task['layout']} {task['dtype']}"
        try:
            a, b = make_operands(M, N, K, task["layout"], getattr(torch, task["dtype"]), seed=0)
            out = torch.empty((M, N), device="cuda", dtype=a.dtype)
            call_for(candidate, a, b, out)()
            wait(what)
        except Hung as e:  # this process's GPU context is stuck: stop here, the main process aborts
            problems.append(f"HUNG {e}")
            break
        except Exception as e:  # reported by the main process; the timing then skips the variant
            problems.append(f"{what}: {type(e).__name__}: {e}")
    return problems


def precompile(run: Run, cases: list[Case], workers: int) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    tasks = compile_tasks(cases)
    chunks = [tasks[i::workers] for i in range(workers)]
    print(f"{len(tasks)} variants on {workers} workers", flush=True)
    hung = []
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for problems in pool.map(compile_worker, chunks):
            for p in problems:
                print(f"compile problem: {p}", flush=True)
                run.errors.append({"what": "compile", "error": p})
                hung += [p] if p.startswith("HUNG") else []
    if hung:
        raise Hung(f"{len(hung)} variant(s) hung while compiling: {hung[0]}")


def correctness(run: Run) -> None:
    import torch

    work: list[tuple[Candidate, tuple[int, int, int], str, str]] = []
    for shape in CHECK_SHAPES:
        for layout in ("kn", "nk"):
            for config in REGISTERED:
                for scheduler in SCHEDULERS:
                    work.append((hopper(config, scheduler), shape, layout, "bfloat16"))
            for dtype in DTYPES:
                work.append((Candidate("hopper", ()), shape, layout, dtype))
                work.append((Candidate("triton", ()), shape, layout, dtype))
            for config in triton_configs.CANDIDATES:
                work.append((triton(dict(config)), shape, layout, "bfloat16"))
    for i, (candidate, (M, N, K), layout, dtype) in enumerate(work):
        what = f"{candidate.label()} {M}x{N}x{K} {layout} {dtype}"
        a, b = make_operands(M, N, K, layout, getattr(torch, dtype), seed=i)
        out = torch.full((M, N), float("nan"), device="cuda", dtype=a.dtype)
        try:
            call_for(candidate, a, b, out)()
            wait(what)
            ok, detail = check(out, a, b)
        except Hung:
            raise
        except Exception as e:  # one broken variant must not stop the others
            ok, detail = False, f"{type(e).__name__}: {e}"
        run.checks.append({"what": what, "ok": ok, "detail": detail})
        if not ok:
            print(f"FAIL {what}: {detail}", flush=True)
    failed = sum(not c["ok"] for c in run.checks)
    verdict = "PASS" if failed == 0 else "FAIL"
    print(f"{verdict} correctness: {len(run.checks) - failed} of {len(run.checks)} within tolerance", flush=True)


def time_candidate(run: Run, case: Case, dtype: str, candidate: Candidate, a: Any, b: Any, out: Any, peer_ms: float | None,
                   verify: bool = False) -> dict[str, Any] | None:  # fmt: skip
    what = f"{candidate.label()} {case.label} {dtype}"
    row: dict[str, Any] = {"M": case.M, "N": case.N, "K": case.K, "layout": case.layout, "dtype": dtype,
                           "kernel": candidate.kernel, "config": candidate.label(), "params": dict(candidate.params),
                           "scheduler": candidate.scheduler, "pick": candidate.is_pick}  # fmt: skip
    try:
        fn = call_for(candidate, a, b, out)
        if verify:
            out.fill_(float("nan"))
        fn()
        wait(what)
        if verify:
            row["ok"], row["detail"] = check(out, a, b)
            if not row["ok"]:
                print(f"FAIL {what}: {row['detail']}", flush=True)
        ms = device_ms(fn)
        if verify:  # the pick: cross-checked with the other method
            row["cudagraph_ms"] = cudagraph_ms(fn)
    except Hung:
        raise
    except Exception as e:  # reported; the table shows the rest
        run.error(what, e)
        return None
    row.update(ms=ms, tflops=case.flops / ms * 1e-9)
    if peer_ms is not None:
        row["vs_cublas"] = peer_ms / ms
    run.rows.append(row)
    return row


def time_case(run: Run, case: Case, dtype_name: str, best_bf16: list[Candidate]) -> None:
    import torch

    dtype = getattr(torch, dtype_name)
    a, b = make_operands(case.M, case.N, case.K, case.layout, dtype, seed=case.M + case.N + case.K)
    out = torch.empty((case.M, case.N), device="cuda", dtype=dtype)
    peer = {"M": case.M, "N": case.N, "K": case.K, "layout": case.layout, "dtype": dtype_name, "kernel": "cublas",
            "config": "torch.matmul", "pick": False}  # fmt: skip
    peer_ms = device_ms(lambda: torch.matmul(a, b, out=out))
    peer_graph_ms = cudagraph_ms(lambda: torch.matmul(a, b, out=out))
    peer.update(ms=peer_ms, tflops=case.flops / peer_ms * 1e-9, vs_cublas=1.0, cudagraph_ms=peer_graph_ms)
    run.rows.append(peer)
    time_candidate(run, case, dtype_name, Candidate("hopper", ()), a, b, out, peer_ms, verify=True)
    if dtype_name == "bfloat16":
        time_candidate(run, case, dtype_name, Candidate("triton", ()), a, b, out, peer_ms)
        candidates = [*hopper_candidates(case), *triton_candidates(case)]
    else:
        candidates = best_bf16
    for candidate in candidates:
        if run.late():
            run.errors.append({"what": f"{candidate.label()} {case.label} {dtype_name}", "error": "not timed: budget"})
            continue
        time_candidate(run, case, dtype_name, candidate, a, b, out, peer_ms)


def fastest(run: Run, case: Case, dtype: str, kernel: str) -> list[dict[str, Any]]:
    rows = [r for r in run.rows if (r["M"], r["N"], r["K"], r["layout"], r["dtype"], r["kernel"]) ==
            (case.M, case.N, case.K, case.layout, dtype, kernel) and "ms" in r]  # fmt: skip
    return sorted(rows, key=lambda r: r["ms"])


def timing(run: Run, cases: list[Case]) -> None:
    for i, case in enumerate(cases):
        time_case(run, case, "bfloat16", [])
        best = [r for r in fastest(run, case, "bfloat16", "hopper") if not r["pick"]][:2]
        again = [Candidate("hopper", tuple(r["params"].items()), r["scheduler"]) for r in best]
        time_case(run, case, "float16", again)
        print(f"[{run.elapsed():.0f}s] {i + 1}/{len(cases)} {case.label}", flush=True)


# -- results ---------------------------------------------------------------------------------------
def choice_entries(run: Run, cases: list[Case], kernel: str) -> list[Entry]:
    """Per case, the fastest measured bf16 config of ``kernel`` (the launcher's pick counts as the
    config it ran), keeping MAIN_SCHEDULER unless another is more than SCHEDULER_TIE faster."""
    entries = []
    for case in cases:
        rows = [r for r in fastest(run, case, "bfloat16", kernel) if not r["pick"]]
        if not rows:
            continue
        best = rows[0]
        if kernel == "hopper" and best["scheduler"] != MAIN_SCHEDULER:
            same = [r for r in rows if r["params"] == best["params"] and r["scheduler"] == MAIN_SCHEDULER]
            if same and same[0]["ms"] <= best["ms"] * (1 + SCHEDULER_TIE):
                best = same[0]
        runner_up = next((r for r in rows if r is not best), None)
        measured = {"dtype": "bfloat16", "us": round(best["ms"] * 1e3, 2), "config": best["config"]}
        cublas = fastest(run, case, "bfloat16", "cublas")
        if cublas:
            measured["cublas_us"] = round(cublas[0]["ms"] * 1e3, 2)
        if runner_up is not None:
            measured["runner_up"] = f"{runner_up['config']} {runner_up['ms'] * 1e3:.2f} us"
        entries.append(Entry(case.M, case.N, case.K, case.layout, best["params"], best.get("scheduler"), measured))
    return entries


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else float("nan")


def report(run: Run, cases: list[Case]) -> dict[str, Any]:
    print("\nH100 device time (tkreg.testing.timing.DeviceTimer, L2 flushed, median); TFLOP/s and ratio to cuBLAS; "
          "graph: the pick's ratio by do_bench_cudagraph (L2 hot)")
    print(f"{'M x N x K':>20s} {'B':3s} {'dtype':5s} {'cuBLAS':>7s} {'pick':>13s} {'best':>13s} {'pick/best':>9s}  "
          f"{'triton':>13s} {'graph':>6s}  pick; best")  # fmt: skip
    summary: dict[str, Any] = {"ratios": {}, "misses": [], "cudagraph_ratios": {}}
    for case in cases:
        for dtype in DTYPES:
            peer = fastest(run, case, dtype, "cublas")
            hop = fastest(run, case, dtype, "hopper")
            pick = next((r for r in hop if r["pick"]), None)
            if not peer or pick is None:
                continue
            best = hop[0]
            tri = next((r for r in fastest(run, case, dtype, "triton") if r["pick"]), None)
            gap = pick["ms"] / best["ms"] - 1
            summary["ratios"].setdefault(dtype, []).append(pick["vs_cublas"])
            graph_ratio = peer[0].get("cudagraph_ms", math.nan) / pick.get("cudagraph_ms", math.nan)
            if not math.isnan(graph_ratio):
                summary["cudagraph_ratios"].setdefault(dtype, []).append(graph_ratio)
            pick_label = hopper(*hopper_pick(case)).label()
            best_label = pick_label + " (the pick)" if best["pick"] else best["config"]
            tri_text = f"{tri['tflops']:6.0f} ({tri['vs_cublas']:.2f})" if tri else f"{'-':>13s}"
            print(f"{case.M:>6d}x{case.N:>6d}x{case.K:>6d} {case.layout:3s} {SHORT[dtype]:5s} {peer[0]['tflops']:7.0f} "
                  f"{pick['tflops']:6.0f} ({pick['vs_cublas']:.2f}) {best['tflops']:6.0f} ({best['vs_cublas']:.2f}) "
                  f"{gap * 100:8.1f}%  {tri_text} {graph_ratio:6.2f}  {pick_label}; {best_label}")  # fmt: skip
            goal = GOAL_LARGE if case.M >= 256 else GOAL_SMALL
            if pick["vs_cublas"] < goal:
                summary["misses"].append(f"{case.label} {dtype}: pick {pick['vs_cublas']:.2f}x cuBLAS < {goal}")
            if gap > GOAL_PICK:
                summary["misses"].append(f"{case.label} {dtype}: pick {gap * 100:.1f}% slower than {best_label}")
            if pick.get("ok") is False:
                summary["misses"].append(f"{case.label} {dtype}: the pick's output is WRONG ({pick['detail']})")
    every = [v for values in summary["ratios"].values() for v in values]
    print(f"\ngeomean pick / cuBLAS: all {geomean(every):.3f}, " + ", ".join(
        f"{d} {geomean(v):.3f}" for d, v in summary["ratios"].items()))  # fmt: skip
    summary["geomean"] = geomean(every)
    graph_every = [v for values in summary["cudagraph_ratios"].values() for v in values]
    summary["geomean_cudagraph"] = geomean(graph_every)
    print(f"cross-check, do_bench_cudagraph (L2 hot): geomean pick / cuBLAS {geomean(graph_every):.3f}")
    print(f"misses ({len(summary['misses'])}):")
    for miss in summary["misses"]:
        print(f"  {miss}")
    failed = [c for c in run.checks if not c["ok"]]
    print(f"{'PASS' if not failed else 'FAIL'} correctness {len(run.checks) - len(failed)}/{len(run.checks)}; "
          f"{len(run.errors)} errors; elapsed {run.elapsed():.0f} s")  # fmt: skip
    return summary


def save(run: Run, cases: list[Case], summary: dict[str, Any]) -> None:
    import json

    from tkreg import records

    meta = records.environment()
    notes = (
        "device time (ms) by tkreg.testing.timing.DeviceTimer (every repetition L2-flushed, in one CUDA graph; median), "
        "as the benchmark items; cudagraph_ms: triton.testing.do_bench_cudagraph (median of 10 graph replays, rep "
        f"{REP_MS} ms, L2 hot) for cuBLAS and the picks; cuBLAS = torch.matmul on the same tensors in the same run; "
        "'pick' rows are the "
        "launchers' own choice"
    )
    path = records.save("matmul_suite", run.rows + [{"check": c} for c in run.checks], notes=notes,
                        meta={"summary": summary, "errors": run.errors})  # fmt: skip
    out_dir = path.parent
    for kind, kernel in ((hopper_choice.TABLE_KIND, "hopper"), (triton_configs.TABLE_KIND, "triton")):
        table = Table(kind, tuple(choice_entries(run, cases, kernel)), {**meta, "source": "scripts/gpu/matmul_suite.py"})
        target = out_dir / f"{kind}.json"
        target.write_text(json.dumps(table.to_json(), indent=1) + "\n")
        print(f"wrote {target} ({len(table.entries)} entries)")
    print(f"wrote {path}")


def plan(cases: list[Case]) -> None:
    """No GPU: what the run would do, with the model's estimates."""
    n_time = 0
    for case in cases:
        config, scheduler = hopper_pick(case)
        est = hopper_model.estimate(case.M, case.N, case.K, config, H100_SMS)
        hc = hopper_candidates(case)
        tc = triton_candidates(case)
        # bf16: cuBLAS, both picks, the candidates; fp16: cuBLAS, the Hopper pick, two configs.
        n_time += 3 + len(hc) + len(tc) + 4
        print(f"{case.label:24s} pick {hopper(config, scheduler).label():42s} {est.describe()}; "
              f"{len(hc)} hopper + {len(tc)} triton candidates")  # fmt: skip
    tasks = compile_tasks(cases)
    checks = len(CHECK_SHAPES) * 2 * (len(REGISTERED) * len(SCHEDULERS) + 4 + len(triton_configs.CANDIDATES))
    per_timing = 0.15
    print(f"\n{len(cases)} cases; about {n_time} timings (~{n_time * per_timing:.0f} s at {per_timing} s each), "
          f"{checks} correctness runs, {len(tasks)} compile variants")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", action="store_true", help="no GPU: list the cases, candidates and counts (default: run)")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help=f"seconds for the whole run (default {BUDGET_S:.0f})")
    parser.add_argument("--workers", type=int, default=min(12, max(1, (os.cpu_count() or 2) - 2)),
                        help="compile worker processes (default: CPU count - 2, at most 12)")  # fmt: skip
    args = parser.parse_args()
    cases = suite_cases()
    if args.plan:
        plan(cases)
        return
    import torch
    import triton

    run = Run(args.budget)
    props = torch.cuda.get_device_properties(0)
    print(f"{props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}, triton {triton.__version__}")
    if props.multi_processor_count != H100_SMS:
        print(f"note: the model and the candidates assume {H100_SMS} SMs")
    torch.backends.cuda.matmul.allow_tf32 = False
    summary: dict[str, Any] = {}
    try:
        run.section("compile")
        precompile(run, cases, args.workers)
        run.section("correctness")
        correctness(run)
        run.section("timing")
        timing(run, cases)
    except Hung as e:
        run.error("hang", e)
        summary = report(run, cases)
        save(run, cases, summary)
        os._exit(3)  # the GPU context is stuck; exiting normally would block on it
    summary = report(run, cases)
    save(run, cases, summary)


if __name__ == "__main__":
    main()
