"""Build the benchmark record (BENCHMARKS.md) from its template and the stored data, so every figure
in it is computed from JSON, never copied by hand.

    python -m tkreg.report.record                      # write BENCHMARKS.md and its plots
    python -m tkreg.report.record --check              # exit 1 if BENCHMARKS.md is not what the data give
    python -m tkreg.report.record --run 2026-11-23     # that day's data as a record, to stdout
    python -m tkreg.report.record --run FILE --out X   # one data file's tables, to X

The record shows, per GPU, the newest data file of each ``tkreg bench`` suite in the data folder
(``<date>-<gpu>-<suite>.json[.gz]``, tkreg.report.records); a GPU appears once a file of it is
there. ``--run DATE`` builds the same record from that day's files only; ``--run FILE`` renders
one file. Plots go to ``benchmarks/plots``, named by date, GPU and op; writing the record deletes
the PNGs there that it no longer references.

The template is Markdown with directives, each alone on a line. The lines between
``{{ per-gpu }}`` and ``{{ end }}`` are repeated for each GPU, and there:

``{{ device }}``            a heading with the GPU's name, and its versions
``{{ suite NAME }}``        the GPU's data of suite NAME: for ``main`` a section per op (kernels
                            against their peer, a summary line, plots), for the others their table

Anywhere: ``{{ contents }}`` (a list of the GPUs and the dates of their data), and directives on
one file: ``{{ source PATH }}``, ``{{ table PATH op=OP }}``, ``{{ vs-peer PATH op=OP }}``,
``{{ best PATH op=OP }}``, ``{{ plots PATH op=OP }}`` (pytest-benchmark JSON) and
``{{ record PATH }}`` (any envelope). Paths are relative to the current directory (run it from the
repository root).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import record_tables
from .markdown import results_table
from .records import DATE, DataFile, data_files, latest, load
from .records import gpu_slug as slug_of
from .results import DEFAULT_MODE, Result, Run, load_run, read_json, section_suffix
from .write import file_stem, op_plots

DEFAULT_TEMPLATE = Path("benchmarks/template.md")
DEFAULT_OUT = Path("BENCHMARKS.md")
DEFAULT_PLOTS = Path("benchmarks/plots")
DEFAULT_DATA = Path("benchmarks/data")
COMMAND = "python -m tkreg.report.record"
MAX_BYTES = 60_000  # the record is read on a web page: past this it is a diary, not a record
DIRECTIVE = re.compile(r"^\{\{\s*([a-z-]+)((?:\s+\S+)*)\s*\}\}\s*$")
BLOCK_START, BLOCK_END = "per-gpu", "end"
SUITE_ORDER = ("main", "dispatch", "timer", "host", "linear", "ranking")


@dataclass
class Gpu:
    """One GPU's data in the record: suite -> file."""

    slug: str
    files: dict[str, DataFile]
    _meta: dict[str, Any] | None = None

    def meta(self) -> dict[str, Any]:
        """The newest meta among the GPU's files (device name, versions)."""
        if self._meta is None:
            self._meta = {}
            for f in sorted(self.files.values(), key=lambda f: (f.date, f.suite), reverse=True):
                found = read_json(f.path).get("meta")
                if isinstance(found, dict) and found.get("device"):
                    self._meta = found
                    break
        return self._meta


@dataclass
class Builder:
    out: Path  # where the record goes (links are relative to it)
    plots_dir: Path | None  # None: no plots
    draw: bool = True
    made: list[Path] = field(default_factory=list)  # the plots the record references
    _runs: dict[str, Run] = field(default_factory=dict)

    def run(self, path: str) -> Run:
        if path not in self._runs:
            self._runs[path] = load_run(path)
        return self._runs[path]

    def results(self, path: str, op: str) -> list[Result]:
        results = self.run(path).of_op(op)
        if not results:
            raise ValueError(f"{path} has no results for op {op!r} (it has {', '.join(self.run(path).ops())})")
        return results

    # -- directives on one file -------------------------------------------------------------------
    def render(self, name: str, args: Sequence[str], gpu: Gpu | None) -> str:
        path, opts = (args[0] if args else ""), dict(a.split("=", 1) for a in args[1:] if "=" in a)
        renderers: dict[str, Callable[[], str]] = {
            "source": lambda: self.source(path),
            "table": lambda: results_table(self.results(path, opts["op"])),
            "vs-peer": lambda: record_tables.vs_peer_table(self.results(path, opts["op"])),
            "best": lambda: record_tables.best_table(self.results(path, opts["op"])),
            "plots": lambda: self.plot_links(self.results(path, opts["op"]), f"{_stem(path)}-{file_stem(opts['op'])}",
                                             f" ({_stem(path)})"),
            "record": lambda: record_tables.envelope_section(load(path), path),
        }
        if name in ("device", "suite"):
            if gpu is None:
                raise ValueError(f"directive {name} belongs between {{{{ {BLOCK_START} }}}} and {{{{ {BLOCK_END} }}}}")
            return self.device(gpu) if name == "device" else self.suite(gpu, path)
        if name not in renderers:
            raise ValueError(f"unknown directive {name!r} (known: {', '.join([*renderers, 'device', 'suite', 'contents'])})")
        if not path:
            raise ValueError(f"directive {name} without a path")
        try:
            return renderers[name]()
        except KeyError as e:
            raise ValueError(f"directive {name} needs {e.args[0]}=...") from None

    def source(self, path: str) -> str:
        document = read_json(path)
        meta = dict(document.get("meta") or {}) if isinstance(document, dict) else {}
        if not meta.get("date") and isinstance(document, dict):
            meta["date"] = str(document.get("datetime", ""))[:19]
        return record_tables.source_line(path, meta)

    def plot_links(self, results: list[Result], stem: str, suffix: str = "") -> str:
        if self.plots_dir is None:
            return ""
        made = op_plots(results, self.plots_dir, stem, suffix, self.draw)
        self.made += made
        return "\n".join(f"![{png.stem}]({Path(os.path.relpath(png, self.out.parent)).as_posix()})" for png in made)

    # -- per GPU ------------------------------------------------------------------------------------
    def device(self, gpu: Gpu) -> str:
        meta = gpu.meta()
        name = meta.get("device") or gpu.slug
        facts = [f"capability {meta['capability']}" if meta.get("capability") else "",
                 f"{meta['sms']} SMs" if meta.get("sms") else "",
                 f"driver {meta['driver']}" if meta.get("driver") else ""]  # fmt: skip
        line = ", ".join(f for f in facts if f)
        return f"## {name}" + (f"\n\n{line}." if line else "")

    def suite(self, gpu: Gpu, name: str, full: bool = False) -> str:
        if not name:
            raise ValueError("directive suite needs the suite's name ({{ suite timer }})")
        found = gpu.files.get(name)
        if found is None:
            return f"*No `{name}` data for this GPU in this record (`tkreg bench {name}` measures it).*"
        path = found.path.as_posix()
        if name == "main":
            covered = {op: s for s, f in gpu.files.items() if s in record_tables.SUITE_OPS
                       for op in record_tables.SUITE_OPS[s](load(f.path.as_posix()))}  # fmt: skip
            return self.main_suite(path, gpu.slug, covered, full)
        document = load(path)
        render = record_tables.SUITE_TABLES.get(name, record_tables.record_table)
        parts = [record_tables.source_line(path, document.get("meta") or {}), "", render(document)]
        return "\n".join(parts)

    def main_suite(self, path: str, slug: str, covered: Mapping[str, str] | None = None, full: bool = False) -> str:
        """The main job's run: where it comes from, its ceilings, then per op (and mode) the
        kernels against the peer, a summary line and the plots. The record stays short: a table
        per case only for forward sections of ops that no other suite covers (``covered``: op ->
        the suite whose table has it, which is longer) and for every section of ops timed against
        rivals; the rest as the summary line. ``full``: a table for every section."""
        covered = covered or {}
        run = self.run(path)
        document = read_json(path)
        meta = dict(document.get("meta") or {})
        date = str(meta.get("date") or document.get("datetime", ""))[:10]
        meta.setdefault("date", str(document.get("datetime", ""))[:19])
        parts = [record_tables.source_line(path, meta)]
        ceilings = record_tables.ceilings_line(run.results)
        if ceilings:
            parts += ["", ceilings]
        for section in run.sections():
            results = run.of_section(section)
            op, mode, params = section
            title = f"{op} {section_suffix(mode, params)}".strip()
            parts += ["", f"#### {title}"]
            if op in covered:
                parts += ["", f"Per case: the `{covered[op]}` suite's table below."]
            elif full or (mode == DEFAULT_MODE and not params) or any(r.is_peer and r.peer_name for r in results):
                # forward sections, and every section of an op timed against rivals (its goals
                # are stated against them)
                parts += ["", record_tables.vs_peer_table(results)]
            summary = record_tables.peer_summary(results)
            if summary:
                parts += ["", summary]
            stem = "-".join(p for p in (date, slug, file_stem(title.replace(" ", "-"))) if p)
            links = self.plot_links(results, stem, f" ({meta.get('device') or slug}, {date})")
            if links:
                parts += ["", links]
        return "\n".join(parts)


def _stem(path: str) -> str:
    name = Path(path).name
    for suffix in (".gz", ".json"):
        name = name.removesuffix(suffix)
    return name


def parse(line: str) -> tuple[str, list[str]] | None:
    """(name, arguments) of a directive line, or None for a plain line."""
    match = DIRECTIVE.match(line)
    if not match:
        return None
    return match.group(1), match.group(2).split()


def gpus_of(files: Sequence[DataFile]) -> list[Gpu]:
    """One entry per GPU with the newest file of each suite, GPUs by name."""
    return [Gpu(slug, dict(sorted(by_suite.items(), key=lambda kv: _suite_rank(kv[0]))))
            for slug, by_suite in sorted(latest(files).items())]  # fmt: skip


def _suite_rank(suite: str) -> tuple[int, str]:
    return (SUITE_ORDER.index(suite) if suite in SUITE_ORDER else len(SUITE_ORDER), suite)


def contents(gpus: Sequence[Gpu]) -> str:
    if not gpus:
        return "*No data yet: `tkreg bench` on a GPU writes it.*"
    lines = []
    for gpu in gpus:
        name = gpu.meta().get("device") or gpu.slug
        anchor = re.sub(r"[^a-z0-9 -]", "", name.lower()).replace(" ", "-")
        dates = ", ".join(f"{suite} {f.date}" for suite, f in gpu.files.items())
        lines.append(f"- [{name}](#{anchor}): {dates}")
    return "\n".join(lines)


def build(template: Path, out: Path = DEFAULT_OUT, plots_dir: Path | None = DEFAULT_PLOTS, write_plots: bool = True,
          files: Sequence[DataFile] | None = None, data_dir: Path = DEFAULT_DATA) -> tuple[str, list[Path]]:  # fmt: skip
    """The record's Markdown (the template with every directive replaced by what it computes) and
    the plots it references. ``files``: the data to show (default: every file in ``data_dir``)."""
    builder = Builder(out, plots_dir, write_plots)
    gpus = gpus_of(data_files(data_dir) if files is None else files)
    lines = template.read_text().splitlines()
    body: list[str] = []
    number = 0
    while number < len(lines):
        directive = parse(lines[number])
        if directive is not None and directive[0] == BLOCK_START:
            end = next((i for i in range(number + 1, len(lines)) if (d := parse(lines[i])) and d[0] == BLOCK_END), None)
            if end is None:
                raise ValueError(f"{template}:{number + 1}: {{{{ {BLOCK_START} }}}} without {{{{ {BLOCK_END} }}}}")
            for gpu in gpus:
                body += _expand(builder, template, lines[number + 1 : end], number + 2, gpu)
            number = end + 1
            continue
        if directive is not None and directive[0] == "contents":
            body.append(contents(gpus))
        else:
            body += _expand(builder, template, [lines[number]], number + 1, None)
        number += 1
    note = f"<!-- Generated by `{COMMAND}` from {template.as_posix()} and the data it names: edit those, not this file. -->"
    return "\n".join([note, *body]).rstrip() + "\n", builder.made


def _expand(builder: Builder, template: Path, lines: Sequence[str], first: int, gpu: Gpu | None) -> list[str]:
    out = []
    for number, line in enumerate(lines, start=first):
        directive = parse(line)
        if directive is None:
            out.append(line)
            continue
        try:
            out.append(builder.render(directive[0], directive[1], gpu))
        except (ValueError, OSError) as e:
            raise ValueError(f"{template}:{number}: {e}") from e
    return out


def select(run: str, data_dir: Path) -> list[DataFile]:
    """The data files ``--run`` names: one file (a path), or every file of a date."""
    if DATE.fullmatch(run):
        found = [f for f in data_files(data_dir) if f.date == run]
        if not found:
            dates = sorted({f.date for f in data_files(data_dir)})
            raise ValueError(f"no data of {run} in {data_dir} (dates there: {', '.join(dates) or 'none'})")
        return found
    path = Path(run)
    if not path.exists():
        raise ValueError(f"--run takes a data file or a date (YYYY-MM-DD); {run!r} is neither")
    named = DataFile.parse(path)
    return [named] if named is not None else [DataFile("", slug_of(""), _kind_of(path), path)]


def _kind_of(path: Path) -> str:
    """A file outside the naming scheme: main for pytest-benchmark JSON, else its envelope's kind."""
    document = read_json(path)
    return "main" if isinstance(document, dict) and "benchmarks" in document else "record"


def render_file(data: DataFile, out: Path, plots_dir: Path | None) -> str:
    """One data file as Markdown: a heading, and its suite's section."""
    builder = Builder(out, plots_dir, plots_dir is not None)
    gpu = Gpu(data.gpu, {data.suite: data})
    heading = f"# {data.suite}: {gpu.meta().get('device') or data.gpu}" + (f", {data.date}" if data.date else "")
    body = builder.suite(gpu, data.suite, full=True) if data.suite in (*record_tables.SUITE_TABLES, "main") else \
        record_tables.envelope_section(load(data.path), data.path.as_posix())  # fmt: skip
    return f"{heading}\n\n{body}\n"


def prune_plots(plots_dir: Path, keep: Sequence[Path]) -> list[Path]:
    """Delete the PNGs in ``plots_dir`` that the record does not reference; the deleted."""
    kept = {p.resolve() for p in keep}
    stale = [p for p in sorted(plots_dir.glob("*.png")) if p.resolve() not in kept]
    for p in stale:
        p.unlink()
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description="Build the benchmark record from its template and stored data.")
    parser.add_argument("--template", type=Path, default=DEFAULT_TEMPLATE, help=f"the template (default: {DEFAULT_TEMPLATE})")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help=f"the data folder (default: {DEFAULT_DATA})")
    parser.add_argument("--out", type=Path, help=f"the record to write (default: {DEFAULT_OUT}; with --run, stdout)")
    parser.add_argument("--plots", type=Path, help=f"where plots go (default: {DEFAULT_PLOTS}; with --run, no plots)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the record is out of date")
    parser.add_argument("--run", metavar="FILE|DATE", help="show an older run: one data file, or every file of a date")
    args = parser.parse_args(argv)
    if args.run and args.check:
        parser.error("--check compares the record itself; it takes no --run")
    try:
        if args.run:
            return _show_run(args)
        out = args.out or DEFAULT_OUT
        plots = args.plots or DEFAULT_PLOTS
        text, made = build(args.template, out, plots, write_plots=not args.check, data_dir=args.data)
    except (ValueError, OSError) as e:
        print(f"{COMMAND}: error: {e}", file=sys.stderr)
        return 2
    if len(text.encode()) > MAX_BYTES:
        print(f"{COMMAND}: warning: the record is {len(text.encode())} bytes, over {MAX_BYTES}", file=sys.stderr)
    if args.check:
        return _check(out, text, made)
    out.write_text(text)
    stale = prune_plots(plots, made) if plots.is_dir() else []
    print(f"wrote {out} ({len(text.encode())} bytes) and {len(made)} plots in {plots}"
          + (f"; deleted {len(stale)} plots it no longer references" if stale else ""))  # fmt: skip
    return 0


def _show_run(args: argparse.Namespace) -> int:
    files = select(args.run, args.data)
    out = args.out or Path("-")
    if len(files) == 1 and not DATE.fullmatch(args.run):
        text = render_file(files[0], out, args.plots)
    else:
        text, _ = build(args.template, out, args.plots, write_plots=args.plots is not None, files=files)
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text)
        print(f"wrote {args.out}")
    return 0


def _check(out: Path, text: str, made: Sequence[Path]) -> int:
    current = out.read_text() if out.exists() else ""
    missing = [p for p in made if not p.exists()]
    if current == text and not missing:
        print(f"{out} is up to date")
        return 0
    if current != text:
        diff = difflib.unified_diff(current.splitlines(), text.splitlines(), str(out), "rebuilt", lineterm="", n=1)
        print("\n".join(list(diff)[:40]))
    for p in missing:
        print(f"missing plot: {p}")
    print(f"{out} is out of date: run `{COMMAND}`", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
