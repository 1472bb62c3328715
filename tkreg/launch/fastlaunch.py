"""Launch a ``@triton.jit`` or ``@gluon.jit`` kernel with little host work per call.

``kernel[grid](*args, **kw)`` spends about 15 us per call on an H100 host (2026-11-23), nearly all
in Python: binding the arguments, specializing each one, building and hashing the cache key,
reading knobs, preparing launch metadata for hooks nobody registered, and, for Gluon kernels,
encoding a CUtensorMap per TMA descriptor on every call. A :class:`Launcher` does that work once
per specialization and then calls the compiled kernel's launcher directly.

Use (make launchers once, e.g. per config in a dict, and call them per launch)::

    launch = Launcher(add_kernel, BLOCK=1024, num_warps=4)   # constexprs and options: fixed
    launch(((n + 1023) // 1024,), a, b, out, n)               # the grid, then every other
                                                              # parameter in the kernel's order
    # Gluon/TMA: descriptors from tkreg.launch.tma.descriptor (cached, immutable), and the whole call
    # bound once per input if it repeats (keep BoundLaunch objects in a bounded dict keyed by
    # what the descriptors were made from: addresses, shapes, strides, dtype, config)
    bound = Launcher(matmul_kernel, BLOCK_M=128, num_warps=4).bind(
        tma.descriptor(a, [128, 64], "a"), tma.descriptor(b, [64, 128], "b"), tma.descriptor(c, [128, 128], "out"))
    bound(grid)

Host-side grid arithmetic: ``triton.cdiv`` and ``triton.next_power_of_2`` are constexpr
functions in triton 3.6 and cost about 3 us per call from Python; use integer arithmetic.
Public names: Launcher (``__call__``, ``bind``, ``slow_calls``, ``entry_count``), BoundLaunch,
FrozenDescriptor (``of``), TensorAddress, is_compiled, enabled / set_enabled / disabled,
ordinary_launches.

How it stays right. The first call with a new specialization takes the ordinary path,
``kernel[grid](...)``: triton binds, checks, compiles if needed, runs its hooks and launches, and
returns the CompiledKernel, which the launcher keeps under a key made of the current device and
triton's own specialization of every runtime argument (``native_specialize_impl``, the function
triton's binder calls, with each parameter's own flags: dtype and 16-byte alignment of tensors,
i32/i64 and divisibility by 16 of integers, value 1, None, ...). Fixed arguments are constant per
launcher, so two calls with equal keys have equal triton cache keys and run the same compiled
kernel: the key can be finer than triton's (then a specialization is compiled-once, looked up
twice), never coarser. Later calls with a known key launch at once on the current stream.

Where the fast path's assumptions do not hold it is not taken, and ``kernel[grid](...)`` runs
instead, every time: a kernel that is not a JITFunction (TRITON_INTERPRET=1 makes interpreter
functions; autotuners and heuristics wrap kernels), a triton other than 3.6 (the launcher internals
read here are 3.6's), a launch hook registered (``triton.knobs.runtime.launch_enter_hook`` /
``launch_exit_hook``: hooks see every launch as before), TRITON_DEBUG or instrumentation, the
kernel's pre-run hooks, a grid given as a callable, a global the kernel read that has changed
since it was compiled (triton raises), or arguments the key cannot be made of.
``TKREG_FASTLAUNCH=0`` in the environment, :func:`set_enabled` or :func:`disabled` turn the fast
path off altogether (to compare with the ordinary path).

Bound launches: ``launch.bind(*args)`` prepares one argument list for launching again and again
(``bound(grid)``): when every argument is immutable (ints, floats, None, FrozenDescriptors,
TensorAddresses) it is specialized and expanded once, and a call reads only the grid, the device
and the stream. Keep bound launches in a cache keyed by whatever the arguments were made from.

TMA descriptors: :class:`FrozenDescriptor` is a Gluon ``TensorDescriptor`` that cannot change
once made and keeps no tensor alive, so its specialization is computed once and the CUtensorMap
triton encodes for it (``make_tensordesc_arg``) is kept per compiled kernel. Cache such
descriptors by address, shape, strides, dtype, block and layout (``tkreg.launch.tma.descriptor`` does);
any other descriptor is specialized and encoded on every call, as triton does.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import triton
from triton import knobs
from triton.backends.compiler import BaseBackend
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonTensorDescriptor
from triton.knobs import HookChain
from triton.runtime.jit import JITFunction, KernelParam, native_specialize_impl

from ..core import bounded
from . import cuda_context

try:  # the CUDA launcher's pieces; without them every launch takes ``run`` (or the ordinary path)
    from triton.backends.nvidia.driver import CudaLauncher, make_tensordesc_arg
except ImportError:  # pragma: no cover - triton without its NVIDIA backend
    CudaLauncher = make_tensordesc_arg = None

ENV_SWITCH = "TKREG_FASTLAUNCH"  # "0" turns the fast path off for the whole process
SUPPORTED_TRITON = "3.6."  # the launcher internals this module reads (CudaLauncher, its C launch)
TRITON_OK = triton.__version__.startswith(SUPPORTED_TRITON)

_enabled = os.environ.get(ENV_SWITCH, "1") != "0"
_MISSING = object()
_ordinary_launches = 0  # launches through kernel[grid](...), by every launcher
# While tkreg.launch.recording records a call: told of every fast launch (and of ordinary ones).
_recorder: Any = None


def ordinary_launches() -> int:
    """How many launches so far took the ordinary path (first ones of a specialization, hooks,
    fallbacks), over every launcher: a script can check that repeated calls add none."""
    return _ordinary_launches


def set_enabled(flag: bool) -> bool:
    """Turn the fast path on or off for every launcher; returns the previous setting."""
    global _enabled
    previous, _enabled = _enabled, bool(flag)
    return previous


def enabled() -> bool:
    return _enabled


@contextmanager
def disabled() -> Iterator[None]:
    """Every launch inside takes the ordinary ``kernel[grid](...)`` path."""
    previous = set_enabled(False)
    try:
        yield
    finally:
        set_enabled(previous)


def is_compiled(fn: Any) -> bool:
    """True when ``fn`` is a kernel triton compiles (a JITFunction), False for interpreter
    functions (TRITON_INTERPRET=1 at import) and wrappers such as autotuners."""
    return isinstance(fn, JITFunction)


# -- what the fast path asks of the CUDA runtime (tests put fakes here) --------------------------


def _bind_driver() -> None:
    """Replace the two trampolines below by the active driver's own functions (what
    JITFunction.run calls: torch's current device and current raw stream). Where the device is
    torch.cuda.current_device and CUDA is initialised, its builtin answers alone: the function
    only initialises CUDA first, and a replayed call pays for each Python call it makes."""
    global _current_device, _current_stream
    import torch
    from triton.runtime.driver import driver

    device = driver.active.get_current_device
    builtin = getattr(torch._C, "_cuda_getDevice", None)
    if device is torch.cuda.current_device and builtin is not None and torch.cuda.is_initialized():
        device = builtin
    _current_device = device
    _current_stream = driver.active.get_current_stream


def _unbind_driver() -> None:
    """The trampolines again: a forked child must not skip torch's check that CUDA is not
    re-initialised in it."""
    global _current_device, _current_stream
    _current_device, _current_stream = _device_trampoline, _stream_trampoline


def _current_device() -> int:
    _bind_driver()
    return _current_device()


def _current_stream(device: int) -> int:
    _bind_driver()
    return _current_stream(device)


_device_trampoline, _stream_trampoline = _current_device, _current_stream
os.register_at_fork(after_in_child=_unbind_driver)


def _backend_for(fn: JITFunction, device: int) -> Any:
    """The backend triton's binder specializes with on ``device`` (JITFunction.create_binder)."""
    return fn.device_caches[device][3]


# -- TMA descriptors that cannot change --------------------------------------------------------


class TensorAddress:
    """What a TMA descriptor needs of its tensor, the address and the dtype, without keeping the
    tensor (and its memory) alive in a descriptor cache."""

    __slots__ = ("_ptr", "dtype")

    def __init__(self, ptr: int, dtype: Any) -> None:
        object.__setattr__(self, "_ptr", ptr)
        object.__setattr__(self, "dtype", dtype)

    def data_ptr(self) -> int:
        return self._ptr

    # Immutable, so a bound launch of addresses keeps its specialization (triton's reads only the
    # address's alignment and the dtype) and its expanded arguments, as one of descriptors does.
    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"TensorAddress is immutable (tried to set {name!r}); make a new one")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"TensorAddress is immutable (tried to delete {name!r})")

    def __repr__(self) -> str:
        return f"TensorAddress(0x{self._ptr:x}, {self.dtype})"


class FrozenDescriptor(GluonTensorDescriptor):
    """A Gluon TensorDescriptor that refuses changes after it is made, so what is derived from it
    stays true: ``launch_spec`` (triton's specialization of it, computed once) and the launch
    arguments triton's CUDA launcher expands it to (kept per tensordesc metadata)."""

    _frozen = False  # until __init__ ends (a class attribute: __setattr__ reads it without a miss)

    def __init__(self, base: Any, shape: Sequence[int], strides: Sequence[int], block_shape: Sequence[int],
                 layout: Any, padding: str = "zero") -> None:
        object.__setattr__(self, "_expansions", {})
        super().__init__(base, tuple(shape), tuple(strides), tuple(block_shape), layout, padding)
        object.__setattr__(self, "launch_spec", _descriptor_spec(self))
        object.__setattr__(self, "_frozen", True)

    @classmethod
    def of(cls, t: Any, block_shape: Sequence[int], layout: Any, padding: str = "zero") -> FrozenDescriptor:
        """A descriptor of tensor ``t`` in ``block_shape`` boxes (TensorDescriptor.from_tensor)."""
        return cls(TensorAddress(t.data_ptr(), t.dtype), t.shape, t.stride(), block_shape, layout, padding)

    def __setattr__(self, name: str, value: Any) -> None:
        if self._frozen:
            raise AttributeError(f"FrozenDescriptor is immutable (tried to set {name!r}); make a new one")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"FrozenDescriptor is immutable (tried to delete {name!r})")

    def launch_args(self, meta: Any, meta_key: Any) -> list[Any]:
        """The arguments triton's launcher passes for this descriptor under ``meta`` (one entry of
        a compiled kernel's tensordesc_meta, ``meta_key`` its hashable form): made once."""
        expanded = self._expansions.get(meta_key)
        if expanded is None:
            expanded = self._expansions[meta_key] = make_tensordesc_arg(self, meta)
        return expanded


# Triton's specialization of a descriptor, by what it is made of: the element type, the block, the
# padding and the layout (by identity, confirmed with ``is``: the entry holds the layout, so its id
# is not reused meanwhile). Not the address, shape or strides (a test checks it against triton's
# own on descriptors that differ in those), so a descriptor of a new tensor (a new activation)
# finds it: making the string prints the layout, several microseconds a descriptor.
_SPEC_CACHE_SIZE = 256
_specs: dict[tuple[Any, ...], tuple[Any, tuple[Any, Any]]] = {}


def _descriptor_spec(desc: FrozenDescriptor) -> tuple[Any, Any]:
    """``native_specialize_impl`` of a descriptor, which ignores the backend and the parameter's
    flags (a test checks it), so one computation serves every kernel parameter it is passed to."""
    layout = desc.layout
    key = (desc.base.dtype, desc.block_shape, desc.padding, type(layout), id(layout))
    found = _specs.get(key)
    if found is not None and found[0] is layout:
        return found[1]
    spec = native_specialize_impl(BaseBackend, desc, False, True, True)
    bounded.put(_specs, key, (layout, spec), _SPEC_CACHE_SIZE)
    return spec


# -- the launcher --------------------------------------------------------------------------------


def _python_function(fn: Any) -> Callable[..., Any]:
    """The plain function under a JITFunction, interpreter function or autotuner."""
    while not inspect.isfunction(fn):
        fn = fn.fn
    return fn


def _fast_path_open(fn: JITFunction, grid: Any) -> bool:
    """Whether a launch of ``fn`` on ``grid`` may skip the ordinary path: on, a grid of 1 to 3
    values, no pre-run hook, no launch hook registered, and nothing on that enters triton's
    options (debug, instrumentation). One function, as it runs on every launch."""
    if not (_enabled and type(grid) is tuple and 0 < len(grid) < 4) or fn.pre_run_hooks:
        return False
    runtime = knobs.runtime
    enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
    return (
        (enter is None or (type(enter) is HookChain and not enter.calls))
        and (leave is None or (type(leave) is HookChain and not leave.calls))
        and not runtime.debug
        and not knobs.compilation.instrumentation_mode
    )


def make_key_function(flags: Sequence[tuple[bool, bool, bool]], backend: Any) -> Callable[..., tuple[Any, ...]]:
    """A function of the runtime arguments that returns, for each, triton's specialization of it:
    ``native_specialize_impl(backend, arg, is_const, specialize, align)`` with that parameter's
    ``flags``, or a FrozenDescriptor's precomputed one. Written out per arity (like triton's own
    binder) because a loop over the arguments costs twice as much per call."""
    names = [f"a{i}" for i in range(len(flags))]
    parts = [
        f"({a}.launch_spec if type({a}) is FD else spec(backend, {a}, {c}, {s}, {al})), "
        for a, (c, s, al) in zip(names, flags)
    ]
    source = f"def key({', '.join(names)}):\n    return ({''.join(parts)})\n"
    namespace: dict[str, Any] = {"FD": FrozenDescriptor, "spec": native_specialize_impl, "backend": backend}
    exec(source, namespace)  # the source is built above from booleans and fixed names only
    return namespace["key"]


class _DeviceState:
    __slots__ = ("entries", "key")

    def __init__(self, key: Callable[..., tuple[Any, ...]]) -> None:
        self.key = key
        self.entries: dict[tuple[Any, ...], _Entry] = {}


class Launcher:
    """``fn[grid](*args, **fixed)`` with the per-call work done once per specialization.

    ``fixed``: the constexpr parameters (every one without a default must be given here) and
    launch options (num_warps, num_stages, maxnreg, ...), the same for every call. A call passes
    the grid (a tuple of 1 to 3 ints; a callable takes the ordinary path) and every other
    parameter positionally, in the kernel's order. Returns None.
    """

    def __init__(self, fn: Any, **fixed: Any) -> None:
        self.fn = fn
        self.fixed = dict(fixed)
        params = list(inspect.signature(_python_function(fn)).parameters.values())
        kernel_params = [KernelParam(i, p, False, False) for i, p in enumerate(params)]
        names = [p.name for p in params]
        for kp in kernel_params:
            if kp.is_constexpr and kp.name not in self.fixed:
                if not kp.has_default:
                    raise ValueError(f"{fn}: constexpr parameter {kp.name!r} must be given when the Launcher is made")
                self.fixed[kp.name] = kp.default
        runtime = [kp for kp in kernel_params if kp.name not in self.fixed]
        bad = [kp.name for kp in kernel_params if kp.name in fixed and not kp.is_constexpr]
        if bad:
            raise ValueError(f"{fn}: {bad} are not constexpr parameters; pass them at each call")
        self.runtime_names = tuple(kp.name for kp in runtime)
        # Full argument list, in parameter order, as the compiled kernel's launcher takes it.
        n = len(runtime)
        if tuple(names[:n]) == self.runtime_names:
            self._tail: tuple[Any, ...] | None = tuple(self.fixed[name] for name in names[n:])
            self._slots: tuple[tuple[bool, Any], ...] = ()
        else:  # a constexpr between runtime parameters
            self._tail = None
            index = {name: i for i, name in enumerate(self.runtime_names)}
            self._slots = tuple((True, index[nm]) if nm in index else (False, self.fixed[nm]) for nm in names)
        self._jit = fn if is_compiled(fn) and TRITON_OK else None
        if self._jit is not None:
            by_name = {p.name: p for p in self._jit.params}
            self._flags = tuple(
                (by_name[kp.name].is_const, not by_name[kp.name].do_not_specialize,
                 not by_name[kp.name].do_not_specialize_on_alignment)
                for kp in runtime
            )
        self._devices: dict[int, _DeviceState] = {}
        self.slow_calls = 0  # launches that took the ordinary path (compiles, hooks, fallbacks)

    def __repr__(self) -> str:
        return f"Launcher({self.fn}, {self.fixed})"

    def __call__(self, grid: Any, *args: Any) -> None:
        fn = self._jit
        if fn is not None and _fast_path_open(fn, grid):
            device = _current_device()
            state = self._devices.get(device)
            if state is not None:
                try:
                    entry = state.entries.get(state.key(*args))
                except Exception:  # an argument triton cannot specialize: its binder will say why
                    entry = None
                if entry is not None and (not fn.used_global_vals or _globals_unchanged(fn)):
                    tail = self._tail
                    full = entry.expand(args + tail if tail is not None else self.full_args(args))
                    entry.launch(grid, _current_stream(device), full)
                    if _recorder is not None:
                        _recorder.launched(fn, entry, grid, full, device)
                    return
            self._first_launch(grid, args, device)
            return
        self._slow(grid, args)

    def bind(self, *args: Any) -> BoundLaunch:
        """``args`` prepared for repeated launches: ``bound(grid)`` is ``self(grid, *args)``."""
        return BoundLaunch(self, args)

    def entry_for(self, device: int, args: tuple[Any, ...]) -> _Entry | None:
        """The compiled specialization a call with ``args`` on ``device`` launches, if known."""
        state = self._devices.get(device)
        if state is None:
            return None
        try:
            return state.entries.get(state.key(*args))
        except Exception:
            return None

    def full_args(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """Every parameter's value in the kernel's order: ``args`` with the fixed ones merged in."""
        if self._tail is not None:
            return args + self._tail
        return tuple(args[v] if runtime else v for runtime, v in self._slots)

    def entry_count(self) -> int:
        """Specializations this launcher can launch without the ordinary path, over all devices."""
        return sum(len(state.entries) for state in self._devices.values())

    def _slow(self, grid: Any, args: tuple[Any, ...]) -> Any:
        global _ordinary_launches
        self.slow_calls += 1
        _ordinary_launches += 1
        if _recorder is not None:
            _recorder.refuse(f"a launch of {self.fn} took the ordinary path")
        if self._jit is not None:  # triton fills descriptors before its launch makes a context current
            cuda_context.make_current(_current_device())
        if len(args) != len(self.runtime_names):
            return self.fn[grid](*args, **self.fixed)  # triton reports the mismatch
        return self.fn[grid](**dict(zip(self.runtime_names, args)), **self.fixed)

    def _first_launch(self, grid: Any, args: tuple[Any, ...], device: int) -> None:
        """The ordinary path, then remember the compiled kernel it ran under this call's key."""
        kernel = self._slow(grid, args)
        if kernel is None or hasattr(kernel, "result") or getattr(kernel, "function", None) is None:
            return  # not launched, or compiled asynchronously: nothing to keep yet
        state = self._devices.get(device)
        if state is None:
            state = self._devices[device] = _DeviceState(make_key_function(self._flags, _backend_for(self._jit, device)))
        try:
            key = state.key(*args)
        except Exception:
            return
        state.entries[key] = _Entry(kernel)


IMMUTABLE_TYPES = (int, float, bool, type(None), TensorAddress)


class BoundLaunch:
    """A launcher's call with fixed arguments: ``bound(grid)`` launches ``launcher(grid, *args)``.

    When every argument is immutable (IMMUTABLE_TYPES, FrozenDescriptor), the first launch on a
    device also keeps the compiled specialization and the expanded argument list, so later calls
    read only the grid, the device and the stream (the same guards as :class:`Launcher` apply).
    Otherwise (a tensor can be re-pointed with ``set_()``, changing its specialization) every call
    goes through the launcher. A bound launch holds its arguments: bind descriptors and sizes,
    not tensors whose memory should be freed.
    """

    __slots__ = ("_device", "_entry", "_flat", "args", "immutable", "launcher")

    def __init__(self, launcher: Launcher, args: tuple[Any, ...]) -> None:
        self.launcher = launcher
        self.args = args
        self.immutable = all(type(a) in IMMUTABLE_TYPES or type(a) is FrozenDescriptor for a in args)
        self._device: int | None = None
        self._entry: _Entry | None = None
        self._flat: Any = None

    def __call__(self, grid: Any) -> None:
        fn = self.launcher._jit
        if self._flat is None and self.immutable and fn is not None:
            # a specialization the launcher already runs (a bound launch of new descriptors, e.g.
            # a new activation's): expanded once here, not once by the launcher and once after
            self._keep(_current_device())
        if self._flat is not None and _fast_path_open(fn, grid) and (not fn.used_global_vals or _globals_unchanged(fn)):
            device = _current_device()
            if device == self._device:
                self._entry.launch(grid, _current_stream(device), self._flat)
                if _recorder is not None:
                    _recorder.launched(fn, self._entry, grid, self._flat, device)
                return
        self.launcher(grid, *self.args)
        if self.immutable and fn is not None:
            self._keep(_current_device())

    def _keep(self, device: int) -> None:
        entry = self.launcher.entry_for(device, self.args)
        if entry is not None:
            self._device, self._entry = device, entry
            self._flat = entry.expand(self.launcher.full_args(self.args))


def _globals_unchanged(fn: JITFunction) -> bool:
    """What JITFunction.run checks before every launch: the globals the kernel read still hold
    the values it was compiled with (else the ordinary path raises triton's error)."""
    for (name, _), (value, scope) in fn.used_global_vals.items():
        now = scope.get(name, _MISSING)
        # the same object first: a Gluon layout's __eq__ is Python, and a kernel reads dozens
        if now is not value and now != value:
            return False
    return True


class _Entry:
    """One compiled specialization and how to launch it: straight into the C launcher when the
    kernel needs no scratch memory (what CudaLauncher.__call__ would add), else through the
    compiled kernel's ``run``."""

    __slots__ = ("descs", "function", "head", "launcher", "types")

    def __init__(self, kernel: Any) -> None:
        run = kernel.run
        signature = list(kernel.src.signature.values())
        self.types = tuple(signature)  # each parameter's type in triton's signature ("*fp32", "i32", "constexpr", ...)
        positions = [i for i, s in enumerate(signature) if isinstance(s, str) and s.startswith("tensordesc")]
        raw = _raw_launch(run, bool(positions))
        self.function = kernel.function
        if raw is None:
            self.launcher = run
            self.head = (kernel.packed_metadata, None, None, None)
            self.descs: tuple[tuple[int, Any, Any], ...] = ()
            return
        self.launcher = raw
        self.head = (run.launch_cooperative_grid, run.launch_pdl, None, None, kernel.packed_metadata, None, None, None)
        metas = list(getattr(kernel.metadata, "tensordesc_meta", None) or [None] * len(positions))
        # Expanded right to left, so earlier positions stay valid while later ones grow.
        self.descs = tuple((i, meta, _meta_key(meta)) for i, meta in reversed(list(zip(positions, metas))))

    def expand(self, args: Sequence[Any]) -> Sequence[Any]:
        """Every parameter's value (in the kernel's order) as the launch function takes them:
        tensor descriptors replaced by what the launcher expands them to."""
        return _expand_descriptors(args, self.descs) if self.descs else args

    def launch(self, grid: tuple[Any, ...], stream: int, args: Sequence[Any]) -> None:
        """Launch on ``stream`` with the expanded arguments (:meth:`expand`)."""
        n = len(grid)
        if n == 1:
            self.launcher(grid[0], 1, 1, stream, self.function, *self.head, *args)
        elif n == 2:
            self.launcher(grid[0], grid[1], 1, stream, self.function, *self.head, *args)
        else:
            self.launcher(grid[0], grid[1], grid[2], stream, self.function, *self.head, *args)


def _raw_launch(run: Any, has_descriptors: bool) -> Callable[..., Any] | None:
    """The C launch function under triton 3.6's CudaLauncher, when calling it directly is what
    CudaLauncher.__call__ would do: no scratch memory to allocate per launch. With tensor
    descriptor parameters ``run.launch`` is a wrapper that expands them; the function it wraps
    is taken from its closure (None, and the launch goes through ``run``, if it is not there)."""
    if CudaLauncher is None or type(run) is not CudaLauncher or run.global_scratch_size or run.profile_scratch_size:
        return None
    if not has_descriptors:
        return run.launch
    inner = inspect.getclosurevars(run.launch).nonlocals.get("launcher")
    return inner if callable(inner) else None


def _meta_key(meta: Any) -> Any:
    """A hashable form of one tensordesc_meta entry (a dict holding a list)."""
    if meta is None:
        return None
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in meta.items()))


def _expand_descriptors(args: tuple[Any, ...], descs: tuple[tuple[int, Any, Any], ...]) -> list[Any]:
    """Each tensor-descriptor argument replaced by what triton's launcher expands it to."""
    cuda_context.make_current(_current_device())  # the fill needs one: a new thread has none yet
    out = list(args)
    for i, meta, meta_key in descs:
        d = out[i]
        out[i : i + 1] = d.launch_args(meta, meta_key) if type(d) is FrozenDescriptor else make_tensordesc_arg(d, meta)
    return out
