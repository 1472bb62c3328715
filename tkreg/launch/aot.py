"""Ahead-of-time compilation for a named architecture, with no GPU needed, and checks that the
generated code holds the instructions a kernel says it relies on.

A kernel's ``aot(arch, dtype, config)`` returns an :class:`AotSpec`; :func:`compile_for` turns it
into PTX and a cubin with ``triton.compile(..., target=GPUTarget("cuda", cap, 32))`` and
disassembles the cubin with the ``cuobjdump`` triton ships.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import Any

from ..core import capability as caps
from ..core import refs
from ..core.specs import CompileTarget, Kernel

WARP_SIZE = 32


@dataclass
class AotSpec:
    """One compile: the jitted function (Triton or Gluon), its argument types, constexpr values,
    compile options (num_warps, num_stages, maxnreg, ...) and the arguments to specialize as
    multiples of 16 (pointers from torch's allocator, sizes and strides), as the JIT would."""

    fn: Any
    signature: dict[str, str]
    constexprs: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    aligned: tuple[str, ...] = ()


@dataclass
class CompiledCode:
    name: str
    ptx: str
    sass: str
    resources: str
    cubin: bytes = b""
    shared: int = 0  # bytes of shared memory the kernel needs (triton's metadata)


@dataclass
class TargetCheck:
    """The outcome of one compile item: which required patterns were missing."""

    arch: str
    missing_ptx: list[str]
    missing_sass: list[str]
    resources: str

    @property
    def ok(self) -> bool:
        return not self.missing_ptx and not self.missing_sass


def compile_spec(spec: AotSpec, arch: str) -> CompiledCode:
    import triton
    from triton.backends.compiler import GPUTarget

    target = GPUTarget("cuda", caps.arch(arch).compile_capability, WARP_SIZE)
    names = list(spec.fn.arg_names)
    unknown = sorted(set(spec.signature) - set(names))
    if unknown:
        raise ValueError(f"signature names {unknown} that {spec.fn.__name__} does not take ({names})")
    attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in spec.aligned}
    if _is_gluon(spec.fn):
        from triton.experimental.gluon._runtime import GluonASTSource as Source
    else:
        from triton.compiler import ASTSource as Source
    src = Source(spec.fn, spec.signature, spec.constexprs, attrs)
    compiled = triton.compile(src, target=target, options=dict(spec.options))
    cubin = compiled.asm["cubin"]
    sass, resources = disassemble(cubin)
    return CompiledCode(spec.fn.__name__, compiled.asm["ptx"], sass, resources, cubin, int(compiled.metadata.shared))


def _is_gluon(fn: Any) -> bool:
    is_gluon = getattr(fn, "is_gluon", None)
    return bool(is_gluon()) if callable(is_gluon) else False


def cuobjdump_path() -> str | None:
    try:
        import triton.backends.nvidia as nvidia_backend

        bundled = os.path.join(os.path.dirname(nvidia_backend.__file__), "bin", "cuobjdump")
        if os.access(bundled, os.X_OK):
            return bundled
    except ImportError:
        pass
    return shutil.which("cuobjdump")


def disassemble(cubin: bytes) -> tuple[str, str]:
    """(SASS, resource usage) of a cubin, or explanations when cuobjdump is missing or fails."""
    tool = cuobjdump_path()
    if tool is None:
        return "", "cuobjdump not found"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, timeout=120)
        res = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True, timeout=120)
    if sass.returncode != 0:
        return "", f"cuobjdump failed: {sass.stderr.strip()}"
    return sass.stdout, _resource_line(res.stdout)


def _resource_line(text: str) -> str:
    match = re.search(r"REG:\d+.*", text)
    return match.group(0).strip() if match else text.strip()


def check_code(code: CompiledCode, target: CompileTarget) -> TargetCheck:
    missing_ptx = [p for p in target.ptx if not re.search(p, code.ptx)]
    missing_sass = [p for p in target.sass if not re.search(p, code.sass)]
    return TargetCheck(target.arch, missing_ptx, missing_sass, code.resources)


def compile_and_check(
    kernel: Kernel, target: CompileTarget, dtype: str, config: dict[str, Any]
) -> tuple[TargetCheck, CompiledCode]:
    if kernel.aot is None:
        raise ValueError(f"kernel {kernel.name} has no aot function")
    spec = refs.resolve(kernel.aot)(caps.arch(target.arch), dtype, dict(config))
    code = compile_spec(spec, target.arch)
    return check_code(code, target), code
