"""The JSON envelope every measurement script writes, so the benchmark record is built from data.

A record file holds one table::

    {"kind": "host_overhead", "meta": {"device": ..., "date": ..., "command": ..., ...},
     "rows": [{"column": value, ...}, ...], "notes": "..."}

``meta`` says where and when the rows were measured and by which command; the record builder
(BENCHMARKS.md) renders rows and names the meta beside every table. Scripts call :func:`save`;
readers call :func:`load` (plain or gzip-compressed files).
"""

from __future__ import annotations

import datetime
import gzip
import json
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any

ENVELOPE_KEYS = ("kind", "meta", "rows")


def environment() -> dict[str, str]:
    """Where this process runs: device, driver and library versions, the UTC date, the command."""
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(shlex.quote(a) for a in [os.path.basename(sys.executable), *sys.argv]),
        "python": platform.python_version(),
        "host": platform.node(),
    }
    try:
        import torch

        meta["torch"] = torch.__version__
        if torch.cuda.is_available():
            meta["device"] = torch.cuda.get_device_name()
            meta["capability"] = "{}.{}".format(*torch.cuda.get_device_capability())
            meta["sms"] = str(torch.cuda.get_device_properties(0).multi_processor_count)
        else:
            meta["device"] = "no GPU (Triton interpreter)"
    except ImportError:
        meta["device"] = "unknown (torch not installed)"
    try:
        import triton

        meta["triton"] = triton.__version__
    except ImportError:
        pass
    return meta


def save(kind: str, rows: list[dict[str, Any]], out_dir: str | os.PathLike[str] | None = None, *, notes: str = "",
         meta: dict[str, Any] | None = None) -> Path:
    """Write ``rows`` as ``<out_dir>/<kind>.json`` (out_dir defaults to $OUT, else ./out)."""
    directory = Path(out_dir if out_dir is not None else os.environ.get("OUT", "out"))
    directory.mkdir(parents=True, exist_ok=True)
    document = {"kind": kind, "meta": {**environment(), **(meta or {})}, "rows": rows, "notes": notes}
    path = directory / f"{kind}.json"
    path.write_text(json.dumps(document, indent=1, default=str) + "\n")
    return path


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a record file (``.json`` or ``.json.gz``) and check it has the envelope's keys."""
    path = Path(path)
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    document = json.loads(raw)
    missing = [k for k in ENVELOPE_KEYS if k not in document]
    if missing:
        raise ValueError(f"{path}: not a tkreg record (missing {', '.join(missing)})")
    return document
