"""Which items ``pytest --tkreg`` generates for a registry: plain data, no pytest, no torch.

Ids are stable and readable, in pytest's ``path::name`` form:
``tkreg/<op>::<kernel>[<dtype>-<case>-<config>]`` for correctness,
``tkreg/<op>::<kernel>[compile-<arch>-<dtype>-<config>]``, ``tkreg/<op>::<kernel>[bench-...]``,
and ``tkreg/<op>::peer-<name>[bench-...]`` for the library peer a benchmark compares with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core import dtypes
from ..core.registry import Registry
from ..core.specs import Case, Kernel, config_id

KINDS = ("correctness", "compile", "bench")  # item kinds, each with its marker tkreg_<kind>


@dataclass(frozen=True)
class Selection:
    ops: tuple[str, ...] = ()
    kernels: tuple[str, ...] = ()
    plugins: tuple[str, ...] = ()
    full: bool = False
    bench: bool = False
    gpu: bool = True  # whether "gpu" cases are generated (they are too slow for the interpreter)

    def wants(self, registry: Registry, kernel: Kernel) -> bool:
        if self.ops and kernel.op not in self.ops:
            return False
        if self.kernels and kernel.name not in self.kernels:
            return False
        return not self.plugins or registry.owner(kernel).name in self.plugins


@dataclass(frozen=True)
class ItemSpec:
    kind: str  # correctness, compile, bench, peer
    op: str
    name: str  # kernel name, or "peer-<name>" for a peer
    dtype: str
    case: Case | None = None
    config: dict[str, Any] = field(default_factory=dict)
    arch: str | None = None

    @property
    def group(self) -> str:
        return f"tkreg/{self.op}"

    @property
    def id(self) -> str:
        return f"{self.group}::{self.name_in_group}"

    @property
    def name_in_group(self) -> str:
        parts = []
        if self.kind == "compile":
            parts += ["compile", self.arch or "?"]
        elif self.kind in ("bench", "peer"):
            parts.append("bench")
        parts.append(dtypes.short(self.dtype))
        if self.case is not None:
            parts.append(self.case.id)
        if self.config:
            parts.append(config_id(self.config))
        return f"{self.name}[{'-'.join(parts)}]"


def generate(registry: Registry, selection: Selection) -> list[ItemSpec]:
    items: list[ItemSpec] = []
    case_sets = ("default", "gpu", "full") if selection.full else ("default", "gpu") if selection.gpu else ("default",)
    for op in registry.ops():
        kernels = [k for k in registry.kernels(op.name) if selection.wants(registry, k)]
        for kernel in kernels:
            kernel_dtypes = registry.kernel_dtypes(kernel)
            for config in registry.configs(kernel):
                for dtype in kernel_dtypes:
                    for case in op.cases_in(*case_sets):
                        items.append(ItemSpec("correctness", op.name, kernel.name, dtype, case, config))
            compile_configs = registry.configs(kernel, "compile")
            items.extend(_compile_items(kernel, kernel_dtypes, compile_configs, selection.full, op.name))
        if selection.bench:
            items.extend(_bench_items(registry, op.name, kernels))
    return items


def _compile_items(
    kernel: Kernel, kernel_dtypes: tuple[str, ...], configs: list[dict[str, Any]], full: bool, op: str
) -> list[ItemSpec]:
    """Every config in the kernel's first dtype, and every dtype with the default config;
    --tkreg-full compiles the whole cross product."""
    pairs = [(c, d) for c in configs for d in kernel_dtypes]
    if not full:
        pairs = [(c, d) for c, d in pairs if d == kernel_dtypes[0] or c == configs[0]]
    return [ItemSpec("compile", op, kernel.name, d, None, c, arch=t.arch) for t in kernel.targets for c, d in pairs]


def _bench_items(registry: Registry, op_name: str, kernels: list[Kernel]) -> list[ItemSpec]:
    op = registry.op(op_name)
    items = []
    bench_cases = op.cases_in("bench")
    for case in bench_cases:
        for dtype in op.bench_dtypes:
            if op.peer is not None and kernels:
                items.append(ItemSpec("peer", op.name, f"peer-{op.peer_name}", dtype, case))
            for kernel in kernels:
                if dtype not in registry.kernel_dtypes(kernel):
                    continue
                for config in registry.configs(kernel, "bench"):
                    items.append(ItemSpec("bench", op.name, kernel.name, dtype, case, config))
    return items
