"""Build the sum_row ranking table (tkreg_reductions/measured.json) from a benchmark record.

    python scripts/measured_from_bench.py BENCH_JSON DATE "COMMAND" > plugins/reductions/tkreg_reductions/measured.json

BENCH_JSON (.json or .json.gz) is pytest-benchmark's ``--benchmark-json`` output of ``pytest --tkreg --tkreg-bench``;
the table keeps, per benchmark shape and dtype, each sum_row kernel's GB/s at its own choice of
parameters, the figures lookup ranks by.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def table(bench: dict[str, Any], date: str, command: str) -> dict[str, Any]:
    gbps: dict[str, dict[str, dict[str, float]]] = {}
    device = ""
    for b in bench["benchmarks"]:
        info = b["extra_info"]
        if info.get("op") != "sum_row" or info["kernel"].startswith("peer-") or info.get("config"):
            continue
        device = info["device"]
        gbps.setdefault(info["case"], {}).setdefault(info["dtype"], {})[info["kernel"]] = round(info["gbps"], 1)
    return {"device": device, "date": date, "command": command, "gbps": gbps}


if __name__ == "__main__":
    from tkreg.report.results import read_json  # plain or gzip-compressed, as benchmarks/data keeps them

    print(json.dumps(table(read_json(sys.argv[1]), sys.argv[2], sys.argv[3]), indent=1, sort_keys=True))
