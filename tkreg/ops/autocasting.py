"""torch.autocast and tkreg's ops: the casts an op declares (``Op.autocast``), made the way
torch's own autocast makes them, so that a call under autocast runs tkreg's kernels in the dtypes
torch's code would compute in.

The casts themselves are torch's rule (:mod:`tkreg.core.autocast_casts`). An op declares which
of them its peer gets, per device type; tkreg.ops then casts the inputs and calls the op with
autocast off, which takes the usual plans (and tuning) for the cast inputs. Gradients flow back
through the casts to the inputs' own dtypes, as through torch's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..core.autocast_casts import FLOAT32, LOWER, UNCHANGED, target_dtype
from ..core.autocast_casts import cast as cast  # re-exported: the eager path, explain and the operator cast from here
from ..core.specs import Op

# The policies as the C++ call reads them (tkreg/ops/native/native.h); None: the op declares none.
POLICY_CODES: dict[str | None, int] = {None: 0, UNCHANGED: 1, LOWER: 2, FLOAT32: 3}


def policy_codes(op: Op) -> tuple[int, int]:
    """The op's autocast policies on CUDA and on the CPU, as the C++ call takes them."""
    return POLICY_CODES[op.autocast_policy("cuda")], POLICY_CODES[op.autocast_policy("cpu")]


def device_type_of(inputs: Sequence[Any]) -> str | None:
    """The device type of the first tensor input (None without one)."""
    for t in inputs:
        if isinstance(t, torch.Tensor):
            return t.device.type
    return None


def policy_for(op: Op, inputs: Sequence[Any]) -> tuple[str, str | None]:
    """The inputs' device type and what autocast does to ``op`` there: a policy of Op.autocast,
    UNCHANGED where autocast is off for that device type (on for another only), None where the
    op does not say."""
    device_type = device_type_of(inputs)
    if device_type is None or not torch.is_autocast_enabled(device_type):
        return device_type or "", UNCHANGED
    return device_type, op.autocast_policy(device_type)


def undeclared(device_type: str) -> str:
    """Why a call under autocast of an op that declares nothing for ``device_type`` is the peer's
    own (the call's warning and explain say it alike)."""
    return f"torch.autocast takes the peer's own code (the op declares no autocast policy for {device_type})"


def describe(policy: str, device_type: str) -> str:
    """What a call under autocast does first, for explain."""
    dtype = target_dtype(policy, device_type)
    if dtype is None:
        return f"torch.autocast leaves it alone on {device_type} (the op's autocast policy {policy!r})"
    name = str(dtype).removeprefix("torch.")
    return f"torch.autocast casts its floating inputs to {name} on {device_type} (the op's autocast policy {policy!r})"
