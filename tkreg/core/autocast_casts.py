"""What torch.autocast does to an op's inputs under each policy an op may declare (``Op.autocast``):
the rule tkreg.ops casts by and ``pytest --tkreg``'s autocast items check declarations with.

Torch casts a floating input on the autocast device type, float64 excepted, to the region's dtype
for an op on its lower-precision list (matmul, linear) and to float32 for one on its float32 list
(layer_norm on CUDA; sum's output there), and leaves every other op alone. torch is imported
when a cast is made, not with this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .specs import AUTOCAST_POLICIES

LOWER, FLOAT32, UNCHANGED = AUTOCAST_POLICIES


def target_dtype(policy: str | None, device_type: str) -> Any:
    """The torch dtype ``policy`` casts floating inputs to in the current region (None: no cast)."""
    import torch

    if policy == LOWER:
        return torch.get_autocast_dtype(device_type)
    if policy == FLOAT32:
        return torch.float32
    return None


def cast(inputs: Sequence[Any], device_type: str, policy: str | None) -> tuple[Any, ...]:
    """The inputs as torch's autocast casts them under ``policy``: floating tensors on
    ``device_type``, float64 excepted, in its dtype (:func:`target_dtype`); everything else as
    given."""
    import torch

    dtype = target_dtype(policy, device_type)
    if dtype is None:
        return tuple(inputs)
    return tuple(
        t.to(dtype)
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype is not torch.float64 and t.device.type == device_type
        else t
        for t in inputs
    )
