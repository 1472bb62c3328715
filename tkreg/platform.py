"""Where kernels would run: a CUDA GPU of some capability, or Triton's CPU interpreter."""

from __future__ import annotations

import functools
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


@functools.lru_cache(maxsize=1)
def current() -> Platform:
    """The GPU torch sees, else the interpreter. Imports torch (about 2 s on a small machine)."""
    import torch

    if torch.cuda.is_available():
        index = torch.cuda.current_device()
        return Platform.cuda(torch.cuda.get_device_capability(index), torch.cuda.get_device_name(index))
    return Platform.interpreter()


@functools.cache
def installed_version(distribution: str) -> str | None:
    """Version of an installed distribution, read from its metadata (no import)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
