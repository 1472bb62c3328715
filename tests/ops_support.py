"""Shared by the tkreg.ops tests: where kernels can run here, float64 references, and a
third-party plugin whose op appears in tkreg.ops with no code in tkreg."""

from __future__ import annotations

import math
from typing import Any

import pytest

import tkreg
from tkreg.core.tolerances import EXACT, UNIT_ROUNDOFF
from tkreg.launch.inputs import interpreter_active


def device_or_skip() -> str:
    """"cuda" on a GPU; "cpu" when the Triton interpreter is on for this whole process (as
    `pytest --tkreg` turns it on with no GPU: kernels run on CPU tensors); else skip."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if interpreter_active():
        return "cpu"
    pytest.skip("needs a GPU, or the Triton interpreter on for the whole process (pytest --tkreg, or TRITON_INTERPRET=1)")


def installed_ops() -> Any:
    """Fixture body: tkreg.ops built from the installed plugins, forgotten after the test."""
    yield install()
    tkreg.ops.uninstall()


def randn(*shape: int, dtype: Any, device: str, seed: int) -> Any:
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float32).to(dtype=dtype, device=device)


def same_alignment_as(t: Any, seed: int) -> Any:
    """A new tensor with t's shape, dtype and base-address alignment class (CPU allocations are
    not all 128-byte aligned), filled with fresh values."""
    import torch

    from tkreg.core.signature import ALIGNMENT_CLASS_BYTES

    spare = ALIGNMENT_CLASS_BYTES // t.element_size()
    buffer = torch.empty(t.numel() + spare, dtype=t.dtype, device=t.device)
    shift = ((t.data_ptr() - buffer.data_ptr()) % ALIGNMENT_CLASS_BYTES) // t.element_size()
    new = buffer[shift : shift + t.numel()].view(t.shape)
    new.copy_(randn(*t.shape, dtype=t.dtype, device=t.device.type, seed=seed))
    assert new.data_ptr() % ALIGNMENT_CLASS_BYTES == t.data_ptr() % ALIGNMENT_CLASS_BYTES
    return new


def assert_sum_close(got: Any, x: Any) -> None:
    """sum_row's tolerance (tkreg_reductions.plugin.TOLERANCES): fp32 accumulation of N terms,
    one rounding to the output dtype."""
    import torch

    n = x.shape[-1]
    dtype = str(x.dtype).removeprefix("torch.")
    ref = x.double().sum(-1)
    torch.testing.assert_close(got.double(), ref, atol=8 * UNIT_ROUNDOFF["float32"] * n, rtol=2 * UNIT_ROUNDOFF[dtype])
    assert got.dtype == x.dtype and got.shape == ref.shape


def assert_matmul_close(got: Any, ref64: Any, k: int) -> None:
    """matmul's tolerance (tkreg_matmul.op): atol lambda u32 (2/pi) K^1.5, rtol 2u of the dtype."""
    import torch

    dtype = str(got.dtype).removeprefix("torch.")
    atol = 8.0 * UNIT_ROUNDOFF["float32"] * (2.0 / math.pi) * k**1.5
    expected = ref64.to(got.dtype).double()
    torch.testing.assert_close(got.double(), expected, atol=atol, rtol=2 * UNIT_ROUNDOFF[dtype])


def install(registry: tkreg.Registry | None = None) -> Any:
    """tkreg.ops built from ``registry`` (default: the installed plugins)."""
    import tkreg.ops

    tkreg.ops.install(registry)
    return tkreg.ops


# -- a third-party plugin: op "toy_mul" (x * y), kernels and a peer --------------------------------
def toy_reference(x: Any, y: Any) -> Any:
    return x * y


def toy_make_output(x: Any, y: Any) -> Any:
    import torch

    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def toy_peer(x: Any, y: Any, out: Any) -> Any:
    import torch

    return torch.mul(x, y, out=out)


def toy_cost(dims: dict[str, int], itemsize: int) -> tkreg.Cost:
    return tkreg.Cost(bytes=3 * dims["M"] * dims["N"] * itemsize, flops=dims["M"] * dims["N"])


def toy_make_inputs(case: Any, dtype: Any, generator: Any, device: Any) -> Any:
    import torch

    return tuple(torch.randn(case["M"], case["N"], generator=generator, dtype=dtype, device=device) for _ in range(2))


def toy_checks(x: Any, y: Any) -> list[str]:
    return [] if x.shape == y.shape else [f"x and y must have one shape, got {tuple(x.shape)} and {tuple(y.shape)}"]


def toy_wide_rows_only(x: Any, y: Any) -> list[str]:
    return [] if x.shape[-1] >= 8 else [f"rows of {x.shape[-1]} elements; toy_mul_wide needs at least 8"]


def toy_mul_torch(x: Any, y: Any, out: Any = None) -> Any:
    """A "kernel" made of torch ops: traceable on FakeTensors, as a wrap_triton launcher is."""
    import torch

    if out is None:
        out = toy_make_output(x, y)
    return torch.mul(x, y, out=out)


toy_mul_torch.tkreg_traceable = True  # type: ignore[attr-defined]


def toy_mul_refusing(x: Any, y: Any, out: Any = None) -> Any:
    """Declares no constraint but refuses odd row counts at launch time."""
    if x.shape[0] % 2:
        raise tkreg.InputError(f"toy_mul_picky: {x.shape[0]} rows; it takes an even number")
    return toy_mul_torch(x, y, out)


class ToyPlugin:
    """Registers op toy_mul and kernels through the public hooks, as a third party would."""

    def __init__(self, *kernels: tkreg.Kernel, peer: bool = True) -> None:
        self.kernels = kernels
        self.peer = peer

    @tkreg.hookimpl
    def tkreg_register_ops(self, register: Any) -> None:
        register(
            tkreg.Op(
                name="toy_mul",
                reference=toy_reference,
                make_inputs=toy_make_inputs,
                make_output=toy_make_output,
                cases=(tkreg.case(M=5, N=7),),
                dtypes=("float32", "float16"),
                tolerances=EXACT,
                cost=toy_cost,
                peer=toy_peer if self.peer else None,
                peer_name="torch.mul" if self.peer else "",
            )
        )

    @tkreg.hookimpl
    def tkreg_register_kernels(self, register: Any) -> None:
        for k in self.kernels:
            register(k)


def toy_kernel(name: str, launcher: Any, **kw: Any) -> tkreg.Kernel:
    return tkreg.Kernel(name=name, op="toy_mul", launcher=launcher, interpretable=True, **kw)


def registry_with(plugin: Any) -> tkreg.Registry:
    """The installed plugins plus ``plugin``, registered in-process."""
    from tkreg.core.loading import build_registry

    return build_registry(plugins=[("toy", plugin)])
