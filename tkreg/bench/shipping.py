"""``python -m tkreg.bench.shipping FILE``: a ranking suite's data file (``tkreg bench ranking``)
into the plugins that ship it. Each op that names a folder (``Op(measured="package:folder")``)
gets its own rows there as ``<device name, lower case, dashes>.json``, the file
tkreg.ops.walltime reads for that GPU; an op without one is named and left out. Run it from a
checkout whose plugins are installed editable, then commit the files.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..ops.walltime import KIND, op_folder
from ..report.records import device_slug

DROPPED_META = ("not_timed",)  # what the run found, not what the data is


def file_name(device: str) -> str:
    """"NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3.json" (the vendor kept, unlike data files)."""
    slug = device_slug(device)
    if not slug:
        raise ValueError("the data names no device (meta['device'])")
    return f"{slug}.json"


def per_op(document: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The document split by op: each op's rows with the run's meta and notes."""
    if document.get("kind") != KIND:
        raise ValueError(f"not a ranking data file: kind {document.get('kind')!r}, expected {KIND!r}")
    meta = {k: v for k, v in (document.get("meta") or {}).items() if k not in DROPPED_META}
    split: dict[str, dict[str, Any]] = {}
    for row in document.get("rows") or []:
        entry = split.setdefault(row["op"], {"kind": KIND, "meta": meta, "rows": [], "notes": document.get("notes", "")})
        entry["rows"].append(row)
    return split


def ship(document: Mapping[str, Any], folders: Mapping[str, Path]) -> tuple[list[Path], list[str]]:
    """Write each op's rows into its folder; the files written, and the ops left out (no folder)."""
    parts = per_op(document)
    name = file_name(str((document.get("meta") or {}).get("device", "")))
    written, left = [], []
    for op, part in sorted(parts.items()):
        folder = folders.get(op)
        if folder is None:
            left.append(op)
            continue
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        path.write_text(json.dumps(part, indent=1) + "\n")
        written.append(path)
    return written, left


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m tkreg.bench.shipping RANKING_FILE", file=sys.stderr)
        return 2
    from ..core.loading import default_registry

    try:
        document = json.loads(Path(args[0]).read_text())
        folders = {op.name: folder for op in default_registry().ops() if (folder := op_folder(op)) is not None}
        written, left = ship(document, folders)
    except (OSError, ValueError) as e:
        print(f"tkreg.bench.shipping: {e}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    for op in left:
        print(f"left out {op}: it names no folder for measured data (Op.measured)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
