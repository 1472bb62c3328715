"""Which items ``pytest --tkreg`` generates for a registry: plain data, no pytest, no torch.

Ids are stable and readable, in pytest's ``path::name`` form:
``tkreg/<op>::<kernel>[<dtype>-<case>-<params>-<config>]`` for correctness (a backward kernel's
items check its gradients), ``tkreg/<op>::<kernel>[compile-<arch>-<dtype>-<config>]``,
``tkreg/<op>::<kernel>[bench-...]`` (``bench-bwd-...`` and ``bench-fwdbwd-...`` for a backward
kernel alone and after its forward), and ``tkreg/<op>::peer-<name>[bench-...]`` for the library
peer a benchmark compares with (and for each of the op's rivals), and ``tkreg/<op>::autocast[<device
type>-bf16]`` for an op's autocast declaration held against its peer on each device type it
declares one for (tkreg.testing.autocast_check), and ``tkreg/<op>::peer_direct[default-cases]`` for
the torch calls an op names for its peer held against the peer (tkreg.testing.direct_check).
Parameters show as ``name=value``.

Parameters: each value an op's params list for tests is covered once, the others at their
defaults; ``--tkreg-full`` covers every combination. Benchmarks run the defaults.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from ..core import dtypes
from ..core.interface import format_value
from ..core.registry import Registry
from ..core.specs import Case, Kernel, Op, config_id

KINDS = ("correctness", "compile", "bench", "autocast", "direct")  # item kinds, each with its marker tkreg_<kind>
AUTOCAST_DEVICE_TYPES = ("cpu", "cuda")  # the device types an autocast declaration is checked on
AUTOCAST_REGION_DTYPE = "bfloat16"  # the torch.autocast region's dtype it is checked under
BENCH_MODES = ("fwd", "bwd", "fwdbwd")  # what a benchmark times: forward, backward, or both in turn


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
    kind: str  # correctness, compile, bench, peer, autocast
    op: str
    name: str  # kernel name, or "peer-<name>" for a peer
    dtype: str
    case: Case | None = None
    config: dict[str, Any] = field(default_factory=dict)
    arch: str | None = None  # compile: the target; autocast: the device type
    params: dict[str, Any] = field(default_factory=dict)
    mode: str = "fwd"  # for benchmarks: one of BENCH_MODES
    forward: str | None = None  # fwdbwd benchmarks of a backward kernel: the forward kernel before it

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
        elif self.kind == "autocast":
            parts.append(self.arch or "?")
        elif self.kind == "direct":
            return f"{self.name}[default-cases]"
        elif self.kind in ("bench", "peer"):
            parts.append("bench" if self.mode == "fwd" else f"bench-{self.mode}")
        parts.append(dtypes.short(self.dtype))
        if self.case is not None:
            parts.append(self.case.id)
        parts.extend(f"{k}={format_value(v)}" for k, v in self.params.items())
        if self.config:
            parts.append(config_id(self.config))
        return f"{self.name}[{'-'.join(parts)}]"


def generate(registry: Registry, selection: Selection) -> list[ItemSpec]:
    items: list[ItemSpec] = []
    case_sets = ("default", "gpu", "full") if selection.full else ("default", "gpu") if selection.gpu else ("default",)
    for op in registry.ops():
        kernels = [k for k in registry.kernels(op.name) if selection.wants(registry, k)]
        param_sets = parameter_sets(op, selection.full)
        for kernel in kernels:
            kernel_dtypes = registry.kernel_dtypes(kernel)
            for config in registry.configs(kernel):
                for dtype in kernel_dtypes:
                    for case in op.cases_in(*case_sets):
                        for params in param_sets:
                            items.append(ItemSpec("correctness", op.name, kernel.name, dtype, case, config, params=params))
            compile_configs = registry.configs(kernel, "compile")
            items.extend(_compile_items(kernel, kernel_dtypes, compile_configs, selection.full, op.name))
        if selection.bench:
            items.extend(_bench_items(registry, op.name, kernels))
        if kernels and not selection.kernels:  # the op's own items: not asked for by kernel
            items.extend(_autocast_items(op))
            items.extend(_direct_items(op))
    return items


def _autocast_items(op: Op) -> list[ItemSpec]:
    """One per device type the op declares an autocast policy for, where it has a peer to hold the
    declaration against."""
    if op.peer is None:
        return []
    return [ItemSpec("autocast", op.name, "autocast", AUTOCAST_REGION_DTYPE, arch=device_type)
            for device_type in AUTOCAST_DEVICE_TYPES if op.autocast_policy(device_type) is not None]  # fmt: skip


def _direct_items(op: Op) -> list[ItemSpec]:
    """One where the op names its peer's torch calls (``peer_direct``): each held against the peer
    on the op's default cases in each of its dtypes, on the GPU where there is one, else the CPU
    (tkreg.testing.direct_check)."""
    if op.peer is None or op.peer_direct is None:
        return []
    return [ItemSpec("direct", op.name, "peer_direct", op.dtypes[0])]


def parameter_sets(op: Op, full: bool) -> list[dict[str, Any]]:
    """The parameter values correctness items cover: the defaults, then each other tested value
    of each parameter with the rest at their defaults; with ``full``, every combination."""
    if not op.params:
        return [{}]
    defaults = op.defaults
    if full:
        return [dict(zip(defaults, combo)) for combo in itertools.product(*(p.values for p in op.params))]
    sets = [defaults]
    for p in op.params:
        sets.extend({**defaults, p.name: v} for v in p.values if v != p.default)
    return sets


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
    """Per benchmark case and dtype: the peer and every forward kernel (fwd); for an op with
    gradients also the peer's backward and every backward kernel, alone (bwd) and after a
    forward kernel of its own plugin (fwdbwd). Parameters at their defaults."""
    op = registry.op(op_name)
    params = op.defaults
    items = []
    forward = [k for k in kernels if not k.backward]
    backward = [k for k in kernels if k.backward]
    modes = ("fwd", "bwd", "fwdbwd") if op.differentiable else ("fwd",)
    for case in op.cases_in("bench"):
        for dtype in op.bench_dtypes_of(case):
            for mode in modes:
                timed = forward if mode == "fwd" else backward
                runs = [k for k in timed if dtype in registry.kernel_dtypes(k)]
                if op.peer is not None and runs:
                    for peer in (op.peer_name, *op.rivals):
                        items.append(ItemSpec("peer", op.name, f"peer-{peer}", dtype, case, params=params, mode=mode))
                for kernel in runs:
                    partner = None
                    if mode == "fwdbwd":
                        partner = _forward_partner(registry, kernel, forward, dtype)
                        if partner is None:
                            continue
                    for config in registry.configs(kernel, "bench"):
                        items.append(ItemSpec("bench", op.name, kernel.name, dtype, case, config, params=params, mode=mode,
                                              forward=partner))
    return items


def _forward_partner(registry: Registry, kernel: Kernel, forward: list[Kernel], dtype: str) -> str | None:
    """The forward kernel a backward kernel is timed after: the first (by name) of its own plugin
    that takes the dtype."""
    owner = registry.owner(kernel).name
    for k in forward:
        if registry.owner(k).name == owner and dtype in registry.kernel_dtypes(k):
            return k.name
    return None
