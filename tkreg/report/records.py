"""The data the benchmark record is built from: the JSON envelope measurements are stored in, and
the names of the files in the data folder.

An envelope holds one table::

    {"kind": "host_overhead", "meta": {"device": ..., "date": ..., "command": ..., ...},
     "rows": [{"column": value, ...}, ...], "notes": "...", "summary": {...}}

``meta`` says where and when the rows were measured and by which command; ``summary`` (optional)
holds figures about the whole table (checks, geometric means). The record builder
(BENCHMARKS.md) renders the rows and names the meta beside every table.

Data files are named ``<date>-<gpu>-<suite>.json[.gz]``: the UTC date of the run, the GPU as
:func:`gpu_slug` writes its name (``h100-80gb-hbm3``), and the ``tkreg bench`` suite that measured
it (``main`` is pytest-benchmark JSON; the others are envelopes). Only the standard library.
"""

from __future__ import annotations

import datetime
import gzip
import json
import os
import platform
import re
import shlex
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.platform import installed_version
from .results import read_json

ENVELOPE_KEYS = ("kind", "meta", "rows")
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
DATA_NAME = re.compile(r"^(?P<date>\d{4}-\d{2}-\d{2})-(?P<gpu>[a-z0-9][a-z0-9-]*)-(?P<suite>[a-z]+)\.json(?P<gz>\.gz)?$")
VENDOR_PREFIX = "nvidia-"  # every GPU here is NVIDIA's: the prefix only lengthens names
DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")


def device_slug(device: str) -> str:
    """A device name in lower case and dashes: "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"."""
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")


def gpu_slug(device: str) -> str:
    """A device name as data file names use it: "NVIDIA H100 80GB HBM3" -> "h100-80gb-hbm3"."""
    return device_slug(device).removeprefix(VENDOR_PREFIX) or "unknown-gpu"


def data_name(date: str, device: str, suite: str, gz: bool = False) -> str:
    """The file name of one suite's data: ``2026-11-23-h100-80gb-hbm3-timer.json``."""
    if not DATE.fullmatch(date):
        raise ValueError(f"date must be YYYY-MM-DD, got {date!r}")
    if not re.fullmatch(r"[a-z]+", suite):
        raise ValueError(f"suite names are lower-case words, got {suite!r}")
    return f"{date}-{gpu_slug(device)}-{suite}.json" + (".gz" if gz else "")


@dataclass(frozen=True, order=True)
class DataFile:
    """A data file named by the scheme: when, on which GPU, by which suite."""

    date: str
    gpu: str
    suite: str
    path: Path

    @classmethod
    def parse(cls, path: str | os.PathLike[str]) -> DataFile | None:
        """The file's date, GPU and suite; None for a name outside the scheme."""
        path = Path(path)
        match = DATA_NAME.match(path.name)
        if match is None:
            return None
        return cls(match["date"], match["gpu"], match["suite"], path)


def data_files(directory: str | os.PathLike[str]) -> list[DataFile]:
    """Every file of the scheme in ``directory``, oldest first."""
    found = (DataFile.parse(p) for p in Path(directory).glob("*.json*"))
    return sorted(f for f in found if f is not None)


def latest(files: Iterable[DataFile]) -> dict[str, dict[str, DataFile]]:
    """GPU -> suite -> the newest file of that suite on that GPU."""
    newest: dict[str, dict[str, DataFile]] = {}
    for f in sorted(files):
        newest.setdefault(f.gpu, {})[f.suite] = f
    return newest


def driver_version() -> str:
    """The NVIDIA driver's version ("580.159.04"), or "" where it cannot be read."""
    try:
        text = DRIVER_VERSION_FILE.read_text()
    except OSError:
        return ""
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
    return match.group(1) if match else ""


def environment() -> dict[str, str]:
    """Where this process runs: device, driver and library versions, the UTC date, the command."""
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(shlex.quote(a) for a in [os.path.basename(sys.executable), *sys.argv]),
        "python": platform.python_version(),
        "host": platform.node(),
        "tkreg": installed_version("tkreg") or "not installed",
    }
    driver = driver_version()
    if driver:
        meta["driver"] = driver
    try:
        import torch

        meta["torch"] = torch.__version__
        if torch.cuda.is_available():
            meta["device"] = torch.cuda.get_device_name()
            meta["capability"] = "{}.{}".format(*torch.cuda.get_device_capability())
            meta["sms"] = str(torch.cuda.get_device_properties(0).multi_processor_count)
            meta["gpus"] = str(torch.cuda.device_count())  # a host of several runs some calls differently
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


def document(kind: str, rows: list[dict[str, Any]], *, notes: str = "", meta: Mapping[str, Any] | None = None,
             summary: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An envelope: ``rows`` with this process's environment as meta (``meta`` overrides it)."""
    envelope: dict[str, Any] = {"kind": kind, "meta": {**environment(), **(meta or {})}, "rows": rows, "notes": notes}
    if summary:
        envelope["summary"] = dict(summary)
    return envelope


def write(path: str | os.PathLike[str], content: Mapping[str, Any]) -> Path:
    """Write a JSON document (gzip-compressed where the name ends in .gz) all at once: it goes to
    a temporary file beside ``path`` first and is renamed over it, so a reader (or a run that
    dies half way) never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = (json.dumps(content, indent=1, default=str) + "\n").encode()
    if path.suffix == ".gz":
        raw = gzip.compress(raw, mtime=0)  # mtime=0: the same data gives the same bytes
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(raw)
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes it private; a data file is not
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def save(kind: str, rows: list[dict[str, Any]], out_dir: str | os.PathLike[str] | None = None, *, notes: str = "",
         meta: dict[str, Any] | None = None) -> Path:
    """Write ``rows`` as ``<out_dir>/<kind>.json`` (out_dir defaults to $OUT, else ./out)."""
    directory = Path(out_dir if out_dir is not None else os.environ.get("OUT", "out"))
    return write(directory / f"{kind}.json", document(kind, rows, notes=notes, meta=meta))


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a record file (``.json`` or ``.json.gz``) and check it has the envelope's keys."""
    content = read_json(path)
    missing = [k for k in ENVELOPE_KEYS if not isinstance(content, dict) or k not in content]
    if missing:
        raise ValueError(f"{path}: not a tkreg record (missing {', '.join(missing)})")
    return content
