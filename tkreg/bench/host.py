"""The ``host`` suite: what a call costs the caller on small inputs, where the launcher's Python
work, not the GPU, sets the pace.

Per op, on an input of SIDE in every dim (256 x 256; 256^3 for matmul) in the op's first benchmark
dtype: the op's peer (torch) writing into a given output and allocating its own (torch's own
call); every kernel's launcher, output given and output allocated; ``tkreg.ops.<op>``;
``torch.ops.tkreg.<op>``; ``tkreg.ops.<op>`` replayed from a CUDA graph (what the same work costs
with no Python at all); a cached ``lookup``; and, for an op with gradients, the peer's forward and
``tkreg.ops.<op>`` on inputs that want one (a training forward), and, for an op that declares
what torch.autocast does to it, the peer and ``tkreg.ops.<op>`` on float32 inputs under
``autocast(bfloat16)`` (mixed-precision use: the casts included). Plus one reference row: a plain
``@triton.jit`` add launched as ``kernel[grid]``. A path that allocates its outputs is held against the peer's
allocating call, one that does not against the peer writing into a given output.

Each figure: CALLS calls queued back to back, then one synchronize, per call; the least of ROUNDS
rounds (``us_per_call``), and the queueing alone (``host_us``: the host's own work per call). The
rounds interleave an op's paths, so a host whose speed drifts while they are timed (seen: torch.add
from 7.0 to 11.4 us between runs on one H100 host) moves them alike and their ratios hold. The
summary holds, per op, tkreg.ops' time over torch's own allocating call, what the torch
operator costs beyond tkreg.ops, and tkreg.ops over the peer where a gradient is wanted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.loading import default_registry
from ..core.registry import Registry
from ..core.specs import Op
from .calls import (
    Call,
    HostTime,
    Signature,
    graph_replay,
    host_times,
    launcher_call,
    launchers,
    make_inputs,
    make_output,
    ops_call,
    peer_call,
    say,
    torch_op_call,
)
from .suites import Deadline, Measured

TORCH, OPS, OPERATOR = "torch", "ops", "operator"  # the paths the summary's goals compare
TORCH_GRAD, OPS_GRAD = "torch_grad", "ops_grad"  # the same forwards, on inputs that want a gradient
TORCH_AMP, OPS_AMP = "torch_amp", "ops_amp"  # the same calls of float32 inputs under autocast(bfloat16)
TORCH_ABSENT, OPS_ABSENT = "torch_absent", "ops_absent"  # the same calls with every optional input None
PLAN_KEY = "plan_key"  # the summary's line on tkreg.ops' plan key (tkreg.ops.native.status())
SIDE = 256  # every dim: small enough that the host, not the GPU, sets the pace
CALLS = 1000
ROUNDS = 9


def signature(op: Op) -> Signature | None:
    """The op's small input: its benchmark cases' dims, each SIDE, in its first benchmark dtype."""
    cases = op.cases_in("bench") or op.cases
    if not cases:
        return None
    return Signature.of(op.name, {name: SIDE for name in cases[0].dims}, op.bench_dtypes[0])


def signatures(registry: Registry) -> list[Signature]:
    return [s for s in (signature(op) for op in registry.ops()) if s is not None]


@dataclass(frozen=True)
class Path:
    """One way to call an op: what it is, a function making the call, whether it is the peer's,
    and whether each call allocates its outputs (it is then held against the peer's own
    allocating call, else against the peer writing into a given output)."""

    what: str
    make: Callable[[], Call | None]
    peer: bool = False
    allocates: bool = False
    role: str = ""  # what the summary holds it as: TORCH, OPS, OPERATOR, ... (empty: nothing)
    grad: bool = False  # on inputs that want a gradient (held against the peer's call on those)
    autocast: str = ""  # the torch.autocast dtype its calls are made under (entered once per round), if any
    absent: bool = False  # with None for every optional input (held against the peer's call with None)


def paths(registry: Registry, op: Op, sig: Signature) -> list[Path]:
    """Every path of one op on its small input. The calls are made when their turn comes, so one
    that cannot be made here (a graph that cannot be captured) fails its own row only."""
    inputs = make_inputs(registry, sig)
    out = make_output(registry, sig, inputs)
    found = [
        Path(f"{op.peer_name} (the peer), output given", lambda: peer_call(op, inputs, out), peer=True),
        Path(f"{op.peer_name} (the peer), output allocated", lambda: peer_call(op, inputs, None), peer=True, allocates=True,
             role=TORCH),
    ]
    for name, launcher in launchers(registry, op, inputs).items():
        found.append(Path(f"{name}, output given", lambda f=launcher: launcher_call(op, f, inputs, out)))
        found.append(Path(f"{name}, output allocated", lambda f=launcher: launcher_call(op, f, inputs), allocates=True))
    found.append(Path(f"tkreg.ops.{op.name}", lambda: ops_call(op, inputs), allocates=True, role=OPS))
    found.append(Path(f"torch.ops.tkreg.{op.name}", lambda: torch_op_call(op, inputs), allocates=True, role=OPERATOR))
    found.append(Path(f"tkreg.ops.{op.name} replayed from a CUDA graph", lambda: graph_replay(ops_call(op, inputs))))
    lookup: Call = lambda: registry.lookup(op.name, inputs=inputs)  # noqa: E731 (a call, as the others)
    found.append(Path("lookup of the kernels for these inputs, cached", lambda: lookup))
    if op.grads:  # a training forward: autograd records each call (its backward is not timed)
        leaves = tuple(t if t is None else t.detach().requires_grad_(name in op.grads) for name, t in zip(op.inputs, inputs))
        found.append(Path(f"{op.peer_name} (the peer), gradient wanted", lambda: peer_call(op, leaves, None), peer=True,
                          allocates=True, role=TORCH_GRAD, grad=True))
        found.append(Path(f"tkreg.ops.{op.name}, gradient wanted", lambda: ops_call(op, leaves), allocates=True,
                          role=OPS_GRAD, grad=True))
    if op.autocast_policy("cuda") is not None:  # mixed precision: float32 weights and activations, autocast's casts
        wide = tuple(t.float() if t is not None and t.is_floating_point() else t for t in inputs)
        for what, make, peer, role in ((f"{op.peer_name} (the peer)", lambda: peer_call(op, wide, None), True, TORCH_AMP),
                                       (f"tkreg.ops.{op.name}", lambda: ops_call(op, wide), False, OPS_AMP)):  # fmt: skip
            found.append(Path(f"{what}, float32 inputs under autocast(bfloat16)", make, peer=peer, allocates=True, role=role,
                              autocast="bfloat16"))  # fmt: skip
    if op.optional:  # a LayerNorm without bias: the call with None keeps its own plan, on the same fast path
        bare = tuple(None if name in op.optional else t for name, t in zip(op.inputs, inputs))
        left_out = ", ".join(f"{name}=None" for name in op.optional)
        for what, make, peer, role in ((f"{op.peer_name} (the peer)", lambda: peer_call(op, bare, None), True, TORCH_ABSENT),
                                       (f"tkreg.ops.{op.name}", lambda: ops_call(op, bare), False, OPS_ABSENT)):  # fmt: skip
            found.append(Path(f"{what}, {left_out}", make, peer=peer, allocates=True, role=role, absent=True))
    return found


def _autocast(dtype: str) -> Callable[[], Any]:
    """A torch.autocast region of ``dtype`` on CUDA, made anew each time it is entered."""
    import torch

    return lambda: torch.autocast("cuda", dtype=getattr(torch, dtype))


def plain_kernel_call() -> Callable[[], Any]:
    """A plain @triton.jit add of two 256 x 256 fp32 tensors launched as kernel[grid]: what a
    hand-written launch costs, for comparison with the launchers."""
    import torch
    import triton

    from .plain_kernel import add_kernel

    a, b = (torch.randn(SIDE, SIDE, device="cuda") for _ in range(2))
    c = torch.empty_like(a)
    n, block = a.numel(), 1024
    grid = (triton.cdiv(n, block),)
    return lambda: add_kernel[grid](a, b, c, n, BLOCK=block)


def measure(deadline: Deadline) -> Measured:
    from .. import ops
    from ..ops import native

    registry = default_registry()
    rows: list[dict[str, Any]] = []
    decisions = []
    summary: dict[str, Any] = {}
    for op in registry.ops():
        sig = signature(op)
        if sig is None:
            continue
        deadline.check(f"op {op.name}")
        made: dict[str, Call] = {}
        contexts: dict[str, Callable[[], Any]] = {}
        found: list[tuple[Path, dict[str, Any]]] = []
        for path in paths(registry, op, sig):
            row: dict[str, Any] = {"op": op.name, "path": path.what, "shape": sig.shape, "dtype": sig.dtype, "peer": path.peer,
                                   "allocates": path.allocates, "grad": path.grad, "autocast": path.autocast,
                                   "absent": path.absent}  # fmt: skip
            try:
                call = path.make()
            except Exception as e:  # a path that cannot be made here is a finding: its row says why
                call, row["error"] = None, f"{type(e).__name__}: {str(e)[:200]}"
            if call is not None:
                made[path.what] = call
                if path.autocast:
                    contexts[path.what] = _autocast(path.autocast)
            if call is not None or "error" in row:
                found.append((path, row))
        try:
            figures = host_times(made, CALLS, ROUNDS, contexts)
        except Exception as e:  # a call that fails while timed fails its op's rows, with the reason
            figures = {}
            for _, row in found:
                row.setdefault("error", f"{type(e).__name__}: {str(e)[:200]}")
        for path, row in found:
            got = figures.get(path.what)
            if got is not None:
                row.update(us_per_call=round(got.per_call_us, 2), host_us=round(got.queued_us, 2))
                say(f"  {op.name} {sig.shape}: {path.what}: {got.per_call_us:.1f} us per call ({got.queued_us:.1f} queueing)")
            else:
                say(f"  {op.name} {sig.shape}: {path.what}: {row.get('error')}")
            rows.append(row)
        summary[op.name] = _summary({path.role: figures[path.what] for path, _ in found if path.role and path.what in figures})
        decisions.append(ops.explain(op.name, *make_inputs(registry, sig)))
    deadline.check("the plain kernel")
    figures = host_times({"plain": plain_kernel_call()}, CALLS, ROUNDS)["plain"]
    rows.append({"op": "(reference)", "path": "plain @triton.jit add, kernel[grid]", "shape": f"{SIDE}x{SIDE}",
                 "dtype": "float32", "peer": False, "us_per_call": round(figures.per_call_us, 2),
                 "host_us": round(figures.queued_us, 2)})  # fmt: skip
    notes = (f"{CALLS} calls queued back to back then one synchronize, per call, least of {ROUNDS} rounds interleaving "
             "an op's paths (us_per_call); host_us: the queueing alone. Summary per op: tkreg.ops over the peer "
             "allocating its own output (goal <= 1.3), torch.ops.tkreg minus tkreg.ops in us (goal <= 5), tkreg.ops "
             "over the peer on inputs that want a gradient (grad_ops_over_torch), and on float32 inputs under "
             "autocast(bfloat16) (amp_ops_over_torch), and with every optional input None (absent_ops_over_torch). What "
             "tkreg.ops decided at these inputs: " + " / ".join(decisions))  # fmt: skip
    summary[PLAN_KEY] = native.status()  # whether the fast path's key was read in C++ or built in Python
    return Measured(kind="host_overhead", rows=rows, notes=notes, summary=summary)


def _summary(by_role: dict[str, HostTime]) -> dict[str, float]:
    """tkreg.ops against torch's own allocating call, the torch operator's cost beyond tkreg.ops,
    and tkreg.ops against torch where the inputs want a gradient, under autocast and with every
    optional input None."""
    ours, peer, operator = by_role.get(OPS), by_role.get(TORCH), by_role.get(OPERATOR)
    ours_grad, peer_grad = by_role.get(OPS_GRAD), by_role.get(TORCH_GRAD)
    ours_amp, peer_amp = by_role.get(OPS_AMP), by_role.get(TORCH_AMP)
    ours_absent, peer_absent = by_role.get(OPS_ABSENT), by_role.get(TORCH_ABSENT)
    found: dict[str, float] = {}
    if ours is not None and peer is not None:
        found["ops_over_torch"] = round(ours.per_call_us / peer.per_call_us, 3)
    if ours is not None and operator is not None:
        found["operator_extra_us"] = round(operator.per_call_us - ours.per_call_us, 2)
    if ours_grad is not None and peer_grad is not None:
        found["grad_ops_over_torch"] = round(ours_grad.per_call_us / peer_grad.per_call_us, 3)
    if ours_amp is not None and peer_amp is not None:
        found["amp_ops_over_torch"] = round(ours_amp.per_call_us / peer_amp.per_call_us, 3)
    if ours_absent is not None and peer_absent is not None:
        found["absent_ops_over_torch"] = round(ours_absent.per_call_us / peer_absent.per_call_us, 3)
    return found
