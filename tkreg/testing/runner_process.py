"""A runner: a child Python process that executes jobs (tkreg.testing.jobs) for the pytest process.

The child is started with ``python -m tkreg.testing.runner_process SETTINGS`` in a session of its own,
with its environment already set (the interpreter switch, the GPU it is pinned to), and loads
the same plugins as the pytest process. Messages are pickled frames: the parent writes jobs to
the child's stdin; the child answers on the stdout it had at start (later writes to fd 1 go to its
log, so a kernel that prints cannot corrupt the channel). Its stderr is a log file: on a crash the
parent reports the log's tail, where faulthandler has written the Python stack.

The child exits when its stdin closes, when the parent disappears, or after a job left it unable
to go on (an outcome with ``fatal``). The parent never waits for a child it gave up on: it kills
the whole process group with SIGKILL, which blocked signals cannot stop.
"""

from __future__ import annotations

import faulthandler
import io
import json
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, BinaryIO

HEADER = struct.Struct("!Q")  # frame length
# What a GPU runner's caching allocator may keep reserved between jobs; beyond it the cache goes
# back to the driver. A dozen runners share a GPU with the one that runs benchmarks, whose inputs
# (2 GiB and more) must still fit: on an H100 the runners each kept 3.5-6 GiB and the benchmark
# runner 23 GiB it no longer used, and a 2 GiB allocation failed (2026-11-26, make run).
RESERVE_KEPT_BYTES = 1 << 30
PARENT_CHECK_S = 1.0  # how often a child checks that its parent is alive
LOG_TAIL_CHARS = 4000
JOB_MARK = "--- tkreg runner"  # the line a child writes to its log as it starts each job


def write_frame(stream: BinaryIO, message: Any) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(HEADER.pack(len(payload)) + payload)
    stream.flush()


def read_frame(stream: BinaryIO) -> Any:
    """The next message, or None at end of stream."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (size,) = HEADER.unpack(header)
    payload = stream.read(size)
    if len(payload) < size:
        return None
    return pickle.loads(payload)


class FrameBuffer:
    """Frames from a non-blocking pipe, read as bytes arrive."""

    def __init__(self) -> None:
        self._data = bytearray()

    def feed(self, chunk: bytes) -> list[Any]:
        self._data += chunk
        messages = []
        while len(self._data) >= HEADER.size:
            (size,) = HEADER.unpack_from(self._data)
            if len(self._data) < HEADER.size + size:
                break
            payload = bytes(self._data[HEADER.size : HEADER.size + size])
            del self._data[: HEADER.size + size]
            messages.append(pickle.loads(payload))
        return messages


@dataclass(frozen=True)
class Flavor:
    """What kind of runner: pinned to a GPU (its index in the parent's visible list), running the
    Triton interpreter, or neither (compiles)."""

    gpu: str | None  # the CUDA_VISIBLE_DEVICES entry it is pinned to; None: no GPU
    interpret: bool

    def describe(self) -> str:
        if self.gpu is not None:
            return f"GPU {self.gpu}"
        return "the Triton interpreter" if self.interpret else "no GPU (compiles)"

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        env = {k: v for k, v in base.items() if k != "TRITON_INTERPRET"}
        if self.interpret:
            env["TRITON_INTERPRET"] = "1"
        # A compile runner sees no GPU at all, so it never takes one away from a benchmark.
        env["CUDA_VISIBLE_DEVICES"] = self.gpu if self.gpu is not None else ""
        env["PYTHONUNBUFFERED"] = "1"
        return env


class RunnerProcess:
    """The parent's handle on one child."""

    def __init__(self, flavor: Flavor, settings: dict[str, Any], log_path: str) -> None:
        self.flavor = flavor
        self.log_path = log_path
        self._log = open(log_path, "ab")  # the child writes it for its whole life
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tkreg.testing.runner_process", json.dumps(settings)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=flavor.environment(dict(os.environ)),
            start_new_session=True,  # its own process group: one kill reaches anything it started
        )
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        self._frames = FrameBuffer()
        self.eof = False

    @property
    def fd(self) -> int:
        assert self.proc.stdout is not None
        return self.proc.stdout.fileno()

    def send(self, message: Any) -> bool:
        """False when the child is gone (its stdin is closed)."""
        assert self.proc.stdin is not None
        try:
            write_frame(self.proc.stdin, message)  # type: ignore[arg-type]
        except (BrokenPipeError, OSError):
            return False
        return True

    def receive(self) -> list[Any]:
        """Messages that have arrived (call when the fd is readable); sets ``eof`` when the child
        closed its end (it exited or died)."""
        assert self.proc.stdout is not None
        messages: list[Any] = []
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return messages
            if not chunk:
                self.eof = True
                return messages
            messages.extend(self._frames.feed(chunk))

    def log_size(self) -> int:
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def log_since(self, offset: int) -> str:
        """What the child wrote to its log since ``offset`` (the tail, if long)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        text = "".join(line for line in text.splitlines(keepends=True) if not line.startswith(JOB_MARK))
        return text if len(text) <= LOG_TAIL_CHARS else "...\n" + text[-LOG_TAIL_CHARS:]

    def exit_status(self, wait_s: float = 2.0) -> str:
        """How the child ended, in words (it has closed its output, so it is exiting)."""
        try:
            code = self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return "closed its output but has not exited"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"killed by {name}"
        return f"exited with code {code}"

    def kill(self) -> None:
        """SIGKILL to the child's process group; never waits."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.close_pipes()

    def close(self, grace_s: float) -> None:
        """Ask the child to exit (end of its input), then kill it if it has not within grace_s."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.kill()
        self.close_pipes()

    def close_pipes(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        self._log.close()

    def reap(self) -> bool:
        """True once the child has exited (collects it, so no zombie is left)."""
        if self.proc.poll() is None:
            return False
        self.close_pipes()
        return True


# -- the child --------------------------------------------------------------------------------


def _exit_when_orphaned(parent: int) -> None:
    while True:
        time.sleep(PARENT_CHECK_S)
        if os.getppid() != parent:
            os._exit(3)


def _channel() -> tuple[BinaryIO, BinaryIO]:
    """The protocol's streams; fd 1 then points at the log (stderr) for anything else."""
    out = io.FileIO(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return sys.stdin.buffer, out  # type: ignore[return-value]


def serve(settings: dict[str, Any]) -> None:
    faulthandler.enable(file=sys.stderr, all_threads=False)
    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), daemon=True).start()
    requests, answers = _channel()

    from ..core.loading import build_registry, plugins_from_files
    from .jobs import Context, execute

    registry = build_registry(plugins=plugins_from_files(settings["plugin_files"]))
    gpu = bool(settings["gpu"])
    import torch

    # Runners share the machine's cores: without a limit each would use all of them for the
    # float64 references and the interpreter's numpy work.
    torch.set_num_threads(int(settings.get("threads", 1)))
    if gpu:
        torch.cuda.init()  # pay for the context before the first job's clock starts
    context = Context(registry, gpu, settings.get("bench_ms"))
    write_frame(answers, ("ready", {"pid": os.getpid()}))
    while True:
        message = read_frame(requests)
        if message is None:
            return
        job = message
        sys.stderr.write(f"{JOB_MARK} {os.getpid()}: {job.item_id}\n")
        sys.stderr.flush()
        began = time.perf_counter()
        outcome = execute(job, context)
        outcome.data["seconds"] = time.perf_counter() - began
        if gpu and not outcome.fatal:
            release_cached_memory(torch.cuda)
        write_frame(answers, ("outcome", outcome))
        if outcome.fatal:
            sys.stderr.flush()
            os._exit(0)  # torch's exit handlers would touch the broken context


def release_cached_memory(cuda: Any) -> bool:
    """Return the caching allocator's cache to the driver where it holds more than
    RESERVE_KEPT_BYTES (the GPU is shared with the other runners); True where it did."""
    if cuda.memory_reserved() <= RESERVE_KEPT_BYTES:
        return False
    cuda.empty_cache()
    return True


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]))
