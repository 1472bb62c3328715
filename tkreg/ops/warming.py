"""``tkreg.ops.warm()``: a process pays its first calls ahead, at a time it chooses.

The first call of a signature in a process plans it and, where a kernel runs it, loads that kernel
(milliseconds; Triton's first load in a process also hashes Triton itself, about 0.3 s on an H200
host). A server pays that on its first requests unless something pays it before. Every signature
earlier processes ran from a measured choice is remembered beside the tuning cache
(:mod:`.remembered`); :func:`warm` replays each one on this process's GPUs: inputs of its exact
dtypes, shapes, strides and alignment, filled with zeros (valid for any index input), through the
op's dispatch, which plans it, loads its kernel and launches it into a fresh output, three times
(a kernel that lets its launches be replayed has them recorded on the second call and replayed on
the third, as later calls replay them). Later calls of those signatures then neither plan nor
load; the first of each still runs slower than a warm call while the host's caches are cold for it
(1.6-1.9x, median, in the dispatch suite on H100 and H200, 2026-11-27). Nothing is timed where the
cache holds the bucket's choice, as it does for every remembered signature of this environment.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from ..core.signature import ALIGNMENT_CLASS_BYTES
from . import keys

log = logging.getLogger("tkreg.ops")
# Calls per signature: the first runs the launcher, the second is recorded (.replaying), the third
# replays the recording, as every later call will.
REPLAYED_CALLS = 3


def warm(dispatchers: dict[str, Any], ops: Iterable[str] | None = None) -> dict[str, int]:
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
        has_params = bool(dispatcher.params.names)
        seen: set[Any] = set()
        done[name] = 0
        for device in range(count):
            for key in dispatcher.remembered_signatures(device):
                if key in seen:  # GPUs of one model share an environment, so its signatures
                    continue
                seen.add(key)
                try:
                    inputs = inputs_of(key, has_params, count)
                    if inputs is None:
                        continue
                    params = dict(zip(dispatcher.params.names, key[-1])) if has_params else {}
                    for _ in range(REPLAYED_CALLS):
                        dispatcher(*inputs, **params)
                except Exception as e:  # one signature's failure leaves the others warm
                    log.warning("tkreg.ops.warm: %s failed on a remembered signature (%s: %s)", name, type(e).__name__, e)
                    continue
                done[name] += 1
    for device in range(count):
        torch.cuda.synchronize(device)
    log.info("tkreg.ops.warm: %d signatures in %.2f s", sum(done.values()), time.perf_counter() - started)
    return {name: n for name, n in done.items() if n}


def inputs_of(key: tuple[Any, ...], has_params: bool, devices: int) -> list[Any] | None:
    """Zero-filled tensors whose signature is ``key``'s; None where it names a GPU this process does
    not have (``devices`` of them) or an alignment no buffer can give."""
    import torch

    made = []
    for dtype, shape, stride, device, align in keys.tensor_specs(key, has_params):
        if device.type == "cuda" and (device.index or 0) >= devices:
            return None
        itemsize = torch.empty((), dtype=dtype).element_size()
        if align % itemsize:
            return None
        span = 1 + sum((n - 1) * s for n, s in zip(shape, stride)) if all(shape) else 0
        spare = ALIGNMENT_CLASS_BYTES // itemsize
        buffer = torch.zeros(span + spare, dtype=dtype, device=device)
        shift = ((align - buffer.data_ptr()) % ALIGNMENT_CLASS_BYTES) // itemsize
        made.append(buffer.as_strided(shape, stride, shift))
    return made
