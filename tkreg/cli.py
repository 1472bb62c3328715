"""The ``tkreg`` command: ``list``, ``info KERNEL``, ``doctor``, ``report RUN.json``. Imports neither torch
nor triton; ``report`` imports matplotlib only when it runs."""

from __future__ import annotations

import argparse
import json
import os
import platform as host
import sys
from typing import Any

from . import __version__
from .core import capability as caps
from .core import refs
from .core.loading import ENV_VAR, build_registry, selected_names
from .core.platform import current, installed_version, platform_for
from .core.registry import Registry, unmet_requirements
from .core.specs import config_id


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
    headers = ("op", "kernel", "plugin", "requirements", "runs here")
    table = [(r["op"], r["kernel"], r["plugin"], r["requirements"], "yes" if r["runs"] else f"no: {r['why_not']}") for r in rows]
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(headers[:-1])]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)) + "  " + headers[-1])
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
    if registry.problems:
        print(f"\n{len(registry.problems)} plugin problem(s); run `tkreg doctor` for details", file=sys.stderr)
    return 0


def _env_plugins() -> str:
    import os

    return os.environ.get(ENV_VAR, "")


def cmd_info(registry: Registry, args: argparse.Namespace) -> int:
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
        f"runs on {where.describe()}": "yes" if not reasons else "no: " + "; ".join(reasons),
        "op cases": {c.id: list(c.sets) for c in op.cases},
        "op tolerances": {d: {"atol": op.tolerances[d].atol, "rtol": op.tolerances[d].rtol} for d in op.dtypes},
        "op tolerance scale": refs.describe(op.tolerance_scale) if op.tolerance_scale else None,
        "op cost model": refs.describe(op.cost),
        "op peer": op.peer_name or None,
    }
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    for key, value in info.items():
        if value in (None, "", [], {}):
            continue
        if isinstance(value, dict):
            print(f"{key}:")
            for k, v in value.items():
                if v not in (None, "", []):
                    print(f"  {k}: {v}")
        else:
            print(f"{key}: {value}")
    return 0


def cmd_doctor(registry: Registry, args: argparse.Namespace) -> int:
    print(f"tkreg {__version__}")
    print(f"python {host.python_version()} ({sys.executable})")
    for dist in ("torch", "triton", "numpy", "pluggy", "pytest", "pytest-benchmark"):
        print(f"{dist} {installed_version(dist) or 'not installed'}")
    print(f"device: {current().describe()}")
    selected = selected_names()
    print(f"{ENV_VAR}: " + ("unset (all plugins)" if selected is None else repr(_env_plugins())))
    print(f"plugins loaded ({len(registry.plugins)}):")
    for p in registry.plugins:
        kernels = [k.name for k in registry.kernels() if registry.owner(k).name == p.name]
        print(f"  {p.describe()}: {len(kernels)} kernel(s)")
    if registry.problems:
        print(f"plugin problems ({len(registry.problems)}):")
        for problem in registry.problems:
            print(f"  {problem.describe()}")
        return 1
    print("plugin problems: none")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Write the report; with a baseline, name every item slower than the threshold and return 1
    if there is one (for CI and scripts)."""
    from .report import write_report

    report = write_report(args.run, args.out, baseline=args.baseline, threshold_pct=args.threshold)
    print(f"wrote {report.markdown} and {len(report.plots)} plot(s) in {report.directory}")
    comparison = report.comparison
    if comparison is None:
        return 0
    slower = comparison.slower
    print(f"{len(comparison.changes)} items compared with {args.baseline}: {len(slower)} slower than {args.threshold:g}%")
    for change in slower:
        print(f"  SLOWER {change.pct:+.1f}%  {change.new.label}")
    return 1 if slower else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tkreg", description="Registry of GPU kernels: what is installed and where it runs.")
    sub = parser.add_subparsers(dest="command", required=True)
    p_list = sub.add_parser("list", help="kernels, their requirements, and whether they run here")
    p_list.add_argument("--op", help="only this op (default: all)")
    p_info = sub.add_parser("info", help="everything about one kernel and its op")
    p_info.add_argument("kernel")
    for p in (p_list, p_info):
        p.add_argument("--capability", help="judge for this GPU capability, e.g. 9.0, or 'interpreter' (default: this machine)")
        p.add_argument("--json", action="store_true", help="machine-readable output (default: a table)")
    sub.add_parser("doctor", help="versions, device, plugins loaded and plugins that failed")
    p_report = sub.add_parser(
        "report", help="plots and a Markdown table from pytest-benchmark JSON; with --baseline, exit 1 if an item got slower"
    )
    add = p_report.add_argument
    add("run", metavar="RUN.json", help="pytest-benchmark JSON of `pytest --tkreg --tkreg-bench` (.json or .json.gz)")
    add("--baseline", metavar="BASE.json", help="compare with this run (default: no comparison)")
    add("--out", default="tkreg-report", metavar="DIR", help="write report.md and the plots here (default: tkreg-report)")
    add("--threshold", type=float, default=5.0, metavar="PCT", help="device-time growth counted as slower, % (default: 5)")
    args = parser.parse_args(argv)
    try:
        if args.command == "report":
            return cmd_report(args)
        registry = build_registry()
        return {"list": cmd_list, "info": cmd_info, "doctor": cmd_doctor}[args.command](registry, args)
    except BrokenPipeError:
        # The reader went away (`tkreg list | head`): stop quietly. Point stdout at /dev/null so
        # the interpreter's final flush does not fail again (the recipe in Python's signal docs).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (LookupError, ValueError, OSError) as e:  # OSError: a results file missing or unreadable
        print(f"tkreg: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
