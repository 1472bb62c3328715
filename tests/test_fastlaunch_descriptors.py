"""tkreg.launch.tma.descriptor: TMA descriptors cached by what they encode, checked before they are made."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
import torch
from triton.backends.compiler import BaseBackend
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.runtime.jit import native_specialize_impl

from tkreg import InputError, tma
from tkreg.launch.fastlaunch import FrozenDescriptor


@pytest.fixture(autouse=True)
def empty_cache():
    tma.clear_descriptor_cache()
    yield
    tma.clear_descriptor_cache()


def layout(swizzle: int = 0, bits: int = 32) -> gl.NVMMASharedLayout:
    return gl.NVMMASharedLayout(swizzle_byte_width=swizzle, element_bitwidth=bits, rank=2)


def test_describes_the_tensor_as_from_tensor_does():
    t = torch.zeros(40, 64)[:33]
    d = tma.descriptor(t, [16, 32], "a")
    reference = TensorDescriptor.from_tensor(t, [16, 32], tma.shared_layout([16, 32], t.dtype))
    assert isinstance(d, FrozenDescriptor)
    assert (d.base.data_ptr(), tuple(d.shape), tuple(d.strides), tuple(d.block_shape), d.layout, d.padding) == (
        reference.base.data_ptr(), tuple(reference.shape), tuple(reference.strides), tuple(reference.block_shape),
        reference.layout, reference.padding,
    )
    assert d.launch_spec == native_specialize_impl(BaseBackend, reference, False, True, True)


def test_a_repeated_request_returns_the_cached_descriptor():
    t = torch.zeros(64, 64)
    assert tma.descriptor(t, [16, 64], "a") is tma.descriptor(t, (16, 64), "a")
    same_place = t.view(64, 64)  # another tensor object over the same memory, same geometry
    assert tma.descriptor(same_place, [16, 64], "a") is tma.descriptor(t, [16, 64], "a")
    fixed = layout(swizzle=128)
    assert tma.descriptor(t, [16, 64], "a", fixed) is tma.descriptor(t, [16, 64], "a", fixed)


@pytest.mark.parametrize(
    "change",
    ["address", "shape", "strides", "dtype", "block", "layout", "equal layout, new object"],
)
def test_anything_the_descriptor_encodes_makes_another(change):
    base = torch.zeros(64, 128)
    t, block, lay = base[:32], [16, 64], layout()
    first = tma.descriptor(t, block, "a", lay)
    if change == "address":
        t = base[32:]
    elif change == "shape":
        t = base[:16]
    elif change == "strides":
        t = base.as_strided((32, 128), (256, 1))  # same address and shape, every other row
    elif change == "dtype":
        t = base.view(torch.int32)[:32]
    elif change == "block":
        block = [8, 64]
    elif change == "layout":
        lay = layout(swizzle=64)
    else:
        lay = layout()
    second = tma.descriptor(t, block, "a", lay)
    assert (second.base.data_ptr(), tuple(second.shape), tuple(second.strides), second.base.dtype) == (
        t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype,
    )
    assert tuple(second.block_shape) == tuple(block) and second.layout is lay
    if change != "equal layout, new object":
        assert second is not first


def test_inputs_tma_cannot_take_are_refused_every_time():
    misaligned = torch.zeros(8, 64)[:, 1:33]
    for _ in range(2):
        with pytest.raises(InputError, match="a: base address is not 16-byte aligned"):
            tma.descriptor(misaligned, [8, 32], "a")
    with pytest.raises(InputError, match="out: stride of dim 0 is 33 elements"):
        tma.descriptor(torch.zeros(8, 33), [8, 32], "out")


def test_the_cache_is_bounded_and_keeps_no_tensor_alive(monkeypatch):
    monkeypatch.setattr(tma, "DESCRIPTOR_CACHE_SIZE", 8)
    tensors = [torch.zeros(16, 16) for _ in range(20)]
    alive = weakref.ref(tensors[-1])
    descriptors = [tma.descriptor(t, [16, 16], "a") for t in tensors]
    assert tma.descriptor(tensors[-1], [16, 16], "a") is descriptors[-1]  # the newest stay
    assert tma.descriptor(tensors[0], [16, 16], "a") is not descriptors[0]  # the oldest went
    del tensors, descriptors
    gc.collect()
    assert alive() is None


def test_tma_ready_agrees_with_tma_reasons():
    """The fast form of the TMA checks answers exactly as the explaining one, for every dtype
    size and layout fault (and their mixes)."""
    from tkreg.launch.inputs import tma_layout, tma_ready, tma_reasons

    base = torch.zeros(4096)
    candidates = []
    for dtype in (torch.float32, torch.float16, torch.int8, torch.float64):
        flat = base.view(dtype) if dtype.itemsize <= 4 else torch.zeros(2048, dtype=dtype)
        for offset in (0, 1, 8, 16):
            for rows, cols, row_stride in [(8, 16, 16), (8, 12, 12), (8, 12, 16), (4, 8, 40), (8, 1, 1)]:
                view = flat[offset:].as_strided((rows, cols), (row_stride, 1))
                candidates += [view, view.t(), view[:, ::2], view.unsqueeze(0)]
    for t in candidates:
        expected = not tma_reasons(t, "t")
        assert tma_ready(t, t.element_size()) == expected, (t.dtype, t.stride(), t.data_ptr() % 16)
        if expected:
            assert tma_layout(t, t.element_size()) == (t.data_ptr(), t.stride())


def test_a_descriptor_of_a_new_tensor_gets_tritons_own_specialization():
    """The specialization is kept by element type, block, padding and layout: descriptors that
    differ in anything else (address, shape, strides) or in one of those get triton's own."""
    fixed, other = layout(swizzle=128), layout(swizzle=64)
    cases = [
        (torch.zeros(64, 128), [16, 64], fixed, "zero"),
        (torch.zeros(64, 128)[8:], [16, 64], fixed, "zero"),  # another address and shape
        (torch.zeros(32, 256)[:, :128], [16, 64], fixed, "zero"),  # other strides
        (torch.zeros(64, 128), [16, 64], fixed, "nan"),
        (torch.zeros(64, 128), [32, 64], fixed, "zero"),
        (torch.zeros(64, 128), [16, 64], other, "zero"),
        (torch.zeros(64, 128), [16, 64], layout(swizzle=128), "zero"),  # an equal layout, a new object
        (torch.zeros(64, 128, dtype=torch.float16), [16, 64], layout(swizzle=128, bits=16), "zero"),
        (torch.zeros(64, 128, dtype=torch.bfloat16), [16, 64], layout(swizzle=128, bits=16), "zero"),
    ]
    specs = set()
    for t, block, lay, padding in cases:
        made = FrozenDescriptor.of(t, block, lay, padding)
        reference = TensorDescriptor(t, list(t.shape), list(t.stride()), list(block), lay, padding)
        assert made.launch_spec == native_specialize_impl(BaseBackend, reference, False, True, True)
        specs.add(made.launch_spec)
    assert len(specs) == 5  # the fp32 blocks of 16x64 and 32x64, two swizzles, fp16 and bf16


def test_a_frozen_descriptor_still_refuses_changes_after_a_cached_specialization():
    t = torch.zeros(64, 128)
    FrozenDescriptor.of(t, [16, 64], layout())
    again = FrozenDescriptor.of(t[8:], [16, 64], layout())
    with pytest.raises(AttributeError, match="immutable"):
        again.shape = (1, 1)


def test_the_specialization_cache_stays_bounded_and_right(monkeypatch):
    from tkreg.launch import fastlaunch

    monkeypatch.setattr(fastlaunch, "_SPEC_CACHE_SIZE", 4)
    monkeypatch.setattr(fastlaunch, "_specs", {})
    t = torch.zeros(64, 128)
    for block in ([8, 64], [16, 64], [32, 64], [64, 64], [8, 32], [16, 32]):
        made = FrozenDescriptor.of(t, block, layout())
        reference = TensorDescriptor(t, list(t.shape), list(t.stride()), block, made.layout)
        assert made.launch_spec == native_specialize_impl(BaseBackend, reference, False, True, True)
        assert len(fastlaunch._specs) <= 4


def _hopper_or_newer() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)


@pytest.mark.skipif(not _hopper_or_newer(), reason="needs a Hopper or newer GPU (TMA descriptors filled by the driver)")
@pytest.mark.parametrize("name", ["matmul_hopper_ws", "add_tma"])
def test_a_kernel_with_descriptors_launches_from_a_thread_that_made_no_cuda_call(name: str) -> None:
    """torch's autograd engine runs a backward in a thread of its own, and a caller may launch
    from a worker thread: where a kernel with TMA descriptors is that thread's first CUDA work,
    no context is current when its descriptors are filled (the driver's "invalid device context"
    until tkreg.launch.cuda_context made one current)."""
    import threading

    import tkreg

    kernel = tkreg.default_registry().kernel(name)
    if name == "matmul_hopper_ws" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("matmul_hopper_ws runs on sm_90 only")
    launch = kernel.load()
    g = torch.Generator(device="cuda").manual_seed(0)

    def inputs() -> tuple[Any, Any, Any]:
        if name == "matmul_hopper_ws":
            a, b = (torch.randn(*s, device="cuda", generator=g, dtype=torch.bfloat16) for s in ((128, 256), (256, 192)))
            return a, b, torch.empty(128, 192, device="cuda", dtype=torch.bfloat16)
        a, b = (torch.randn(256, 512, device="cuda", generator=g) for _ in range(2))
        return a, b, torch.empty_like(a)

    a, b, out = inputs()
    launch(a, b, out=out)  # compiled and loaded from this thread
    torch.cuda.synchronize()
    a, b, out = inputs()  # new tensors: new descriptors, filled in the other thread
    errors: list[BaseException] = []

    def work() -> None:
        try:
            launch(a, b, out=out)
        except BaseException as e:  # the test reports whatever the thread met
            errors.append(e)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert errors == []
    want = a.double() @ b.double() if name == "matmul_hopper_ws" else a.double() + b.double()
    torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2 * (16 if name == "matmul_hopper_ws" else 1))
