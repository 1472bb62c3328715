"""What each generated item does in the pytest process: decide whether it can run here, hand its
job to a runner process (tkreg.testing.pool) and turn the outcome into the item's result.

Shared state for a session (the registry, the runner pool, ceilings and peer timings per GPU, the
benchmark results) lives in :class:`Session`, kept in pytest's stash. The pytest process itself
never touches a GPU: a crash, a hang or a broken CUDA context stays in a runner.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from ..core import dtypes
from ..core.platform import Platform, current, interpreter_blocker, visible_gpus
from ..core.registry import Registry, unmet_requirements
from ..core.specs import config_id
from ..launch.inputs import interpreter_active
from . import harness
from .generation import ItemSpec
from .jobs import Context, Job, Outcome, execute
from .pool import PoolSettings, RunnerPool, Task
from .runner_process import Flavor

# Runners per GPU for correctness: their work is mostly on the CPU (input generation, JIT
# compiles, Python), so up to three quarters of the cores (the compile runners take the rest).
MAX_KERNEL_RUNNERS_PER_GPU = 12
KERNEL_RUNNER_CORE_SHARE = 0.75
MAX_COMPILE_RUNNERS = 4
LOOKAHEAD_PER_RUNNER = 3  # jobs a lane may start ahead of pytest, per runner in it


@dataclass
class Session:
    registry: Registry
    base_seed: int
    deadline_s: float
    plugin_files: list[tuple[str, str]]
    save_asm: str | None
    full: bool = False
    in_process: bool = False  # no runner processes (no isolation): for debuggers
    workers: int = 0  # kernel runners per GPU (without a GPU: in all); 0 = from the machine
    prefetch: bool = True  # start jobs ahead of pytest (off in pytest-xdist workers)
    bench_log: str | None = None  # JSON lines, one per finished benchmark
    bench_ms: float = 100.0  # device time of each benchmark's measured repetitions
    on_progress: Callable[[str], None] | None = None
    peer_ms: dict[tuple[str, str, str, str], float] = field(default_factory=dict)
    ceilings_by_gpu: dict[str, Any] = field(default_factory=dict)
    results: list[dict[str, Any]] = field(default_factory=list)
    durations: list[tuple[float, str, str]] = field(default_factory=list)  # (seconds, item id, where) per job
    _pool: RunnerPool | None = None
    _context: Context | None = None
    _bench_gpu: dict[tuple[str, str, str], str] = field(default_factory=dict)

    @property
    def platform(self) -> Platform:
        return current()

    # -- where jobs run ---------------------------------------------------------------------
    def gpus(self) -> list[str]:
        return visible_gpus() if self.platform.is_gpu else []

    def pool(self) -> RunnerPool:
        if self._pool is None:
            self._pool = RunnerPool(self._pool_settings())
        return self._pool

    def _pool_settings(self) -> PoolSettings:
        cores = os.cpu_count() or 1
        gpus = self.gpus()
        if gpus:
            per_gpu = self.workers or max(1, min(MAX_KERNEL_RUNNERS_PER_GPU, int(cores * KERNEL_RUNNER_CORE_SHARE) // len(gpus)))
            kernel = [Flavor(g, interpret=False) for g in gpus for _ in range(per_gpu)]
        else:
            count = self.workers or (cores if self.prefetch else 1)
            kernel = [Flavor(None, interpret=True) for _ in range(count)]
        compile_count = max(1, min(MAX_COMPILE_RUNNERS, cores // 4)) if self.prefetch else 1
        compile_flavors = [Flavor(None, interpret=False) for _ in range(compile_count)]
        lookahead = LOOKAHEAD_PER_RUNNER * len(kernel) if self.prefetch else 0
        return PoolSettings(
            kernel_flavors=kernel,
            compile_flavors=compile_flavors,
            plugin_files=self.plugin_files,
            lookahead=lookahead,
            on_progress=self.on_progress,
            prepare=self._prepare,
            extra={"threads": max(1, cores // len(kernel)), "bench_ms": self.bench_ms},
        )

    def _prepare(self, job: Job, flavor: Flavor) -> Job:
        """Last touches before a job is sent: a benchmark reuses the ceilings measured on its GPU."""
        if job.exclusive and flavor.gpu in self.ceilings_by_gpu:
            return replace(job, ceilings=self.ceilings_by_gpu[flavor.gpu])
        return job

    def bench_gpu(self, spec: ItemSpec) -> str | None:
        """Benchmarks of one (op, case, dtype) share a GPU, so ratios to the peer compare timings
        from one device; the groups are dealt round the GPUs in run order."""
        gpus = self.gpus()
        if not gpus:
            return None
        key = (spec.op, spec.case.id if spec.case else "", spec.dtype)
        if key not in self._bench_gpu:
            self._bench_gpu[key] = gpus[len(self._bench_gpu) % len(gpus)]
        return self._bench_gpu[key]

    def variant(self, spec: ItemSpec) -> str | None:
        """The compiled kernel a correctness job needs, where it compiles one (on a GPU): jobs of
        one variant wait for the first to finish, then load it from triton's cache (tkreg.testing.pool).
        Shapes are left out (most cases of a kernel share its compiled variant); the case's
        variant (a layout, say) is kept, since it changes the kernel."""
        if spec.kind != "correctness" or not self.gpus():
            return None
        layout = spec.case.variant if spec.case is not None else ""
        return "|".join((spec.op, spec.name, spec.dtype, config_id(spec.config), layout))

    def job(self, spec: ItemSpec) -> Job:
        return Job(spec.id, spec, harness.seed_for(spec.id, self.base_seed), self.deadline_s, self.save_asm)

    def plan(self, specs: list[ItemSpec]) -> None:
        """Queue the jobs of the items pytest is about to run (in run order), so runners can start
        on them early. Items that will skip in this process get no job."""
        if self.in_process or not self.prefetch:
            return
        tasks = []
        for position, spec in enumerate(specs):
            if skip_reason(self, spec) is None:
                device = self.bench_gpu(spec) if spec.kind in ("bench", "peer") else None
                tasks.append(Task(self.job(spec), position, device, variant=self.variant(spec)))
        self.pool().plan(tasks)

    def outcome(self, spec: ItemSpec) -> Outcome:
        job = self.job(spec)
        if self.in_process:
            if self._context is None:
                self._context = Context(self.registry, self.platform.is_gpu, self.bench_ms)
            return execute(job, self._context)
        device = self.bench_gpu(spec) if spec.kind in ("bench", "peer") else None
        return self.pool().result(job, device)

    @property
    def runner_logs(self) -> str | None:
        """Where the runners of this session write their logs (None: no runner started)."""
        return self._pool.log_dir if self._pool is not None else None

    def close(self, keep_logs: bool = False) -> None:
        if self._pool is not None:
            self._pool.close(keep_logs)


def skip_reason(session: Session, spec: ItemSpec) -> str | None:
    """Why the item cannot run on this machine (None: it can)."""
    platform = session.platform
    if spec.kind in ("bench", "peer") and not platform.is_gpu:
        return "benchmarks need a CUDA GPU; this machine has none (Triton interpreter only)"
    if spec.kind == "peer":
        return None
    if spec.kind == "direct":  # torch's code on the GPU, else on the CPU
        return None
    if spec.kind == "autocast":  # the peer's own code: any machine with the device type runs it
        return None if spec.arch != "cuda" or platform.is_gpu else "autocast on CUDA needs a CUDA GPU; this machine has none"
    kernel = session.registry.kernel(spec.name)
    if spec.kind == "compile":
        return None if kernel.targets else f"{kernel.name} declares no compile targets"
    reasons = unmet_requirements(kernel, platform)
    if reasons:
        return f"{kernel.name}: " + "; ".join(reasons)
    if not platform.is_gpu and session.in_process and not interpreter_active():
        return "no GPU and TRITON_INTERPRET is not set, so the interpreter is not active in this process"
    if not platform.is_gpu:
        return interpreter_blocker()  # an environment the interpreter cannot run in: say so, once per item
    return None


def describe(spec: ItemSpec, seed: int) -> str:
    """The item in words: kernel, case, dtype, config and seed, for failure messages."""
    if spec.kind == "autocast":
        return f"op {spec.op}'s peer under torch.autocast({spec.arch!r}, {spec.dtype}), seed {seed}"
    if spec.kind == "direct":
        return f"op {spec.op}'s peer_direct against its peer on its default cases, seed {seed}"
    parts = [f"kernel {spec.name}"]
    if spec.case is not None:
        parts.append(f"case {spec.case.id}")
    if spec.arch:
        parts.append(f"arch {spec.arch}")
    parts += [f"dtype {spec.dtype}", f"config {spec.config or '{}'}"]
    if spec.params:
        parts.append(f"params {spec.params}")
    parts.append(f"seed {seed}")
    return ", ".join(parts)


def _settle(session: Session, spec: ItemSpec) -> Outcome:
    """Run the item's job and fail or skip the item unless it passed."""
    reason = skip_reason(session, spec)
    if reason is not None:
        pytest.skip(reason)
    outcome = session.outcome(spec)
    if "seconds" in outcome.data:
        session.durations.append((outcome.data["seconds"], spec.id, outcome.data.get("where", "")))
    if outcome.status == "passed":
        return outcome
    if outcome.status == "skipped":
        pytest.skip(outcome.message)
    seed = harness.seed_for(spec.id, session.base_seed)
    where = outcome.data.get("where", "")
    if outcome.status == "failed":
        text = outcome.message
    else:
        text = f"{spec.name}[{dtypes.short(spec.dtype)}] ({describe(spec, seed)}; ran on {where}): {outcome.message}"
    log = outcome.data.get("log", "").strip()
    if log and outcome.status in ("crashed", "timeout", "error"):
        text += f"\n--- the runner's log for this item ---\n{log}"
    pytest.fail(text, pytrace=False)


# Item kinds whose job's outcome is the whole item: it passes, fails or skips as its job did.
SETTLED_KINDS = ("correctness", "compile", "autocast", "direct")


def run_settled(session: Session, spec: ItemSpec) -> None:
    """An item of SETTLED_KINDS: a correctness check, a compile check, an autocast or a
    peer_direct check."""
    _settle(session, spec)


def run_bench(session: Session, spec: ItemSpec, benchmark: Any, clock: Any) -> None:
    """Report one benchmark: pytest-benchmark gets the device times the runner measured (through
    ``clock``, the item's DeviceClock), extra_info the throughput, the fraction of the ceiling
    measured on that GPU and the speed-up over the peer timed on the same GPU."""
    outcome = _settle(session, spec)
    data = outcome.data
    times_ms: list[float] = data["times_ms"]
    replay = iter(times_ms)

    def measured() -> None:
        clock.advance(next(replay))

    benchmark.pedantic(measured, rounds=len(times_ms), warmup_rounds=0, iterations=1)
    gpu = session.bench_gpu(spec) or ""
    ceilings = data["ceilings"]
    session.ceilings_by_gpu.setdefault(gpu, ceilings)
    info = bench_info(session.registry, spec, data, ceilings, gpu)
    key = (spec.op, spec.case.id if spec.case else "", spec.dtype, spec.mode, tuple(spec.params.items()), gpu)
    op = session.registry.op(spec.op)
    if spec.kind == "peer" and spec.name == f"peer-{op.peer_name}":
        session.peer_ms[key] = info["median_ms"]
    elif key in session.peer_ms:
        peer_ms = session.peer_ms[key]
        info.update(peer=op.peer_name, peer_median_ms=peer_ms, speedup_vs_peer=peer_ms / info["median_ms"])
    benchmark.extra_info.update(info)
    session.results.append(info)
    if session.bench_log:
        with open(session.bench_log, "a") as f:  # as each finishes, so a stopped run keeps them
            f.write(json.dumps(info) + "\n")


def bench_info(registry: Registry, spec: ItemSpec, data: dict[str, Any], ceilings: Any, gpu: str) -> dict[str, Any]:
    op = registry.op(spec.op)
    assert spec.case is not None
    median_ms = data["median_ms"]
    cost = bench_cost(op, spec)
    info: dict[str, Any] = {
        "device": ceilings.device,
        "gpu": gpu,  # the CUDA_VISIBLE_DEVICES entry of the GPU it ran on
        "op": op.name,
        "kernel": spec.name,
        "case": spec.case.id,
        "dtype": spec.dtype,
        "config": {k: (v if not hasattr(v, "name") else v.name) for k, v in spec.config.items()},
        "mode": spec.mode,
        "params": dict(spec.params),
        "median_ms": median_ms,
        "reps": len(data["times_ms"]),
        "bytes": cost.bytes if cost is not None else None,
        "flops": cost.flops if cost is not None else None,
        "wall_ms": data["wall_ms"],  # per call as a Python caller pays it, launcher included (do_bench's method)
        "timing": data["timing"],
        "host_us": data["host_us"],  # the launcher's Python work per call, outside the device time
    }
    for why in ("capture_error", "cupti_error"):  # why not a CUDA graph; why the events and not CUPTI
        if data.get(why):
            info[why] = data[why]
    if spec.forward:
        info["forward"] = spec.forward
    if cost is None:  # a backward without a declared cost model: times only
        return info
    if op.bound == "memory":
        rate = cost.bytes / (median_ms / 1e3)
        info.update(gbps=rate / 1e9, ceiling="device copy (read+write)", ceiling_gbps=ceilings.copy_bytes_per_s / 1e9)
    else:
        rate = cost.flops / (median_ms / 1e3)
        info.update(tflops=rate / 1e12, ceiling="cuBLAS bf16 8192^3", ceiling_tflops=ceilings.matmul_flops_per_s / 1e12)
    info["fraction_of_ceiling"] = rate / ceilings.for_bound(op.bound)
    return info


def bench_cost(op: Any, spec: ItemSpec) -> Any:
    """What the benchmark's call must move and compute: the forward's cost, the backward's, or
    their sum; None where a backward cost is needed and the op declares none."""
    assert spec.case is not None
    forward = op.cost_of(spec.case, spec.dtype)
    if spec.mode == "fwd":
        return forward
    backward = op.cost_of(spec.case, spec.dtype, backward=True)
    if backward is None or spec.mode == "bwd":
        return backward
    return type(forward)(forward.bytes + backward.bytes, forward.flops + backward.flops)


def bench_table(results: list[dict[str, Any]]) -> str:
    """Markdown table of this session's benchmark results."""
    if not results:
        return ""
    lines = [
        "| op | kernel | case | dtype | median (us) | throughput | of ceiling | vs peer |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        rate = f"{r['gbps']:.0f} GB/s" if "gbps" in r else f"{r['tflops']:.0f} TFLOP/s" if "tflops" in r else "-"
        share = f"{r['fraction_of_ceiling'] * 100:.0f}%" if "fraction_of_ceiling" in r else "-"
        peer = "(peer)" if r["kernel"].startswith("peer-") else "-"
        speed = f"{r['speedup_vs_peer']:.2f}x" if "speedup_vs_peer" in r else peer
        config = ",".join(f"{k}={v}" for k, v in r["config"].items())
        mode = "" if r.get("mode", "fwd") == "fwd" else f" ({r['mode']})"
        kernel = f"{r['kernel']}{mode} {config}".strip()
        lines.append(
            f"| {r['op']} | {kernel} | {r['case']} | {dtypes.short(r['dtype'])} | {r['median_ms'] * 1e3:.1f} | {rate} "
            f"| {share} | {speed} |"
        )
    return "\n".join(lines)
