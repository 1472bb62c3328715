"""What the suites time, made the way the benchmark items make it: an op's inputs from its own
factory on the GPU (tkreg.testing.harness), its output, and calls of its peer, its kernels (at
their launchers' own choice), ``tkreg.ops.<op>`` and ``torch.ops.tkreg.<op>``; plus host time per
call of calls queued back to back. GPU only; torch is imported inside the functions."""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core import refs
from ..core.dtypes import SHORT_NAMES
from ..core.registry import Registry
from ..core.specs import Case, Kernel, Op
from ..testing import harness

Call = Callable[[], Any]
HOST_WARM_CALLS = 20  # calls before the timed rounds (compiles, caches, plans)


@dataclass(frozen=True)
class Signature:
    """One op's inputs: dims, dtype and the op's layout variant ("" or e.g. "weight"). Picklable,
    so the compile workers of tkreg.bench.warm receive it."""

    op: str
    dims: tuple[tuple[str, int], ...]
    dtype: str
    variant: str = ""

    @classmethod
    def of(cls, op: str, dims: Mapping[str, int], dtype: str, variant: str = "") -> Signature:
        return cls(op, tuple(dims.items()), dtype, variant)

    @property
    def case(self) -> Case:
        return Case(dims=dict(self.dims), variant=self.variant)

    @property
    def shape(self) -> str:
        return "x".join(str(v) for _, v in self.dims)

    @property
    def label(self) -> str:
        variant = f"-{self.variant}" if self.variant else ""
        return f"{self.op} {self.shape}{variant} {SHORT_NAMES.get(self.dtype, self.dtype)}"

    @property
    def size(self) -> int:
        return math.prod(v for _, v in self.dims)


def bench_signatures(op: Op) -> list[Signature]:
    """The op's benchmark cases in its benchmark dtypes, as the main job's benchmark items run them."""
    return [Signature.of(op.name, c.dims, dtype, c.variant) for c in op.cases_in("bench") for dtype in op.bench_dtypes_of(c)]


def make_inputs(registry: Registry, sig: Signature, seed: int = 0) -> tuple[Any, ...]:
    op = registry.op(sig.op)
    return harness.make_inputs(op, sig.case, sig.dtype, seed, "cuda", op.defaults)


def make_output(registry: Registry, sig: Signature, inputs: tuple[Any, ...]) -> Any:
    """The output a launcher writes into (poisoned, so an unwritten element shows)."""
    op = registry.op(sig.op)
    return harness.poisoned_output(op, inputs, op.defaults)


def peer_call(op: Op, inputs: tuple[Any, ...], out: Any) -> Call | None:
    """The op's peer writing into ``out`` (where ``out`` is None, returning new outputs, as torch
    code calls it); None for an op without one."""
    if op.peer is None:
        return None
    peer, params = refs.resolve(op.peer), op.defaults
    return functools.partial(peer, *inputs, out=out, **params)  # no frame of its own: a model calls it directly


def launchers(registry: Registry, op: Op, inputs: tuple[Any, ...]) -> dict[str, Callable[..., Any]]:
    """Every forward kernel's launcher that takes these inputs on this GPU, in lookup's order."""
    return {kernel.name: kernel.load() for kernel in registry.lookup(op.name, inputs=inputs)}


def planned_kernels(registry: Registry, op: Op, inputs: tuple[Any, ...]) -> list[Kernel]:
    """The kernels tkreg.ops may run for these inputs on this GPU (lookup's order): those that
    take them, less any that overwrites an input, which tkreg.ops never plans (and whose calls,
    repeated on the same inputs, would time inputs the previous call changed)."""
    return [kernel for kernel in registry.lookup(op.name, inputs=inputs) if not kernel.writes]


def launcher_call(op: Op, launcher: Callable[..., Any], inputs: tuple[Any, ...], out: Any = None) -> Call:
    """A launcher at its own choice on ``inputs`` with the op's parameters at their defaults,
    writing into ``out``; where ``out`` is None, into a new output per call, as a user's call
    (and tkreg.ops) does: the launcher's own where it allocates one, else the op's make_output."""
    params = op.defaults
    if out is not None:
        return functools.partial(launcher, *inputs, **params, out=out)
    if allocates(launcher):
        return functools.partial(launcher, *inputs, **params)
    allocate = refs.resolve(op.make_output)
    sizes = harness.accepted(allocate, params)
    return lambda: launcher(*inputs, out=allocate(*inputs, **sizes), **params)


def kernel_call(op: Op, kernel: Kernel, launcher: Callable[..., Any], inputs: tuple[Any, ...]) -> Call:
    """A kernel as tkreg.ops runs it: new outputs per call, allocated as a plan allocates them
    (the layouts of the op's make_output, worked out once), and for a kernel that declares
    replay its second call recorded and later ones replayed (tkreg.ops.replaying); other
    kernels as launcher_call makes them."""
    if not kernel.replayable:
        return launcher_call(op, launcher, inputs)
    from ..ops import choosing
    from ..ops.forms import OutputLayout, as_tuple

    params = op.defaults
    allocate = refs.resolve(op.make_output)
    layouts = [OutputLayout.like(t) for t in as_tuple(allocate(*inputs, **harness.accepted(allocate, params)))]
    return choosing.kernel_call(launcher, inputs, layouts, params, replayable=True)  # the tuner's own candidate call


def allocates(launcher: Callable[..., Any]) -> bool:
    """Whether the launcher may be called without ``out`` (it allocates its output)."""
    try:
        out = inspect.signature(launcher).parameters.get("out")
    except (TypeError, ValueError):  # no signature to read: let the call say
        return True
    return out is None or out.default is not inspect.Parameter.empty


def kernel_calls(registry: Registry, op: Op, inputs: tuple[Any, ...], out: Any = None) -> dict[str, Call]:
    """Every kernel that takes these inputs on this GPU (lookup's order), as launcher_call makes it."""
    return {name: launcher_call(op, launcher, inputs, out) for name, launcher in launchers(registry, op, inputs).items()}


def as_called(op: Op, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """``inputs`` as a model passes them: trailing optional inputs that are None left out, as
    ``F.linear(x, w)`` leaves out its bias and ``F.layer_norm(x, shape)`` its weight and bias."""
    if len(op.inputs) != len(inputs):  # inputs not declared (none is optional), or already fewer
        return inputs
    count = len(inputs)
    while count > op.required_inputs and inputs[count - 1] is None:
        count -= 1
    return inputs[:count]


def ops_call(op: Op, inputs: tuple[Any, ...]) -> Call:
    """``tkreg.ops.<op>(*inputs)`` as a model calls it (:func:`as_called`): it allocates its
    output, and takes the op's parameters at their defaults."""
    from .. import ops

    return functools.partial(ops.get(op.name), *as_called(op, inputs))  # bound, as a model's call binds them: no frame between


def torch_op_call(op: Op, inputs: tuple[Any, ...]) -> Call | None:
    """``torch.ops.tkreg.<op>(*inputs)`` as a model calls it (:func:`as_called`), where tkreg.ops
    registered one."""
    import torch

    from .. import ops

    ops.get(op.name)  # installs the torch operators
    packet = getattr(torch.ops.tkreg, op.name, None) if op.name.isidentifier() else None
    if packet is None:
        return None
    given = as_called(op, inputs)
    return lambda: packet(*given)


def graph_replay(fn: Call) -> Call:
    """``fn`` captured in a CUDA graph (after warm-up on a side stream); returns the replay."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


@dataclass(frozen=True)
class HostTime:
    per_call_us: float  # calls queued back to back, then one synchronize: what a loop of calls costs
    queued_us: float  # the queueing alone: the host's work per call


def host_times(calls: Mapping[str, Call], count: int, rounds: int,
               contexts: Mapping[str, Callable[[], Any]] | None = None) -> dict[str, HostTime]:  # fmt: skip
    """Per call of ``count`` calls queued back to back, the least of ``rounds`` rounds (the host's
    own noise only adds). The rounds interleave the calls, so a host that speeds up or slows down
    while they are timed moves them alike and their ratios hold. A call named in ``contexts`` is
    made inside its context (torch.autocast), entered once around each batch, as a model enters
    one around many calls."""
    import torch

    contexts = contexts or {}
    for name, fn in calls.items():
        with contexts.get(name, contextlib.nullcontext)():
            for _ in range(HOST_WARM_CALLS):
                fn()
    torch.cuda.synchronize()
    per_call = dict.fromkeys(calls, math.inf)
    queued = dict.fromkeys(calls, math.inf)
    for _ in range(rounds):
        for name, fn in calls.items():
            with contexts.get(name, contextlib.nullcontext)():
                t0 = time.perf_counter()
                for _ in range(count):
                    fn()
                t1 = time.perf_counter()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            per_call[name] = min(per_call[name], (t2 - t0) / count)
            queued[name] = min(queued[name], (t1 - t0) / count)
    return {name: HostTime(per_call[name] * 1e6, queued[name] * 1e6) for name in calls}


def say(text: str) -> None:
    print(text, flush=True)
