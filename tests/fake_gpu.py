"""A fake GPU for launch tests on a machine without one: triton's real ``JITFunction.run`` (its
binder, cache key and argument packing) runs with a fake driver (device, stream, target, TMA
encoding) and a fake compiler whose "compiled kernel" has triton's real CudaLauncher wrapper
around a recorder in place of the C launch function."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import torch
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.driver import CudaLauncher, wrap_handle_tensordesc
from triton.runtime.driver import DriverConfig
from triton.runtime.jit import JITFunction

from tkreg.launch import fastlaunch


def add_source(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    """c = a + b over n elements: the plain kernel source the launch tests make JITFunctions of
    (each its own, so its caches are the test's)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(c_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


def axpy_source(x_ptr, y_ptr, alpha, n, BLOCK: tl.constexpr):
    """y = alpha * x over n elements on a grid of one or two dims: a kernel with a float argument."""
    offs = (tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * alpha, mask=offs < n)


class FakeTmaUtils:
    def __init__(self) -> None:
        self.encoded: list[tuple[Any, ...]] = []

    def fill_tma_descriptor(self, ptr, swizzle, elem_size, elem_type, block_size, shape, strides, padding):
        self.encoded.append((ptr, tuple(shape), tuple(strides)))
        return ("CUtensorMap", ptr, swizzle, elem_size, elem_type, tuple(block_size), tuple(shape), tuple(strides), padding)


class FakeDriver:
    def __init__(self) -> None:
        self.device = 0
        self.utils = FakeTmaUtils()

    def get_current_device(self) -> int:
        return self.device

    def get_current_stream(self, device: int) -> int:
        return 1000 + device

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("cuda", 90, 32)


class FakeGpu:
    """Records every call of the C launch function and every compile."""

    def __init__(self, driver: FakeDriver) -> None:
        self.driver = driver
        self.launches: list[tuple[Any, ...]] = []
        self.compiles: list[Any] = []
        self.scratch = 0

    def c_launch(self, *args: Any) -> None:
        # what triton's C launcher does with the hooks: call them around the launch
        enter, leave, metadata = args[11], args[12], args[10]
        if enter is not None:
            enter(metadata)
        self.launches.append(args)
        if leave is not None:
            leave(metadata)

    def compile(self, src: Any, target: Any = None, options: Any = None) -> Any:
        self.compiles.append(src)
        signature = dict(src.signature)
        metas = [
            {"swizzle": 0, "elem_size": 4, "elem_type": 7, "block_size": _block_of(s), "fp4_padded": False}
            for s in signature.values()
            if isinstance(s, str) and s.startswith("tensordesc")
        ]
        run = CudaLauncher.__new__(CudaLauncher)
        run.num_ctas = 1
        run.launch = wrap_handle_tensordesc(self.c_launch, signature, metas or None)
        run.global_scratch_size = self.scratch
        run.global_scratch_align = 1
        run.profile_scratch_size = 0
        run.profile_scratch_align = 1
        run.launch_cooperative_grid = False
        run.launch_pdl = False
        return SimpleNamespace(
            function=0xF000 + len(self.compiles),
            packed_metadata=(options["num_warps"], 1, 0),
            src=src,
            metadata=SimpleNamespace(tensordesc_meta=metas or None),
            run=run,
            launch_metadata=lambda grid, stream, *args: None,
        )


def _block_of(signature: str) -> list[int]:
    """[16, 64] from 'tensordesc<fp32[16, 64],...>'."""
    return [int(d) for d in re.findall(r"\d+", signature.split("[")[1].split("]")[0])]


def fake_gpu(monkeypatch: Any, kernels: Any) -> FakeGpu:
    """triton's launch path on a fake GPU for ``kernels``, which start with empty caches."""
    fake = FakeDriver()
    record = FakeGpu(fake)
    monkeypatch.setattr(DriverConfig, "active", property(lambda self: fake))
    monkeypatch.setattr(fastlaunch, "_current_device", fake.get_current_device)
    monkeypatch.setattr(fastlaunch, "_current_stream", fake.get_current_stream)
    for kernel in kernels:
        kernel.device_caches.clear()
        monkeypatch.setattr(kernel, "create_binder", _binder_with(kernel, record))
    return record


def _binder_with(kernel: JITFunction, record: FakeGpu) -> Any:
    original = type(kernel).create_binder

    def create_binder():
        result = original(kernel)
        kernel.compile = record.compile  # JITFunction._do_compile calls self.compile
        return result

    kernel.device_caches.default_factory = create_binder
    return create_binder


def without_hooks(launch: tuple[Any, ...]) -> tuple[Any, ...]:
    """A recorded C launch minus launch metadata and hooks (the ordinary path passes triton's
    empty hook chains and metadata for them; the fast path passes None: the same launch)."""
    return launch[:10] + launch[13:]


def tensors(*shape: int, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    return [torch.zeros(*shape, dtype=dtype) for _ in range(3)]


