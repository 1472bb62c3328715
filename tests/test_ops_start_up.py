"""What installing tkreg.ops costs a process: it imports no part of torch's compiler (Dynamo,
Inductor, SymPy), and torch.compile still traces tkreg.ops' callables once something imports the
compiler (tkreg.ops.after_import runs the registration then)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.helpers import new_process
from tkreg.ops import after_import as hook

ROOT = Path(__file__).resolve().parents[1]


def _fresh_process(code: str, tmp_path: Path, interpret: bool = True) -> tuple[subprocess.CompletedProcess[str], Any]:
    """Runs ``code`` in a new Python process (a private cache; Triton's interpreter on where
    ``interpret``), which must exit 0; the process and what its last line of output says (JSON)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TKREG_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": str(ROOT), **({"TRITON_INTERPRET": "1"} if interpret else {})}  # fmt: skip
    return new_process(["-c", code], env, cwd=ROOT)


_FRESH_PROCESS = """
import json, sys, warnings
import torch, tkreg
from tests.ops_support import ToyPlugin, registry_with, toy_kernel, toy_mul_torch
from tkreg.ops import native

warnings.simplefilter("ignore")
tkreg.ops.install(registry_with(ToyPlugin(toy_kernel("toy_torch", toy_mul_torch))))
compiler = [m for m in ("torch._dynamo", "torch._inductor", "sympy") if m in sys.modules]
x, y = torch.randn(6, 8), torch.randn(6, 8)
eager = tkreg.ops.toy_mul(x, y)
compiled = torch.compile(lambda a, b: tkreg.ops.toy_mul(a, b) + 1, fullgraph=True, backend="aot_eager")(x, y)
print(json.dumps({"compiler": compiler, "builtin": native.fast_caller() is not None and type(tkreg.ops.toy_mul).__name__,
                  "eager": torch.equal(eager, x * y), "compiled": torch.equal(compiled, x * y + 1)}))
"""


def test_installing_imports_no_compiler_and_compiling_still_traces_the_callables(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    _, got = _fresh_process(_FRESH_PROCESS, tmp_path)
    assert got["compiler"] == []
    assert got["eager"] and got["compiled"]
    assert got["builtin"] in (False, "builtin_function_or_method")  # the C++ callable, where the extension builds


_SUBSTITUTION_FAILS = """
import json, logging, sys, warnings
import torch, tkreg
from tests.ops_support import ToyPlugin, registry_with, toy_kernel, toy_mul_torch
from tkreg.ops import native

def refuse(original, **options):
    raise RuntimeError("this torch will not substitute it")

warnings.simplefilter("ignore")
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
torch.compiler.substitute_in_graph = refuse  # as a torch would whose checks the C++ callable fails
tkreg.ops.install(registry_with(ToyPlugin(toy_kernel("toy_torch", toy_mul_torch))))
before = tkreg.ops.toy_mul
x, y = torch.randn(6, 8), torch.randn(6, 8)
compiled = torch.compile(lambda a, b: tkreg.ops.toy_mul(a, b) + 1, fullgraph=True, backend="aot_eager")(x, y)
after = tkreg.ops.toy_mul
print(json.dumps({"builtin": native.fast_caller() is not None, "before": type(before).__name__,
                  "after": type(after).__name__, "got": after is tkreg.ops.get("toy_mul"),
                  "compiled": torch.equal(compiled, x * y + 1), "eager": torch.equal(after(x, y), x * y),
                  "old_eager": torch.equal(before(x, y), x * y)}))
"""


def test_a_failed_substitution_leaves_the_python_fast_path_which_compiles(tmp_path: Path) -> None:
    """Where torch's compiler refuses the C++ callable once it is imported, tkreg.ops.<op> becomes
    the Python fast path (which the compiler traces itself), with a warning that says so."""
    pytest.importorskip("torch")
    run, got = _fresh_process(_SUBSTITUTION_FAILS, tmp_path)
    if not got["builtin"]:
        pytest.skip("the C++ extension is not in use here: tkreg.ops.<op> is the Python fast path from the start")
    assert got["before"] == "builtin_function_or_method" and got["after"] == "function" and got["got"]
    assert got["compiled"] and got["eager"] and got["old_eager"]
    assert "cannot trace its C++ call" in run.stderr and "this torch will not substitute it" in run.stderr


_THREADS_FIRST_USE = """
import json, sys, threading, warnings
import torch, tkreg

warnings.simplefilter("ignore")
if "rms_norm" not in [op.name for op in tkreg.default_registry().ops()]:
    print(json.dumps({"skip": "the norms plugin is not installed"}))
    sys.exit()
start, errors = threading.Barrier(6), []
device = "cuda" if torch.cuda.is_available() else "cpu"  # on a GPU its kernels, else the interpreter's

def first_use(seed):
    try:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(3 + seed, 40 + seed, generator=g).to(device).requires_grad_()
        w = torch.randn(40 + seed, generator=g).to(device).requires_grad_()
        start.wait()
        y = tkreg.ops.rms_norm(x, w, eps=0.5)  # every thread's first use of tkreg.ops at once
        y.sum().backward()
        x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
        want = torch.nn.functional.rms_norm(x64, (x64.shape[-1],), w64, eps=0.5)
        want.sum().backward()
        for got, ref in ((y, want), (x.grad, x64.grad), (w.grad, w64.grad), (tkreg.ops.sum_row(x.detach()), x64.sum(-1))):
            torch.testing.assert_close(got.double(), ref, atol=1e-4, rtol=1e-4)
    except Exception as e:
        errors.append(f"{seed}: {type(e).__name__}: {e}")

threads = [threading.Thread(target=first_use, args=(i,)) for i in range(6)]
[t.start() for t in threads]
[t.join() for t in threads]
kernel = tkreg.ops.explain("rms_norm", torch.randn(2, 40, device=device), torch.randn(40, device=device))
print(json.dumps({"errors": errors, "kernel": kernel, "device": device}))
"""


def test_threads_that_first_use_tkreg_ops_together_get_one_install(tmp_path: Path) -> None:
    """Installing tkreg.ops once for threads that use it first at the same moment (each used to
    install, and the torch operators failed to register: outputs without gradients); on a GPU
    they tune at once too, and without one Triton's interpreter, which keeps the running kernel
    in process-wide state, runs one kernel at a time."""
    torch = pytest.importorskip("torch")
    run, got = _fresh_process(_THREADS_FIRST_USE, tmp_path, interpret=not torch.cuda.is_available())
    if "skip" in got:
        pytest.skip(got["skip"])
    assert got["errors"] == []
    # a Triton kernel, interpreted (on a GPU tuning may choose the peer for these small rows)
    assert "calls rms_norm_triton" in got["kernel"] or got["device"] == "cuda"
    assert "no torch operator" not in run.stderr


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A module of its own on sys.path, ``tkreg_probe_<n>``, that no test imported yet; the hook's
    waiting functions and sys.meta_path are the test's own."""
    made: list[str] = []

    def make(body: str = "VALUE = 41\n") -> str:
        name = f"tkreg_probe_{len(made)}_{tmp_path.name[-12:].replace('-', '_')}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
        made.append(name)
        return name

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(hook, "_waiting", {})  # what this process's tkreg.ops waits on stays as it is
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    yield make
    for name in made:
        sys.modules.pop(name, None)


def test_a_module_already_imported_runs_the_function_at_once() -> None:
    seen: list[ModuleType] = []
    hook.after_import("json", seen.append)
    assert seen == [json]


def test_the_function_runs_after_the_modules_code_and_the_module_keeps_its_loader(package: Any) -> None:
    name = package()
    seen: list[Any] = []
    hook.after_import(name, lambda module: seen.append((module.VALUE, module.__loader__)))
    assert seen == []
    module = __import__(name)
    assert [value for value, _ in seen] == [41]
    loader = seen[0][1]
    assert not isinstance(loader, hook._ThenLoader)
    assert module.__spec__.loader is loader
    assert name not in hook._waiting
    assert not any(isinstance(finder, hook._Finder) for finder in sys.meta_path)  # nothing waits: later imports skip it


def test_a_failing_function_is_logged_not_raised_into_the_import(package: Any, caplog: pytest.LogCaptureFixture) -> None:
    name = package()
    later: list[str] = []

    def broken(module: ModuleType) -> None:
        raise RuntimeError("no luck")

    hook.after_import(name, broken)
    hook.after_import(name, lambda module: later.append(module.__name__))
    with caplog.at_level(logging.WARNING, logger="tkreg.ops"):
        __import__(name)
    assert later == [name]  # the next one still ran
    assert "no luck" in caplog.text and name in caplog.text


def test_a_failed_import_leaves_the_function_waiting_for_the_next_try(package: Any, tmp_path: Path) -> None:
    name = package("raise ImportError('not yet')\n")
    seen: list[int] = []
    hook.after_import(name, lambda module: seen.append(module.VALUE))
    with pytest.raises(ImportError, match="not yet"):
        __import__(name)
    assert seen == []
    (tmp_path / f"{name}.py").write_text("VALUE = 7\n")
    sys.path_importer_cache.clear()
    import importlib

    importlib.invalidate_caches()
    __import__(name)
    assert seen == [7]


def test_a_module_another_thread_imports_while_the_function_is_registered_still_runs_it(
    package: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = package()
    real = hook._ensure_finder

    def import_meanwhile() -> None:  # as if another thread's import had found the module just before
        with monkeypatch.context() as patch:
            patch.setattr(sys, "meta_path", [f for f in sys.meta_path if not isinstance(f, hook._Finder)])
            __import__(name)
        real()

    monkeypatch.setattr(hook, "_ensure_finder", import_meanwhile)
    seen: list[int] = []
    hook.after_import(name, lambda module: seen.append(module.VALUE))
    assert seen == [41]
    assert hook._waiting.get(name, []) == []
