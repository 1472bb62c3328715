"""Runner processes for the generated items: crashes and hangs stay in the process that had them.

The pytest process plans every tkreg item's job in run order; the pool starts jobs ahead of the
item that pytest is running (up to a bounded number per lane), on runner processes of the right
flavor, and hands each item its outcome when pytest gets to it. So items report in order, under
their own ids, while several run at once.

- Lanes: "kernel" runners run correctness and benchmark jobs (one per GPU slot, pinned to that
  GPU with CUDA_VISIBLE_DEVICES; or under the interpreter without a GPU); "compile" runners run
  compile jobs (no interpreter, no GPU).
- A benchmark job has its GPU to itself: it starts only once no other job runs there, and no job
  starts there until it has finished. Benchmarks of one (op, case, dtype) go to one GPU, so a
  kernel and its peer are timed on the same device.
- A job that outlives its time-out has its runner killed (SIGKILL to the process group, never
  waited for) and fails with "did not finish within N s". A runner that dies fails the job it was
  running, with its exit status and the tail of its log. A runner that reports its CUDA context
  broken exits after answering. Either way the slot starts a fresh process for its next job.

- One compile per kernel variant: a job whose variant (kernel, config, dtype, layout; set where
  the jobs compile kernels, on a GPU) has not run yet starts alone; the variant's other jobs wait
  until it has finished, then find the compiled kernel in triton's on-disk cache instead of
  compiling it again in every runner at once (runners meet a new variant together, since items
  of one variant are next to each other in run order).

:func:`assign` decides which pending job starts on which slot; it is pure, so the scheduling
rules are tested without processes.
"""

from __future__ import annotations

import os
import select
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .jobs import Job, Outcome
from .runner_process import Flavor, RunnerProcess

STARTUP_TIMEOUT_S = 180.0  # importing torch and triton and loading plugins, on a loaded machine
STARTUP_FAILURES_BEFORE_GIVING_UP = 3  # in a row, per flavor: then its jobs fail at once
CLOSE_GRACE_S = 2.0
POLL_S = 0.5
PROGRESS_EVERY_S = 15.0


class Runner(Protocol):
    """What the pool needs of a runner process (RunnerProcess, or a fake in tests)."""

    fd: int
    eof: bool

    def send(self, message: Any) -> bool: ...
    def receive(self) -> list[Any]: ...
    def log_size(self) -> int: ...
    def log_since(self, offset: int) -> str: ...
    def exit_status(self, wait_s: float = ...) -> str: ...
    def kill(self) -> None: ...
    def close(self, grace_s: float) -> None: ...
    def reap(self) -> bool: ...


@dataclass
class Task:
    job: Job
    position: int  # order in which pytest will ask for it
    device: str | None = None  # the GPU a benchmark must run on; None: any slot of its lane
    variant: str | None = None  # the compiled kernel it needs, where jobs compile; None: no gating
    outcome: Outcome | None = None
    where: str = ""
    started: bool = False

    @property
    def lane(self) -> str:
        return self.job.lane


@dataclass
class Slot:
    lane: str
    flavor: Flavor
    runner: Runner | None = None
    state: str = "empty"  # empty, starting, idle, busy
    task: Task | None = None
    spawned_at: float = 0.0
    started_at: float = 0.0
    log_offset: int = 0

    @property
    def device(self) -> str | None:
        return self.flavor.gpu

    @property
    def free(self) -> bool:
        return self.state in ("empty", "idle")


def assign(
    pending: Sequence[Task],
    slots: Sequence[Slot],
    capacity: dict[str, int],
    head: Task | None,
    compiling: Collection[str] = (),
    settled: Collection[str] = (),
) -> list[tuple[Task, Slot]]:
    """Which pending tasks start now, and where. ``pending`` is in run order; ``capacity`` is how
    many more tasks each lane may start ahead of pytest (``head``, the task pytest waits for,
    starts regardless, or no run could progress). ``compiling``: variants whose first job is
    running (their other jobs wait, the head included: that first job will finish);
    ``settled``: variants a job has finished (their jobs start freely)."""
    reserved = {s.device for s in slots if s.state in ("busy", "starting") and s.task is not None and s.task.job.exclusive}
    busy_devices = {s.device for s in slots if s.state in ("busy", "starting")}
    taken: set[int] = set()
    room = dict(capacity)
    starts: list[tuple[Task, Slot]] = []
    free_slots = sum(1 for s in slots if s.free)
    head_pending = head is not None and not head.started and head.outcome is None
    gated = set(compiling)

    def pick(candidates: Iterable[int]) -> int | None:
        # Prefer a runner that is already up, then the device with the fewest jobs running.
        ranked = sorted(
            candidates,
            key=lambda i: (
                slots[i].state != "idle",
                sum(1 for s in slots if s.device == slots[i].device and s.state in ("busy", "starting")),
            ),
        )
        return ranked[0] if ranked else None

    for task in pending:
        # Nothing more can start: every slot taken, or every lane's look-ahead used and the task
        # pytest waits for already considered (the queue is long; this runs on every wait).
        if len(taken) == free_slots or (not head_pending and all(r <= 0 for r in room.values())):
            break
        if task is head:
            head_pending = False
        elif room.get(task.lane, 0) <= 0:
            continue
        if task.variant is not None and task.variant in gated:
            continue
        free = [i for i, s in enumerate(slots) if s.lane == task.lane and s.free and i not in taken]
        if task.job.exclusive:
            device = task.device
            if device in reserved:
                continue
            reserved.add(device)  # first in line for this GPU: nothing else starts there before it
            if device in busy_devices:
                continue
            chosen = pick(i for i in free if slots[i].device == device)
        else:
            chosen = pick(i for i in free if slots[i].device not in reserved)
        if chosen is None:
            continue
        taken.add(chosen)
        if task.variant is not None and task.variant not in settled:
            gated.add(task.variant)  # the variant's first job: the others wait for its compile
        busy_devices.add(slots[chosen].device)
        room[task.lane] = room.get(task.lane, 0) - 1
        starts.append((task, slots[chosen]))
    return starts


@dataclass
class PoolSettings:
    kernel_flavors: list[Flavor]  # one entry per kernel slot
    compile_flavors: list[Flavor]
    plugin_files: list[tuple[str, str]]
    lookahead: int  # tasks each lane may start ahead of the one pytest waits for
    log_dir: str | None = None
    spawn: Callable[[Flavor, dict[str, Any], str], Runner] | None = None  # tests swap in fakes
    on_progress: Callable[[str], None] | None = None
    prepare: Callable[[Job, Flavor], Job] | None = None  # last touches to a job as it is sent
    extra: dict[str, Any] = field(default_factory=dict)


class RunnerPool:
    def __init__(self, settings: PoolSettings) -> None:
        self.settings = settings
        self.slots = [Slot("kernel", f) for f in settings.kernel_flavors] + [Slot("compile", f) for f in settings.compile_flavors]
        self._tasks: dict[str, Task] = {}
        self._unconsumed: Counter[str] = Counter()  # started tasks per lane pytest has not taken yet
        self._order: list[Task] = []  # not yet started, in run order
        self._dying: list[Runner] = []
        self._startup_failures: dict[Flavor, int] = {}
        self._broken: dict[Flavor, str] = {}
        self.log_dir = settings.log_dir or tempfile.mkdtemp(prefix="tkreg-runners-")
        self._spawned = 0
        self._compiling: dict[str, Task] = {}  # variant -> its first job, running
        self._settled: set[str] = set()  # variants a job has finished
        self._last_progress = time.monotonic()
        self.done_count = 0

    # -- planning -------------------------------------------------------------------------
    def plan(self, tasks: Iterable[Task]) -> None:
        """Queue jobs in the order pytest will ask for them, so they can start early."""
        for task in tasks:
            self._tasks[task.job.item_id] = task
            self._order.append(task)
        self._order.sort(key=lambda t: t.position)

    def result(self, job: Job, device: str | None = None) -> Outcome:
        """The outcome of ``job`` (started now if it was not planned), waiting as long as it runs."""
        task = self._tasks.get(job.item_id)
        if task is None:
            task = Task(job, position=-1, device=device)
            self._tasks[job.item_id] = task
            self._order.insert(0, task)
        try:
            while task.outcome is None:
                self._pump(head=task)
                self._wait(POLL_S)
        except BaseException:
            # Interrupted while waiting (Ctrl-C, a backstop time-out): the job cannot be trusted.
            self._abandon(task)
            raise
        self._forget(task)
        self.done_count += 1
        return task.outcome

    def _forget(self, task: Task) -> None:
        """pytest has taken the task's outcome (or given up on it)."""
        self._tasks.pop(task.job.item_id, None)
        if task.started:
            self._unconsumed[task.lane] -= 1

    # -- the loop --------------------------------------------------------------------------
    def _capacity(self) -> dict[str, int]:
        """How many more tasks each lane may start: the look-ahead less those started and not yet
        handed to pytest."""
        return {lane: self.settings.lookahead - self._unconsumed[lane] for lane in ("kernel", "compile")}

    def _pump(self, head: Task) -> None:
        if self._broken:
            for task in [t for t in self._order if self._cannot_start(t)]:
                self._order.remove(task)
                task.outcome = Outcome("crashed", self._broken[self._flavors_for(task)[0]])
        for variant, first in list(self._compiling.items()):
            if first.outcome is not None:
                del self._compiling[variant]
                self._settled.add(variant)
        for task, slot in assign(self._order, self.slots, self._capacity(), head, self._compiling, self._settled):
            self._order.remove(task)
            if task.variant is not None and task.variant not in self._settled:
                self._compiling[task.variant] = task
            self._start(task, slot)

    def _flavors_for(self, task: Task) -> list[Flavor]:
        return [s.flavor for s in self.slots if s.lane == task.lane and (task.device is None or s.device == task.device)]

    def _cannot_start(self, task: Task) -> bool:
        """Every runner flavor that could take the task has failed to start too often."""
        flavors = self._flavors_for(task)
        return bool(flavors) and all(f in self._broken for f in flavors)

    def _start(self, task: Task, slot: Slot) -> None:
        task.started = True
        self._unconsumed[task.lane] += 1
        slot.task = task
        task.where = slot.flavor.describe()
        if slot.state == "idle":
            self._send(slot)
            return
        self._spawned += 1
        log = os.path.join(self.log_dir, f"runner-{self._spawned}.log")
        settings = {"plugin_files": self.settings.plugin_files, "gpu": slot.flavor.gpu is not None, **self.settings.extra}
        spawn = self.settings.spawn or RunnerProcess
        slot.runner = spawn(slot.flavor, settings, log)
        slot.state = "starting"
        slot.spawned_at = time.monotonic()

    def _send(self, slot: Slot) -> None:
        assert slot.runner is not None and slot.task is not None
        slot.log_offset = slot.runner.log_size()
        slot.started_at = time.monotonic()
        slot.state = "busy"
        job = slot.task.job
        if self.settings.prepare is not None:
            job = self.settings.prepare(job, slot.flavor)
        if not slot.runner.send(job):
            self._runner_gone(slot)

    def _wait(self, timeout: float) -> None:
        self._report_progress()  # before reading: a job that just finished is still named as running
        live = {s.runner.fd: s for s in self.slots if s.runner is not None and s.state in ("starting", "busy", "idle")}
        if live:
            readable, _, _ = select.select(list(live), [], [], timeout)
            for fd in readable:
                self._read(live[fd])
        else:
            time.sleep(min(timeout, 0.05))
        self._enforce_deadlines()
        self._reap()

    def _read(self, slot: Slot) -> None:
        assert slot.runner is not None
        for kind, payload in slot.runner.receive():
            if kind == "ready":
                self._startup_failures.pop(slot.flavor, None)
                slot.state = "idle"
                if slot.task is not None:
                    self._send(slot)
            elif kind == "outcome" and slot.task is not None:
                self._finish(slot, payload)
                if payload.fatal:
                    self._retire(slot, kill=False)
        if slot.runner is not None and slot.runner.eof:
            self._runner_gone(slot)

    def _finish(self, slot: Slot, outcome: Outcome) -> None:
        task = slot.task
        assert task is not None and slot.runner is not None
        if outcome.status not in ("passed", "skipped"):
            log = slot.runner.log_since(slot.log_offset)
            outcome.data["log"] = log
        outcome.data["where"] = task.where
        task.outcome = outcome
        slot.task = None
        slot.state = "idle"

    def _runner_gone(self, slot: Slot) -> None:
        runner = slot.runner
        assert runner is not None
        status = runner.exit_status()
        log = runner.log_since(slot.log_offset if slot.state == "busy" else 0)
        if slot.task is not None:
            if slot.state == "starting":
                why = f"the runner process ({slot.flavor.describe()}) {status} before it was ready"
                self._note_startup_failure(slot.flavor, why, log)
            else:
                why = f"the runner process running it ({slot.flavor.describe()}) {status}"
            slot.task.outcome = Outcome("crashed", why, data={"log": log, "where": slot.task.where})
            slot.task = None
        self._retire(slot, kill=False)

    def _note_startup_failure(self, flavor: Flavor, why: str, log: str) -> None:
        count = self._startup_failures.get(flavor, 0) + 1
        self._startup_failures[flavor] = count
        if count >= STARTUP_FAILURES_BEFORE_GIVING_UP:
            self._broken[flavor] = f"{why} ({count} times in a row, so no more are started); its log:\n{log}"

    def _enforce_deadlines(self) -> None:
        now = time.monotonic()
        for slot in self.slots:
            task = slot.task
            if task is None or slot.runner is None:
                continue
            if slot.state == "busy" and now - slot.started_at > task.job.timeout_s:
                log = slot.runner.log_since(slot.log_offset)
                why = (
                    f"did not finish within {task.job.timeout_s:g} s; its runner process ({slot.flavor.describe()}) "
                    "was killed and replaced"
                )
                task.outcome = Outcome("timeout", why, data={"log": log, "where": task.where})
                slot.task = None
                self._retire(slot, kill=True)
            elif slot.state == "starting" and now - slot.spawned_at > STARTUP_TIMEOUT_S:
                log = slot.runner.log_since(0)
                why = f"the runner process ({slot.flavor.describe()}) did not start within {STARTUP_TIMEOUT_S:g} s"
                self._note_startup_failure(slot.flavor, why, log)
                task.outcome = Outcome("crashed", why, data={"log": log, "where": task.where})
                slot.task = None
                self._retire(slot, kill=True)

    def _retire(self, slot: Slot, *, kill: bool) -> None:
        if slot.runner is not None:
            if kill:
                slot.runner.kill()
            self._dying.append(slot.runner)
        slot.runner = None
        slot.state = "empty"

    def _reap(self) -> None:
        self._dying = [r for r in self._dying if not r.reap()]

    def _abandon(self, task: Task) -> None:
        if task.variant is not None and self._compiling.get(task.variant) is task:
            del self._compiling[task.variant]  # given up on: it no longer holds the others back
            self._settled.add(task.variant)
        for slot in self.slots:
            if slot.task is task:
                slot.task = None
                self._retire(slot, kill=True)
        self._forget(task)
        if task in self._order:
            self._order.remove(task)

    def _report_progress(self) -> None:
        now = time.monotonic()
        if self.settings.on_progress is None or now - self._last_progress < PROGRESS_EVERY_S:
            return
        self._last_progress = now
        running = sorted(
            ((now - s.started_at, s.task) for s in self.slots if s.state == "busy" and s.task is not None),
            key=lambda pair: -pair[0],
        )
        shown = ", ".join(f"{t.job.item_id.split('::')[-1]} on {t.where} ({age:.0f} s)" for age, t in running[:4])
        more = f" and {len(running) - 4} more" if len(running) > 4 else ""
        starting = sum(1 for s in self.slots if s.state == "starting")
        if starting:
            more += f"; {starting} runner process{'es' if starting > 1 else ''} starting"
        total = self.done_count + len(self._tasks)
        self.settings.on_progress(f"tkreg: {self.done_count} of {total} jobs done; running: {shown or 'nothing'}{more}")

    def close(self, keep_logs: bool = False) -> None:
        """End every runner: idle ones get end-of-input, busy ones are killed. Does not wait
        longer than CLOSE_GRACE_S in all. Then deletes the runners' logs, unless ``keep_logs``
        (an item failed: its log tells why) or the caller chose the directory."""
        deadline = time.monotonic() + CLOSE_GRACE_S
        for slot in self.slots:
            if slot.runner is None:
                continue
            if slot.state in ("busy", "starting"):
                slot.runner.kill()
            else:
                slot.runner.close(max(0.0, deadline - time.monotonic()))
            self._dying.append(slot.runner)
            slot.runner = None
            slot.state = "empty"
        for runner in self._dying:
            runner.kill()
            runner.reap()
        self._dying = []
        if not keep_logs and self.settings.log_dir is None:
            shutil.rmtree(self.log_dir, ignore_errors=True)
