"""Stand-ins for testing a launcher's checks without a GPU."""

from __future__ import annotations

from typing import Any


class OnDevice:
    """A CPU tensor that reports another device (default cuda:0; torch.device needs no GPU to
    exist). Everything else a launcher's checks read (shape, dtype, strides, data pointer, element
    size) is the real tensor's, so checks that come after the device check run on it; an input that
    passed every check would fail at the first CUDA call."""

    def __init__(self, t: Any, device: Any = None) -> None:
        import torch

        self._t = t
        self.dtype, self.shape = t.dtype, t.shape
        self.device = torch.device("cuda", 0) if device is None else torch.device(device)

    def stride(self, dim: int | None = None) -> Any:
        return self._t.stride() if dim is None else self._t.stride(dim)

    def __getattr__(self, name: str) -> Any:  # data_ptr, element_size, dim, numel
        return getattr(self._t, name)
