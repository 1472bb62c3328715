"""Benchmark results as the report reads them, from pytest-benchmark's JSON or from the rows a
tkreg session collected (each benchmark's ``extra_info``, written by ``tkreg.testing.runners.run_bench``).

Only the standard library: the CLI and the record builder load results without torch.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from ..core.dtypes import SHORT_NAMES

PEER_PREFIX = "peer-"  # how run_bench names an op's peer (peer-torch.add, ...)

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

    @property
    def is_peer(self) -> bool:
        return self.kernel.startswith(PEER_PREFIX)

    @property
    def config_id(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.config)

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        """What identifies an item across runs."""
        return (self.op, self.kernel, self.config_id, self.case, self.dtype)

    @property
    def short_dtype(self) -> str:
        return SHORT_NAMES.get(self.dtype, self.dtype)

    @property
    def label(self) -> str:
        config = f"[{self.config_id}]" if self.config else ""
        return f"{self.op}/{self.kernel}{config} {self.case} {self.short_dtype}".strip()


@dataclass(frozen=True)
class Run:
    """The results of one benchmark run and where they came from."""

    results: list[Result]
    meta: dict[str, str] = field(default_factory=dict)  # source, device, date, commit where known

    def ops(self) -> list[str]:
        return sorted({r.op for r in self.results})

    def of_op(self, op: str) -> list[Result]:
        return [r for r in self.results if r.op == op]


def read_json(path: str | os.PathLike[str]) -> Any:
    """A JSON file, gzip-compressed where its name ends in .gz."""
    raw = Path(path).read_bytes()
    return json.loads(gzip.decompress(raw) if str(path).endswith(".gz") else raw)


def load_run(source: Source) -> Run:
    """Results from a pytest-benchmark JSON (path or parsed) or a list of extra_info rows."""
    meta: dict[str, str] = {}
    if isinstance(source, (str, os.PathLike)):
        meta["source"] = f"`{source}`"
        source = read_json(source)
    if isinstance(source, Mapping):
        if "benchmarks" not in source:
            where = meta.get("source", "input").replace("`", "")
            raise ValueError(f"{where}: not a pytest-benchmark JSON (no 'benchmarks' list)")
        meta.setdefault("source", "pytest-benchmark results passed in memory")
        meta.update(_benchmark_meta(source))
        results = [_from_benchmark(b) for b in source["benchmarks"]]
    else:
        meta["source"] = "the benchmark rows of a tkreg pytest session"
        results = [_from_info(info) for info in source]
    if results and "device" not in meta:
        meta["device"] = next((r.device for r in results if r.device), "")
    return Run(results, meta)


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
        info["median_ms"] = float(bench["stats"]["median"]) * 1e3
    return _from_info(info, name=str(bench.get("fullname", "")))


def _from_info(info: Mapping[str, Any], name: str = "") -> Result:
    try:
        op, kernel, median_ms = str(info["op"]), str(info["kernel"]), float(info["median_ms"])
    except KeyError as e:
        raise ValueError(f"benchmark result without {e.args[0]!r}: {dict(info)}") from None
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
    )


def _config(config: Any) -> tuple[tuple[str, str], ...]:
    if not config:
        return ()
    if isinstance(config, Mapping):
        return tuple((str(k), str(v)) for k, v in config.items())
    return tuple((str(k), str(v)) for k, v in config)


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
