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
from ..core.registry import Registry, input_constraint_reasons
from ..core.specs import Case, Kernel, Op
from .checking import Comparison, compare

DEFAULT_DEADLINE_S = 60.0


class KernelTimeout(RuntimeError):
    """A launched kernel did not finish by its deadline (a deadlock, most likely)."""


class DeviceWedged(RuntimeError):
    """An earlier kernel hung; the GPU context cannot run anything more in this process."""


_wedged_by: list[str] = []


@dataclass
class CheckResult:
    comparison: Comparison | None  # None when the inputs were rejected (see ``rejected``)
    seed: int
    context: str
    rejected: tuple[str, ...] = ()  # the kernel's declared reasons for refusing these inputs


def seed_for(item_id: str, base_seed: int) -> int:
    """A stable per-item seed: the same item gets the same data run after run, different items
    different data. The seed is printed in every failure."""
    import zlib

    return (base_seed * 1_000_003 + zlib.crc32(item_id.encode())) % (2**31)


def make_inputs(op: Op, case: Case, dtype: str, seed: int, device: str) -> tuple[Any, ...]:
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return tuple(refs.resolve(op.make_inputs)(case, dtypes.torch_dtype(dtype), generator, device))


# Quiet NaNs with a payload no arithmetic produces, so an element that still holds these bits was
# never written, while a NaN the kernel computed (canonical bits) is told apart.
POISON_BITS: dict[str, tuple[str, int]] = {
    "float64": ("int64", 0x7FF8_0000_DEAD_BEEF),
    "float32": ("int32", 0x7FC0_BEEF),
    "float16": ("int16", 0x7E5B),
    "bfloat16": ("int16", 0x7FDB),
}


def poisoned_output(op: Op, inputs: tuple[Any, ...]) -> Any:
    import torch

    out = refs.resolve(op.make_output)(*inputs)
    name = dtypes.name_of(out.dtype)
    if name in POISON_BITS:
        int_name, bits = POISON_BITS[name]
        out.view(dtypes.torch_dtype(int_name)).fill_(bits)
    elif out.dtype.is_floating_point:
        out.fill_(float("nan"))
    else:
        out.fill_(torch.iinfo(out.dtype).min)
    return out


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
) -> CheckResult:
    op = registry.op(kernel.op)
    params = resolve_config(registry, config)
    inputs = make_inputs(op, case, dtype, seed, device)
    out = poisoned_output(op, inputs)
    context = f"{kernel.name} on {op.name} {case.id} {dtype} config={config} seed={seed} device={device}"
    rejected = input_constraint_reasons(kernel, inputs, config)
    if rejected:
        # The kernel declares it cannot take these inputs: its launcher must refuse them cleanly.
        try:
            kernel.load()(*inputs, out=out, **params)
        except InputError:
            return CheckResult(None, seed, context, tuple(rejected))
        raise AssertionError(
            f"{kernel.name} declares it cannot take these inputs ({'; '.join(rejected)}) but its launcher "
            f"did not raise tkreg.InputError ({context})"
        )
    what = f"{kernel.name}[{dtypes.short(dtype)}-{case.id}]"
    wait(device, deadline_s, "input generation")
    result = kernel.load()(*inputs, out=out, **params)
    wait(device, deadline_s, what)
    if result is not None and result.data_ptr() != out.data_ptr():
        raise AssertionError(f"{kernel.name} returned a new tensor instead of writing into out=")
    ref = float64_reference(op, inputs)
    # The best a kernel can return is the exact result rounded once to the output dtype.
    ref = ref.to(out.dtype).double()
    comparison = compare(out, ref, op.tolerance(dtype, case), unwritten=unwritten_mask(out))
    return CheckResult(comparison, seed, context)


def float64_reference(op: Op, inputs: tuple[Any, ...]) -> Any:
    """The op's reference on float64 copies of the inputs, where the inputs live: float64 is IEEE
    double arithmetic on a GPU as on the CPU, and a GPU computes a large case's reference in
    milliseconds where the CPU takes seconds. A reference that cannot run there runs on the CPU."""
    reference = refs.resolve(op.reference)
    try:
        return reference(*(x.detach().double() for x in inputs))
    except (RuntimeError, NotImplementedError):
        if all(x.device.type == "cpu" for x in inputs):
            raise
        return reference(*(x.detach().to("cpu").double() for x in inputs))


def resolve_config(registry: Registry, config: dict[str, Any]) -> dict[str, Any]:
    """Config as the launcher takes it: a scheduler name becomes the registered Scheduler spec."""
    params = dict(config)
    if "scheduler" in params and isinstance(params["scheduler"], str):
        params["scheduler"] = registry.scheduler(params["scheduler"])
    return params
