"""tkreg.launch.fastlaunch on a machine with no GPU.

The launch path is exercised against a fake GPU: triton's real ``JITFunction.run`` (its binder,
cache key and argument packing) runs with a fake driver (device, stream, target, TMA encoding)
and a fake compiler whose "compiled kernel" has triton's real CudaLauncher wrapper around a
recorder in place of the C launch function. So the ordinary path and the fast path hand their
arguments to the same recorder, and the tests compare what each would have launched. The
specialization key is tested against triton's own cache key; the interpreter fallback runs real
kernels on the CPU. The end-to-end check on a GPU is `tkreg bench host`.
"""

from __future__ import annotations

import gc
import itertools
import random
import weakref
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from triton import knobs
from triton.backends.compiler import BaseBackend, GPUTarget
from triton.compiler import make_backend
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonJITFunction
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction, compute_cache_key, create_function_from_signature, native_specialize_impl

from tests.fake_gpu import add_source, fake_gpu, tensors, without_hooks
from tkreg.launch import fastlaunch
from tkreg.launch.fastlaunch import FrozenDescriptor, Launcher, TensorAddress

SCALE = 3  # a module global the scaled kernel reads; changing it must not go unnoticed

# -- kernels (made JITFunctions explicitly, so TRITON_INTERPRET in the environment changes nothing)


def _scaled(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * SCALE, mask=mask)


def _mixed(x_ptr, BLOCK: tl.constexpr, y_ptr, n, FLAG: tl.constexpr = False):
    """A constexpr between runtime parameters, and a defaulted one."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def _copy_desc(a_desc, c_desc, M, N, XBLOCK: gl.constexpr, YBLOCK: gl.constexpr):
    pass


add_kernel = JITFunction(add_source)
scaled_kernel = JITFunction(_scaled)
mixed_kernel = JITFunction(_mixed)
quiet_add_kernel = JITFunction(add_source, do_not_specialize=["n"], do_not_specialize_on_alignment=["b_ptr"])
desc_kernel = GluonJITFunction(_copy_desc, do_not_specialize=["M", "N"])
CUDA_BACKEND = make_backend(GPUTarget("cuda", 90, 32))


def smem_layout(bits: int = 32, swizzle: int = 0) -> Any:
    return gl.NVMMASharedLayout(swizzle_byte_width=swizzle, element_bitwidth=bits, rank=2)


# -- the fake GPU ------------------------------------------------------------------------------


@pytest.fixture
def gpu(monkeypatch):
    """triton's launch path on a fake GPU; every kernel above starts with empty caches."""
    return fake_gpu(monkeypatch, (add_kernel, scaled_kernel, mixed_kernel, quiet_add_kernel, desc_kernel))


# -- the specialization key ----------------------------------------------------------------------


def _arg_pool() -> list[Any]:
    base = torch.zeros(64, dtype=torch.float32)
    pool: list[Any] = [base, base[1:], base[4:], base[3:]]
    pool += [torch.zeros(8, dtype=d) for d in (torch.float16, torch.bfloat16, torch.int32, torch.int8, torch.float64)]
    pool += [torch.zeros(8, dtype=torch.float16)[1:], torch.zeros(16, dtype=torch.int8)[8:]]
    pool += [0, 1, 2, 15, 16, 17, 32, -1, -16, -17, 2**31 - 1, 2**31, 2**31 + 16, -(2**31), -(2**31) - 1, -(2**31) - 16]
    pool += [2**63 - 1, 2**63, 2**64 - 16, 2**64 - 1, None, True, False, 1.0, 1.5]
    return pool


def _triton_key(kernel: JITFunction, args: tuple[Any, ...], fixed: dict[str, Any]) -> str | None:
    binder = create_function_from_signature(kernel.signature, kernel.params, CUDA_BACKEND)
    try:
        _, specialization, options = binder(*args, **fixed, debug=None, instrumentation_mode="")
    except Exception:  # triton itself cannot bind these
        return None
    return compute_cache_key({}, specialization, options)


@pytest.mark.parametrize("kernel", [add_kernel, quiet_add_kernel], ids=["add", "do_not_specialize"])
def test_equal_keys_mean_triton_compiles_the_same_kernel(kernel):
    """The launcher's key refines triton's: wherever two argument lists get one launcher key,
    triton's own cache key (the binder's specialization plus options) is one too."""
    launcher = Launcher(kernel, BLOCK=128, num_warps=4)
    key = fastlaunch.make_key_function(launcher._flags, CUDA_BACKEND)
    pool = _arg_pool()
    rng = random.Random(0)
    combos = {tuple(rng.choice(pool) for _ in range(4)) for _ in range(3000)}
    combos |= {(pool[0], pool[0], pool[0], x) for x in pool} | {(x, pool[0], pool[0], 16) for x in pool}
    triton_keys: dict[Any, set[str]] = {}
    checked = 0
    for args in combos:
        theirs = _triton_key(kernel, args, {"BLOCK": 128, "num_warps": 4})
        if theirs is None:
            continue
        triton_keys.setdefault(key(*args), set()).add(theirs)
        checked += 1
    assert checked > 1000
    split = {k: v for k, v in triton_keys.items() if len(v) > 1}
    assert not split, f"one launcher key, several triton keys: {split}"
    # and the key is not trivially fine: aligned fp32 pointers with n % 16 == 0 share one
    a = torch.zeros(64)
    assert key(a, a, a, 16) == key(torch.zeros(8), a, a, 32)


def test_key_is_each_arguments_triton_specialization():
    flags = ((False, True, True), (True, False, True), (False, True, False), (False, False, False))
    key = fastlaunch.make_key_function(flags, CUDA_BACKEND)
    x = torch.zeros(8)[1:]
    for args in [(x, x, x, 16), (torch.zeros(4), 1, 17, None), (2**40, x, 1, 1.5)]:
        assert key(*args) == tuple(native_specialize_impl(CUDA_BACKEND, a, *f) for a, f in zip(args, flags))
    with pytest.raises(TypeError):
        key(x, x)  # the wrong number of arguments: the launcher takes the ordinary path


def test_key_tells_apart_what_triton_specializes_on():
    key = fastlaunch.make_key_function(Launcher(add_kernel, BLOCK=128)._flags, CUDA_BACKEND)
    a = torch.zeros(64)
    cases = {
        "base": (a, a, a, 64),
        "dtype": (a.half(), a, a, 64),
        "misaligned pointer": (a, a[1:], a, 64),
        "n not a multiple of 16": (a, a, a, 65),
        "n == 1": (a, a, a, 1),
        "n needs 64 bits": (a, a, a, 2**32),
    }
    keys = {name: key(*args) for name, args in cases.items()}
    assert len(set(keys.values())) == len(cases), keys


# -- FrozenDescriptor ----------------------------------------------------------------------------


def test_frozen_descriptor_specializes_as_triton_does_whatever_the_flags():
    t = torch.zeros(64, 256)
    frozen = FrozenDescriptor.of(t, [16, 256], smem_layout())
    plain = TensorDescriptor.from_tensor(t, [16, 256], smem_layout())
    specs = {native_specialize_impl(backend, d, *flags)
             for backend in (BaseBackend, CUDA_BACKEND) for d in (frozen, plain)
             for flags in itertools.product([False, True], repeat=3)}
    assert specs == {frozen.launch_spec}
    assert frozen.launch_spec[0].startswith("tensordesc<fp32[16, 256],NVMMASharedLayout(")


def test_frozen_descriptor_cannot_change_and_keeps_no_tensor_alive():
    t = torch.zeros(32, 64)
    alive = weakref.ref(t)
    d = FrozenDescriptor.of(t, (8, 64), smem_layout())
    assert (d.base.data_ptr(), d.shape, d.strides, d.block_shape) == (t.data_ptr(), (32, 64), (64, 1), (8, 64))
    for name, value in [("shape", (1, 1)), ("base", t), ("layout", smem_layout(swizzle=128)), ("launch_spec", None)]:
        with pytest.raises(AttributeError, match="immutable"):
            setattr(d, name, value)
    with pytest.raises(AttributeError, match="immutable"):
        del d.block_shape
    del t
    gc.collect()
    assert alive() is None


def test_frozen_descriptor_keeps_triton_rules():
    with pytest.raises(AssertionError, match="16-byte aligned"):
        FrozenDescriptor.of(torch.zeros(8, 64)[:, 1:], [8, 32], smem_layout())
    assert repr(TensorAddress(0x40, torch.float16)) == "TensorAddress(0x40, torch.float16)"


# -- argument binding ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kernel", "fixed", "args"),
    [
        (add_kernel, {"BLOCK": 64, "num_warps": 2}, ("A", "B", "C", 7)),
        (mixed_kernel, {"BLOCK": 32}, ("X", "Y", 5)),
        (mixed_kernel, {"BLOCK": 32, "FLAG": True}, ("X", "Y", 5)),
    ],
)
def test_arguments_reach_the_kernel_in_its_order(kernel, fixed, args):
    """full_args is what triton's binder binds, parameter by parameter."""
    launcher = Launcher(kernel, **fixed)
    binder = create_function_from_signature(kernel.signature, kernel.params, CUDA_BACKEND)
    values = [torch.zeros(4) if isinstance(a, str) else a for a in args]
    bound, _, _ = binder(*[None] * 0, **dict(zip(launcher.runtime_names, values)), **fixed)
    assert launcher.full_args(tuple(values)) == tuple(bound.values())


def test_constructor_refuses_what_cannot_be_fixed_or_left_out():
    with pytest.raises(ValueError, match="constexpr parameter 'BLOCK' must be given"):
        Launcher(add_kernel)
    with pytest.raises(ValueError, match=r"\['n'\] are not constexpr parameters"):
        Launcher(add_kernel, BLOCK=64, n=3)


# -- the fast path on the fake GPU ---------------------------------------------------------------


def test_second_launch_goes_straight_to_the_compiled_kernel(gpu):
    launch = Launcher(add_kernel, BLOCK=128, num_warps=4)
    a, b, c = tensors(1000)
    before = fastlaunch.ordinary_launches()
    launch((8,), a, b, c, 1000)
    launch((8,), a, b, c, 1000)
    assert launch.slow_calls == 1 and len(gpu.compiles) == 1 and fastlaunch.ordinary_launches() == before + 1
    slow, fast = gpu.launches
    assert without_hooks(fast) == without_hooks(slow)
    assert fast[:5] == (8, 1, 1, 1000, 0xF001)  # grid, the current stream, the compiled function
    assert fast[10:13] == (None, None, None)
    assert fast[13:] == (a, b, c, 1000, 128)  # every parameter, the constexpr included


def test_each_new_specialization_takes_the_ordinary_path_once(gpu):
    """A dtype, an alignment, a size triton specializes on: compiled (by triton) and launched
    through the ordinary path the first time, then fast, each with its own compiled kernel."""
    launch = Launcher(add_kernel, BLOCK=128, num_warps=4)
    a = torch.zeros(4096)
    cases = [(a, a, a, 4096), (a.half(), a.half(), a.half(), 4096), (a[1:], a, a, 4095), (a, a, a, 4095), (a, a, a, 1)]
    for args in cases:
        for _ in range(3):
            launch((4,), *args)
    assert launch.slow_calls == len(cases) == len(gpu.compiles) == launch.entry_count()
    by_case = [{call[4] for call in gpu.launches[3 * i : 3 * i + 3]} for i in range(len(cases))]
    assert all(len(functions) == 1 for functions in by_case)
    assert len(set.union(*by_case)) == len(cases)


def test_launches_match_the_ordinary_path_for_every_grid_shape(gpu):
    launch = Launcher(add_kernel, BLOCK=128, num_warps=4)
    a, b, c = tensors(64)
    for grid in [(3,), (3, 2), (3, 2, 5)]:
        launch(grid, a, b, c, 64)
        with fastlaunch.disabled():
            launch(grid, a, b, c, 64)
    pairs = list(zip(gpu.launches[::2], gpu.launches[1::2]))
    assert all(without_hooks(f) == without_hooks(s) for f, s in pairs)
    assert [p[0][:3] for p in pairs] == [(3, 1, 1), (3, 2, 1), (3, 2, 5)]


def test_interleaved_and_default_constexprs(gpu):
    launch = Launcher(mixed_kernel, BLOCK=32)
    x, y, _ = tensors(40)
    launch((2,), x, y, 40)
    launch((2,), x, y, 40)
    slow, fast = gpu.launches
    assert without_hooks(fast) == without_hooks(slow)
    assert fast[13:] == (x, 32, y, 40, False)


def test_hooks_see_every_launch(gpu):
    launch = Launcher(add_kernel, BLOCK=128, num_warps=4)
    a, b, c = tensors(64)
    launch((1,), a, b, c, 64)
    seen = []
    knobs.runtime.launch_enter_hook.add(seen.append)
    try:
        for _ in range(3):
            launch((1,), a, b, c, 64)
    finally:
        knobs.runtime.launch_enter_hook.remove(seen.append)
    assert len(seen) == 3 and launch.slow_calls == 4
    launch((1,), a, b, c, 64)
    assert launch.slow_calls == 4  # fast again once the hook is gone


@pytest.mark.parametrize(
    "setting",
    ["disabled", "callable grid", "debug", "pre-run hook", "exit hook", "hook function"],
)
def test_ordinary_path_where_the_fast_paths_assumptions_fail(gpu, monkeypatch, setting):
    launch = Launcher(add_kernel, BLOCK=128, num_warps=4)
    a, b, c = tensors(64)
    launch((1,), a, b, c, 64)
    grid: Any = (1,)
    if setting == "disabled":
        monkeypatch.setattr(fastlaunch, "_enabled", False)
    elif setting == "callable grid":
        grid = lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)  # noqa: E731
    elif setting == "debug":
        monkeypatch.setattr(knobs.runtime, "debug", True)
    elif setting == "pre-run hook":
        monkeypatch.setattr(add_kernel, "pre_run_hooks", [lambda *args, **kw: None])
    elif setting == "exit hook":
        monkeypatch.setattr(knobs.runtime.launch_exit_hook, "calls", [lambda metadata: None])
    elif setting == "hook function":
        monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda metadata: None)
    launch(grid, a, b, c, 64)
    assert launch.slow_calls == 2


def test_a_changed_global_is_reported_as_triton_reports_it(gpu, monkeypatch):
    launch = Launcher(scaled_kernel, BLOCK=64)
    x, y, _ = tensors(64)
    assert scaled_kernel.cache_key  # records the globals the kernel reads
    launch((1,), x, y, 64)
    launch((1,), x, y, 64)
    assert launch.slow_calls == 1
    monkeypatch.setitem(globals(), "SCALE", 4)
    with pytest.raises(RuntimeError, match="Global variable SCALE has changed"):
        launch((1,), x, y, 64)


def test_devices_have_their_own_entries(gpu):
    launch = Launcher(add_kernel, BLOCK=128, num_warps=4)
    a, b, c = tensors(64)
    launch((1,), a, b, c, 64)
    gpu.driver.device = 1
    launch((1,), a, b, c, 64)
    launch((1,), a, b, c, 64)
    assert launch.slow_calls == 2 and launch.entry_count() == 2
    assert [call[3] for call in gpu.launches] == [1000, 1001, 1001]  # each device's current stream


def test_wrong_arguments_get_tritons_error(gpu):
    launch = Launcher(add_kernel, BLOCK=128, num_warps=4)
    a, b, c = tensors(64)
    launch((1,), a, b, c, 64)
    with pytest.raises(TypeError):
        launch((1,), a, b, c)
    with pytest.raises(TypeError):
        launch((1,), a, b, c, "64")


def test_kernels_that_need_scratch_memory_launch_through_run(gpu):
    """CudaLauncher.__call__ allocates a kernel's scratch memory per launch: such kernels are
    launched through it, as the ordinary path does."""
    gpu.scratch = 256
    allocations = []

    def allocate(size: int, alignment: int, stream: Any) -> torch.Tensor:
        allocations.append(size)
        return torch.empty(size, dtype=torch.int8)

    triton.set_allocator(allocate)
    try:
        launch = Launcher(add_kernel, BLOCK=128, num_warps=4)
        a, b, c = tensors(64)
        launch((3,), a, b, c, 64)
        launch((3,), a, b, c, 64)
    finally:
        from triton.runtime._allocation import NullAllocator

        triton.set_allocator(NullAllocator())
    assert launch.slow_calls == 1 and allocations == [768, 768]
    slow, fast = gpu.launches
    assert without_hooks(fast)[:7] + without_hooks(fast)[9:] == without_hooks(slow)[:7] + without_hooks(slow)[9:]
    assert fast[7].numel() == 768  # the scratch buffer of this launch


def test_descriptors_are_encoded_once_and_launched_as_triton_does(gpu):
    layout = smem_layout()
    launch = Launcher(desc_kernel, XBLOCK=16, YBLOCK=64, num_warps=4)
    a, c = torch.zeros(100, 64), torch.zeros(100, 64)
    da, dc = FrozenDescriptor.of(a, [16, 64], layout), FrozenDescriptor.of(c, [16, 64], layout)
    for _ in range(4):
        launch((7,), da, dc, 100, 64)
    assert launch.slow_calls == 1
    # the ordinary path encodes both on its launch; the fast path once, then keeps them
    assert len(gpu.driver.utils.encoded) == 4
    first, *rest = gpu.launches
    assert all(without_hooks(x) == without_hooks(first) for x in rest)
    assert first[13][0] == "CUtensorMap" and first[13][1] == a.data_ptr()
    # a plain TensorDescriptor still works, encoded on every call as triton does
    plain = TensorDescriptor.from_tensor(a, [16, 64], layout)
    launch((7,), plain, dc, 100, 64)
    launch((7,), plain, dc, 100, 64)
    assert without_hooks(gpu.launches[-1]) == without_hooks(first)
    assert launch.slow_calls == 1 and len(gpu.driver.utils.encoded) == 6


def test_descriptor_launches_match_the_ordinary_path(gpu):
    layout = smem_layout()
    launch = Launcher(desc_kernel, XBLOCK=16, YBLOCK=64, num_warps=4)
    a, c = torch.zeros(48, 64), torch.zeros(48, 64)
    da, dc = FrozenDescriptor.of(a, [16, 64], layout), FrozenDescriptor.of(c, [16, 64], layout)
    launch((3,), da, dc, 48, 64)
    launch((3,), da, dc, 48, 64)
    with fastlaunch.disabled():
        launch((3,), da, dc, 48, 64)
    fast, slow = gpu.launches[1], gpu.launches[2]
    assert without_hooks(fast) == without_hooks(slow)


def test_every_launch_that_fills_descriptors_makes_a_context_current_first(gpu, monkeypatch):
    """A thread that has made no CUDA call has no context current, and the driver cannot fill a
    descriptor there: the ordinary path (triton fills them before its launch makes one current) and
    the fast path's expansion both make the device's context current first, for a plain launcher
    as for a bound launch (tkreg.launch.cuda_context)."""
    made: list[tuple[int, int]] = []  # (device, descriptors encoded so far) at each call
    monkeypatch.setattr(fastlaunch.cuda_context, "make_current", lambda d: made.append((d, len(gpu.driver.utils.encoded))))
    layout = smem_layout()
    launch = Launcher(desc_kernel, XBLOCK=16, YBLOCK=64, num_warps=4)
    a, c = torch.zeros(48, 64), torch.zeros(48, 64)
    plain = (TensorDescriptor.from_tensor(a, [16, 64], layout), TensorDescriptor.from_tensor(c, [16, 64], layout))
    launch((3,), *plain, 48, 64)  # the ordinary path
    assert launch.slow_calls == 1 and made == [(0, 0)]
    gpu.driver.device = 1
    launch((3,), *plain, 48, 64)  # the ordinary path on another device
    launch((3,), *plain, 48, 64)  # the fast path: expanded on every call
    assert launch.slow_calls == 2 and made == [(0, 0), (1, 2), (1, 4)]


# -- bound launches ------------------------------------------------------------------------------


def test_a_bound_launch_prepares_its_arguments_once(gpu):
    layout = smem_layout()
    launch = Launcher(desc_kernel, XBLOCK=16, YBLOCK=64, num_warps=4)
    a, c = torch.zeros(100, 64), torch.zeros(100, 64)
    bound = launch.bind(FrozenDescriptor.of(a, [16, 64], layout), FrozenDescriptor.of(c, [16, 64], layout), 100, 64)
    assert bound.immutable
    for grid in [(7,), (7,), (7, 2), (7,)]:
        bound(grid)
    with fastlaunch.disabled():
        bound((7,))
    assert launch.slow_calls == 2 and len(gpu.compiles) == 1
    # two per ordinary launch (triton encodes them), two kept for all the fast ones
    assert len(gpu.driver.utils.encoded) == 6
    first, *rest = gpu.launches
    assert all(without_hooks(x)[3:] == without_hooks(first)[3:] for x in rest)
    assert [x[:3] for x in gpu.launches] == [(7, 1, 1), (7, 1, 1), (7, 2, 1), (7, 1, 1), (7, 1, 1)]


def test_a_new_bound_launch_of_a_known_specialization_launches_it_directly(gpu, monkeypatch):
    """New descriptors (a new activation's) of a specialization the launcher runs: the bound
    launch's first call goes straight to the compiled kernel, each descriptor encoded once."""
    layout = smem_layout()
    launch = Launcher(desc_kernel, XBLOCK=16, YBLOCK=64, num_warps=4)
    a, c = torch.zeros(100, 64), torch.zeros(100, 64)
    launch.bind(FrozenDescriptor.of(a, [16, 64], layout), FrozenDescriptor.of(c, [16, 64], layout), 100, 64)((7,))
    encoded = len(gpu.driver.utils.encoded)
    through_launcher = []
    original = Launcher.__call__

    def counted(self: Launcher, grid: Any, *args: Any) -> None:
        through_launcher.append(grid)
        original(self, grid, *args)

    monkeypatch.setattr(Launcher, "__call__", counted)
    a2, c2 = torch.zeros(100, 64), torch.zeros(100, 64)
    fresh = launch.bind(FrozenDescriptor.of(a2, [16, 64], layout), FrozenDescriptor.of(c2, [16, 64], layout), 100, 64)
    fresh((7,))
    fresh((7,))
    assert through_launcher == [] and launch.slow_calls == 1 and len(gpu.compiles) == 1
    assert len(gpu.driver.utils.encoded) == encoded + 2
    first, new, again = gpu.launches
    assert first[13][1] == a.data_ptr() and new[13][1] == a2.data_ptr()
    assert without_hooks(new) == without_hooks(again)
    assert without_hooks(new)[:10] == without_hooks(first)[:10]  # grid, device, stream, kernel: as before
    with fastlaunch.disabled():  # its guards still apply: the ordinary path
        launch.bind(FrozenDescriptor.of(a, [16, 64], layout), FrozenDescriptor.of(c2, [16, 64], layout), 100, 64)((7,))
    assert through_launcher == [(7,)] and launch.slow_calls == 2


def test_a_bound_launch_follows_the_current_device(gpu):
    launch = Launcher(desc_kernel, XBLOCK=16, YBLOCK=64, num_warps=4)
    a = torch.zeros(16, 64)
    bound = launch.bind(FrozenDescriptor.of(a, [16, 64], smem_layout()), FrozenDescriptor.of(a, [16, 64], smem_layout()), 16, 64)
    bound((1,))
    gpu.driver.device = 1
    bound((1,))
    bound((1,))
    assert launch.slow_calls == 2 and [x[3] for x in gpu.launches] == [1000, 1001, 1001]


def test_a_bound_launch_of_tensors_specializes_every_call(gpu):
    """A tensor can be re-pointed (set_) to memory of another alignment: bound tensors are
    specialized on every call, so such a change gets its own compiled kernel."""
    launch = Launcher(add_kernel, BLOCK=128, num_warps=4)
    a, b, c = tensors(64)
    bound = launch.bind(a, b, c, 64)
    assert not bound.immutable
    bound((1,))
    bound((1,))
    a.set_(torch.zeros(65)[1:])
    bound((1,))
    assert launch.slow_calls == 2 and len(gpu.compiles) == 2
    assert gpu.launches[-1][13] is a and gpu.launches[-1][4] != gpu.launches[0][4]


def test_a_bound_launch_of_addresses_prepares_its_arguments_once(gpu):
    """An address cannot be re-pointed: a bound launch of TensorAddresses (a bias pointer beside
    descriptors) is specialized and expanded once, and launches those addresses."""
    launch = Launcher(add_kernel, BLOCK=128, num_warps=4)
    a, b, c = tensors(64)
    bound = launch.bind(*(TensorAddress(t.data_ptr(), t.dtype) for t in (a, b, c)), 64)
    assert bound.immutable
    for _ in range(3):
        bound((1,))
    assert launch.slow_calls == 1 and len(gpu.compiles) == 1 and len(gpu.launches) == 3
    assert [x.data_ptr() for x in gpu.launches[-1][13:16]] == [a.data_ptr(), b.data_ptr(), c.data_ptr()]


def test_an_address_cannot_change():
    address = TensorAddress(0x40, torch.float16)
    for name in ("_ptr", "dtype"):
        with pytest.raises(AttributeError, match="immutable"):
            setattr(address, name, 0x80)
        with pytest.raises(AttributeError, match="immutable"):
            delattr(address, name)
    assert (address.data_ptr(), address.dtype) == (0x40, torch.float16)


def test_a_bound_launch_of_an_interpreted_kernel_runs_it():
    launch = Launcher(InterpretedFunction(add_source), BLOCK=16)
    a, b, c = torch.ones(20), torch.ones(20), torch.zeros(20)
    launch.bind(a, b, c, 20)((2,))
    assert torch.equal(c, torch.full((20,), 2.0))


# -- the interpreter -----------------------------------------------------------------------------


def test_interpreter_functions_take_the_ordinary_path():
    kernel = InterpretedFunction(add_source)
    launch = Launcher(kernel, BLOCK=32)
    assert not fastlaunch.is_compiled(kernel) and fastlaunch.is_compiled(add_kernel)
    a, b = torch.randn(50), torch.randn(50)
    c = torch.full((50,), float("nan"))
    for _ in range(2):
        launch((2,), a, b, c, 50)
    torch.testing.assert_close(c, a + b, rtol=0, atol=0)
    assert launch.slow_calls == 2


def test_set_enabled_returns_the_previous_setting():
    before = fastlaunch.enabled()
    assert fastlaunch.set_enabled(False) == before
    with fastlaunch.disabled():
        assert not fastlaunch.enabled()
    assert not fastlaunch.enabled()
    fastlaunch.set_enabled(before)


@pytest.mark.parametrize("initialised", [True, False])
def test_the_current_device_is_asked_of_torchs_builtin_once_cuda_is_initialised(monkeypatch, initialised):
    """torch.cuda.current_device only initialises CUDA before its builtin answers: once CUDA is up,
    a launch asks the builtin, a Python call less; a forked child gets the trampolines back."""
    import sys

    triton_driver = sys.modules["triton.runtime.driver"]  # the module (triton.runtime.driver is its instance)

    class Active:
        get_current_device = staticmethod(torch.cuda.current_device)
        get_current_stream = staticmethod(lambda device: 0)

    config = triton_driver.DriverConfig()
    config.set_active(Active())
    monkeypatch.setattr(triton_driver, "driver", config)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialised)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)  # a CPU build has none
    monkeypatch.setattr(fastlaunch, "_current_device", fastlaunch._current_device)
    monkeypatch.setattr(fastlaunch, "_current_stream", fastlaunch._current_stream)
    fastlaunch._bind_driver()
    expected = torch._C._cuda_getDevice if initialised else torch.cuda.current_device
    assert fastlaunch._current_device is expected
    assert fastlaunch._current_stream is Active.get_current_stream
    fastlaunch._unbind_driver()
    assert fastlaunch._current_device is fastlaunch._device_trampoline
    assert fastlaunch._current_stream is fastlaunch._stream_trampoline
