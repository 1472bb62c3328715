"""Where a call of ``tkreg.ops.<op>`` leaves the plans before its key is read, and why: inputs
no plan takes (sparse and nested tensors), torch.autocast, and dual tensors. tkreg.ops' checked
path acts on a detour and explain states it, so the two cannot disagree.

torch.func transforms come between the layout and the rest on the checked path; explain is not
called under them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core.errors import InputError
from ..core.specs import Op
from . import autocasting
from .contexts import autocast_on, has_tangents, unusual_layout
from .gradients import NoGradientError

PEER = "peer"  # the peer's own code runs the call
CAST = "cast"  # autocast casts the inputs; the call is then made again with autocast off
RAISE = "raise"  # the call raises ``error``
DUAL_TENSORS = "forward-mode AD (dual tensors) takes the peer's own code"


def no_tangent(op: str) -> str:
    """NoGradientError's message for dual tensors of an op without a peer."""
    return (f"tkreg.ops.{op} has no forward-mode gradient (dual tensors of torch.autograd.forward_ad) and op {op!r} has "
            "no peer to compute one")  # fmt: skip


@dataclass(frozen=True)
class Detour:
    way: str
    reason: str  # why the peer runs it, what the cast does, or the error's message
    error: type[Exception] | None = None
    device_type: str = ""
    policy: str | None = None

    def describe(self, op: Op) -> str:
        """What the call does, as explain says it (for CAST, only the cast: the cast call's own
        description follows it)."""
        if self.way == PEER:
            return f"tkreg.ops.{op.name} calls its peer {op.peer_name}: {self.reason}"
        if self.way == RAISE:
            assert self.error is not None
            return f"tkreg.ops.{op.name} raises {self.error.__name__}: {self.reason}"
        return self.reason

    def cast(self, inputs: Sequence[Any]) -> tuple[Any, ...]:
        """For CAST: the inputs as autocast casts them (the call is then made with autocast off)."""
        return autocasting.cast(inputs, self.device_type, self.policy)

    def raise_error(self) -> None:
        assert self.error is not None
        raise self.error(self.reason)


def layout_detour(op: Op, inputs: Sequence[Any]) -> Detour | None:
    """A sparse or nested input: the peer's own code takes it, or InputError where there is none
    (kernels and plans take strided tensors)."""
    odd = unusual_layout(inputs)
    if odd is None:
        return None
    if op.peer is None:
        return Detour(RAISE, f"tkreg.ops.{op.name}: {odd}; its kernels take strided tensors, and op {op.name!r} has "
                             "no peer", InputError)  # fmt: skip
    return Detour(PEER, f"{odd}: the peer's own code takes it")


def context_detour(op: Op, inputs: Sequence[Any]) -> Detour | None:
    """What torch.autocast or dual tensors make of a call of strided tensors, or None where the
    call goes on to the plans: under autocast, the casts the op declares for the inputs' device
    type, else the peer's own code where there is one; of dual tensors (kernels compute no
    tangent), the peer's own code, or NoGradientError where there is none."""
    if autocast_on():
        device_type, policy = autocasting.policy_for(op, inputs)
        if policy is not None:
            return Detour(CAST, autocasting.describe(policy, device_type), device_type=device_type, policy=policy)
        if op.peer is not None:
            return Detour(PEER, autocasting.undeclared(device_type))
    if has_tangents(inputs):
        if op.peer is None:
            return Detour(RAISE, no_tangent(op.name), NoGradientError)
        return Detour(PEER, DUAL_TENSORS)
    return None
