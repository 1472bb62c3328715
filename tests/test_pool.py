"""The runner pool's scheduling rules (tkreg.testing.pool.assign) and the pool layout per machine, on
simulated GPU lists: no processes, no GPU."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tkreg.core.specs import case
from tkreg.testing import runners
from tkreg.testing.generation import ItemSpec
from tkreg.testing.jobs import Job
from tkreg.testing.pool import Slot, Task, assign
from tkreg.testing.runner_process import Flavor


def task(kind: str, position: int, device: str | None = None, op: str = "add") -> Task:
    spec = ItemSpec(kind, op, f"k{position}", "float32", case(M=4, N=4), arch="sm_90a" if kind == "compile" else None)
    return Task(Job(f"item{position}", spec, seed=position, timeout_s=10.0), position, device)


def slots(gpus: list[str], per_gpu: int, compile_slots: int = 1) -> list[Slot]:
    kernel = [Slot("kernel", Flavor(g, interpret=False)) for g in gpus for _ in range(per_gpu)]
    return kernel + [Slot("compile", Flavor(None, interpret=False)) for _ in range(compile_slots)]


def busy(slot: Slot, t: Task) -> None:
    slot.state, slot.task = "busy", t


ROOM = {"kernel": 100, "compile": 100}


def test_correctness_jobs_fill_every_gpu_and_compiles_go_to_compile_runners() -> None:
    pool = slots(["0", "1"], per_gpu=2)
    pending = [task("correctness", i) for i in range(5)] + [task("compile", 5)]
    starts = assign(pending, pool, ROOM, head=pending[0])
    placed = {t.position: s for t, s in starts}
    assert sorted(placed) == [0, 1, 2, 3, 5]  # four kernel runners, one compile runner
    assert sorted(s.device for p, s in placed.items() if p < 5) == ["0", "0", "1", "1"]
    assert placed[5].lane == "compile"


def test_a_benchmark_waits_until_its_gpu_is_idle_and_blocks_later_jobs_there() -> None:
    pool = slots(["0", "1"], per_gpu=2)
    busy(pool[0], task("correctness", 0))
    bench = task("bench", 1, device="0")
    later = [task("correctness", i) for i in (2, 3, 4)]
    starts = assign([bench, *later], pool, ROOM, head=bench)
    # GPU 0 is busy: the benchmark does not start, and nothing new starts on GPU 0 before it.
    assert bench not in [t for t, _ in starts]
    assert {s.device for _, s in starts} == {"1"}
    assert len(starts) == 2


def test_a_running_benchmark_has_its_gpu_to_itself() -> None:
    pool = slots(["0", "1"], per_gpu=3)
    busy(pool[0], task("bench", 0, device="0"))
    starts = assign([task("correctness", i) for i in (1, 2, 3, 4)], pool, ROOM, head=None)
    assert {s.device for _, s in starts} == {"1"}


def test_benchmarks_on_different_gpus_run_at_once() -> None:
    pool = slots(["0", "1"], per_gpu=2)
    benches = [task("bench", 0, device="0"), task("bench", 1, device="1"), task("bench", 2, device="0")]
    starts = assign(benches, pool, ROOM, head=benches[0])
    assert [(t.position, s.device) for t, s in starts] == [(0, "0"), (1, "1")]


def test_lookahead_is_bounded_per_lane_but_the_awaited_job_always_starts() -> None:
    pool = slots(["0"], per_gpu=4)
    pending = [task("correctness", i) for i in range(4)]
    assert len(assign(pending, pool, {"kernel": 2, "compile": 0}, head=pending[0])) == 2
    assert [t.position for t, _ in assign(pending, pool, {"kernel": 0, "compile": 0}, head=pending[0])] == [0]


def test_without_a_gpu_kernel_runners_use_the_interpreter() -> None:
    pool = [Slot("kernel", Flavor(None, interpret=True)) for _ in range(2)]
    pending = [task("correctness", i) for i in range(3)]
    assert len(assign(pending, pool, ROOM, head=pending[0])) == 2


def test_an_idle_runner_is_preferred_over_starting_a_new_one() -> None:
    pool = slots(["0"], per_gpu=3)
    pool[2].state = "idle"
    starts = assign([task("correctness", 0)], pool, ROOM, head=None)
    assert starts[0][1] is pool[2]


@pytest.fixture
def session_on(monkeypatch: pytest.MonkeyPatch):
    """A runners.Session on a simulated machine with the given GPU list and core count."""

    def make(gpus: list[str], cores: int = 16, workers: int = 0) -> runners.Session:
        from tkreg.core.platform import Platform
        from tkreg.core.registry import Registry

        monkeypatch.setattr(runners, "visible_gpus", lambda: list(gpus))
        monkeypatch.setattr(runners, "current", lambda: Platform.cuda("9.0") if gpus else Platform.interpreter())
        monkeypatch.setattr(runners.os, "cpu_count", lambda: cores)
        return runners.Session(Registry(), 0, 10.0, [], None, workers=workers)

    return make


def test_every_gpu_gets_runners_pinned_to_it(session_on) -> None:
    settings = session_on(["0", "1", "2", "3"], cores=64)._pool_settings()
    assert [f.gpu for f in settings.kernel_flavors].count("2") == 12  # three quarters of 64 cores, at most 12 per GPU
    assert {f.gpu for f in settings.kernel_flavors} == {"0", "1", "2", "3"}
    assert all(f.gpu is None and not f.interpret for f in settings.compile_flavors)
    # CUDA_VISIBLE_DEVICES entries as the parent sees them ("3,5" -> runners pinned to 3 and 5).
    settings = session_on(["3", "5"], cores=8, workers=2)._pool_settings()  # --tkreg-workers 2
    assert sorted(f.gpu for f in settings.kernel_flavors) == ["3", "3", "5", "5"]
    env = settings.kernel_flavors[0].environment({"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "3,5"})
    assert env["CUDA_VISIBLE_DEVICES"] == "3" and "TRITON_INTERPRET" not in env


def test_benchmark_groups_are_dealt_round_the_gpus_and_stay_together(session_on) -> None:
    session = session_on(["0", "1"])

    def bench(kernel: str, m: int) -> ItemSpec:
        return ItemSpec("bench", "add", kernel, "float32", case(M=m, N=4))

    assert session.bench_gpu(bench("peer-torch.add", 8)) == "0"
    assert session.bench_gpu(bench("add_tma", 8)) == "0"  # the same group as its peer
    assert session.bench_gpu(bench("peer-torch.add", 16)) == "1"
    assert session.bench_gpu(bench("add_tma", 32)) == "0"


def test_without_a_gpu_the_interpreter_runs_kernels_and_compiles_run_without_it(session_on) -> None:
    settings = session_on([], cores=2)._pool_settings()
    assert [f.interpret for f in settings.kernel_flavors] == [True, True]
    env = settings.compile_flavors[0].environment({"TRITON_INTERPRET": "1"})
    assert "TRITON_INTERPRET" not in env and env["CUDA_VISIBLE_DEVICES"] == ""


def variant_task(position: int, variant: str | None) -> Task:
    t = task("correctness", position)
    t.variant = variant
    return t


def test_a_variant_s_first_job_compiles_alone_and_the_rest_wait_for_it() -> None:
    pool = slots(["0"], per_gpu=4)
    pending = [variant_task(0, "A"), variant_task(1, "A"), variant_task(2, "B"), variant_task(3, "A"), variant_task(4, None)]
    starts = assign(pending, pool, ROOM, head=pending[0])
    # one job of A, one of B, and the job that compiles nothing; A's others wait
    assert [t.position for t, _ in starts] == [0, 2, 4]
    # while A's first job runs, its followers wait, the awaited one included
    busy(pool[0], pending[0])
    waiting = [pending[1], pending[3]]
    assert assign(waiting, pool, ROOM, head=pending[1], compiling={"A"}) == []
    # once it has finished, they start anywhere at once
    pool[0].state, pool[0].task = "idle", None
    assert [t.position for t, _ in assign(waiting, pool, ROOM, head=pending[1], settled={"A"})] == [1, 3]


def test_the_pool_lets_a_variant_s_jobs_go_once_its_first_job_has_an_outcome(tmp_path: Path) -> None:
    from tkreg.testing.jobs import Outcome
    from tkreg.testing.pool import PoolSettings, RunnerPool

    settings = PoolSettings(kernel_flavors=[Flavor("0", interpret=False)] * 3, compile_flavors=[], plugin_files=[],
                            lookahead=10, log_dir=str(tmp_path),  # the pool is never closed: no temp dir of its own
                            spawn=lambda flavor, settings, log: FakeRunner())  # fmt: skip
    rp = RunnerPool(settings)
    tasks = [variant_task(i, "A") for i in range(3)]
    rp.plan(tasks)
    rp._pump(head=tasks[0])
    assert [t.started for t in tasks] == [True, False, False]
    rp._pump(head=tasks[1])
    assert [t.started for t in tasks] == [True, False, False]  # the compile is still running
    tasks[0].outcome = Outcome("failed", "a crash counts too")
    rp._pump(head=tasks[1])
    assert [t.started for t in tasks] == [True, True, True]


class FakeRunner:
    fd = -1
    eof = False

    def send(self, message: object) -> bool:
        return True

    def receive(self) -> list:
        return []

    def log_size(self) -> int:
        return 0

    def log_since(self, offset: int) -> str:
        return ""

    def exit_status(self, wait_s: float = 0.0) -> str:
        return "exited 0"

    def kill(self) -> None:
        pass

    def close(self, grace_s: float) -> None:
        pass

    def reap(self) -> bool:
        return True


def test_correctness_jobs_on_a_gpu_name_their_variant_and_nothing_else_does(session_on) -> None:
    spec = ItemSpec("correctness", "matmul", "matmul_hopper_ws", "bfloat16", case(M=4, N=4, K=4, variant="weight"),
                    config={"BLOCK_M": 64})  # fmt: skip
    on_gpu = session_on(["0"])
    assert on_gpu.variant(spec) == on_gpu.variant(replace(spec, case=case(M=9, N=9, K=9, variant="weight")))
    assert on_gpu.variant(spec) != on_gpu.variant(replace(spec, case=case(M=4, N=4, K=4)))  # another layout
    assert on_gpu.variant(spec) != on_gpu.variant(replace(spec, dtype="float16"))
    assert on_gpu.variant(replace(spec, kind="bench")) is None
    assert session_on([]).variant(spec) is None  # the interpreter compiles nothing


def test_a_gpu_runner_gives_back_a_large_cache_between_jobs() -> None:
    from tkreg.testing.runner_process import RESERVE_KEPT_BYTES, release_cached_memory

    class Cuda:
        def __init__(self, reserved: int) -> None:
            self.reserved, self.emptied = reserved, 0

        def memory_reserved(self) -> int:
            return self.reserved

        def empty_cache(self) -> None:
            self.emptied += 1
            self.reserved = 0

    small, large = Cuda(RESERVE_KEPT_BYTES), Cuda(RESERVE_KEPT_BYTES + 1)
    assert not release_cached_memory(small) and small.emptied == 0  # a small cache stays: the next job reuses it
    assert release_cached_memory(large) and large.emptied == 1 and large.reserved == 0
