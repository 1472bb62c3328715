"""The faulty launchers. Each takes (a, b, out=None) like every add launcher."""

from __future__ import annotations

import ctypes
import os
import signal
import time
from typing import Any

import triton
import triton.language as tl

BLOCK = 1024
FAR = 1 << 36  # elements past the output: no allocation reaches that far


@triton.jit
def _oob_store_kernel(a_ptr, b_ptr, c_ptr, numel, FAR_OFFSET: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < numel
    total = tl.load(a_ptr + offs, mask=inside) + tl.load(b_ptr + offs, mask=inside)
    tl.store(c_ptr + offs.to(tl.int64) + FAR_OFFSET, total, mask=inside)


@triton.jit(debug=True)
def _assert_kernel(a_ptr, c_ptr, numel, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(a_ptr + offs, mask=offs < numel, other=0.0)
    tl.device_assert(x != x, "tkreg fault fixture: a device-side assert")  # false for every number
    tl.store(c_ptr + offs, x, mask=offs < numel)


@triton.jit
def _spin_kernel(a_ptr, c_ptr):
    i = tl.load(a_ptr).to(tl.int32) * 0 + 1  # a runtime value, so the loop cannot be folded away
    while i > 0:
        i = i % 1000 + 1
    tl.store(c_ptr, i.to(tl.float32))


def _out(a: Any, out: Any) -> Any:
    import torch

    return torch.empty_like(a) if out is None else out


def add_fault_oob(a: Any, b: Any, out: Any = None) -> Any:
    out = _out(a, out)
    _oob_store_kernel[(triton.cdiv(a.numel(), BLOCK),)](a, b, out, a.numel(), FAR_OFFSET=FAR, BLOCK=BLOCK)
    return out


def add_fault_assert(a: Any, b: Any, out: Any = None) -> Any:
    out = _out(a, out)
    _assert_kernel[(triton.cdiv(a.numel(), BLOCK),)](a, out, a.numel(), BLOCK=BLOCK)
    return out


def add_fault_spin(a: Any, b: Any, out: Any = None) -> Any:
    out = _out(a, out)
    _spin_kernel[(1,)](a, out)
    return out


def add_fault_kill(a: Any, b: Any, out: Any = None) -> Any:
    os.kill(os.getpid(), signal.SIGKILL)
    return out


def add_fault_segfault(a: Any, b: Any, out: Any = None) -> Any:
    ctypes.string_at(0)
    return out


def add_fault_blocked(a: Any, b: Any, out: Any = None) -> Any:
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    time.sleep(3600)
    return out
