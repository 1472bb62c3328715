"""Measure what tkreg's wall-time ranking needs, on this GPU (H100).

For every signature of ops_common (each op's benchmark cases and the shapes issue #12 names), each
registered kernel that takes the inputs here and the op's peer: wall time per call (do_bench
median, launcher included), device time and host time (see ops_common). Writes

- $OUT/ops_ranking.json: the ranking data (tkreg.report.records envelope, kind "ops_ranking"), to be
  copied to tkreg/measured/<device>.json (the command is printed last);
- $OUT/ops_measure.json: every row with quantiles, and every failure.

    python scripts/gpu/ops_measure.py [--ops add,sum_row] [--budget 100] [--workers 8]

Compiles run first in worker processes (Triton's on-disk cache then serves the measuring
process). Prints PASS when every signature and candidate was measured, a table last.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ops_common import Deadline, candidates, make_inputs, say, signatures, time_call, warm_up


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default="", help="comma list of ops (default: all)")
    parser.add_argument("--budget", type=float, default=100.0, help="seconds for the whole run (default 100)")
    parser.add_argument("--workers", type=int, default=min(8, (os.cpu_count() or 2) // 2), help="compile workers")
    args = parser.parse_args()
    deadline = Deadline(args.budget)

    import torch

    import tkreg
    import tkreg.report.records
    from tkreg.ops.forms import form_for
    from tkreg.testing.timing import DeviceTimer

    registry = tkreg.default_registry()
    sigs = signatures(registry, [o for o in args.ops.split(",") if o])
    say(f"{torch.cuda.get_device_name()}: {len(sigs)} signatures; compiling in {args.workers} workers")
    for failure in warm_up(sigs, args.workers, seconds=deadline.left() * 0.5):
        say(f"  warm-up: {failure}")
    say(f"compiled; {deadline.left():.0f} s left")

    timer = DeviceTimer()
    rows, full, failures, skipped = [], [], [], []
    for sig in sigs:
        if deadline.passed():
            skipped.append(sig.label)
            continue
        inputs = make_inputs(registry, sig)
        layout = form_for(registry.op(sig.op)).layout(inputs)
        for name, call in candidates(registry, sig, inputs).items():
            try:
                call()
                torch.cuda.synchronize()
                timing = time_call(call, timer)
            except Exception as e:  # recorded: the table says which candidate could not be timed
                failures.append(f"{sig.label} {name}: {type(e).__name__}: {e}")
                continue
            row = {"op": sig.op, "impl": name, "dtype": sig.dtype, "dims": dict(sig.dims), "layout": layout,
                   "wall_us": round(timing.wall_us, 3), "device_us": round(timing.device_us, 3),
                   "host_us": round(timing.host_us, 3)}
            rows.append(row)
            q20, q80 = timing.wall_quantiles_us
            full.append({"signature": sig.label, "impl": name, "wall_us": row["wall_us"], "wall_q20_us": round(q20, 3),
                         "wall_q80_us": round(q80, 3), "device_us": row["device_us"], "device_timing": timing.device_method,
                         "host_us": row["host_us"]})
        del inputs
    torch.cuda.synchronize()

    notes = ("wall: triton.testing.do_bench median (L2 flushed, launcher included); device: tkreg.testing.timing.DeviceTimer.queue "
             "(L2 flushed, a CUDA graph of the call replayed where it can be captured, else the call held); host: median "
             "perf_counter per call of back-to-back calls. Each call allocates its output, as a user's call does.")
    data_path = tkreg.report.records.save("ops_ranking", rows, notes=notes)
    tkreg.report.records.save("ops_measure", full, notes=notes + f" Failures: {failures}. Not measured (budget): {skipped}.")
    _table(full)
    for f in failures:
        say(f"FAIL could not time {f}")
    if skipped:
        say(f"FAIL budget ran out before {len(skipped)} signatures: {', '.join(skipped)}")
    ok = not failures and not skipped
    say(f"{'PASS' if ok else 'FAIL'} measured {len(rows)} candidate-signatures of {len(sigs)} signatures")
    slug = re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name().lower()).strip("-")
    say(f"ranking data: {data_path}\n  copy with: cp {data_path} tkreg/measured/{slug}.json")
    return 0 if ok else 1


def _table(rows: list[dict]) -> None:
    """Per signature: each candidate's wall us (device, host), the fastest first."""
    by_sig: dict[str, list[dict]] = {}
    for r in rows:
        by_sig.setdefault(r["signature"], []).append(r)
    say(f"\n{'signature':40s} candidates by wall us (device us / host us)")
    for label, group in by_sig.items():
        group.sort(key=lambda r: r["wall_us"])
        text = "  ".join(f"{r['impl']} {r['wall_us']:.1f} ({r['device_us']:.1f}/{r['host_us']:.1f})" for r in group)
        say(f"{label:40s} {text}")


if __name__ == "__main__":
    sys.exit(main())
