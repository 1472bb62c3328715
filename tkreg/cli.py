"""The ``tkreg`` command: ``list``, ``info KERNEL``, ``doctor``, ``report RUN.json``. Imports neither torch
nor triton; ``report`` imports matplotlib only when it runs.

Text output fits WIDTH columns (long values wrap) unless ``--wide``; ``--json`` is for scripts.
Exit status: 0 done; 1 ``report``: a kernel got slower than the threshold, ``doctor``: a plugin has a
problem; 2 a usage error or an input that cannot be read (named in the message); 3 a bug (the
traceback is printed), so that a script never mistakes a crash for a result.
"""

from __future__ import annotations

import argparse
import json
import os
import platform as host
import shutil
import sys
import textwrap
import traceback
from typing import Any, TextIO

from . import __version__
from .core import capability as caps
from .core import refs
from .core.errors import UnknownNameError
from .core.loading import (
    ENV_VAR,
    build_registry,
    installed_plugins,
    selected_names,
    unknown_names_message,
    unknown_plugins_message,
    unknown_selected,
)
from .core.platform import current, installed_version, platform_for
from .core.registry import Registry, unmet_requirements
from .core.specs import Op, config_id

WIDTH = 100  # columns text output fits in without --wide (fewer on a narrower terminal)
EXIT_REGRESSION = 1
EXIT_USAGE = 2  # argparse's code for a bad command line; also an unreadable input
EXIT_BUG = 3


def output_width(args: argparse.Namespace) -> int | None:
    """Columns to fit text output in; None with --wide (full lines)."""
    if getattr(args, "wide", False):
        return None
    if sys.stdout.isatty():
        return min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns)
    return WIDTH


def emit(text: str, width: int | None, hang: str = "    ", file: TextIO | None = None) -> None:
    """Print ``text``, wrapped at ``width`` columns (continuation lines indented by its own indent
    plus ``hang``); whole where width is None or it fits."""
    if width is None or len(text) <= width:
        print(text, file=file)
        return
    indent = text[: len(text) - len(text.lstrip())]
    lines = textwrap.wrap(text, width, subsequent_indent=indent + hang, break_on_hyphens=False)
    print("\n".join(lines), file=file)


def check_plugin_selection(width: int | None) -> int | None:
    """Warn about names in TKREG_PLUGINS that no installed plugin has; EXIT_USAGE when it names
    no installed plugin at all (and so loads none), None to go on."""
    problem = unknown_plugins_message()
    if not problem:
        return None
    if not (selected_names() or set()) - set(unknown_selected()):
        emit(f"tkreg: error: {problem}; no plugin loaded (unset {ENV_VAR} to load all)", width, file=sys.stderr)
        return EXIT_USAGE
    emit(f"tkreg: warning: {problem}", width, file=sys.stderr)
    return None


def cmd_list(registry: Registry, args: argparse.Namespace) -> int:
    where = platform_for(args.capability)
    rows = []
    for kernel in registry.kernels(args.op):
        reasons = unmet_requirements(kernel, where)
        rows.append(
            {
                "op": kernel.op,
                "kernel": kernel.name,
                "plugin": registry.owner(kernel).name,
                "requirements": kernel.requires.describe() + (", interpreter" if kernel.interpretable else ""),
                "runs": not reasons,
                "why_not": "; ".join(reasons),
            }
        )
    if args.json:
        print(json.dumps({"platform": where.describe(), "kernels": rows}, indent=2))
        return 0
    print(f"platform: {where.describe()}")
    if not rows:
        print("no kernels registered" + (f" (TKREG_PLUGINS={_env_plugins()!r})" if selected_names() is not None else ""))
        return 0
    width = output_width(args)
    if width is None:  # one line per kernel, however long: for grep
        headers = ("op", "kernel", "plugin", "requirements", "runs here")
        table = [(r["op"], r["kernel"], r["plugin"], r["requirements"], "yes" if r["runs"] else f"no: {r['why_not']}")
                 for r in rows]  # fmt: skip
    else:  # the requirements and the reason on lines of their own, wrapped
        headers = ("op", "kernel", "plugin", "runs here")
        table = [(r["op"], r["kernel"], r["plugin"], "yes" if r["runs"] else "no") for r in rows]
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(headers[:-1])]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)) + "  " + headers[-1])
    for row, r in zip(table, rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
        if width is not None:
            emit(f"    requires: {r['requirements']}", width)
            if not r["runs"]:
                emit(f"    why not: {r['why_not']}", width)
    if width is not None:
        print("(one line per kernel: tkreg list --wide; for scripts: --json)")
    if registry.problems:
        print(f"\n{len(registry.problems)} plugin problem(s); run `tkreg doctor` for details", file=sys.stderr)
    return 0


def _env_plugins() -> str:
    import os

    return os.environ.get(ENV_VAR, "")


def op_interface(op: Op) -> dict[str, Any]:
    """What a kernel of ``op`` is called with and returns: the op's calling interface."""
    params = [f"{p.name}={p.default!r} (tests: {', '.join(map(repr, p.values or (p.default,)))})" for p in op.params]
    kept = ", kept for the backward"
    outputs = [f"{o.name} ({o.dtype or 'the case dtype'}{'' if o.returned else kept})" for o in op.outputs]
    return {
        "op inputs": [f"{n} (optional: may be None)" if n in op.optional else n for n in op.inputs] or None,
        "op params": params or None,
        "op outputs": outputs,
        "op gradients": list(op.grads) or None,
        "op contract": op.contract.kind,
    }


def cmd_info(registry: Registry, args: argparse.Namespace) -> int:
    if args.kernel in {o.name for o in registry.ops()} and args.kernel not in {k.name for k in registry.kernels()}:
        return show_op(registry, registry.op(args.kernel), args)
    kernel = registry.kernel(args.kernel)
    op = registry.op(kernel.op)
    where = platform_for(args.capability)
    reasons = unmet_requirements(kernel, where)
    req = kernel.requires
    lo, hi = req.capability_range()
    info: dict[str, Any] = {
        "kernel": kernel.name,
        "op": op.name,
        "plugin": registry.owner(kernel).describe(),
        "description": kernel.description,
        "launcher": refs.describe(kernel.launcher),
        "requirements": {
            "capability": f"{caps.fmt(lo)}..{caps.fmt(hi)}",
            "arch": req.arch,
            "triton": req.triton,
            "features": list(req.features),
            "dtypes": list(registry.kernel_dtypes(kernel)),
            "input constraints": refs.describe(req.inputs) if req.inputs else None,
        },
        "interpreter": kernel.interpretable,
        "compile targets": {t.arch: {"ptx": list(t.ptx), "sass": list(t.sass)} for t in kernel.targets},
        "configs": [config_id(c) or "(launcher default)" for c in kernel.configs],
        "scheduler axis": [s.name for s in registry.schedulers()] if kernel.takes_scheduler else None,
        "priority": kernel.priority,
        "direction": "backward (computes the op's gradients)" if kernel.backward else "forward",
        "writes inputs": [f"{w.input}: {w.reason}" if w.reason else w.input for w in kernel.writes] or None,
        f"runs on {where.describe()}": "yes" if not reasons else "no: " + "; ".join(reasons),
        **op_interface(op),
        "op cases": {c.id: list(c.sets) for c in op.cases},
        "op tolerances": {d: {"atol": op.tolerances[d].atol, "rtol": op.tolerances[d].rtol} for d in op.dtypes},
        "op tolerance scale": refs.describe(op.tolerance_scale) if op.tolerance_scale else None,
        "op cost model": refs.describe(op.cost),
        "op peer": op.peer_name or None,
        "op wall-time data (the prior)": _prior_data(op),
    }
    return show_info(info, op, args)


def show_op(registry: Registry, op: Op, args: argparse.Namespace) -> int:
    """``tkreg info <op>``: the op's interface, cases and tolerances, and its kernels."""
    info: dict[str, Any] = {
        "op": op.name,
        "plugin": registry.owner(op).describe(),
        "description": op.description,
        **op_interface(op),
        "kernels": [k.name + (" (backward)" if k.backward else "") for k in registry.kernels(op.name)] or None,
        "op cases": {c.id: list(c.sets) for c in op.cases},
        "op tolerances": {d: {"atol": op.tolerances[d].atol, "rtol": op.tolerances[d].rtol} for d in op.dtypes},
        "op peer": op.peer_name or None,
        "op wall-time data (the prior)": _prior_data(op),
    }
    return show_info(info, op, args)


def _prior_data(op: Op) -> list[str] | str:
    """The GPUs the op's plugin ships wall-time data for: what tkreg.ops ranks by where it does
    not time calls (tkreg.ops.walltime)."""
    from .ops import walltime

    return walltime.described(op) or "none: kernels rank by priority and score where tkreg.ops does not time calls"


def show_info(info: dict[str, Any], op: Op, args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    # The cases grouped by the sets they are in: a line per set instead of a line per case.
    by_sets: dict[str, list[str]] = {}
    for case in op.cases:
        by_sets.setdefault(", ".join(case.sets), []).append(case.id)
    info["op cases"] = by_sets
    width = output_width(args)
    for key, value in info.items():
        show_field(key, value, width)
    return 0


def show_field(key: str, value: Any, width: int | None, depth: int = 0) -> None:
    """``key: value`` for the text view of info: lists comma-separated, a dict a line per key (a
    nested dict of plain values on one line), every line wrapped at ``width``."""
    if value in (None, "", [], {}):
        return
    pad = "  " * depth
    if isinstance(value, dict):
        if depth and not any(isinstance(v, (dict, list)) for v in value.values()):
            emit(f"{pad}{key}: " + ", ".join(f"{k} {_plain(v)}" for k, v in value.items()), width)
            return
        print(f"{pad}{key}:")
        for k, v in value.items():
            show_field(str(k), v, width, depth + 1)
    elif isinstance(value, list):
        emit(f"{pad}{key}: " + ", ".join(_plain(v) for v in value), width)
    else:
        emit(f"{pad}{key}: {_plain(value)}", width)


def _plain(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _built(module: str) -> bool:
    """Whether a C++ extension of tkreg was built, found without importing it (it needs torch)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except ImportError:
        spec = None
    return spec is not None and spec.origin is not None


def _plan_key_state() -> str:
    if not _built("tkreg.ops.native._plan_key"):
        return "Python (the C++ key is not built: install tkreg with torch in the build, as `make install` does)"
    return "C++ (built; used with the torch it was built for, else Python)"


def _replay_state() -> str:
    if not _built("tkreg.launch.native._replay"):
        return "Python (the C++ replay is not built: install tkreg with torch and triton in the build)"
    return "C++ (built; Python where a recording or the torch in use does not fit it)"


def cmd_doctor(registry: Registry, args: argparse.Namespace) -> int:
    print(f"tkreg {__version__}")
    emit(f"python {host.python_version()} ({sys.executable})", output_width(args))
    for dist in ("torch", "triton", "numpy", "pluggy", "pytest", "pytest-benchmark"):
        print(f"{dist} {installed_version(dist) or 'not installed'}")
    print(f"device: {current().describe()}")
    emit(f"tkreg.ops plan key: {_plan_key_state()}", output_width(args))
    emit(f"recorded launches replayed in: {_replay_state()}", output_width(args))
    selected = selected_names()
    width = output_width(args)
    print(f"{ENV_VAR}: " + ("unset (all plugins)" if selected is None else repr(_env_plugins())))
    installed = installed_plugins()
    loaded = {p.name for p in registry.plugins}
    failed = {p.plugin.name for p in registry.problems}
    print(f"plugins installed ({len(installed)}, {len(loaded)} loaded):")
    for p in installed:
        if p.name in loaded:
            kernels = [k.name for k in registry.kernels() if registry.owner(k).name == p.name]
            state = f"{len(kernels)} kernel(s)"
        elif p.name in failed:
            state = "failed to load (see plugin problems)"
        else:
            state = f"not loaded ({ENV_VAR} leaves it out)"
        emit(f"  {p.describe()}: {state}", width)
    problems = [problem.describe() for problem in registry.problems]
    selection = unknown_plugins_message()
    problems += [selection] if selection else []
    if problems:
        print(f"plugin problems ({len(problems)}):")
        for problem in problems:
            emit(f"  {problem}", width)
        return 1
    print("plugin problems: none")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Write the report; with a baseline, name every kernel slower than the threshold and return 1
    if there is one (for CI and scripts). The peers' own changes are the machine's drift: shown,
    never counted."""
    from .report import write_report
    from .report.write import describe_change

    report = write_report(args.run, args.out, baseline=args.baseline, threshold_pct=args.threshold, gate=args.gate)
    print(f"wrote {report.markdown} and {len(report.plots)} plot(s) in {report.directory}")
    comparison = report.comparison
    if comparison is None:
        return 0
    slower, gate = comparison.slower, comparison.gate
    print(
        f"{len(comparison.changes)} items compared with {args.baseline}: {len(comparison.kernels)} kernel items, "
        f"{len(slower)} slower than {args.threshold:g}% ({gate} gate)"
    )
    drift = comparison.median_drift_pct
    if drift is not None:
        print(f"machine drift: the peers moved by {drift:+.1f}% (median of {len(comparison.drift)}), not counted as slower")
    for change in slower:
        print(f"  SLOWER {describe_change(change, gate)}  {change.new.label}")
    return EXIT_REGRESSION if slower else 0


def cmd_bench(args: argparse.Namespace, argv: list[str]) -> int:
    """Run the measurement suites (tkreg.bench); ``argv`` (what followed ``bench``) is recorded in each data file."""
    from .bench.cli import run

    return run(args, "tkreg bench", argv)


def cmd_tune(args: argparse.Namespace) -> int:
    """Fill the tuning cache for the shapes given (or a model's linear layers) and say what won."""
    from .core.errors import TkregError
    from .ops.model_shapes import read_config
    from .ops.prefill import tune, tune_model

    try:
        if args.model:
            tokens = [int(t) for t in args.tokens.split(",")] if args.tokens else None
            results = tune_model(read_config(args.model), op=args.op, tokens=tokens, dtype=args.dtype, training=args.training)
        else:
            if not args.op or not args.shape:
                print("tkreg: error: give an op and --shape M=..,N=.. (repeatable), or --model CONFIG.json", file=sys.stderr)
                return EXIT_USAGE
            shapes = [_dims(text) for text in args.shape]
            results = tune(args.op, shapes, dtype=args.dtype, variant=args.variant, training=args.training)
    except TkregError as e:
        print(f"tkreg: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    for result in results:
        print(result.describe())
    return 0


def _dims(text: str) -> dict[str, int]:
    """"M=16,N=4096,K=4096" -> {"M": 16, "N": 4096, "K": 4096}."""
    dims = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or not value.strip().isdigit():
            raise ValueError(f"--shape {text!r}: expected sizes like M=16,N=4096,K=4096")
        dims[name.strip()] = int(value)
    return dims


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tkreg", description="Registry of GPU kernels: what is installed and where it runs.")
    sub = parser.add_subparsers(dest="command", required=True)
    p_list = sub.add_parser("list", help="kernels, their requirements, and whether they run here")
    p_list.add_argument("--op", help="only this op (default: all)")
    p_info = sub.add_parser("info", help="everything about one kernel and its op, or one op and its kernels")
    p_info.add_argument("kernel", metavar="NAME", help="a kernel's or an op's name")
    for p in (p_list, p_info):
        p.add_argument("--capability", help="judge for this GPU capability, e.g. 9.0, or 'interpreter' (default: this machine)")
        p.add_argument("--json", action="store_true", help="machine-readable output (default: a table)")
    p_doctor = sub.add_parser("doctor", help="versions, device, plugins installed and loaded, and plugins that failed")
    for p in (p_list, p_info, p_doctor):
        p.add_argument(
            "--wide", "--full-width", dest="wide", action="store_true",
            help=f"full lines, however long (default: fit {WIDTH} columns, wrapping long values)",
        )  # fmt: skip
    from .report.compare import DEFAULT_GATE, DEFAULT_THRESHOLD_PCT, GATES

    p_report = sub.add_parser(
        "report",
        help="plots and a Markdown table from pytest-benchmark JSON; with --baseline, exit 1 if a kernel got slower",
        epilog="exit status: 0 nothing got slower (or no baseline); 1 a kernel got slower than the threshold; "
        "2 an input cannot be read (the message names it) or the arguments are wrong",
    )
    add = p_report.add_argument
    add("run", metavar="RUN.json", help="pytest-benchmark JSON of `pytest --tkreg --tkreg-bench` (.json or .json.gz)")
    add("--baseline", metavar="BASE.json", help="compare with this run (default: no comparison)")
    add("--out", default="tkreg-report", metavar="DIR", help="write report.md and the plots here (default: tkreg-report)")
    # argparse formats help with %: a literal percent sign is written %%.
    add("--threshold", type=float, default=DEFAULT_THRESHOLD_PCT, metavar="PCT",
        help=f"growth counted as slower, in %% (default: {DEFAULT_THRESHOLD_PCT:g})")  # fmt: skip
    add("--gate", choices=GATES, default=DEFAULT_GATE,
        help="what counts as slower: 'relative', a kernel's device time relative to its peer's on the same case (the "
        "ratio in this run against the baseline's), so that machine drift, which moves the peer too, does not count; "
        "items whose peer is not in both runs are judged on their own change; 'absolute', every kernel's own device "
        "time. The peers' own changes are drift and never fail the gate (default: relative)")  # fmt: skip
    from .bench.cli import add_arguments as bench_arguments

    p_bench = sub.add_parser("bench", help="run the measurement suites on this GPU and write their data (docs/benchmarks.md)")
    bench_arguments(p_bench)
    p_tune = sub.add_parser(
        "tune", help="time the kernels and the peer on given shapes (or a model's linear layers) and cache the fastest",
        epilog="The cache is what tkreg.ops reads (TKREG_CACHE_DIR, default ~/.cache/tkreg); docs/ops.md says more.",
    )
    add = p_tune.add_argument
    add("op", nargs="?", help="the op to tune (with --model: default the op whose contract is linear)")
    add("--shape", action="append", metavar="DIMS", help="sizes as the op's cases name them, e.g. M=16,N=4096,K=4096 (repeat it)")
    add("--variant", default="", help="the op's case variant for the inputs (default: its plain layout)")
    add("--model", metavar="CONFIG.json", help="a Hugging Face style config: tune its q/k/v/o and MLP projections")
    add("--tokens", metavar="LIST", help="token counts for --model, e.g. 1,16,128 (default: 1,16,128,1024,4096)")
    add("--dtype", default="bfloat16", help="element type of the inputs (default: bfloat16)")
    add("--training", action="store_true", help="also time each shape's training choice: where a kernel runs the forward, "
        "a forward and a backward through the peer against the same through the kernel and its backward")
    args = parser.parse_args(argv)
    try:
        if args.command == "tune":
            return cmd_tune(args)
        if args.command == "bench":
            return cmd_bench(args, sys.argv[2:] if argv is None else argv[1:])
        if args.command == "report":
            return cmd_report(args)
        if args.command in ("list", "info"):
            refused = check_plugin_selection(output_width(args))
            if refused is not None:
                return refused
        registry = build_registry()
        return {"list": cmd_list, "info": cmd_info, "doctor": cmd_doctor}[args.command](registry, args)
    except BrokenPipeError:
        # The reader went away (`tkreg list | head`): stop quietly. Point stdout at /dev/null so
        # the interpreter's final flush does not fail again (the recipe in Python's signal docs).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except UnknownNameError as e:  # `tkreg info add_trtion`: the known names and the closest one
        print(f"tkreg: error: {unknown_names_message(e.kind, [e.name], e.known)}", file=sys.stderr)
        return EXIT_USAGE
    except (LookupError, ValueError, OSError) as e:  # ValueError: tkreg.report's ResultsError, naming the file
        print(f"tkreg: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Exception:  # a bug: exit with its own code, never 1, which `report` gives a regression
        traceback.print_exc()
        print(f"tkreg: internal error (a bug, not a result); exit status {EXIT_BUG}", file=sys.stderr)
        return EXIT_BUG


if __name__ == "__main__":
    sys.exit(main())
