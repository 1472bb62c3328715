"""Benchmark results as the report reads them, from pytest-benchmark's JSON or from the rows a
tkreg session collected (each benchmark's ``extra_info``, written by ``tkreg.testing.runners.run_bench``).

Only the standard library: the CLI and the record builder load results without torch.

A benchmark times the forward (``mode`` "fwd"), the backward ("bwd") or both in turn ("fwdbwd"), at
the op's parameter values (``params``); results of runs that predate these fields are forward
runs without parameters. A file that cannot be read or is not a benchmark run raises
:class:`ResultsError`, naming the file and what is wrong with it.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from ..core.dtypes import SHORT_NAMES
from ..core.interface import format_value

PEER_PREFIX = "peer-"  # how run_bench names an op's peer (peer-torch.add, ...)
# What a benchmark times, in the order reports show them (tkreg.testing.generation.BENCH_MODES;
# the report part may not import the testing part).
MODES = ("fwd", "bwd", "fwdbwd")
DEFAULT_MODE = "fwd"  # results written before benchmarks had a mode timed the forward
GZIP_MAGIC = b"\x1f\x8b"


class ResultsError(ValueError):
    """A results file (or document) that cannot be read as a benchmark run: names the file and
    what is wrong with it."""


# What write_report and load_run accept: a path to the JSON (.json or .json.gz), the parsed
# pytest-benchmark document, or the list of extra_info rows a tkreg session collected.
Source = Union[str, os.PathLike, Mapping[str, Any], list]


@dataclass(frozen=True)
class Result:
    """One benchmark item: a kernel (or its op's peer) on one case and dtype."""

    op: str
    kernel: str
    case: str
    dtype: str
    config: tuple[tuple[str, str], ...]
    median_ms: float  # device time per call
    wall_ms: float | None = None  # wall time per call, launcher included, where recorded
    host_us: float | None = None  # the launcher's host time per call
    throughput: float | None = None  # in `unit`
    unit: str = ""  # "GB/s" (memory-bound ops) or "TFLOP/s" (compute-bound)
    ceiling: float | None = None  # the ceiling measured in the same run, in `unit`
    ceiling_name: str = ""  # what the ceiling is ("device copy (read+write)", "cuBLAS bf16 8192^3")
    fraction: float | None = None  # throughput / ceiling
    speedup: float | None = None  # the peer's median over this item's
    device: str = ""
    timing: str = ""  # how the device time was measured, as the run recorded it
    name: str = ""  # pytest-benchmark's fullname, where known
    mode: str = DEFAULT_MODE  # one of MODES: what the benchmark timed
    peer_name: str = ""  # the peer `speedup` is against (a kernel's, or a rival's: not the peer's own)
    params: tuple[tuple[str, str], ...] = ()  # the op's parameter values, as item ids show them

    @property
    def is_peer(self) -> bool:
        """The op's peer, or one of its rivals (timed the same way, named the same way)."""
        return self.kernel.startswith(PEER_PREFIX)

    @property
    def is_rival(self) -> bool:
        """One of the op's rivals (torch.compile, another library): timed beside the peer, with
        a speed-up against it."""
        return self.is_peer and bool(self.peer_name)

    @property
    def config_id(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.config)

    @property
    def params_id(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.params)

    @property
    def section(self) -> tuple[str, str, str]:
        """(op, mode, params): results that belong in one table and one plot."""
        return (self.op, self.mode, self.params_id)

    @property
    def point(self) -> tuple[str, str, str, str, str]:
        """(op, mode, params, case, dtype): what a kernel and its peer were both timed on."""
        return (self.op, self.mode, self.params_id, self.case, self.dtype)

    @property
    def key(self) -> tuple[str, ...]:
        """What identifies an item across runs."""
        return (self.op, self.kernel, self.config_id, self.case, self.dtype, self.mode, self.params_id)

    @property
    def short_dtype(self) -> str:
        return SHORT_NAMES.get(self.dtype, self.dtype)

    @property
    def label(self) -> str:
        config = f"[{self.config_id}]" if self.config else ""
        label = f"{self.op}/{self.kernel}{config} {self.case} {self.short_dtype}".strip()
        return f"{label} {section_suffix(self.mode, self.params_id)}".strip()


def section_suffix(mode: str, params_id: str) -> str:
    """How a section is told apart from the plain forward one: "bwd", "fwd eps=1e-06", or ""."""
    shown = [mode] if mode != DEFAULT_MODE or params_id else []
    return " ".join([*shown, *([params_id] if params_id else [])])


def section_order(section: tuple[str, str, str]) -> tuple[str, int, str]:
    op, mode, params = section
    return (op, MODES.index(mode) if mode in MODES else len(MODES), params)


@dataclass(frozen=True)
class Run:
    """The results of one benchmark run and where they came from."""

    results: list[Result]
    meta: dict[str, str] = field(default_factory=dict)  # source, device, date, commit where known

    def ops(self) -> list[str]:
        return sorted({r.op for r in self.results})

    def of_op(self, op: str) -> list[Result]:
        return [r for r in self.results if r.op == op]

    def sections(self) -> list[tuple[str, str, str]]:
        """(op, mode, params) of the results: by op, forward before backward, parameters in the
        order measured."""
        return sorted(dict.fromkeys(r.section for r in self.results), key=section_order)

    def of_section(self, section: tuple[str, str, str]) -> list[Result]:
        return [r for r in self.results if r.section == section]


def read_json(path: str | os.PathLike[str]) -> Any:
    """A JSON file, gzip-compressed where its name ends in .gz; ResultsError naming the file when
    it is missing, unreadable, a truncated or corrupt gzip stream, or not JSON."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ResultsError(f"{path}: cannot read it: {e.strerror or e}") from None
    if str(path).endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except EOFError:
            raise ResultsError(f"{path}: the gzip stream ends early (a truncated file?)") from None
        except (gzip.BadGzipFile, zlib.error) as e:
            if not raw.startswith(GZIP_MAGIC):
                raise ResultsError(f"{path}: not gzip-compressed, although its name ends in .gz") from None
            raise ResultsError(f"{path}: a corrupt gzip stream ({e})") from None
    try:
        return json.loads(raw)
    except UnicodeDecodeError as e:
        raise ResultsError(f"{path}: not JSON text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        ends_early = e.pos >= len(e.doc.rstrip())  # what a run stopped while writing leaves
        hint = " (the file ends early: truncated?)" if ends_early else ""
        raise ResultsError(f"{path}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno}{hint}") from None


def load_run(source: Source) -> Run:
    """Results from a pytest-benchmark JSON (path or parsed) or a list of extra_info rows;
    ResultsError (a ValueError) naming the file when it is not one."""
    meta: dict[str, str] = {}
    where = "input"
    if isinstance(source, (str, os.PathLike)):
        meta["source"] = f"`{source}`"
        where = str(source)
        source = read_json(source)
    if isinstance(source, Mapping):
        if not isinstance(source.get("benchmarks"), list):
            raise ResultsError(f"{where}: not a pytest-benchmark JSON (no 'benchmarks' list)")
        meta.setdefault("source", "pytest-benchmark results passed in memory")
        meta.update(_benchmark_meta(source))
        results = [_parsed(_from_benchmark, b, where, i) for i, b in enumerate(source["benchmarks"])]
    elif isinstance(source, list):
        meta["source"] = "the benchmark rows of a tkreg pytest session"
        results = [_parsed(_from_info, info, where, i) for i, info in enumerate(source)]
    else:
        raise ResultsError(f"{where}: not a pytest-benchmark JSON (a JSON {type(source).__name__}, not an object)")
    if results and "device" not in meta:
        meta["device"] = next((r.device for r in results if r.device), "")
    return Run(results, meta)


def _parsed(parse: Any, entry: Any, where: str, index: int) -> Result:
    """One entry parsed, or ResultsError naming the file and the entry."""
    try:
        if not isinstance(entry, Mapping):
            raise ValueError(f"expected an object, got a JSON {type(entry).__name__}")
        return parse(entry)
    except (KeyError, TypeError, ValueError) as e:
        name = (entry.get("fullname") or entry.get("name")) if isinstance(entry, Mapping) else None
        what = f"benchmark {index}" + (f" ({name})" if name else "")
        problem = f"no {e.args[0]!r}" if isinstance(e, KeyError) else str(e)
        raise ResultsError(f"{where}: {what}: {problem}") from None


def _benchmark_meta(document: Mapping[str, Any]) -> dict[str, str]:
    meta = {"date": str(document.get("datetime", ""))}
    commit = document.get("commit_info") or {}
    if commit.get("id"):
        meta["commit"] = str(commit["id"])[:12] + (" (dirty)" if commit.get("dirty") else "")
    machine = document.get("machine_info") or {}
    if machine.get("node"):
        meta["host"] = str(machine["node"])
    return meta


def _from_benchmark(bench: Mapping[str, Any]) -> Result:
    info = dict(bench.get("extra_info") or {})
    if "op" not in info:  # not a tkreg item: keep what pytest-benchmark knows
        info = {"op": bench.get("group") or "other", "kernel": bench.get("name", "?"), "case": "", "dtype": ""}
    if "median_ms" not in info:
        stats = bench.get("stats")
        if not isinstance(stats, Mapping) or "median" not in stats:
            raise ValueError("neither extra_info['median_ms'] nor stats['median']")
        info["median_ms"] = float(stats["median"]) * 1e3
    return _from_info(info, name=str(bench.get("fullname", "")))


def _from_info(info: Mapping[str, Any], name: str = "") -> Result:
    try:
        op, kernel, median_ms = str(info["op"]), str(info["kernel"]), float(info["median_ms"])
    except KeyError as e:
        raise ValueError(f"benchmark result without {e.args[0]!r}") from None
    if not median_ms > 0:  # a ratio to it would divide by zero or be meaningless
        raise ValueError(f"median_ms must be a positive time, got {median_ms}")
    if "gbps" in info:
        rate, unit, ceiling = info["gbps"], "GB/s", info.get("ceiling_gbps")
    elif "tflops" in info:
        rate, unit, ceiling = info["tflops"], "TFLOP/s", info.get("ceiling_tflops")
    else:
        rate, unit, ceiling = None, "", None
    return Result(
        op=op,
        kernel=kernel,
        case=str(info.get("case", "")),
        dtype=str(info.get("dtype", "")),
        config=_config(info.get("config")),
        median_ms=median_ms,
        wall_ms=_number(info.get("wall_ms")),
        host_us=_number(info.get("host_us")),
        throughput=_number(rate),
        unit=unit,
        ceiling=_number(ceiling),
        ceiling_name=str(info.get("ceiling", "")),
        fraction=_number(info.get("fraction_of_ceiling")),
        speedup=_number(info.get("speedup_vs_peer")),
        device=str(info.get("device", "")),
        timing=str(info.get("timing", "")),
        name=name,
        mode=str(info.get("mode") or DEFAULT_MODE),
        peer_name=str(info.get("peer") or ""),
        params=_params(info.get("params")),
    )


def _config(config: Any) -> tuple[tuple[str, str], ...]:
    if not config:
        return ()
    if isinstance(config, Mapping):
        return tuple((str(k), str(v)) for k, v in config.items())
    return tuple((str(k), str(v)) for k, v in config)


def _params(params: Any) -> tuple[tuple[str, str], ...]:
    if not params:
        return ()
    if not isinstance(params, Mapping):
        raise ValueError(f"params must be an object of name: value, got {params!r}")
    return tuple((str(k), format_value(v)) for k, v in params.items())


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def varying_config_keys(results: Iterable[Result]) -> dict[str, list[str]]:
    """Per kernel, the config keys whose values differ between its items (what tells its
    configurations apart; the rest is noise in a legend)."""
    values: dict[str, dict[str, set[str]]] = {}
    for r in results:
        per_key = values.setdefault(r.kernel, {})
        for k, v in r.config:
            per_key.setdefault(k, set()).add(v)
    return {kernel: [k for k, vs in keys.items() if len(vs) > 1] for kernel, keys in values.items()}


def short_names(results: Iterable[Result]) -> dict[tuple[str, str], str]:
    """(kernel, config_id) -> a short series name: the kernel, plus only the config values that
    vary among that kernel's items."""
    results = list(results)
    varying = varying_config_keys(results)
    names: dict[tuple[str, str], str] = {}
    for r in results:
        shown = [f"{k}={v}" for k, v in r.config if k in varying.get(r.kernel, [])]
        names[(r.kernel, r.config_id)] = f"{r.kernel} {','.join(shown)}".strip()
    return names
