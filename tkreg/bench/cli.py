"""``tkreg bench`` (also ``python -m tkreg.bench``): run the measurement suites on this machine's GPU
and write one data file per suite, from which ``python -m tkreg.report.record`` builds BENCHMARKS.md.

    tkreg bench                          # every suite, about 6 minutes on an H100
    tkreg bench timer host --out $OUT    # two suites, their files in $OUT
    tkreg bench --list                   # the suites and their time limits (no GPU needed)

Files are named ``<date>-<gpu>-<suite>.json[.gz]`` (tkreg.report.records.data_name). Before the
first suite, one step compiles what the selected suites run, in parallel processes. The whole
command stops starting suites when ``--budget-s`` is spent; each suite also has a limit of its
own. Imports neither torch nor triton: the suites run in child processes.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import sys
import time
from pathlib import Path

from ..core.platform import current
from ..report.records import data_name
from .runner import Outcome, execute
from .suites import SUITES, WARM, Suite, by_name

DEFAULT_OUT = Path("benchmarks/data")
DEFAULT_BUDGET_S = 360.0  # the whole command, warm-up included: what a GPU session can spare
MIN_START_S = 20.0  # a suite that would get less time than this is not started
NO_GPU_STATUS = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``tkreg bench``, shared by ``python -m tkreg.bench``."""
    names = ", ".join(s.name for s in SUITES)
    parser.add_argument("suites", nargs="*", metavar="SUITE", help=f"suites to run, in this order (default: all: {names})")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                        help=f"where the data files go (default: {DEFAULT_OUT})")  # fmt: skip
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S, metavar="S",
                        help="seconds for the whole command; no suite starts once they are spent "
                        f"(default: {DEFAULT_BUDGET_S:.0f})")  # fmt: skip
    parser.add_argument("--limit", action="append", default=[], metavar="SUITE=S",
                        help="a suite's own time limit in seconds; repeatable (default: each suite's, see --list)")  # fmt: skip
    parser.add_argument("--pytest-args", default="", metavar="ARGS",
                        help="more arguments for the main suite's pytest, e.g. '--tkreg-op=<op>,<op>' "
                        "(default: none)")  # fmt: skip
    parser.add_argument("--no-warm", action="store_true",
                        help="skip compiling ahead; each suite compiles what it runs (default: compile ahead)")  # fmt: skip
    parser.add_argument("--list", action="store_true", help="list the suites and their limits, run nothing (default: off)")


def limits(overrides: list[str]) -> dict[str, float]:
    """Suite name -> time limit, the defaults with ``SUITE=S`` overrides applied."""
    found = {s.name: s.limit_s for s in (*SUITES, WARM)}
    for item in overrides:
        name, sep, value = item.partition("=")
        if not sep or name not in found:
            raise ValueError(f"--limit takes SUITE=SECONDS with SUITE one of {', '.join(found)}, got {item!r}")
        try:
            found[name] = float(value)
        except ValueError:
            raise ValueError(f"--limit {item!r}: {value!r} is not a number of seconds") from None
        if found[name] <= 0:
            raise ValueError(f"--limit {item!r}: the limit must be positive")
    return found


def plan(suites: list[Suite], out: Path, date: str, device: str) -> list[tuple[Suite, Path]]:
    """Each suite with the data file it writes."""
    return [(s, out / data_name(date, device, s.name, gz=s.gz)) for s in suites]


def listing() -> str:
    lines = [f"{s.name:8s} {s.limit_s:4.0f} s  {s.summary}" for s in SUITES]
    lines.append(f"(before them, unless --no-warm: {WARM.name}, {WARM.limit_s:.0f} s at most: {WARM.summary})")
    return "\n".join(lines)


def no_gpu_message(prog: str) -> str:
    return (f"{prog}: no CUDA GPU here ({current().describe()}): the suites time work on a GPU. "
            f"Run it on a machine with one; `{prog} --list` shows the suites.")  # fmt: skip


def run(args: argparse.Namespace, prog: str, argv: list[str]) -> int:
    """Run the suites ``args`` names; 0 when each wrote its file, 1 otherwise, 2 for bad arguments or no GPU."""
    if args.list:
        print(listing())
        return 0
    try:
        suites = by_name(args.suites)
        limit_of = limits(args.limit)
    except ValueError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    if args.budget_s <= 0:
        print(f"{prog}: error: --budget-s must be positive", file=sys.stderr)
        return 2
    where = current()
    if not where.is_gpu:
        print(no_gpu_message(prog), file=sys.stderr)
        return NO_GPU_STATUS
    command = " ".join([prog, *(shlex.quote(a) for a in argv)])
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    steps = plan(suites, args.out, date, where.name)
    print(f"{prog}: {where.describe()}, {date}; suites {', '.join(s.name for s in suites)} into {args.out}; "
          f"budget {args.budget_s:.0f} s", flush=True)  # fmt: skip
    start = time.monotonic()
    outcomes: list[Outcome] = []
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if not args.no_warm:
        left = args.budget_s - (time.monotonic() - start)
        warm = execute(WARM, None, min(limit_of[WARM.name], left), command, {"suites": ",".join(s.name for s in suites)}, env)
        print(f"[{time.monotonic() - start:4.0f} s] {warm.describe()}", flush=True)  # a failed warm-up only costs time
    for suite, path in steps:
        left = args.budget_s - (time.monotonic() - start)
        if left < MIN_START_S:
            outcomes.append(Outcome(suite.name, "not run", detail=f"{max(left, 0):.0f} s of the budget left"))
        else:
            print(f"[{time.monotonic() - start:4.0f} s] {suite.name}: {suite.summary}", flush=True)
            options = {"pytest_args": args.pytest_args} if suite.name == "main" and args.pytest_args else None
            outcomes.append(execute(suite, path, min(limit_of[suite.name], left), command, options, env))
        print(f"[{time.monotonic() - start:4.0f} s] {outcomes[-1].describe()}", flush=True)
    print(f"\n{prog} done in {time.monotonic() - start:.0f} s:")
    for outcome in outcomes:
        print(f"  {outcome.describe()}")
    written = [o for o in outcomes if o.path is not None]
    if written:
        print("Rebuild the record from the data: python -m tkreg.report.record")
    return 0 if all(o.ok for o in outcomes) else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    prog = "python -m tkreg.bench"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=listing())  # fmt: skip
    add_arguments(parser)
    return run(parser.parse_args(argv), prog, argv)
