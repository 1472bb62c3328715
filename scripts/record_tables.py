"""Summary tables for BENCHMARKS.md from one benchmark record (pytest-benchmark JSON of
``pytest --tkreg --tkreg-bench``), so the record's summary is computed, not copied by hand.

    python scripts/record_tables.py notes/gpu-runs/<run>/bench.json

Prints three Markdown tables: every add kernel against torch.add per shape and dtype; the Hopper
matmul's default tile against cuBLAS per scheduler and K, with the geometric mean; the fastest
sum_row kernel per shape and dtype against torch.sum.
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from typing import Any

SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
# The Hopper matmul's default tile (tkreg_hopper_matmul), timed with each scheduler.
MATMUL_DEFAULT = {"BLOCK_M": 128, "BLOCK_N": 256, "NUM_STAGES": 3, "CONSUMERS": 2, "PINGPONG": False, "EPILOGUE_SPLIT": 1}


def rows(bench: dict[str, Any]) -> list[dict[str, Any]]:
    return [b["extra_info"] for b in bench["benchmarks"]]


def add_table(infos: list[dict[str, Any]]) -> list[str]:
    kernels = sorted({i["kernel"] for i in infos if i["op"] == "add" and not i["kernel"].startswith("peer")})
    out = [
        "| shape | dtype | torch.add GB/s | " + " | ".join(f"{k} GB/s (x torch)" for k in kernels) + " |",
        "| --- | --- | ---: | " + " | ".join("---:" for _ in kernels) + " |",
    ]
    cells: dict[tuple[str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    for i in infos:
        if i["op"] == "add":
            cells[(i["case"], i["dtype"])][i["kernel"]] = i
    for (case, dtype), by in cells.items():
        peer = by["peer-torch.add"]["gbps"]
        kernel_cells = [f"{by[k]['gbps']:.0f} ({by[k]['speedup_vs_peer']:.3f}x)" for k in kernels]
        out.append(f"| {case} | {SHORT[dtype]} | {peer:.0f} | " + " | ".join(kernel_cells) + " |")
    return out


def matmul_table(infos: list[dict[str, Any]]) -> list[str]:
    ratios: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    for i in infos:
        config = dict(i.get("config") or {})
        scheduler = config.pop("scheduler", None)
        if i["kernel"] == "matmul_hopper_ws" and config == MATMUL_DEFAULT and "speedup_vs_peer" in i:
            k = int(i["case"].split("x")[2])
            ratios[(SHORT[i["dtype"]], scheduler)][k] = i["speedup_vs_peer"]
    ks = sorted({k for by_k in ratios.values() for k in by_k})
    out = [
        "| dtype | scheduler | " + " | ".join(f"K={k}" for k in ks) + " | geomean | lowest |",
        "| --- | --- | " + " | ".join("---:" for _ in ks) + " | ---: | ---: |",
    ]
    for (dtype, scheduler), by_k in sorted(ratios.items()):
        values = [by_k[k] for k in ks if k in by_k]
        geomean = math.exp(sum(map(math.log, values)) / len(values))
        cols = " | ".join(f"{by_k[k]:.2f}" if k in by_k else "-" for k in ks)
        out.append(f"| {dtype} | {scheduler} | {cols} | {geomean:.3f} | {min(values):.2f} |")
    return out


def sum_row_table(infos: list[dict[str, Any]]) -> list[str]:
    out = [
        "| shape | dtype | torch.sum GB/s | best kernel | GB/s | of ceiling | vs torch |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: |",
    ]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for i in infos:
        if i["op"] == "sum_row" and not i.get("config"):
            groups[(i["case"], i["dtype"])].append(i)
    for (case, dtype), group in groups.items():
        peer = next(i for i in group if i["kernel"].startswith("peer"))
        best = max((i for i in group if not i["kernel"].startswith("peer")), key=lambda i: i["gbps"])
        out.append(
            f"| {case} | {SHORT[dtype]} | {peer['gbps']:.0f} | {best['kernel']} | {best['gbps']:.0f} | "
            f"{best['fraction_of_ceiling']:.0%} | {best['speedup_vs_peer']:.2f}x |"
        )
    return out


def main() -> None:
    with open(sys.argv[1]) as f:
        infos = rows(json.load(f))
    for title, table in (("add", add_table), ("matmul (default tile)", matmul_table), ("sum_row", sum_row_table)):
        print(f"### {title}\n")
        print("\n".join(table(infos)) + "\n")


if __name__ == "__main__":
    main()
