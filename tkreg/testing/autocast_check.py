"""An op's autocast declaration (``Op.autocast``) held against what torch.autocast does to its
peer: the ``autocast`` items of ``pytest --tkreg``.

Under autocast tkreg.ops casts the inputs as the op declares and runs its kernels on them
(the rule in tkreg.core.autocast_casts), so a wrong declaration gives outputs of another dtype than torch's code
gives, silently. The check runs the peer on the op's first case under ``autocast(bfloat16)`` on
one device type, and again with autocast off on the inputs cast as declared: each output must
have the same dtype and shape, and values within the op's tolerance for that dtype. Inputs come
in float32 and in a half-precision dtype (bfloat16, or float16 for an op that lists only that),
which tells the three policies apart (float32 inputs separate "lower" from the others, half
ones "float32" from "unchanged"). A failure names the policy the peer behaves as, where one does.
"""

from __future__ import annotations

from typing import Any

from ..core import autocast_casts, dtypes, refs
from ..core.specs import Op
from .checking import compare, compare_exact
from .generation import AUTOCAST_REGION_DTYPE as REGION_DTYPE
from .harness import as_tuple, make_inputs

_POLICIES = (autocast_casts.LOWER, autocast_casts.FLOAT32, autocast_casts.UNCHANGED)


def check(op: Op, device_type: str, seed: int) -> str | None:
    """None where the peer under autocast on ``device_type`` computes as the op's declaration
    says; else what differs, and which policy it behaves as."""
    policy = op.autocast_policy(device_type)
    if op.peer is None or policy is None:
        raise ValueError(f"op {op.name!r} has no peer or declares no autocast policy for {device_type}")
    found = []
    for input_dtype in _input_dtypes(op):
        inputs = _inputs(op, input_dtype, seed, device_type)
        found += [f"{input_dtype} inputs: {problem}" for problem in _differences(op, inputs, device_type, policy)]
    if not found:
        return None
    behaves = [p for p in _POLICIES if p != policy and _agrees(op, seed, device_type, p)]
    hint = (f"; the peer behaves as {behaves[0]!r} does there: declare that" if behaves else
            "; the peer behaves as none of the policies does there")  # fmt: skip
    return (f"op {op.name!r} declares autocast {policy!r} on {device_type}, but its peer {op.peer_name} under "
            f"torch.autocast({device_type!r}, {REGION_DTYPE}) computes otherwise: " + "; ".join(found) + hint)  # fmt: skip


def _case(op: Op) -> Any:
    """The case the check runs: the op's first default one."""
    return (op.cases_in("default") or op.cases)[0]


def _inputs(op: Op, dtype: str, seed: int, device_type: str) -> tuple[Any, ...]:
    return make_inputs(op, _case(op), dtype, seed, device_type, op.defaults)


def _input_dtypes(op: Op) -> tuple[str, str]:
    """float32 (a float32 model under autocast), and the op's half-precision dtype."""
    half = "float16" if "float16" in op.dtypes and "bfloat16" not in op.dtypes else "bfloat16"
    return "float32", half


def _agrees(op: Op, seed: int, device_type: str, policy: str) -> bool:
    return not any(_differences(op, _inputs(op, d, seed, device_type), device_type, policy) for d in _input_dtypes(op))


def _differences(op: Op, inputs: tuple[Any, ...], device_type: str, policy: str) -> list[str]:
    """How the peer's outputs under autocast differ from its outputs on the inputs cast as
    ``policy`` says, with autocast off."""
    import torch

    peer, params = refs.resolve(op.peer), op.defaults
    with torch.autocast(device_type, dtype=dtypes.torch_dtype(REGION_DTYPE)):
        got = as_tuple(peer(*inputs, out=None, **params))
        cast = autocast_casts.cast(inputs, device_type, policy)
    with torch.autocast(device_type, enabled=False):
        want = as_tuple(peer(*cast, out=None, **params))
    if len(got) != len(want):
        return [f"{len(got)} outputs against {len(want)}"]
    found = []
    # a peer gives every output, or the returned ones only (Output.returned)
    specs = op.outputs if len(got) == len(op.outputs) else tuple(o for o in op.outputs if o.returned)
    for g, w, spec in zip(got, want, specs):
        if g.dtype != w.dtype or g.shape != w.shape:
            found.append(f"{spec.name} is {_name(g.dtype)} {tuple(g.shape)}, the declared casts give "
                         f"{_name(w.dtype)} {tuple(w.shape)}")  # fmt: skip
            continue
        if not g.is_floating_point():
            result = compare_exact(g, w)
        else:
            # tolerances are kept per case dtype: the output's own dtype stands for it here; one the
            # op gives none for is left at dtype and shape
            table = op.tolerances if spec.tolerances is None else spec.tolerances
            if _name(g.dtype) not in table:
                continue
            result = compare(g, w, op.tolerance(_name(g.dtype), _case(op), spec))
        if not result.ok:
            found.append(result.report(spec.name))
    return found


def _name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")
