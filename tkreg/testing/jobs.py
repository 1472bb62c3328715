"""The work of one generated item, as a runner process executes it: check, compile or time one
kernel, and say how it went in a picklable :class:`Outcome`.

The pytest process sends a :class:`Job` to a runner (see tkreg.testing.pool) and turns the outcome into
the item's result. The runner holds the registry, the device timer and whatever a kernel does to
the process (a sticky CUDA error, patched interpreter state), so none of it reaches the pytest
process or the items that follow. With ``--tkreg-in-process`` the same functions run in the
pytest process itself (no isolation; for debuggers).
"""

from __future__ import annotations

import statistics
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..core import refs
from ..core.registry import Registry, input_constraint_reasons
from . import harness
from .generation import ItemSpec

# Words in the CUDA errors that leave a context unusable (cudaErrorIllegalAddress,
# MisalignedAddress, IllegalInstruction, Assert, LaunchFailure, ...): every later call in the
# process fails with the same error.
STICKY_CUDA_ERRORS = (
    "illegal memory access",
    "misaligned address",
    "illegal instruction",
    "device-side assert",
    "unspecified launch failure",
    "an illegal",
    "invalid program counter",
    "hardware stack error",
    "uncorrectable ECC",
)


WALL_MIN_REPS = 20
WALL_REPS_DIVISOR = 4  # wall-time repetitions: a quarter of the device-time ones, at least WALL_MIN_REPS


@dataclass(frozen=True)
class Job:
    """One item's work. ``device`` is the runner's GPU ordinal (0 in a pinned runner) or None."""

    item_id: str
    spec: ItemSpec
    seed: int
    timeout_s: float
    save_asm: str | None = None
    ceilings: Any = None  # tkreg.testing.timing.Ceilings already measured on this GPU, for bench jobs

    @property
    def lane(self) -> str:
        """Which runners can take it: compile jobs need a process without the interpreter and no
        GPU; the others run kernels."""
        return "compile" if self.spec.kind == "compile" else "kernel"

    @property
    def exclusive(self) -> bool:
        """Benchmarks have their GPU to themselves while they run."""
        return self.spec.kind in ("bench", "peer")


@dataclass
class Outcome:
    status: str  # passed, failed, skipped, error (an exception), crashed, timeout
    message: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    fatal: bool = False  # the runner cannot go on (its CUDA context is broken); it exits


class Context:
    """What a runner keeps between jobs: the registry, and on a GPU the timer and ceilings."""

    def __init__(self, registry: Registry, gpu: bool, bench_ms: float | None = None) -> None:
        self.registry = registry
        self.gpu = gpu
        self.bench_ms = bench_ms
        self._timer: Any = None
        self.ceilings: Any = None

    def timer(self) -> Any:
        from .timing import DeviceTimer

        if self._timer is None:
            self._timer = DeviceTimer() if self.bench_ms is None else DeviceTimer(target_ms=self.bench_ms)
        return self._timer


def execute(job: Job, context: Context) -> Outcome:
    """Run one job; every exception becomes an outcome (fatal when it broke the CUDA context)."""
    try:
        if job.spec.kind == "correctness":
            return _correctness(job, context)
        if job.spec.kind == "compile":
            return _compile(job, context)
        if job.spec.kind == "autocast":
            return _autocast(job, context)
        if job.spec.kind == "direct":
            return _direct(job, context)
        return _bench(job, context)
    except Exception as error:  # the item fails with the exception; the runner decides whether to go on
        fatal = context.gpu and not cuda_usable(error)
        first_line = (str(error).strip().splitlines() or [""])[0]
        head = f"{type(error).__name__}: {first_line}"
        if fatal:
            head += "\n(a sticky CUDA error: this process's GPU context cannot run anything more, so its runner was replaced)"
        trace = "".join(traceback.format_exception(type(error), error, error.__traceback__, limit=-12))
        return Outcome("error", f"{head}\n{trace}", fatal=fatal)


def cuda_usable(error: BaseException | None = None) -> bool:
    """Whether this process can still use its GPU after ``error``: sticky errors poison the
    context for good, and a kernel that hung leaves it wedged."""
    if isinstance(error, (harness.KernelTimeout, harness.DeviceWedged)):
        return False
    if error is not None and any(word in str(error) for word in STICKY_CUDA_ERRORS):
        return False
    import torch

    try:
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").add_(1).item()
    except Exception:
        return False
    return True


def _correctness(job: Job, context: Context) -> Outcome:
    spec = job.spec
    registry = context.registry
    kernel = registry.kernel(spec.name)
    assert spec.case is not None
    result = harness.run_check(
        registry,
        kernel,
        spec.case,
        spec.dtype,
        spec.config,
        seed=job.seed,
        device="cuda" if context.gpu else "cpu",
        deadline_s=job.timeout_s,
        params=spec.params,
    )
    if not result.ok:
        return Outcome("failed", result.report())
    return Outcome("passed")


def _autocast(job: Job, context: Context) -> Outcome:
    from .autocast_check import check

    spec = job.spec
    problem = check(context.registry.op(spec.op), spec.arch or "cpu", job.seed)
    return Outcome("passed") if problem is None else Outcome("failed", problem)


def _direct(job: Job, context: Context) -> Outcome:
    from .direct_check import check

    problem, named = check(context.registry.op(job.spec.op), "cuda" if context.gpu else "cpu", job.seed)
    if problem is not None:
        return Outcome("failed", problem)
    if not named:
        return Outcome("skipped", f"op {job.spec.op}'s peer_direct names no call for its default cases' shapes")
    return Outcome("passed")


def _compile(job: Job, context: Context) -> Outcome:
    from ..launch.aot import TargetCheck
    from .aot_worker import compile_request

    spec = job.spec
    request = {"item": job.item_id, "kernel": spec.name, "arch": spec.arch, "dtype": spec.dtype, "config": spec.config}
    check = TargetCheck(**compile_request(context.registry, request, job.save_asm)["check"])
    if check.ok:
        return Outcome("passed")
    lines = [f"{spec.name} compiled for {spec.arch} but its code lacks what the kernel relies on:"]
    lines += [f"  PTX has no match for /{p}/" for p in check.missing_ptx]
    lines += [f"  SASS has no match for /{p}/" for p in check.missing_sass]
    lines.append(f"  resources: {check.resources}")
    return Outcome("failed", "\n".join(lines))


def _bench(job: Job, context: Context) -> Outcome:
    """Device times of the kernel (or the op's peer) on one benchmark case, forward, backward or
    both; the pytest process turns them into throughput and ratios."""
    import torch

    from .timing import measure_ceilings

    spec = job.spec
    call = bench_call(context.registry, spec, job.seed)
    if isinstance(call, str):
        return Outcome("skipped", call)
    timer = context.timer()
    ceilings = job.ceilings or context.ceilings or measure_ceilings(timer)
    context.ceilings = ceilings
    harness.wait("cuda", job.timeout_s, spec.id)
    estimate = timer.warmup(call)
    reps = timer.reps_for(estimate)
    read = timer.queue(call, reps)
    harness.wait("cuda", job.timeout_s, spec.id)
    times_ms = read()
    # What a Python caller pays per call, launcher included (do_bench's method): fewer
    # repetitions suffice, the figure is for comparison beside the device time.
    read_wall = timer.queue_wall(call, max(WALL_MIN_REPS, reps // WALL_REPS_DIVISOR))
    harness.wait("cuda", job.timeout_s, spec.id)
    wall_ms = read_wall()
    torch.cuda.synchronize()
    data = {
        "times_ms": times_ms,
        "median_ms": statistics.median(times_ms),
        "wall_ms": statistics.median(wall_ms),
        "host_us": timer.host_ms * 1e3,
        "timing": timer.describe(),
        "capture_error": timer.capture_error,
        "cupti_error": timer.cupti_error,
        "ceilings": ceilings,
    }
    return Outcome("passed", data=data)


def bench_call(registry: Registry, spec: ItemSpec, seed: int) -> Callable[[], None] | str:
    """The call one benchmark times, with its inputs made on the GPU; or why the kernel cannot
    take them (the item is skipped)."""
    import torch

    op = registry.op(spec.op)
    assert spec.case is not None
    params = {**op.defaults, **spec.params}
    if spec.mode == "fwd":
        inputs = harness.make_inputs(op, spec.case, spec.dtype, seed, "cuda", params)
        out = harness.poisoned_output(op, inputs, params)
        if spec.kind == "peer":
            peer = refs.resolve(op.implementation(spec.name.removeprefix("peer-")))
            return lambda: peer(*inputs, out=out, **params)
        return _kernel_call(registry, spec, inputs, out, params)
    inputs, outputs, grad_outputs, _ = harness.backward_problem(op, spec.case, spec.dtype, seed, "cuda", params,
                                                                expected=False)
    if spec.kind == "peer":
        peer = refs.resolve(op.implementation(spec.name.removeprefix("peer-")))
        return _peer_backward(op, peer, inputs, grad_outputs, params, spec.mode == "fwdbwd")
    grads = tuple(None if x is None else torch.empty_like(x, memory_format=torch.contiguous_format)
                  for x in (inputs[op.inputs.index(g)] for g in op.grads))  # fmt: skip  # None: an absent input
    backward = _kernel_call(registry, spec, (*inputs, *outputs, *grad_outputs), grads, params)
    if isinstance(backward, str) or spec.mode == "bwd":
        return backward
    assert spec.forward is not None
    fresh = harness.poisoned_output(op, inputs, params)
    forward = _kernel_call(registry, replace(spec, name=spec.forward, config={}), inputs, fresh, params)
    if isinstance(forward, str):
        return forward
    run_backward = _kernel_call(
        registry, spec, (*inputs, *harness.as_tuple(fresh), *grad_outputs), grads, params
    )
    assert not isinstance(run_backward, str)

    def both() -> None:
        forward()
        run_backward()  # type: ignore[operator]

    return both


def _kernel_call(registry: Registry, spec: ItemSpec, inputs: tuple[Any, ...], out: Any, params: dict[str, Any]) -> Any:
    kernel = registry.kernel(spec.name)
    rejected = input_constraint_reasons(kernel, inputs, spec.config or None)
    if rejected:
        return f"{kernel.name} cannot take these inputs: " + "; ".join(rejected)
    launcher = kernel.load()
    keywords = {**harness.resolve_config(registry, spec.config), **params}
    return lambda: launcher(*inputs, out=out, **keywords)


def _peer_backward(op: Any, peer: Callable[..., Any], inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...],
                   params: dict[str, Any], with_forward: bool) -> Callable[[], None]:
    """A peer's gradients through torch autograd: the backward of a graph built once (bwd), or
    the forward and backward together (fwdbwd)."""
    import torch

    leaves = tuple(x.detach().requires_grad_(op.inputs[i] in op.grads) if x is not None and x.is_floating_point() else x
                   for i, x in enumerate(inputs))
    wrt = [t for t in (leaves[op.inputs.index(g)] for g in op.grads) if t is not None]  # an absent input has none
    differentiable = [i for i, o in enumerate(op.outputs) if o.differentiable]

    def forward() -> list[Any]:
        with torch.enable_grad():
            outs = harness.as_tuple(peer(*leaves, out=None, **params))
        return [outs[i] for i in differentiable]

    if with_forward:
        return lambda: torch.autograd.grad(forward(), wrt, grad_outputs)
    built = forward()
    return lambda: torch.autograd.grad(built, wrt, grad_outputs, retain_graph=True)
