"""Paying a process's first calls ahead: ``tkreg.ops.warm()``, and the first call's preload.

The first call of a signature in a process plans it and, where a kernel runs it, loads that kernel
(milliseconds; Triton's first load in a process once hashed Triton itself, about 0.3 s: its key is
now kept, :mod:`tkreg.launch.triton_key`), records its second call and replays from the third
(:mod:`.replaying`). A server pays that on its first
requests unless something pays it before. Every signature earlier processes ran from a measured
choice is remembered beside the tuning cache (:mod:`.remembered`), most recently planned last.

- :func:`warm` replays every one on this process's GPUs: inputs of its exact dtypes, shapes,
  strides and alignment, filled with zeros (valid for any index input), through ``tkreg.ops.<op>``
  itself, which plans it, loads its kernel and launches it into a fresh output,
  :data:`REPLAYED_CALLS` times (the launcher's call, the recorded one, then replays). Later calls
  of those signatures then neither plan nor load; the first of each still runs slower than a warm
  call while the host's caches are cold for it (1.6-1.9x, median, in the dispatch suite on H100
  and H200, 2026-11-27 and 2026-11-28). Calls through the dispatcher's own call instead left the
  caller's path (the C++ call's lookup, the plan's returned outputs) unrun: a probe's first calls
  of 11 cached shapes (the process's first, which preloads, among them) read over 2x a warm call
  on 7-9 of them that way, on 5-6 through ``tkreg.ops.<op>`` (H200, 2026-11-29, three processes
  each, in turn).
- :func:`preload` does the same, on its own, at the first call on a GPU of a process that did not
  call :func:`warm` on it: for the signatures a kernel runs on that GPU only (a peer's first call
  costs torch what it costs torch code), most recently planned first, for at most
  ``TKREG_PRELOAD_S`` seconds (default :data:`DEFAULT_PRELOAD_S`; 0 turns it off), leaving out
  any whose inputs would take more than :func:`preload_max_bytes`: :data:`PRELOAD_MAX_BYTES`, or
  a :data:`PRELOAD_FREE_SHARE`-th of the GPU's free memory where that is less. A first call made in a CUDA-graph
  capture, a torch.compile trace or under a torch dispatch or function mode preloads nothing, then
  or later: launching work of its own there would change what the caller records. That first call
  pays for the others.

Nothing is timed where the cache holds the bucket's choice, as it does for every remembered
signature of this environment.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..core.signature import ALIGNMENT_CLASS_BYTES
from . import choosing, keys, remembered

log = logging.getLogger("tkreg.ops")
# Calls per signature: the first runs the launcher, the second is recorded (.replaying), the rest
# replay the recording, as every later call will. Several replays, not one: a replay is a function
# generated for its signature, and CPython specializes a function's bytecode over its first runs,
# which a caller's first call would otherwise pay (a probe on an H200, 2026-11-28: the first calls
# of 41 preloaded kernel-run shapes took 19-24 us more host time than a warm call with 8 calls
# each, 21-40 us with 3). Each extra replay costs about 10 us of host time.
REPLAYED_CALLS = 8
ENV_PRELOAD = "TKREG_PRELOAD_S"
DEFAULT_PRELOAD_S = 1.0
# A signature's zero-filled inputs, at most (larger ones wait for their first call): a signature
# left out paid its plan and its kernel's load on its first call, 5 ms against a warm call's
# 0.16 ms for an add of two 206 MB inputs in the dispatch suite's cold process (H200, 2026-12-04,
# under the 256 MiB this bound was then). The blocks the replays took stay in torch's caching
# allocator, for the caller's calls to reuse: hence a share of the free memory, never all of it,
# and a cap that still takes a 70B model's MLP weight (470 MB) with a long prompt's activations.
PRELOAD_MAX_BYTES = 1 << 30
PRELOAD_FREE_SHARE = 16

_lock = threading.Lock()
preloads: dict[int, dict[str, Any]] = {}  # per CUDA device: what the last preload there did


def warm(dispatchers: Mapping[str, Any], ops: Iterable[str] | None = None) -> dict[str, int]:
    """Replay the remembered signatures of ``ops`` (default: every installed op) on every CUDA
    device of this process; returns how many were replayed per op (ops with none left out). A
    signature that fails is logged (WARNING, on the "tkreg.ops" logger) and skipped; the others
    still run."""
    import torch

    if not torch.cuda.is_available():
        return {}
    names = list(dispatchers) if ops is None else list(ops)
    count = torch.cuda.device_count()
    done: dict[str, int] = {}
    started = time.perf_counter()
    for name in names:
        dispatcher = dispatchers[name]
        seen: set[Any] = set()
        done[name] = 0
        for device in range(count):
            for key in dispatcher.remembered_signatures(device):
                if key in seen:  # GPUs of one model share an environment, so its signatures
                    continue
                seen.add(key)
                done[name] += replay(dispatcher, key, count)
    for device in range(count):
        torch.cuda.synchronize(device)
    log.info("tkreg.ops.warm: %d signatures in %.2f s", sum(done.values()), time.perf_counter() - started)
    return {name: n for name, n in done.items() if n}


def preload(dispatchers: Mapping[str, Any], device: int) -> None:
    """At the first call on CUDA ``device`` (its remembered signatures read): replay the signatures
    a kernel runs there, most recently planned first and taking the ops in turn, within the
    budget; see the module's docstring. Once per device and set of installed ops."""
    with _lock:  # two threads' first calls: one preloads
        pending = {name: d for name, d in dispatchers.items() if device not in d.preloaded}
        for dispatcher in pending.values():
            dispatcher.preloaded.add(device)
    budget = preload_budget_s()
    if not pending or not budget > 0 or not may_launch_own_work():  # NaN too
        return
    import torch

    started = time.perf_counter()
    count = torch.cuda.device_count()
    max_bytes = preload_max_bytes(device)
    done = skipped = 0
    try:
        for dispatcher, key in _kernel_signatures(pending, device):
            if time.perf_counter() - started > budget:
                skipped += 1
                continue
            done += replay(dispatcher, key, count, max_bytes)
    except Exception as e:  # the caller's own call goes on: its signature loads when it runs
        log.warning("tkreg.ops: the first call on cuda:%d stopped preloading (%s: %s)", device, type(e).__name__, e)
    seconds = time.perf_counter() - started
    preloads[device] = {"signatures": done, "left": skipped, "seconds": round(seconds, 3)}
    if done or skipped:
        log.info("tkreg.ops: the first call on cuda:%d loaded %d remembered kernel signatures in %.2f s "
                 "(%d left to their first calls; %s=0 turns this off)", device, done, seconds, skipped, ENV_PRELOAD)  # fmt: skip


def preload_max_bytes(device: int) -> int:
    """The most a signature's inputs may take to be preloaded on CUDA ``device``: PRELOAD_MAX_BYTES,
    or a PRELOAD_FREE_SHARE-th of the memory the driver says is free there where that is less."""
    import torch

    try:
        free, _ = torch.cuda.mem_get_info(device)
    except (RuntimeError, AssertionError):  # no driver to ask (a torch without CUDA): the bound alone
        return PRELOAD_MAX_BYTES
    return min(PRELOAD_MAX_BYTES, free // PRELOAD_FREE_SHARE)


def preload_budget_s() -> float:
    """``TKREG_PRELOAD_S`` (seconds; unset or unreadable: DEFAULT_PRELOAD_S)."""
    try:
        return float(os.environ.get(ENV_PRELOAD, DEFAULT_PRELOAD_S))
    except ValueError:
        given = os.environ[ENV_PRELOAD]
        log.warning("tkreg.ops: %s=%r is not a number of seconds; using %s", ENV_PRELOAD, given, DEFAULT_PRELOAD_S)
        return DEFAULT_PRELOAD_S


def may_launch_own_work() -> bool:
    """Not while the caller's work is being captured, traced or intercepted."""
    import torch

    if not torch.cuda.is_available() or choosing.capturing_or_tracing():
        return False
    return torch._C._len_torch_dispatch_stack() == 0 and torch._C._len_torch_function_stack() == 0


def _kernel_signatures(dispatchers: Mapping[str, Any], device: int) -> list[tuple[Any, Any]]:
    """(dispatcher, key) of every remembered signature a kernel runs on ``device`` alone, newest
    first within each op, the ops taken in turn."""
    per_op = []
    for dispatcher in dispatchers.values():
        has_params = bool(dispatcher.params.names)
        found = [
            (dispatcher, key)
            for key, entry in dispatcher.remembered_signatures(device).items()
            if entry.get("way") == remembered.KERNEL and _only_on(key, has_params, device)
        ]
        per_op.append(found[::-1])
    return [pair for row in itertools.zip_longest(*per_op) for pair in row if pair is not None]


def _only_on(key: tuple[Any, ...], has_params: bool, device: int) -> bool:
    """No tensor of ``key`` on another CUDA device."""
    return all(d is None or d.type != "cuda" or (d.index or 0) == device for _, _, _, d, _ in keys.tensor_specs(key, has_params))


def replay(dispatcher: Any, key: tuple[Any, ...], devices: int, max_bytes: int | None = None) -> bool:
    """Make ``key``'s first REPLAYED_CALLS calls on zero-filled inputs, through ``tkreg.ops.<op>``
    itself where the dispatcher has it, so that every part a caller's call runs has run (the
    plan's returned outputs, the C++ call's lookup), not the dispatcher's own call alone; False
    where its inputs cannot be made here (or would take more than ``max_bytes``) or a call failed
    (logged)."""
    has_params = bool(dispatcher.params.names)
    name = dispatcher.op.name
    try:
        inputs = inputs_of(key, has_params, devices, max_bytes)
        if inputs is None:
            return False
        params = dict(zip(dispatcher.params.names, key[-1])) if has_params else {}
        call = dispatcher.entry or dispatcher
        for _ in range(REPLAYED_CALLS):
            call(*inputs, **params)
    except Exception as e:  # one signature's failure leaves the others warm
        log.warning("tkreg.ops: %s failed on a remembered signature, replayed ahead (%s: %s)", name, type(e).__name__, e)
        return False
    return True


def inputs_of(key: tuple[Any, ...], has_params: bool, devices: int, max_bytes: int | None = None) -> list[Any] | None:
    """Zero-filled tensors whose signature is ``key``'s (None for an absent optional input); None
    where it names a GPU this process does not have (``devices`` of them), an alignment no buffer
    can give, or more than ``max_bytes``."""
    import torch

    specs = keys.tensor_specs(key, has_params)
    absent = [spec == keys.ABSENT for spec in specs]
    specs = [spec for spec, gone in zip(specs, absent) if not gone]
    sizes = []
    for dtype, shape, stride, device, align in specs:
        if device.type == "cuda" and (device.index or 0) >= devices:
            return None
        itemsize = torch.empty((), dtype=dtype).element_size()
        if align % itemsize:
            return None
        span = 1 + sum((n - 1) * s for n, s in zip(shape, stride)) if all(shape) else 0
        sizes.append((span + ALIGNMENT_CLASS_BYTES // itemsize, itemsize))
    if max_bytes is not None and sum(n * size for n, size in sizes) > max_bytes:
        return None
    made = []
    for (dtype, shape, stride, device, align), (elements, itemsize) in zip(specs, sizes):
        buffer = torch.zeros(elements, dtype=dtype, device=device)
        shift = ((align - buffer.data_ptr()) % ALIGNMENT_CLASS_BYTES) // itemsize
        made.append(buffer.as_strided(shape, stride, shift))
    tensors = iter(made)
    return [None if gone else next(tensors) for gone in absent]
