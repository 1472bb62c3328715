"""Check tkreg.ops on this GPU (H100), with the ranking data in place (tkreg/measured/, or
$TKREG_RANKING_DATA pointing at ops_measure.py's output):

1. pick vs best: on every ops_common signature, tkreg.ops.<op>'s wall time (do_bench median,
   launch included) against every registered kernel's and the peer's, in the same run. PASS when
   tkreg.ops is within 5% of the fastest kernel and, where some kernel is at or above the peer,
   at or above the peer itself (within PEER_NOISE, the run-to-run spread of do_bench medians).
2. host overhead at 256x256 (256^3 for matmul): us per call of 2000 calls then one sync, for
   torch, a plain @triton.jit kernel[grid], its CUDA-graph replay, every registered launcher,
   tkreg.ops.<op>, the same under CUDA-graph replay, and a cached tkreg.lookup. PASS per issue #12's
   targets: tkreg.ops.<op> <= 25 us, cached lookup <= 20 us (built-in launchers <= 20 us is the
   launch and matmul helpers' target; shown with PASS/FAIL too).
3. a small MLP block (matmul, relu, matmul, residual add, row sum) whose matmuls, add and sum go
   through tkreg.ops: eager, torch.compile(fullgraph=True), CUDA-graph capture and replay of the
   eager block, and torch.compile(mode="reduce-overhead"), each against eager torch.

    python scripts/gpu/ops_check.py [--ops add,sum_row] [--budget 80] [--skip-mlp]

Saves ops_pick_vs_best.json, ops_host_overhead.json, ops_mlp_block.json (tkreg.report.records) to $OUT.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import triton
import triton.language as tl
from ops_common import Deadline, candidates, make_inputs, say, signatures, wall_us, warm_up

WITHIN_BEST = 0.95  # tkreg.ops at least this fraction of the fastest kernel's speed
PEER_NOISE = 0.02  # "at or above the peer", allowing do_bench's run-to-run spread
HOST_CALLS = 2000
OPS_TARGET_US = 25.0
LOOKUP_TARGET_US = 20.0
LAUNCHER_TARGET_US = 20.0
MLP = {"tokens": 512, "model": 1024, "hidden": 4096}
MLP_ERROR_FACTOR = 2.0  # tkreg's error against float64 may be at most this multiple of torch's,
MLP_ERROR_FLOOR = 2 * 2.0**-8  # or this fraction of the largest output (two bf16 roundings)
MLP_WARM_CALLS = 3  # calls before the checked one: compiles, and CUDA-graph trees record on the second
# Seconds of the budget kept for the host-overhead table and the MLP block (two torch.compile runs).
RESERVE_S = 45.0
WARM_UP_MAX_S = 20.0  # compiling in workers; ops_measure.py has usually filled Triton's cache already


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default="", help="comma list of ops for the pick-vs-best table (default: all)")
    parser.add_argument("--budget", type=float, default=80.0,
                        help=f"seconds for the whole run (default 80; the pick table stops {RESERVE_S:.0f} s before)")
    parser.add_argument("--workers", type=int, default=min(8, (os.cpu_count() or 2) // 2), help="compile workers")
    parser.add_argument("--skip-mlp", action="store_true", help="leave out the MLP block")
    args = parser.parse_args()
    deadline = Deadline(args.budget)

    import torch

    import tkreg
    import tkreg.report.records
    from tkreg import walltime
    from tkreg.core.platform import current

    registry = tkreg.default_registry()
    data = walltime.for_platform(current())
    verdicts: list[tuple[str, bool]] = []
    if data is None:
        say(f"FAIL no ranking data for {torch.cuda.get_device_name()} in {walltime.data_files()}; tkreg ranks by priority")
        verdicts.append(("ranking data in place", False))
    else:
        say(f"ranking data: {data.device}, {data.date} ({len(data.points)} points; {data.command})")
    sigs = signatures(registry, [o for o in args.ops.split(",") if o])
    for failure in warm_up(sigs, args.workers, seconds=min(WARM_UP_MAX_S, deadline.left() * 0.3)):
        say(f"  warm-up: {failure}")

    picks = pick_vs_best(registry, sigs, Deadline(deadline.left() - RESERVE_S))
    verdicts += [(f"pick vs best {r['signature']}", r["pass"]) for r in picks]
    tkreg.report.records.save("ops_pick_vs_best", picks, notes=f"PASS: tkreg.ops >= {WITHIN_BEST} x fastest kernel and, where a kernel "
                       f"is at or above the peer, >= {1 - PEER_NOISE} x peer; do_bench medians, same run")
    host, decisions = host_overhead(registry)
    verdicts += [(f"host overhead {r['path']}", r["pass"]) for r in host if r["pass"] is not None]
    tkreg.report.records.save("ops_host_overhead", host, notes=f"us per call: wall clock of {HOST_CALLS} calls then one sync. "
                       "Decisions at these shapes: " + " / ".join(decisions))
    if not args.skip_mlp:
        mlp = mlp_block()
        verdicts += [(f"MLP block {r['variant']}", r["pass"]) for r in mlp]
        tkreg.report.records.save("ops_mlp_block", mlp, notes=f"shape {MLP}; PASS: max error against float64 at most "
                           f"{MLP_ERROR_FACTOR} x torch's or {MLP_ERROR_FLOOR} x the largest output")

    _print_picks(picks)
    _print_host(host, decisions)
    _summary(picks, host, mlp if not args.skip_mlp else [])
    failed = [name for name, ok in verdicts if not ok]
    for name in failed:
        say(f"FAIL {name}")
    say(f"{'PASS' if not failed else 'FAIL'}: {len(verdicts) - len(failed)} of {len(verdicts)} checks passed")
    return 0 if not failed else 1


def _summary(picks: list[dict[str, Any]], host: list[dict[str, Any]], mlp: list[dict[str, Any]]) -> None:
    """The few lines that matter, last (session.sh shows a script's last 30 lines)."""
    passed = sum(1 for r in picks if r["pass"])
    ratios = [r["vs_fastest"] for r in picks if "vs_fastest" in r]
    spread = f"; tkreg.ops / fastest kernel: min {min(ratios):.3f}, median {statistics.median(ratios):.3f}" if ratios else ""
    say(f"\nsummary: pick vs best {passed}/{len(picks)} PASS{spread}")
    key = ("torch.add(out=)", "plain @triton.jit", "CUDA graph replay of that", "tkreg.ops.", "tkreg.lookup")
    shown = [r for r in host if r["path"].startswith(key) and not r["path"].startswith("CUDA graph replay of tkreg")]
    say("host us/call at 256x256: " + ", ".join(f"{r['path'].split(' (')[0]} {r['us_per_call']}" for r in shown))
    for r in mlp:
        say(f"MLP {r['variant']}: {'PASS' if r['pass'] else 'FAIL'} max err {r.get('max_error')} (bound {r.get('bound')}), "
            f"{r.get('ms_per_block')} ms" + (f" {r['error']}" if "error" in r else ""))


# -- 1. pick vs best ---------------------------------------------------------------------------
def pick_vs_best(registry: Any, sigs: list[Any], deadline: Deadline) -> list[dict[str, Any]]:
    import torch

    import tkreg

    rows = []
    for sig in sigs:
        if deadline.passed():
            rows.append({"signature": sig.label, "pass": False, "note": "not measured: budget ran out"})
            continue
        inputs = make_inputs(registry, sig)
        op = tkreg.ops.get(sig.op)
        calls = {"tkreg.ops": _bound_op(op, inputs), **candidates(registry, sig, inputs)}
        walls: dict[str, float] = {}
        for name, call in calls.items():
            try:
                call()
                torch.cuda.synchronize()
                walls[name] = wall_us(call)[0]
            except Exception as e:  # a candidate that fails is a finding, not a crash
                say(f"  {sig.label} {name}: {type(e).__name__}: {e}")
        kernels = {n: w for n, w in walls.items() if n not in ("tkreg.ops", "peer")}
        ours, peer = walls.get("tkreg.ops"), walls.get("peer")
        best = min(kernels, key=kernels.get) if kernels else None
        decision = tkreg.ops.explain(sig.op, *inputs)
        row: dict[str, Any] = {"signature": sig.label, "tkreg_ops_us": _round(ours),
                               "pick": "peer" if " calls its peer" in decision else decision.split()[2],
                               "fastest_kernel": best, "fastest_kernel_us": _round(kernels.get(best)), "peer_us": _round(peer),
                               "kernels_us": ", ".join(f"{n} {w:.1f}" for n, w in sorted(kernels.items(), key=lambda kv: kv[1]))}
        ok = ours is not None
        if ok and best is not None:
            row["vs_fastest"] = round(kernels[best] / ours, 3)
            ok = row["vs_fastest"] >= WITHIN_BEST
        if peer is not None and ours:
            row["vs_peer"] = round(peer / ours, 3)
            # required only where some registered kernel is at or above the peer
            row["peer_rule"] = bool(kernels) and min(kernels.values()) <= peer
            ok = ok and (not row["peer_rule"] or row["vs_peer"] >= 1 - PEER_NOISE)
        row["pass"] = ok
        rows.append(row)
    return rows


def _round(us: float | None) -> float | None:
    return None if us is None else round(us, 2)


def _bound_op(op: Callable[..., Any], inputs: tuple[Any, ...]) -> Callable[[], Any]:
    return lambda: op(*inputs)


def _print_picks(rows: list[dict[str, Any]]) -> None:
    say(f"\n{'signature':38s} {'tkreg.ops':>10s} {'fastest kernel':>32s} {'peer':>9s} {'vs best':>8s} {'vs peer':>9s}  picks"
        "  (us: do_bench medians; vs: speed of tkreg.ops relative; * peer rule applies)")
    for r in rows:
        if r.get("tkreg_ops_us") is None:
            say(f"{r['signature']:38s} {'FAIL':>10s} {r.get('note', 'tkreg.ops failed')}")
            continue
        best = f"{r['fastest_kernel']} {r['fastest_kernel_us']:.1f}" if r["fastest_kernel"] else "-"
        peer = f"{r['peer_us']:.1f}" if r["peer_us"] is not None else "-"
        vs_peer = f"{r['vs_peer']:.3f}{'*' if r.get('peer_rule') else ' '}" if "vs_peer" in r else "-"
        say(f"{r['signature']:38s} {r['tkreg_ops_us']:10.1f} {best:>32s} {peer:>9s} {r.get('vs_fastest', 0):8.3f} "
            f"{vs_peer:>9s}  {'PASS' if r['pass'] else 'FAIL'} {r['pick']}")


# -- 2. host overhead ---------------------------------------------------------------------------
@triton.jit
def plain_add_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    """The simplest add: what a hand-written kernel[grid] launch costs."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(c_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


def per_call_us(fn: Callable[[], Any], calls: int = HOST_CALLS) -> float:
    """Wall clock of ``calls`` calls then one sync, per call (us), after 20 warm-up calls."""
    import torch

    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def graph_of(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` captured in a CUDA graph (after warm-up on a side stream); returns the replay."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def host_overhead(registry: Any) -> tuple[list[dict[str, Any]], list[str]]:
    import torch

    import tkreg

    a, b = (torch.randn(256, 256, device="cuda") for _ in range(2))
    c = torch.empty_like(a)
    s = torch.empty(256, device="cuda")
    ma, mb = (torch.randn(256, 256, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    mc = torch.empty_like(ma)
    n = a.numel()

    def plain() -> None:
        plain_add_kernel[(triton.cdiv(n, 1024),)](a, b, c, n, BLOCK=1024)

    paths: list[tuple[str, Callable[[], Any], float | None]] = [
        ("torch.add(out=) 256^2 fp32", lambda: torch.add(a, b, out=c), None),
        ("plain @triton.jit kernel[grid] add", plain, None),
        ("CUDA graph replay of that kernel", graph_of(plain), None),
        ("torch.sum(dim=-1, out=) 256^2 fp32", lambda: torch.sum(a, dim=-1, out=s), None),
        ("torch.matmul(out=) 256^3 bf16", lambda: torch.matmul(ma, mb, out=mc), None),
    ]
    inputs = {"add": ((a, b), c), "sum_row": ((a,), s), "matmul": ((ma, mb), mc)}
    for op, (args, out) in inputs.items():
        for kernel in registry.lookup(op, inputs=args):
            launcher = kernel.load()
            call = _bound(launcher, args, out)
            paths.append((f"{kernel.name}(out=) (launcher; the launch helpers' target)", call, LAUNCHER_TARGET_US))
        fn = tkreg.ops.get(op)
        paths.append((f"tkreg.ops.{op}", lambda fn=fn, args=args: fn(*args), OPS_TARGET_US))
        paths.append((f"CUDA graph replay of tkreg.ops.{op}", graph_of(lambda fn=fn, args=args: fn(*args)), None))
    paths.append(("tkreg.lookup('add', inputs=...) cached", lambda: tkreg.lookup("add", inputs=(a, b)), LOOKUP_TARGET_US))
    rows = []
    for name, fn, target in paths:
        row: dict[str, Any] = {"path": name, "us_per_call": None, "target_us": target}
        try:
            us = per_call_us(fn)
            row.update(us_per_call=round(us, 2), passed=None if target is None else us <= target)
        except Exception as e:  # shown as a failed row
            row.update(passed=False, error=f"{type(e).__name__}: {e}")
        row["pass"] = row.pop("passed")
        rows.append(row)
    decisions = [tkreg.ops.explain(op, *args) for op, (args, _) in inputs.items()]
    return rows, decisions


def _bound(launcher: Callable[..., Any], args: tuple[Any, ...], out: Any) -> Callable[[], Any]:
    return lambda: launcher(*args, out=out)


def _print_host(rows: list[dict[str, Any]], decisions: list[str]) -> None:
    say(f"\n{'path (256x256; matmul 256^3 bf16)':64s} {'us/call':>9s} {'target':>7s}")
    for r in rows:
        us = f"{r['us_per_call']:.1f}" if r["us_per_call"] is not None else r.get("error", "failed")
        target = f"<= {r['target_us']:.0f}" if r["target_us"] else ""
        verdict = "" if r["pass"] is None else ("PASS" if r["pass"] else "FAIL")
        say(f"{r['path']:64s} {us:>9s} {target:>7s} {verdict}")
    for d in decisions:
        say(f"  {d}")


# -- 3. an MLP block ---------------------------------------------------------------------------
def mlp_block() -> list[dict[str, Any]]:
    import torch

    import tkreg

    tokens, model, hidden = MLP["tokens"], MLP["model"], MLP["hidden"]
    g = torch.Generator(device="cuda").manual_seed(0)
    w1 = (torch.randn(hidden, model, device="cuda", generator=g) * model**-0.5).bfloat16()
    w2 = (torch.randn(model, hidden, device="cuda", generator=g) * hidden**-0.5).bfloat16()

    def with_tkreg(x: Any) -> Any:
        h = torch.relu(tkreg.ops.matmul(x, w1.t()))  # F.linear's layout: the weight transposed
        return tkreg.ops.sum_row(tkreg.ops.add(tkreg.ops.matmul(h, w2.t()), x))

    def with_torch(x: Any) -> Any:
        h = torch.relu(x @ w1.t())
        return ((h @ w2.t()) + x).sum(-1)

    def reference(x: Any) -> Any:  # float64 from the same bf16 values, rounded where the blocks round
        h = torch.relu(x.double() @ w1.double().t()).bfloat16().double()
        y = (h @ w2.double().t()).bfloat16().double() + x.double()
        return y.bfloat16().double().sum(-1)

    x = torch.randn(4, tokens // 4, model, device="cuda", generator=g).bfloat16()
    expected, baseline = reference(x), with_torch(x)
    torch_error = float((baseline.double() - expected).abs().max())
    eager = with_tkreg(x)
    rows = []

    bound = max(MLP_ERROR_FACTOR * torch_error, MLP_ERROR_FLOOR * float(expected.abs().max()))

    def check(variant: str, run: Callable[[Any], Any], timed: Callable[[], Any] | None = None) -> None:
        try:
            for _ in range(MLP_WARM_CALLS):
                run(x)
            got = run(x)
            error = float((got.double() - expected).abs().max())
            same = bool(torch.equal(got, eager))
            ok = error <= bound
            ms = per_call_us(timed or (lambda: run(x)), calls=50) / 1e3
            rows.append({"variant": variant, "max_error": round(error, 5), "torch_max_error": round(torch_error, 5),
                         "bound": round(bound, 5), "identical_to_eager_tkreg": same, "ms_per_block": round(ms, 4), "pass": ok})
        except Exception as e:  # a variant that cannot run fails its row
            rows.append({"variant": variant, "pass": False, "error": f"{type(e).__name__}: {e}"})
        say(f"MLP {variant}: {rows[-1]}")

    check("eager torch", with_torch)
    check("eager tkreg.ops", with_tkreg)
    check("torch.compile(fullgraph=True)", torch.compile(with_tkreg, fullgraph=True))
    static = torch.zeros_like(x)  # captured on zeros: the replays below compute on the data copied in
    graph_out: list[Any] = [None]
    replay = graph_of(lambda: graph_out.__setitem__(0, with_tkreg(static)))

    def replayed(new: Any) -> Any:
        static.copy_(new)
        replay()
        return graph_out[0].clone()

    check("CUDA graph capture + replay", replayed, timed=replay)
    reduce_overhead = torch.compile(with_tkreg, fullgraph=True, mode="reduce-overhead")
    check("torch.compile(mode='reduce-overhead')", lambda v: reduce_overhead(v).clone())
    return rows


if __name__ == "__main__":
    sys.exit(main())
