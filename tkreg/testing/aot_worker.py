"""Compile items in a separate process when this one runs kernels under the Triton interpreter.

``TRITON_INTERPRET=1`` makes ``@triton.jit`` produce interpreter functions at import, which cannot
be compiled; a process can therefore not both interpret a kernel module and compile it. The
worker is a child Python started without that variable, which loads the same plugins (entry
points, plus in-process plugin modules by file path) and answers compile requests, one JSON line
each way. It is started once and reused; if a request runs over its time limit the worker is
killed and the next request starts a fresh one.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
import traceback
from dataclasses import asdict
from typing import Any

from ..launch.aot import CompiledCode, compile_and_check
from .harness import resolve_config


class CompileFailed(RuntimeError):
    pass


def compile_request(registry: Any, request: dict[str, Any], save_dir: str | None) -> dict[str, Any]:
    """Compile one kernel/target/dtype/config and check its code. Runs in whichever process
    may compile (this one when no interpreter is active, else the worker)."""
    kernel = registry.kernel(request["kernel"])
    target = next(t for t in kernel.targets if t.arch == request["arch"])
    config = resolve_config(registry, request["config"])
    check, code = compile_and_check(kernel, target, request["dtype"], config)
    response: dict[str, Any] = {"ok": True, "check": asdict(check)}
    if request.get("want_code"):
        response["code"] = {
            "name": code.name,
            "ptx": code.ptx,
            "sass": code.sass,
            "resources": code.resources,
            "shared": code.shared,
        }
    if save_dir:
        os.makedirs(save_dir, exist_ok=True)
        stem = os.path.join(save_dir, request["item"].replace("/", "_"))
        for ext, text in (("ptx", code.ptx), ("sass", code.sass)):
            with open(f"{stem}.{ext}", "w") as f:
                f.write(text)
    return response


def serve() -> None:
    from ..core.loading import build_registry, plugins_from_files

    registry = build_registry(plugins=plugins_from_files(json.loads(sys.argv[1])))
    save_dir = sys.argv[2] or None
    for line in sys.stdin:
        request = json.loads(line)
        try:
            response = compile_request(registry, request, save_dir)
        except Exception:
            response = {"ok": False, "error": traceback.format_exc()}
        sys.stdout.write(json.dumps(response) + "\n")
        sys.stdout.flush()


class WorkerClient:
    """The test process's handle on the compile worker."""

    def __init__(self, plugin_files: list[tuple[str, str]], save_dir: str | None) -> None:
        self._args = [json.dumps(plugin_files), save_dir or ""]
        self._proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        return subprocess.Popen(
            [sys.executable, "-m", "tkreg.testing.aot_worker", *self._args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def request(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = self._start()
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        answer: list[str] = []
        reader = threading.Thread(target=lambda: answer.append(proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout_s)
        if reader.is_alive() or not answer or not answer[0]:
            proc.kill()
            self._proc = None
            why = f"did not finish within {timeout_s:.0f} s" if reader.is_alive() else "the compile worker died"
            raise CompileFailed(f"compiling {request['item']}: {why}")
        response = json.loads(answer[0])
        if not response["ok"]:
            raise CompileFailed(response["error"])
        return response

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._proc = None


_shared_worker: list[WorkerClient] = []


def compile_installed(kernel: str, arch: str, dtype: str, config: dict[str, Any], timeout_s: float = 600) -> CompiledCode:
    """Compile one kernel of the installed plugins for ``arch`` and return its code: in this
    process, or in a worker when this process runs the interpreter. For plugin tests, which
    must pass both in plain pytest and under ``pytest --tkreg`` on a CPU machine."""
    from ..launch.inputs import interpreter_active

    item = f"{kernel}-{arch}-{dtype}"
    request = {"item": item, "kernel": kernel, "arch": arch, "dtype": dtype, "config": config, "want_code": True}
    if interpreter_active():
        if not _shared_worker:
            _shared_worker.append(WorkerClient([], None))
            atexit.register(_shared_worker[0].close)
        return CompiledCode(**_shared_worker[0].request(request, timeout_s)["code"])
    from .. import default_registry

    return CompiledCode(**compile_request(default_registry(), request, None)["code"])


if __name__ == "__main__":
    serve()
