"""One suite in a process of its own: run its measuring function and write its data file.

    python -m tkreg.bench.child --entry MODULE:FUNCTION --suite NAME [--out PATH] --seconds S --command CMD

The runner (tkreg.bench.runner) starts this per suite, so each suite gets a fresh CUDA context
(the timer suite measures a launcher before the process's first CUPTI trace), and a suite stuck
in a kernel can be killed without losing the others. The file is written all at once, and only
when the measuring function returns: exit status 0 with the file, 1 without it.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from ..core import refs
from ..report import records
from .suites import Deadline, Measured, SuiteFailed


def envelope(suite: str, measured: Measured, command: str) -> dict[str, Any]:
    """The data file's content: the suite's rows in a records envelope, or its finished document
    with a ``meta`` key; either way meta names the device, versions, date and ``command``."""
    meta = {"suite": suite, "command": command, **measured.meta}
    if measured.document is not None:
        content = dict(measured.document)
        content["meta"] = {**records.environment(), **meta}
        return content
    return records.document(measured.kind or suite, measured.rows, notes=measured.notes, meta=meta,
                            summary=measured.summary)  # fmt: skip


def produce(entry: str, suite: str, out: Path | None, seconds: float, command: str, **options: str) -> Path | None:
    """Measure (``entry`` gets a Deadline of ``seconds`` and ``options``) and write the file to
    ``out`` (none where ``out`` is None); the path written."""
    measure = refs.resolve(entry)
    measured = measure(Deadline(seconds), **options)
    if out is None:
        return None
    return records.write(out, envelope(suite, measured, command))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tkreg.bench.child", description=__doc__.splitlines()[0])
    parser.add_argument("--entry", required=True, help="the measuring function, module:function")
    parser.add_argument("--suite", required=True, help="the suite's name (recorded in meta)")
    parser.add_argument("--out", type=Path, help="the data file to write (default: none)")
    parser.add_argument("--seconds", type=float, required=True, help="the suite's time limit")
    parser.add_argument("--command", default="", help="the command a user ran (recorded in meta)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="passed to the function")
    args = parser.parse_args(argv)
    options = dict(item.split("=", 1) for item in args.option)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        path = produce(args.entry, args.suite, args.out, args.seconds, args.command, **options)
    except SuiteFailed as e:
        print(f"{args.suite}: FAILED: {e}", flush=True)
        return 1
    except Exception:  # any other error: its traceback, and no file
        traceback.print_exc()
        print(f"{args.suite}: FAILED with the error above", flush=True)
        return 1
    if path is not None:
        print(f"{args.suite}: wrote {path.name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
