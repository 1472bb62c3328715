"""The package's parts and the one-way imports between them, and the module paths of earlier
releases that third-party plugins still import."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import tkreg
from tkreg.compat import MOVED

PACKAGE = Path(tkreg.__file__).parent
# What each part may import besides itself (the arrows of docs/architecture.md).
ALLOWED = {
    "core": set(),
    "launch": {"core"},
    "testing": {"core", "launch", "report"},  # --tkreg-report writes a report when the run ends
    "ops": {"core", "launch"},
    "report": {"core"},
    "bench": {"core", "launch", "testing", "ops", "report"},
}


def tkreg_imports(path: Path) -> set[str]:
    """Absolute names of the tkreg modules ``path`` imports, at any depth of its code."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    package = parts[:-1] if parts[-1] != "__init__" else parts
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names = [f"{module}.{a.name}" for a in node.names] if not node.module else [module]
            found.update(n for n in names if n.startswith("tkreg"))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("tkreg"))
    return found


def part_of(module: str) -> str | None:
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 and pieces[1] in ALLOWED else None


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_imports_go_one_way(part: str) -> None:
    folder = PACKAGE / part
    if not folder.is_dir():
        pytest.skip(f"tkreg/{part} does not exist")
    wrong = []
    for path in sorted(folder.rglob("*.py")):
        for module in sorted(tkreg_imports(path)):
            target = part_of(module)
            if module in ("tkreg",) or module.startswith("tkreg.compat"):
                wrong.append(f"{path.relative_to(PACKAGE.parent)} imports {module} (the package root)")
            elif target is not None and target != part and target not in ALLOWED[part]:
                wrong.append(f"{path.relative_to(PACKAGE.parent)} imports {module} ({part} may import {sorted(ALLOWED[part])})")
    assert not wrong, "\n".join(wrong)


def test_few_modules_at_the_top_level() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 10, top
    assert sum((PACKAGE / part / "__init__.py").exists() for part in ALLOWED) >= 3


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_module_paths_are_the_new_modules(old: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(MOVED[old])
    assert importlib.import_module(old).__spec__.name == MOVED[old]  # the module keeps its own spec


def test_old_paths_work_in_a_fresh_process_as_a_plugin_uses_them() -> None:
    """What a plugin written for the flat layout does: import helpers by their old paths, name
    checks by old-path references, and import neither torch nor triton by loading."""
    code = (
        "import sys, tkreg\n"
        "from tkreg.tolerances import EXACT\n"
        "from tkreg.inputs import fail_if\n"
        "from tkreg import capability\n"
        "from tkreg.refs import resolve\n"
        "import tkreg.launch.inputs as new\n"
        "assert resolve('tkreg.inputs:tma_inputs_reasons') is new.tma_inputs_reasons\n"
        "assert capability is sys.modules['tkreg.core.capability']\n"
        "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_old_module_paths_run_with_python_dash_m(tmp_path: Path) -> None:
    """``python -m tkreg.record`` (now tkreg.report.record) still runs the record builder."""
    result = subprocess.run([sys.executable, "-m", "tkreg.record", "--help"], capture_output=True, text=True, timeout=120,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "usage: python -m tkreg.report.record" in result.stdout
