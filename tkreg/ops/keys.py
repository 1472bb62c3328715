"""Plan keys: what tkreg.ops keeps a call's plan under, built as cheaply as Python allows.

A key is one flat tuple: for each input tensor its dtype, shape, strides, device and base-address
alignment class (see :mod:`tkreg.core.signature`), then, where the op has parameters, the tuple
of their values. Flat, because the key is built on every call, and on a launch-bound call the
host's work is what the caller waits for: nested tuples, a list and a loop cost about a fifth of
the dispatch's own time. Keys of one to MAX_UNROLLED tensors are built by functions generated
from one expression (:data:`FIELDS`), as the dispatcher's fast path is (tkreg.ops.library), so
the two can never disagree.

Where tkreg.ops' C++ key is in use (:mod:`.native`), the fast paths look plans up by it instead:
a :class:`PlanTable` keeps each plan under the Python key and, beside it, under the C++ key of
the same signature, packed from the Python key.

Keys also travel between processes (:mod:`.remembered`): :func:`to_json` writes one as plain
data and :func:`from_json` makes the same key again, equal and of equal hash, in a later process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..core.generated import generated
from ..core.signature import ALIGNMENT_CLASS_BYTES
from . import native

MASK = ALIGNMENT_CLASS_BYTES - 1  # a power of two: ptr & MASK is the alignment class
# What a key holds of one tensor, as Python source on a name (the generated code's single source).
FIELDS = ("{t}.dtype", "{t}.shape", "{t}.stride()", "{t}.device", f"{{t}}.data_ptr() & {MASK}")
PER_TENSOR = len(FIELDS)
MAX_UNROLLED = 4  # arities with a generated key function; more inputs take the loop


def source(names: Sequence[str], optional: frozenset[int] = frozenset()) -> str:
    """The key of tensors named ``names`` as a Python expression (no parentheses); an input at a
    position in ``optional`` may be None, keyed as :data:`ABSENT`."""
    parts = []
    for i, name in enumerate(names):
        fields = ", ".join(field.format(t=name) for field in FIELDS)
        parts.append(f"*(ABSENT if {name} is None else ({fields},))" if i in optional else fields)
    return ", ".join(parts)


def _unrolled(arity: int) -> Callable[..., tuple[Any, ...]]:
    names = [f"t{i}" for i in range(arity)]
    return generated(f"def key({', '.join(names)}):\n    return ({source(names)},)\n", "key", {})


_BY_ARITY = {n: _unrolled(n) for n in range(1, MAX_UNROLLED + 1)}


# An absent optional input (None) in a key: as many fields as a tensor's, none of them a tensor's.
ABSENT = (None,) * PER_TENSOR


def _looped(tensors: Sequence[Any]) -> tuple[Any, ...]:
    one = _BY_ARITY[1]  # the generated key of one tensor: FIELDS stay the only spelling of a key
    key: list[Any] = []
    for t in tensors:
        key += ABSENT if t is None else one(t)
    return tuple(key)


def tensors_key(tensors: Sequence[Any]) -> tuple[Any, ...] | None:
    """The key part of these tensors (:data:`ABSENT` for a None); None where one is neither a
    tensor nor None (planning gives the op's error)."""
    build = _BY_ARITY.get(len(tensors))
    try:
        return build(*tensors) if build is not None else _looped(tensors)
    except AttributeError:  # None among them (an absent optional input), or not a tensor
        try:
            return _looped(tensors)
        except (AttributeError, TypeError, RuntimeError):
            return None
    except (TypeError, RuntimeError):  # RuntimeError: a tensor without strides or storage
        return None


def plan_key(tensors: Sequence[Any], values: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """What a plan is kept under: the tensors' key, then the parameter values where the op has any."""
    key = tensors_key(tensors)
    return (*key, values) if key is not None and values else key


class PlanTable(dict):  # type: ignore[type-arg]  # Python key -> plan
    """A dispatcher's plans by their Python key, and in ``fast`` by the C++ key of the same
    signature (:mod:`.native`: the generated fast paths' lookup where it is in use), packed from the
    Python key as each plan is kept, so a plan made without tensors (a remembered signature) is
    found on the fast path too. A plan is never replaced under its key; the two start over together.
    ``epoch`` (8 bytes, read by the C++ call's memo of recent plans) changes whenever they start
    over or a packed key is given another plan, so that no memo keeps a plan the table dropped."""

    def __init__(self, has_params: bool) -> None:
        super().__init__()
        self.fast: dict[Any, Any] = {}
        self.has_params = has_params
        self.epoch = bytearray(8)
        self._pack = native.packer()

    def __setitem__(self, key: tuple[Any, ...], plan: Any) -> None:
        super().__setitem__(key, plan)
        if self._pack is not None:  # the fast paths' spelling: packed tensors, then the values if any
            packed = (self._pack(key[:-1]), key[-1]) if self.has_params else self._pack(key)
            if self.fast.get(packed, plan) is not plan:
                self._next_epoch()
            self.fast[packed] = plan

    def clear(self) -> None:
        super().clear()
        self.fast.clear()
        self._next_epoch()

    def _next_epoch(self) -> None:
        self.epoch[:] = ((int.from_bytes(self.epoch, "little") + 1) % (1 << 64)).to_bytes(8, "little")


# -- keys as plain data, for later processes -------------------------------------------------------
def to_json(key: tuple[Any, ...], has_params: bool) -> dict[str, Any]:
    """``key`` as JSON-ready data: each tensor's dtype name, shape, strides, device and alignment
    class, and the parameter values."""
    body = key[:-1] if has_params else key
    tensors = []
    for i in range(0, len(body), PER_TENSOR):
        dtype, shape, stride, device, align = body[i : i + PER_TENSOR]
        if dtype is None:  # an absent optional input
            tensors.append(None)
            continue
        tensors.append({"dtype": str(dtype).removeprefix("torch."), "shape": list(shape), "stride": list(stride),
                        "device": device.type, "index": device.index, "align": align})  # fmt: skip
    return {"tensors": tensors, "params": list(key[-1]) if has_params else []}


def from_json(data: dict[str, Any], has_params: bool) -> tuple[Any, ...]:
    """The key :func:`to_json` wrote, made again; ValueError where the data is not such a key."""
    import torch

    key: list[Any] = []
    try:
        for t in data["tensors"]:
            if t is None:  # an absent optional input
                key += ABSENT
                continue
            dtype = getattr(torch, t["dtype"])
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"{t['dtype']!r} is not a torch dtype")
            device = torch.device(t["device"], t["index"]) if t["index"] is not None else torch.device(t["device"])
            key += (dtype, torch.Size(t["shape"]), tuple(int(s) for s in t["stride"]), device, int(t["align"]))
        params = tuple(data["params"])
    except (KeyError, TypeError, AttributeError, RuntimeError) as e:
        raise ValueError(f"not a remembered signature: {e}") from e
    return (*key, params) if has_params else tuple(key)


def tensor_specs(key: tuple[Any, ...], has_params: bool) -> list[tuple[Any, ...]]:
    """(dtype, shape, strides, device, alignment class) of each tensor of ``key``
    (:data:`ABSENT` for an absent optional input)."""
    body = key[:-1] if has_params else key
    return [tuple(body[i : i + PER_TENSOR]) for i in range(0, len(body), PER_TENSOR)]
