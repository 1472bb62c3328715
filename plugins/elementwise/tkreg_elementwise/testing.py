"""Test helpers the add plugins share: inputs every add launcher must refuse before launching,
and CPU tensors posing as CUDA tensors, for lookups with concrete inputs on a machine with no GPU."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


@dataclass
class BadCall:
    """Launcher arguments and a fragment the InputError message must contain."""

    id: str
    args: tuple[Any, ...]
    expect: str
    kwargs: dict[str, Any] = field(default_factory=dict)


def bad_calls(*, tma: bool) -> list[BadCall]:
    """Calls every add launcher refuses; with ``tma``, also those only TMA kernels refuse."""
    import torch

    def f32(*shape: int) -> torch.Tensor:
        return torch.randn(*shape)

    calls = [
        BadCall("rank1", (f32(8), f32(8)), "a must be 2-D"),
        BadCall("rank3", (f32(2, 4, 8), f32(2, 4, 8)), "b must be 2-D"),
        BadCall("float64", (f32(4, 8).double(), f32(4, 8).double()), "supported: float32, float16, bfloat16"),
        BadCall("int32", (torch.ones(4, 8, dtype=torch.int32), f32(4, 8)), "a has dtype int32"),
        BadCall("mixed-dtype", (f32(4, 8), f32(4, 8).half()), "one dtype"),
        BadCall("shape-mismatch", (f32(4, 8), f32(8, 4)), "one shape, got (4, 8) and (8, 4)"),
        BadCall("empty", (f32(0, 8), f32(0, 8)), "is empty"),
        BadCall("not-a-tensor", ([[1.0]], f32(1, 1)), "a must be a torch.Tensor"),
        BadCall("out-shape", (f32(4, 8), f32(4, 8)), "out has shape (4, 4)", {"out": f32(4, 4)}),
        BadCall("out-dtype", (f32(4, 8), f32(4, 8)), "out has dtype float16", {"out": f32(4, 8).half()}),
    ]
    if tma:
        padded = f32(33, 40)[:, :33]  # 160-byte rows: TMA-legal
        calls += [
            BadCall("row-stride", (f32(33, 33), f32(33, 33)), "stride of dim 0 is 33 elements (132 bytes)"),
            BadCall("transposed", (f32(8, 16).t(), f32(16, 8)), "last stride is 16"),
            BadCall("base-offset", (f32(4, 12)[:, 1:9], f32(4, 8)), "base address is not 16-byte aligned"),
            BadCall("out-row-stride", (padded, padded), "out: stride of dim 0", {"out": f32(33, 33)}),
            BadCall("cpu", (f32(4, 8), f32(4, 8)), "this kernel needs CUDA tensors"),
        ]
    return calls


class PosingAsCuda:
    """A CPU tensor that says it lives on a CUDA device: enough for the registry's and the
    kernels' input checks, which read only metadata (dtype, shape, strides, address)."""

    def __init__(self, t: Any) -> None:
        self._t = t
        self.dtype, self.shape = t.dtype, t.shape
        self.device = SimpleNamespace(type="cuda", index=0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._t, name)


def heavy_imports(module: str) -> list[str]:
    """Which of torch and triton importing ``module`` pulls in, in a fresh interpreter."""
    import subprocess
    import sys

    code = f"import sys, {module}; print(','.join(sorted({{'torch', 'triton'}} & set(sys.modules))))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return [m for m in run.stdout.strip().split(",") if m]


def explain_add(plugins: str, *inputs: Any) -> list[Any]:
    """The registry's verdicts on an H100 (capability 9.0) for CPU ``inputs`` posing as CUDA."""
    from tkreg.core.loading import build_registry

    return build_registry(env={"TKREG_PLUGINS": plugins}).explain("add", "9.0", [PosingAsCuda(t) for t in inputs])


def compile_tma_add(spec: Any, kernel: Any, target: Any, dtype: str, config: Any, load_buffers: str) -> Any:
    """Compile a TMA add kernel as the generated compile items do and check what they do not:
    no spills, and shared memory between the tiles the config asks for and a block's limit."""
    from tkreg.core import dtypes
    from tkreg.launch.aot import check_code
    from tkreg.testing.aot_worker import compile_installed

    from .tma_launch import SMEM_PER_BLOCK

    code = compile_installed(spec.name, target.arch, dtype, dict(config))
    check = check_code(code, target)
    assert check.ok, (check.missing_ptx, check.missing_sass)
    assert "LOCAL:0" in code.resources, code.resources
    resolved = kernel.resolve(dtype, config)
    tiles = 2 * resolved[load_buffers] + resolved["num_store_buffers"]
    assert tiles * resolved["XBLOCK"] * resolved["YBLOCK"] * dtypes.ITEMSIZE[dtype] <= code.shared <= SMEM_PER_BLOCK
    return code
