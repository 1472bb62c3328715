"""Build the benchmark record (BENCHMARKS.md) from its template and the stored data, so every table
in it is computed from JSON, never copied by hand.

    python -m tkreg.report.record            # write BENCHMARKS.md (and its plots) from benchmarks/template.md
    python -m tkreg.report.record --check    # exit 1 if BENCHMARKS.md is not what the template and data give

The template is Markdown with directives, each alone on a line: ``{{ NAME PATH [key=value ...] }}``.
Paths are relative to the current directory (run it from the repository root).

==========================================================  =========================================
``{{ source PATH }}``                                       a benchmark JSON's device, date and commit
``{{ table PATH op=OP }}``                                  every item of OP (the report's full table)
``{{ vs-peer PATH op=OP }}``                                each kernel against the peer, per case/dtype
``{{ best PATH op=OP }}``                                   the fastest kernel per case/dtype vs the peer
``{{ speedups PATH op=OP kernel=K by=KEY where=A=1,B=2 }}``  one kernel's speed-ups per value of KEY
``{{ plots PATH op=OP }}``                                  the report's plots of OP, written beside it
``{{ record PATH }}``                                       a tkreg.report.records envelope, with its meta
``{{ records DIR }}``                                       every envelope in DIR no record line placed
``{{ matmul-suite PATH }}``                                 scripts/gpu/matmul_suite.py's record, per case
==========================================================  =========================================

PATH for the first six is pytest-benchmark JSON (``--benchmark-json``, .json or .json.gz).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import record_tables
from .markdown import results_table
from .records import load as load_record
from .results import Run, load_run, read_json
from .write import file_stem, op_plots

DEFAULT_TEMPLATE = Path("benchmarks/template.md")
DEFAULT_OUT = Path("BENCHMARKS.md")
DEFAULT_PLOTS = Path("benchmarks/plots")
COMMAND = "python -m tkreg.report.record"
DIRECTIVE = re.compile(r"^\{\{\s*([a-z-]+)\s+(.*?)\s*\}\}\s*$")


@dataclass
class Builder:
    out: Path  # where the record goes (links are relative to it)
    plots_dir: Path
    write_plots: bool = True
    _runs: dict[str, Run] = field(default_factory=dict)
    placed: set[Path] = field(default_factory=set)  # envelopes a record line placed

    def run(self, path: str) -> Run:
        if path not in self._runs:
            self._runs[path] = load_run(path)
        return self._runs[path]

    def results(self, path: str, op: str) -> list:
        results = self.run(path).of_op(op)
        if not results:
            raise ValueError(f"{path} has no results for op {op!r} (it has {', '.join(self.run(path).ops())})")
        return results

    def render(self, name: str, path: str, opts: dict[str, str]) -> str:
        renderers: dict[str, Callable[[], str]] = {
            "source": lambda: self.source(path),
            "table": lambda: results_table(self.results(path, opts["op"])),
            "vs-peer": lambda: record_tables.vs_peer_table(self.results(path, opts["op"])),
            "best": lambda: record_tables.best_table(self.results(path, opts["op"])),
            "speedups": lambda: record_tables.speedup_table(
                self.results(path, opts["op"]), opts["kernel"], opts["by"], _pairs(opts.get("where", ""))
            ),
            "plots": lambda: self.plots(path, opts["op"]),
            "record": lambda: record_tables.record_table(load_record(path)),
            "matmul-suite": lambda: record_tables.matmul_suite_table(load_record(path)),
            "records": lambda: self.records(path),
        }
        if name not in renderers:
            raise ValueError(f"unknown directive {name!r} (known: {', '.join(renderers)})")
        try:
            return renderers[name]()
        except KeyError as e:
            raise ValueError(f"directive {name} needs {e.args[0]}=...") from None

    def source(self, path: str) -> str:
        meta = self.run(path).meta
        facts = ", ".join(meta[k] for k in ("device", "date") if meta.get(k))
        commit = f", commit {meta['commit']}" if meta.get("commit") else ""
        return f"Data: `{path}` (pytest-benchmark JSON; {facts}{commit})."

    def plots(self, path: str, op: str) -> str:
        stem = _stem(path)
        made = op_plots(self.results(path, op), self.plots_dir, f"{stem}-{file_stem(op)}", f" ({stem})", self.write_plots)
        return "\n".join(f"![{op}: {png.stem}]({Path(os.path.relpath(png, self.out.parent)).as_posix()})" for png in made)

    def records(self, directory: str) -> str:
        parts = []
        for path in sorted(Path(directory).glob("*.json*")):
            if path.resolve() in self.placed or "kind" not in _peek(path):
                continue
            document = load_record(path)
            parts += [f"### {document['kind']} (`{path.as_posix()}`)", "", record_tables.record_table(document), ""]
        return "\n".join(parts).rstrip() or "(no other records)"


def _stem(path: str) -> str:
    name = Path(path).name
    for suffix in (".gz", ".json"):
        name = name.removesuffix(suffix)
    return name


def _peek(path: Path) -> dict:
    document = read_json(path)
    return document if isinstance(document, dict) else {}


def _pairs(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split(",") if item)


def parse(line: str) -> tuple[str, str, dict[str, str]] | None:
    """(name, path, options) of a directive line, or None for a plain line."""
    match = DIRECTIVE.match(line)
    if not match:
        return None
    words = match.group(2).split()
    if not words:
        raise ValueError(f"directive {match.group(1)} without a path")
    return match.group(1), words[0], dict(w.split("=", 1) for w in words[1:])


def build(template: Path, out: Path = DEFAULT_OUT, plots_dir: Path = DEFAULT_PLOTS, write_plots: bool = True) -> str:
    """The record's Markdown: the template with every directive replaced by what it computes."""
    builder = Builder(out, plots_dir, write_plots)
    lines = template.read_text().splitlines()
    parsed = [parse(line) for line in lines]
    builder.placed = {Path(p[1]).resolve() for p in parsed if p and p[0] in ("record", "matmul-suite")}
    body = []
    for number, (line, directive) in enumerate(zip(lines, parsed), start=1):
        if directive is None:
            body.append(line)
            continue
        try:
            body.append(builder.render(*directive))
        except (ValueError, OSError) as e:
            raise ValueError(f"{template}:{number}: {e}") from e
    note = f"<!-- Generated by `{COMMAND}` from {template.as_posix()} and the data it names: edit those, not this file. -->"
    return "\n".join([note, *body]).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description="Build the benchmark record from its template and stored data.")
    parser.add_argument("--template", type=Path, default=DEFAULT_TEMPLATE, help=f"the template (default: {DEFAULT_TEMPLATE})")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the record to write (default: {DEFAULT_OUT})")
    parser.add_argument("--plots", type=Path, default=DEFAULT_PLOTS, help=f"where plots go (default: {DEFAULT_PLOTS})")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the record is out of date")
    args = parser.parse_args(argv)
    try:
        text = build(args.template, args.out, args.plots, write_plots=not args.check)
    except (ValueError, OSError) as e:
        print(f"{COMMAND}: error: {e}", file=sys.stderr)
        return 2
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current == text:
            print(f"{args.out} is up to date")
            return 0
        diff = difflib.unified_diff(current.splitlines(), text.splitlines(), str(args.out), "rebuilt", lineterm="", n=1)
        print("\n".join(list(diff)[:40]))
        print(f"{args.out} is out of date: run `{COMMAND}`", file=sys.stderr)
        return 1
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
