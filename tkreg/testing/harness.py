"""Run one kernel on one case and check it against the op's float64 reference (or, where the
kernel declares it cannot take the case's inputs, check that its launcher refuses them).

Used by the generated pytest items and by scripts. Inputs are fresh seeded random data; the output
is poisoned (NaN) before the launch so unwritten elements fail; the float64 reference and the
comparison run where the inputs live; a launch that does not finish by its deadline raises
:class:`KernelTimeout` instead of hanging the caller.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..core import dtypes, refs
from ..core.errors import InputError
from ..core.interface import Writes
from ..core.refs import accepted
from ..core.registry import Registry, input_constraint_reasons
from ..core.specs import Case, Kernel, Op
from .checking import Comparison, Snapshot, compare, compare_exact

DEFAULT_DEADLINE_S = 60.0


class KernelTimeout(RuntimeError):
    """A launched kernel did not finish by its deadline (a deadlock, most likely)."""


class DeviceWedged(RuntimeError):
    """An earlier kernel hung; the GPU context cannot run anything more in this process."""


_wedged_by: list[str] = []


@dataclass
class CheckResult:
    """How one check went: a comparison per output (or gradient, or written input), by label, and
    the problems no comparison shows (an input the kernel changed without declaring it)."""

    comparisons: dict[str, Comparison]
    seed: int
    context: str
    rejected: tuple[str, ...] = ()  # the kernel's declared reasons for refusing these inputs
    problems: tuple[str, ...] = ()

    @property
    def comparison(self) -> Comparison | None:
        """The first output's comparison (None when the inputs were rejected)."""
        return next(iter(self.comparisons.values()), None)

    @property
    def ok(self) -> bool:
        return not self.problems and all(c.ok for c in self.comparisons.values())

    def report(self) -> str:
        lines = [self.context, *self.problems]
        for label, comparison in self.comparisons.items():
            if not comparison.ok:
                # An op's one unnamed output needs no label; gradients and named outputs do.
                lines.append(comparison.report() if label == "output 'out'" else f"{label}: {comparison.report()}")
        return "\n".join(lines)


def seed_for(item_id: str, base_seed: int) -> int:
    """A stable per-item seed: the same item gets the same data run after run, different items
    different data. The seed is printed in every failure."""
    import zlib

    return (base_seed * 1_000_003 + zlib.crc32(item_id.encode())) % (2**31)


def make_inputs(op: Op, case: Case, dtype: str, seed: int, device: str, params: dict[str, Any] | None = None) -> tuple[Any, ...]:
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    factory = refs.resolve(op.make_inputs)
    made = tuple(factory(case, dtypes.torch_dtype(dtype), generator, device, **accepted(factory, params or {})))
    absent = [name for name, x in zip(op.inputs, made) if x is None and name not in op.optional]
    if absent:
        raise AssertionError(f"op {op.name}: make_inputs gave None for {', '.join(absent)} (case {case.id}), which the op "
                             f"does not declare optional (Op(optional=...))")  # fmt: skip
    return made


def as_tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


# Quiet NaNs with a payload no arithmetic produces, so an element that still holds these bits was
# never written, while a NaN the kernel computed (canonical bits) is told apart.
POISON_BITS: dict[str, tuple[str, int]] = {
    "float64": ("int64", 0x7FF8_0000_DEAD_BEEF),
    "float32": ("int32", 0x7FC0_BEEF),
    "float16": ("int16", 0x7E5B),
    "bfloat16": ("int16", 0x7FDB),
}


def poison(out: Any) -> Any:
    """Fill ``out`` with values no kernel computes, so elements it never wrote are found."""
    import torch

    name = dtypes.name_of(out.dtype)
    if name in POISON_BITS:
        int_name, bits = POISON_BITS[name]
        out.view(dtypes.torch_dtype(int_name)).fill_(bits)
    elif out.dtype.is_floating_point:
        out.fill_(float("nan"))
    elif out.dtype == torch.bool:
        out.fill_(True)
    else:
        out.fill_(torch.iinfo(out.dtype).min)
    return out


def poisoned_outputs(op: Op, inputs: tuple[Any, ...], params: dict[str, Any] | None = None) -> tuple[Any, ...]:
    """The op's outputs for these inputs, one per declared output, poisoned."""
    allocate = refs.resolve(op.make_output)
    outs = as_tuple(allocate(*inputs, **accepted(allocate, params or {})))
    if len(outs) != len(op.outputs):
        names = ", ".join(o.name for o in op.outputs)
        raise AssertionError(f"op {op.name}: make_output returned {len(outs)} tensor(s) for {len(op.outputs)} outputs ({names})")
    for output, out in zip(op.outputs, outs):
        if output.dtype is not None and dtypes.name_of(out.dtype) != output.dtype:
            raise AssertionError(
                f"op {op.name}: make_output gave output {output.name!r} dtype {out.dtype}; the op declares {output.dtype}"
            )
    return tuple(poison(o) for o in outs)


def poisoned_output(op: Op, inputs: tuple[Any, ...], params: dict[str, Any] | None = None) -> Any:
    """What a launcher receives as ``out``: the output, or the tuple of outputs of an op with several."""
    outs = poisoned_outputs(op, inputs, params)
    return outs[0] if len(outs) == 1 else outs


def unwritten_mask(out: Any) -> Any:
    """Elements that still hold the poison bits (None for dtypes without a payload poison)."""
    name = dtypes.name_of(out.dtype)
    if name not in POISON_BITS:
        return None
    int_name, bits = POISON_BITS[name]
    return out.view(dtypes.torch_dtype(int_name)) == bits


def wait(device: str, deadline_s: float, what: str) -> None:
    """Wait for queued GPU work without blocking in the driver, so a hang becomes an error."""
    if device != "cuda":
        return
    import torch

    if _wedged_by:
        raise DeviceWedged(f"the GPU is stuck since {_wedged_by[0]} hung; restart the process")
    done = torch.cuda.Event()
    done.record()
    start = time.monotonic()
    while not done.query():
        if time.monotonic() - start > deadline_s:
            _wedged_by.append(what)
            raise KernelTimeout(f"{what} did not finish within {deadline_s:.0f} s (deadlock or runaway loop?)")
        time.sleep(1e-4)


def run_check(
    registry: Registry,
    kernel: Kernel,
    case: Case,
    dtype: str,
    config: dict[str, Any],
    *,
    seed: int,
    device: str,
    deadline_s: float = DEFAULT_DEADLINE_S,
    params: dict[str, Any] | None = None,
) -> CheckResult:
    """Check one kernel (forward or backward) on one case, dtype, config and parameter set."""
    if kernel.backward:
        return run_backward_check(registry, kernel, case, dtype, config, seed=seed, device=device, deadline_s=deadline_s,
                                  params=params)
    op = registry.op(kernel.op)
    params = {**op.defaults, **(params or {})}
    inputs = make_inputs(op, case, dtype, seed, device, params)
    outs = poisoned_outputs(op, inputs, params)
    context = _context(kernel, op, case, dtype, config, params, seed, device)
    call = _Call(registry, kernel, inputs, outs, params, config, context)
    if call.rejected:
        return call.refused(seed)
    call.launch(deadline_s, device, f"{kernel.name}[{dtypes.short(dtype)}-{case.id}]")
    originals = call.originals  # what the inputs held before the launch, whatever the kernel did to them
    expected = float64_reference(op, originals, params)
    if len(expected) != len(outs):
        raise AssertionError(f"op {op.name}: the reference returned {len(expected)} tensor(s) for {len(outs)} outputs")
    comparisons = {}
    for output, out, ref in zip(op.outputs, outs, expected):
        comparisons[f"output {output.name!r}"] = _compare(out, ref, None if output.exact else op.tolerance(dtype, case, output))
    return call.result(comparisons, op.inputs, lambda w: _expected_written(op, w, originals, params, dtype, case), seed)


def run_backward_check(
    registry: Registry,
    kernel: Kernel,
    case: Case,
    dtype: str,
    config: dict[str, Any],
    *,
    seed: int,
    device: str,
    deadline_s: float = DEFAULT_DEADLINE_S,
    params: dict[str, Any] | None = None,
) -> CheckResult:
    """A backward kernel's gradients against float64 autograd of the reference, for fresh random
    upstream gradients; the forward outputs it receives are the reference's, rounded to their
    dtypes, so the check depends on no forward kernel."""
    op = registry.op(kernel.op)
    params = {**op.defaults, **(params or {})}
    problem = backward_problem(op, case, dtype, seed, device, params)
    inputs, outputs, grad_outputs, expected = problem
    # an absent optional input has no gradient: None in its place, as tkreg.ops passes it
    grads = tuple(None if x is None else poison(_gradient_like(x)) for x in (inputs[op.inputs.index(g)] for g in op.grads))
    context = _context(kernel, op, case, dtype, config, params, seed, device)
    names = (*op.inputs, *(o.name for o in op.outputs), *(f"grad_{o.name}" for o in op.outputs if o.differentiable))
    call = _Call(registry, kernel, (*inputs, *outputs, *grad_outputs), grads, params, config, context, tuple_out=True)
    if call.rejected:
        return call.refused(seed)
    call.launch(deadline_s, device, f"{kernel.name}[{dtypes.short(dtype)}-{case.id}]")
    tol = op.grad_tolerance(dtype, case)
    comparisons = {f"gradient of {g!r}": _compare(got, want, tol) for g, got, want in zip(op.grads, grads, expected)
                   if got is not None}  # fmt: skip
    return call.result(comparisons, names, None, seed)


def backward_problem(
    op: Op, case: Case, dtype: str, seed: int, device: str, params: dict[str, Any], expected: bool = True
) -> tuple[tuple[Any, ...], tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]]:
    """(inputs, forward outputs, upstream gradients, expected gradients in float64) for one case;
    without ``expected``, the expected gradients are not computed (an empty tuple)."""
    import torch

    inputs = make_inputs(op, case, dtype, seed, device, params)
    allocated = poisoned_outputs(op, inputs, params)
    for g in op.grads:
        given = inputs[op.inputs.index(g)]
        if given is not None and not given.is_floating_point():
            raise AssertionError(f"op {op.name}: input {g!r} is listed in grads but make_inputs gave {given.dtype}")
    wide = _promoted(inputs, grads=set(op.grads), names=op.inputs)
    with torch.enable_grad():
        reference = as_tuple(refs.resolve(op.reference)(*wide, **params))
    if len(reference) != len(op.outputs):
        raise AssertionError(f"op {op.name}: the reference returned {len(reference)} tensor(s) for {len(op.outputs)} outputs")
    outputs = tuple(r.detach().to(a.dtype).reshape(a.shape) for r, a in zip(reference, allocated))
    generator = torch.Generator(device=device)
    generator.manual_seed(seed + 1)
    differentiable = [(o, r, a) for o, r, a in zip(op.outputs, reference, allocated) if o.differentiable]
    grad_outputs = tuple(torch.randn(a.shape, generator=generator, dtype=a.dtype, device=device) for _, _, a in differentiable)
    if not expected:
        return inputs, outputs, grad_outputs, ()
    targets = [wide[op.inputs.index(g)] for g in op.grads]  # None for an absent optional input
    present = [t for t in targets if t is not None]
    got = iter(torch.autograd.grad([r for _, r, _ in differentiable], present, [g.double() for g in grad_outputs],
                                   allow_unused=True))  # fmt: skip
    grads = []
    for t in targets:
        g = None if t is None else next(got)
        grads.append(torch.zeros_like(t) if t is not None and g is None else g)  # unused by the reference: zeros
    return inputs, outputs, grad_outputs, tuple(grads)


def _gradient_like(t: Any) -> Any:
    import torch

    return torch.empty(t.shape, dtype=t.dtype, device=t.device)


def _compare(out: Any, ref: Any, tol: Any) -> Comparison:
    if tol is None:
        return compare_exact(out, ref)
    # The best a kernel can return is the exact result rounded once to the output's dtype.
    return compare(out, ref.to(out.dtype).double(), tol, unwritten=unwritten_mask(out))


def _context(kernel: Kernel, op: Op, case: Case, dtype: str, config: dict[str, Any], params: dict[str, Any], seed: int,
             device: str) -> str:
    shown = f" params={params}" if params else ""
    return f"{kernel.name} on {op.name} {case.id} {dtype} config={config}{shown} seed={seed} device={device}"


def _expected_written(op: Op, writes: Writes, inputs: tuple[Any, ...], params: dict[str, Any], dtype: str,
                      case: Case) -> tuple[Any, Any] | None:
    if writes.expect is None:
        return None
    want = refs.resolve(writes.expect)(*_promoted(inputs), **params)
    return want, writes.tolerances[dtype] if writes.tolerances is not None else op.tolerance(dtype, case)


class _Call:
    """One launch of a kernel under check: refusal, launch, and the inputs it must leave alone."""

    def __init__(self, registry: Registry, kernel: Kernel, inputs: tuple[Any, ...], outs: tuple[Any, ...],
                 params: dict[str, Any], config: dict[str, Any], context: str, tuple_out: bool = False) -> None:
        self.kernel, self.inputs, self.outs, self.context = kernel, inputs, outs, context
        self.params = resolve_config(registry, config) | params
        self.out_arg = outs if tuple_out or len(outs) != 1 else outs[0]
        self.rejected = input_constraint_reasons(kernel, inputs, config)

    def refused(self, seed: int) -> CheckResult:
        """The kernel declares it cannot take these inputs: its launcher must refuse them cleanly."""
        try:
            self.kernel.load()(*self.inputs, out=self.out_arg, **self.params)
        except InputError:
            return CheckResult({}, seed, self.context, tuple(self.rejected))
        raise AssertionError(
            f"{self.kernel.name} declares it cannot take these inputs ({'; '.join(self.rejected)}) but its launcher "
            f"did not raise tkreg.InputError ({self.context})"
        )

    def launch(self, deadline_s: float, device: str, what: str) -> None:
        wait(device, deadline_s, "input generation")
        self.snapshots = {i: Snapshot.of(str(i), t) for i, t in enumerate(self.inputs) if hasattr(t, "untyped_storage")}
        self.originals = tuple(self.snapshots[i].values if i in self.snapshots else t for i, t in enumerate(self.inputs))
        result = self.kernel.load()(*self.inputs, out=self.out_arg, **self.params)
        wait(device, deadline_s, what)
        returned = as_tuple(result) if result is not None else self.outs
        if len(returned) != len(self.outs) or any(
            (r is None) != (o is None) or (o is not None and r.data_ptr() != o.data_ptr()) for r, o in zip(returned, self.outs)
        ):  # None: the gradient of an absent optional input, which the launcher leaves None
            raise AssertionError(f"{self.kernel.name} returned new tensors instead of writing into out=")

    def result(self, comparisons: dict[str, Comparison], names: tuple[str, ...],
               expected_written: Any, seed: int) -> CheckResult:
        """The comparisons, plus a problem per input the kernel changed without declaring it; a
        declared one is compared with what its Writes expects, or left unchecked for its reason."""
        declared = {w.input: w for w in self.kernel.writes}
        problems = []
        for index, snapshot in self.snapshots.items():
            name = names[index] if index < len(names) else f"#{index}"
            tensor = self.inputs[index]
            if name in declared:
                written = expected_written(declared[name]) if expected_written is not None else None
                if written is not None:
                    want, tol = written
                    comparisons[f"written input {name!r}"] = _compare(tensor, want, tol)
                continue
            change = Snapshot(name, snapshot.values, snapshot.storage).changes(tensor)
            if change:
                problems.append(f"{self.kernel.name} changed an input it does not declare in writes=: {change}")
        return CheckResult(comparisons, seed, self.context, problems=tuple(problems))


def float64_reference(op: Op, inputs: tuple[Any, ...], params: dict[str, Any] | None = None) -> tuple[Any, ...]:
    """The op's reference on copies of the inputs, the floating ones in float64 (integer and bool
    inputs as they are), where the inputs live: float64 is IEEE double arithmetic on a GPU as on
    the CPU, and a GPU computes a large case's reference in milliseconds where the CPU takes
    seconds. A reference that cannot run there runs on the CPU. One tensor per output."""
    reference = refs.resolve(op.reference)
    params = params or {}
    try:
        return as_tuple(reference(*_promoted(inputs), **params))
    except (RuntimeError, NotImplementedError):
        if all(x is None or x.device.type == "cpu" for x in inputs):
            raise
        return as_tuple(reference(*_promoted(inputs, device="cpu"), **params))


def _promoted(inputs: tuple[Any, ...], device: str | None = None, grads: set[str] | None = None,
              names: tuple[str, ...] = ()) -> tuple[Any, ...]:
    """Copies for a reference: floating tensors in float64 (requiring grad where named in
    ``grads``), others unchanged."""
    out = []
    for i, x in enumerate(inputs):
        if x is None:  # an absent optional input
            out.append(None)
            continue
        y = x.detach()
        if device is not None:
            y = y.to(device)
        if y.is_floating_point():
            y = y.double()
            if grads and i < len(names) and names[i] in grads:
                y = y.clone().requires_grad_(True)
        out.append(y)
    return tuple(out)


def resolve_config(registry: Registry, config: dict[str, Any]) -> dict[str, Any]:
    """Config as the launcher takes it: a scheduler name becomes the registered Scheduler spec."""
    params = dict(config)
    if "scheduler" in params and isinstance(params["scheduler"], str):
        params["scheduler"] = registry.scheduler(params["scheduler"])
    return params
