"""Recorded launches made again in C++ (``replay.cpp``), where tkreg was built with it for the
torch in use (:mod:`tkreg.core.extensions`).

:func:`replayer` packs each recorded launch's parameters once, as triton's launcher would pass
them (8 bytes a parameter, the call's tensors left out), and hands them to the extension; a replay
then checks the fast path's guards, writes the call's addresses in and calls ``cuLaunchKernelEx``.
A recording it cannot pack exactly (a kernel that reads globals, tensor descriptors, scratch
memory, clusters, a launcher other than triton's own, a parameter type it does not know) keeps
the Python replay (:func:`tkreg.launch.recording._replay_function`), as does every recording where
the extension is not in use.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Sequence
from typing import Any

from ...core import extensions

# How triton 3.6's launcher passes a scalar of each type (driver.py: ty_to_cpp, and its packing of
# floats), as struct formats; each is then widened to 8 bytes, little-endian.
_SCALARS = {
    "i1": "<b", "i8": "<b", "i16": "<h", "i32": "<i", "i64": "<q",
    "u1": "<B", "u8": "<B", "u16": "<H", "u32": "<I", "u64": "<Q",
    "fp16": "<e", "fp32": "<f", "f32": "<f", "fp64": "<d",
}  # fmt: skip
_SCRATCH_WORDS = 2  # the global and profile scratch pointers triton's kernels take last (null: none)
_TRITON_LAUNCHER = "__triton_launcher"  # the module name of triton's compiled C launchers


def replayer(launches: Sequence[Any]) -> Callable[[Sequence[Any]], bool] | None:
    """``replay(tensors) -> bool`` for these recorded launches (tkreg.launch.recording._Launch), in
    C++; None where the extension is not in use or a launch cannot be packed exactly."""
    module = _load()[0]
    if module is None or not launches or len({launch.device for launch in launches}) != 1:
        return None
    packed = []
    for launch in launches:
        one = _packed(launch)
        if one is None:
            return None
        packed.append(one)
    kernels = tuple({id(launch.fn): launch.fn for launch in launches}.values())
    return module.replayer(int(launches[0].device), kernels, tuple(packed))


def parameters(replay: Callable[[Sequence[Any]], bool], tensors: Sequence[Any]) -> list[bytes]:
    """Each launch's parameters as ``replay`` would pass them with ``tensors`` (launching nothing)."""
    return _load()[0].parameters(replay, tuple(tensors))


def guards_pass(replay: Callable[[Sequence[Any]], bool]) -> bool:
    """Whether ``replay``'s guards pass now (fast launches on, no hook, its device current), the
    driver left out."""
    return _load()[0].guards_pass(replay)


def status() -> str:
    """Whether recorded launches are replayed in C++, and if not, why."""
    return _load()[1]


def _packed(launch: Any) -> tuple[Any, ...] | None:
    """(function, grid, num_warps, shared, cooperative, pdl, words, slots) for the extension, or
    None where this launch is not one it replays exactly."""
    entry, fn = launch.entry, launch.fn
    launcher_module = getattr(getattr(entry.launcher, "__self__", None), "__name__", None)
    if fn.used_global_vals or entry.descs or len(entry.head) != 8 or launcher_module != _TRITON_LAUNCHER:
        return None
    cooperative, pdl = entry.head[0], entry.head[1]
    num_warps, num_ctas, shared = entry.head[4]
    if num_ctas != 1 or len(entry.types) != len(launch.args):
        return None
    tensor_at = dict(launch.slots)
    words, slots = bytearray(), []
    for position, (kind, value) in enumerate(zip(entry.types, launch.args)):
        if kind == "constexpr":
            continue
        if position in tensor_at:
            if not (isinstance(kind, str) and kind.startswith("*")):
                return None
            slots.append((len(words) // 8, tensor_at[position]))
            words += bytes(8)
            continue
        word = _word(kind, value)
        if word is None:
            return None
        words += word
    words += bytes(8 * _SCRATCH_WORDS)
    grid = (*launch.grid, 1, 1)[:3]
    return (int(entry.function), grid, int(num_warps), int(shared), bool(cooperative), bool(pdl), bytes(words),
            tuple(slots))  # fmt: skip


def _word(kind: Any, value: Any) -> bytes | None:
    """One parameter's 8 bytes as triton's launcher passes it, or None where it is not known."""
    if not isinstance(kind, str) or type(value) not in (int, float, bool, type(None)):
        return None
    try:
        if kind.startswith("*"):  # an address given as an int, or None (null)
            raw = struct.pack("<Q", 0 if value is None else value)
        elif kind == "bf16":  # triton keeps the high half of the float's bits (no rounding)
            raw = struct.pack("<H", int.from_bytes(struct.pack("<f", value), "little") >> 16)
        elif kind in _SCALARS and value is not None:
            raw = struct.pack(_SCALARS[kind], value)
        else:
            return None
    except (struct.error, OverflowError, TypeError):
        return None
    return raw.ljust(8, b"\0")


@functools.cache  # loaded on first use
def _load() -> tuple[Any, str]:
    module, status = extensions.load("tkreg.launch.native._replay", "recorded launches are replayed in Python")
    if module is not None:
        from triton import knobs
        from triton.knobs import HookChain

        from .. import fastlaunch

        module.guards(vars(fastlaunch), knobs.runtime, knobs.compilation, HookChain)
    return module, status
