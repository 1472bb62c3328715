"""Where kernels would run: a CUDA GPU of some capability, or Triton's CPU interpreter."""

from __future__ import annotations

import ctypes
import functools
import os
import re
import sys
from dataclasses import dataclass
from importlib import metadata

from . import capability as caps


@dataclass(frozen=True)
class Platform:
    kind: str  # "cuda" or "interpreter"
    capability: caps.Capability | None = None
    name: str = ""

    @classmethod
    def cuda(cls, capability: str | caps.Capability, name: str = "") -> Platform:
        return cls("cuda", caps.parse(capability), name)

    @classmethod
    def interpreter(cls) -> Platform:
        return cls("interpreter", None, "Triton interpreter (CPU)")

    @property
    def is_gpu(self) -> bool:
        return self.kind == "cuda"

    def describe(self) -> str:
        if self.kind == "interpreter":
            return "no GPU: Triton interpreter"
        label = f"capability {caps.fmt(self.capability)}"
        return f"{self.name} ({label})" if self.name else label


def platform_for(capability: str | caps.Capability | Platform | None) -> Platform:
    """None: this machine; "interpreter"; else a GPU capability ("9.0", (9, 0), "sm_90")."""
    if capability is None:
        return current()
    if isinstance(capability, Platform):
        return capability
    if capability == "interpreter":
        return Platform.interpreter()
    return Platform.cuda(capability)


def interpreter_on() -> bool:
    """Whether triton kernels in this process run under the CPU interpreter (TRITON_INTERPRET,
    read by triton when a kernel is defined)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


_VERSION_HEADER = re.compile(r"^Version:[ \t]*(\S+)", re.MULTILINE)
# CUdevice_attribute values from cuda.h
_ATTR_MAJOR = 75
_ATTR_MINOR = 76


@functools.lru_cache(maxsize=1)
def current() -> Platform:
    """The first GPU the CUDA driver shows this process (CUDA_VISIBLE_DEVICES applies), else the
    interpreter. Asks the driver directly, so it costs milliseconds, not a torch import."""
    found = _first_cuda_device()
    if found is None:
        return Platform.interpreter()
    capability, name = found
    return Platform.cuda(capability, name)


def cuda_driver() -> ctypes.CDLL | None:
    """The CUDA driver library, initialized; None where there is none (or it will not start)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    return cuda if cuda.cuInit(0) == 0 else None


def visible_gpus() -> list[str]:
    """The CUDA devices this process sees, as the ids a child process pins one with
    (``CUDA_VISIBLE_DEVICES=<id>``): the entries of this process's CUDA_VISIBLE_DEVICES, or
    "0".."n-1" when it is unset. Empty without a GPU. Asks the driver, not torch."""
    cuda = cuda_driver()
    count = ctypes.c_int()
    if cuda is None or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return []
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return [str(i) for i in range(count.value)]
    # The driver counts the entries up to the first invalid one; those are the first `count`.
    return [entry.strip() for entry in listed.split(",")][: count.value]


def _first_cuda_device() -> tuple[caps.Capability, str] | None:
    cuda = cuda_driver()
    count, device, major, minor = (ctypes.c_int() for _ in range(4))
    name = ctypes.create_string_buffer(256)
    if cuda is None or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return None
    if (
        cuda.cuDeviceGet(ctypes.byref(device), 0) != 0
        or cuda.cuDeviceGetAttribute(ctypes.byref(major), _ATTR_MAJOR, device) != 0
        or cuda.cuDeviceGetAttribute(ctypes.byref(minor), _ATTR_MINOR, device) != 0
        or cuda.cuDeviceGetName(name, len(name), device) != 0
    ):
        return None
    return (major.value, minor.value), name.value.decode(errors="replace")


@functools.lru_cache(maxsize=1)
def driver_version() -> str:
    """The CUDA driver's API version ("12.8"), or "" without a driver; from the driver itself."""
    cuda = cuda_driver()
    version = ctypes.c_int()
    if cuda is None or cuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return ""
    return f"{version.value // 1000}.{version.value % 1000 // 10}"


def interpreter_blocker_for(triton_version: str | None, numpy_version: str | None) -> str | None:
    """Why Triton's interpreter cannot run kernels with these versions installed (None: it can).
    Triton 3.6's interpreter converts one-element arrays to Python scalars, which numpy 2.4 made
    an error: every kernel it runs then fails with numpy's "only 0-dimensional arrays can be
    converted to Python scalars", whatever the kernel."""
    release = re.match(r"(\d+)\.(\d+)", numpy_version or "")
    if not (triton_version or "").startswith("3.6.") or release is None:
        return None
    if (int(release.group(1)), int(release.group(2))) < (2, 4):
        return None
    return (f"triton {triton_version}'s interpreter fails under numpy >= 2.4 (this environment has numpy "
            f"{numpy_version}); install numpy<2.4 to run kernels under the interpreter")


@functools.cache
def interpreter_blocker() -> str | None:
    """:func:`interpreter_blocker_for` the installed triton and numpy."""
    return interpreter_blocker_for(installed_version("triton"), installed_version("numpy"))


@functools.cache
def installed_version(distribution: str) -> str | None:
    """Version of an installed distribution, read from its metadata (no import). The Version
    header is read from the metadata's text: parsing it whole, as importlib.metadata.version
    does, costs about a millisecond, paid by the first tkreg.ops call of a process."""
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return None
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    found = _VERSION_HEADER.search(text.split("\n\n", 1)[0])  # the headers end at the first blank line
    return found.group(1) if found else dist.version
