"""Small in-process plugins and specs shared by the core tests."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tkreg
from tkreg.core.loading import build_registry
from tkreg.core.registry import Registry
from tkreg.core.tolerances import EXACT


def cost(dims: dict[str, int], itemsize: int) -> tkreg.Cost:
    return tkreg.Cost(bytes=dims["N"] * itemsize)


def op(name: str = "vec") -> tkreg.Op:
    return tkreg.Op(
        name=name,
        reference="tests.helpers:cost",  # never called by these tests
        make_inputs="tests.helpers:cost",
        make_output="tests.helpers:cost",
        cases=(tkreg.case(N=7),),
        dtypes=("float32", "float16"),
        tolerances=EXACT,
        cost=cost,
    )


def kernel(name: str, op_name: str = "vec", **kw: Any) -> tkreg.Kernel:
    return tkreg.Kernel(name=name, op=op_name, launcher="tests.helpers:cost", **kw)


class Plugin:
    """A plugin object registering the given specs through the public hooks."""

    def __init__(self, ops: tuple = (), kernels: tuple = (), fail: str | None = None) -> None:
        self._ops, self._kernels, self._fail = ops, kernels, fail

    @tkreg.hookimpl
    def tkreg_register_ops(self, register: Any) -> None:
        for o in self._ops:
            register(o)

    @tkreg.hookimpl
    def tkreg_register_kernels(self, register: Any) -> None:
        if self._fail == "kernels":
            raise RuntimeError("plugin bug while registering kernels")
        for k in self._kernels:
            register(k() if callable(k) else k)


def registry_of(**plugins: Plugin) -> Registry:
    return build_registry(use_entry_points=False, plugins=list(plugins.items()))


def new_process(args: Sequence[str], env: Mapping[str, str], timeout: float = 600,
                cwd: Path | None = None) -> tuple[subprocess.CompletedProcess[str], Any]:
    """Runs ``python *args`` in a new process with ``env``, which must exit 0: the process, and
    what its last line of output says (JSON)."""
    run = subprocess.run([sys.executable, *args], cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-4000:]
    return run, json.loads(run.stdout.strip().splitlines()[-1])
