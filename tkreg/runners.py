"""What each generated item does when it runs: check, compile, or time one kernel.

Shared state for a session (the registry, the platform, the compile worker, the device timer,
ceilings and peer timings measured once) lives in :class:`Session`, kept in pytest's stash.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import pytest

from . import dtypes, harness, refs
from .generation import ItemSpec
from .inputs import interpreter_active
from .platform import Platform, current
from .registry import Registry, input_constraint_reasons, unmet_requirements


@dataclass
class Session:
    registry: Registry
    base_seed: int
    deadline_s: float
    plugin_files: list[tuple[str, str]]
    save_asm: str | None
    full: bool = False
    _worker: Any = None
    _timer: Any = None
    _ceilings: Any = None
    peer_ms: dict[tuple[str, str, str], float] = field(default_factory=dict)
    results: list[dict[str, Any]] = field(default_factory=list)

    @property
    def platform(self) -> Platform:
        return current()

    def worker(self) -> Any:
        from .aot_worker import WorkerClient

        if self._worker is None:
            self._worker = WorkerClient(self.plugin_files, self.save_asm)
        return self._worker

    def timer(self) -> Any:
        from .timing import DeviceTimer

        if self._timer is None:
            self._timer = DeviceTimer()
        return self._timer

    def ceilings(self) -> Any:
        from .timing import measure_ceilings

        if self._ceilings is None:
            self._ceilings = measure_ceilings(self.timer())
        return self._ceilings

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()


def _skip_unless_runnable(session: Session, spec: ItemSpec, *, gpu_only: bool = False) -> str:
    """Skip with the requirement's reason where the kernel cannot run; return the device."""
    platform = session.platform
    if gpu_only and not platform.is_gpu:
        pytest.skip("benchmarks need a CUDA GPU; this machine has none (Triton interpreter only)")
    kernel = session.registry.kernel(spec.name)
    reasons = unmet_requirements(kernel, platform)
    if reasons:
        pytest.skip(f"{kernel.name}: " + "; ".join(reasons))
    if not platform.is_gpu and not interpreter_active():
        pytest.skip("no GPU and TRITON_INTERPRET is not set, so the interpreter is not active in this process")
    return "cuda" if platform.is_gpu else "cpu"


def run_correctness(session: Session, spec: ItemSpec, item_id: str) -> None:
    device = _skip_unless_runnable(session, spec)
    kernel = session.registry.kernel(spec.name)
    assert spec.case is not None
    seed = harness.seed_for(item_id, session.base_seed)
    result = harness.run_check(
        session.registry, kernel, spec.case, spec.dtype, spec.config, seed=seed, device=device, deadline_s=session.deadline_s
    )
    if result.comparison is not None and not result.comparison.ok:
        pytest.fail(result.comparison.report(result.context), pytrace=False)


def run_compile(session: Session, spec: ItemSpec, item_id: str) -> None:
    from .aot_worker import compile_request

    request = {"item": item_id, "kernel": spec.name, "arch": spec.arch, "dtype": spec.dtype, "config": spec.config}
    if interpreter_active():
        check = session.worker().compile(request, timeout_s=session.deadline_s)
    else:
        from .aot import TargetCheck

        check = TargetCheck(**compile_request(session.registry, request, session.save_asm)["check"])
    if not check.ok:
        lines = [f"{spec.name} compiled for {spec.arch} but its code lacks what the kernel relies on:"]
        lines += [f"  PTX has no match for /{p}/" for p in check.missing_ptx]
        lines += [f"  SASS has no match for /{p}/" for p in check.missing_sass]
        lines.append(f"  resources: {check.resources}")
        pytest.fail("\n".join(lines), pytrace=False)


def run_bench(session: Session, spec: ItemSpec, benchmark: Any, clock: Any) -> None:
    """Time one kernel (or the op's peer) with device events; report throughput, the fraction of
    the ceiling measured this session, and the speed-up over the peer timed the same way.
    ``clock`` is the item's DeviceClock, which pytest-benchmark reads as its timer."""
    registry = session.registry
    op = registry.op(spec.op)
    assert spec.case is not None
    if spec.kind == "bench":
        _skip_unless_runnable(session, spec, gpu_only=True)
    elif not session.platform.is_gpu:
        pytest.skip("benchmarks need a CUDA GPU; this machine has none (Triton interpreter only)")
    import torch

    seed = harness.seed_for(spec.id, session.base_seed)
    inputs = harness.make_inputs(op, spec.case, spec.dtype, seed, "cuda")
    out = harness.poisoned_output(op, inputs)
    if spec.kind == "peer":
        peer = refs.resolve(op.peer)

        def call() -> None:
            peer(*inputs, out=out)
    else:
        kernel = registry.kernel(spec.name)
        rejected = input_constraint_reasons(kernel, inputs, spec.config or None)
        if rejected:
            pytest.skip(f"{kernel.name} cannot take these inputs: " + "; ".join(rejected))
        launcher = kernel.load()
        params = harness.resolve_config(registry, spec.config)

        def call() -> None:
            launcher(*inputs, out=out, **params)

    timer = session.timer()
    ceilings = session.ceilings()
    harness.wait("cuda", session.deadline_s, spec.id)
    estimate = timer.warmup(call)
    read = timer.queue(call, timer.reps_for(estimate))
    harness.wait("cuda", session.deadline_s, spec.id)  # a hung kernel fails here, not in a sync
    times_ms = read()
    replay = iter(times_ms)

    def measured() -> None:
        # pytest-benchmark's statistics are those of the device times just measured.
        clock.advance(next(replay))

    benchmark.pedantic(measured, rounds=len(times_ms), warmup_rounds=0, iterations=1)
    torch.cuda.synchronize()
    median_ms = statistics.median(times_ms)
    cost = op.cost_of(spec.case, spec.dtype)
    info: dict[str, Any] = {
        "device": ceilings.device,
        "op": op.name,
        "kernel": spec.name,
        "case": spec.case.id,
        "dtype": spec.dtype,
        "config": {k: (v if not hasattr(v, "name") else v.name) for k, v in spec.config.items()},
        "median_ms": median_ms,
        "reps": len(times_ms),
        "bytes": cost.bytes,
        "flops": cost.flops,
        "timing": "CUDA events around each repetition, L2 flushed and GPU held before each, queued back to back; median",
        "host_us": timer.host_ms * 1e3,  # the launcher's Python work per call, outside the figure
    }
    if op.bound == "memory":
        rate = cost.bytes / (median_ms / 1e3)
        info.update(gbps=rate / 1e9, ceiling="device copy (read+write)", ceiling_gbps=ceilings.copy_bytes_per_s / 1e9)
    else:
        rate = cost.flops / (median_ms / 1e3)
        info.update(tflops=rate / 1e12, ceiling="cuBLAS bf16 8192^3", ceiling_tflops=ceilings.matmul_flops_per_s / 1e12)
    info["fraction_of_ceiling"] = rate / ceilings.for_bound(op.bound)
    key = (op.name, spec.case.id, spec.dtype)
    if spec.kind == "peer":
        session.peer_ms[key] = median_ms
    elif key in session.peer_ms:
        info.update(peer=op.peer_name, peer_median_ms=session.peer_ms[key], speedup_vs_peer=session.peer_ms[key] / median_ms)
    benchmark.extra_info.update(info)
    session.results.append(info)


def bench_table(results: list[dict[str, Any]]) -> str:
    """Markdown table of this session's benchmark results."""
    if not results:
        return ""
    lines = [
        "| op | kernel | case | dtype | median (us) | throughput | of ceiling | vs peer |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        rate = f"{r['gbps']:.0f} GB/s" if "gbps" in r else f"{r['tflops']:.0f} TFLOP/s"
        peer = "(peer)" if r["kernel"].startswith("peer-") else "-"
        speed = f"{r['speedup_vs_peer']:.2f}x" if "speedup_vs_peer" in r else peer
        config = ",".join(f"{k}={v}" for k, v in r["config"].items())
        kernel = f"{r['kernel']} {config}".strip()
        lines.append(
            f"| {r['op']} | {kernel} | {r['case']} | {dtypes.short(r['dtype'])} | {r['median_ms'] * 1e3:.1f} | {rate} "
            f"| {r['fraction_of_ceiling'] * 100:.0f}% | {speed} |"
        )
    return "\n".join(lines)
