"""What torch is doing around a call that changes which code may take it: torch.func transforms
(whose tensors wrap others and have no storage), forward-mode AD (dual tensors), torch.autocast,
and inputs no plan takes (sparse and nested tensors). tkreg.ops' checked path and its torch
operators ask here; the generated fast paths ask the cheapest of these inline."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.autograd import forward_ad

# Whether a torch.func transform (vmap, grad, jacrev...) is running: its tensors wrap others.
transforms_active: Callable[[], bool] = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)


def transform_levels() -> tuple[str, ...]:
    """The torch.func transforms running, outermost first ("Vmap", "Grad", "Jvp", ...)."""
    try:
        from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

        return tuple(level.key().name for level in retrieve_all_functorch_interpreters())
    except (ImportError, AttributeError):  # another torch's internals: taken as transforms tkreg does not know
        return ("unknown",)


def unusual_layout(inputs: Sequence[Any]) -> str | None:
    """What makes an input one no plan takes (a sparse or nested tensor), or None."""
    for i, t in enumerate(inputs):
        if isinstance(t, torch.Tensor) and (t.layout is not torch.strided or t.is_nested):
            return f"input {i} is a {'nested' if t.is_nested else str(t.layout).removeprefix('torch.')} tensor"
    return None


def _autocast_either() -> bool:
    return torch.is_autocast_enabled("cuda") or torch.is_autocast_enabled("cpu")


# Whether torch.autocast is on, for any device type: one C call where torch has it (a fast path
# asks on every call), else CUDA's and the CPU's.
autocast_on: Callable[[], bool] = getattr(torch._C, "_is_any_autocast_enabled", _autocast_either)


class no_autocast:  # lower case: used as a function, as torch.no_grad is
    """A context with torch.autocast off for every device type it is on for: the flags alone, set
    and put back (a fifth of what entering ``torch.autocast(enabled=False)`` costs, which a call
    under autocast pays each time), in a class rather than a generator, which costs a call more."""

    __slots__ = ("was_on",)

    def __enter__(self) -> None:
        self.was_on = [device_type for device_type in ("cuda", "cpu") if torch.is_autocast_enabled(device_type)]
        for device_type in self.was_on:
            torch.set_autocast_enabled(device_type, False)

    def __exit__(self, *exc: object) -> None:
        for device_type in self.was_on:
            torch.set_autocast_enabled(device_type, True)


def has_tangents(inputs: Sequence[Any]) -> bool:
    """Whether an input is a dual tensor of forward-mode AD (torch.autograd.forward_ad)."""
    if forward_ad._current_level < 0:  # no dual level entered: nothing to unpack
        return False
    return any(isinstance(t, torch.Tensor) and forward_ad.unpack_dual(t).tangent is not None for t in inputs)


def wants_gradient(inputs: Sequence[Any]) -> bool:
    """Whether a call records a gradient: grad mode on and an input that requires one."""
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs)
