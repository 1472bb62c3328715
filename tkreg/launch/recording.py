"""Record the launches one launcher call makes, and make them again for another call of the same
signature without the launcher's Python.

A launcher called from tkreg.ops on a planned signature checks its inputs, works out its grid and
sizes, and asks :class:`~tkreg.launch.fastlaunch.Launcher` to find the compiled specialization:
several microseconds of Python per call, the same answer every time, since a plan's key fixes
every tensor's dtype, shape, strides, device and alignment class and every parameter value. For a
kernel that declares it (``Kernel(replay=True)``), tkreg.ops records one call's launches
(:func:`record`) and then launches those again with the next call's tensors in place of the
recorded ones (:meth:`Recording.replay`).

A recording is kept only when everything the call did is seen and can be repeated:

- every launch went through a Launcher's fast path (a known compiled specialization on the
  current device), and no Triton kernel was launched any other way (``JITFunction.run`` is
  counted while recording);
- every tensor argument of every launch is one of the call's own tensors (inputs or outputs,
  found by address: a view at the same address counts), so the next call's tensor can take its
  place; every other argument is a plain int, float, bool or None, and no int equals one of the
  call's addresses (an address passed as an integer would be replayed stale);
- the call ran no torch operation other than views (a TorchDispatchMode watches): no temporary
  buffer, no zeroing, no copy that a replay would leave out.

What the recording cannot see is the declaration's part: a launcher whose launches depend on
anything beyond the signature (tensor values read on the host, global state, the time) must not
declare it. A replay checks what a Launcher's fast path checks on every call (fast launches on,
no launch hooks, the kernel's globals unchanged, the same current device) and, where one fails,
says so and the launcher runs instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from triton.runtime.jit import JITFunction

from ..core.generated import generated
from . import fastlaunch, native

_PLAIN_ARGS = (int, float, bool, type(None))
_ALWAYS_ALLOWED = {"aten::detach", "aten::alias", "aten::lift_fresh"}
# One recording at a time: JITFunction.run is wrapped for the duration, process-wide.
_RECORDING = threading.Lock()


@dataclass(frozen=True)
class _Launch:
    fn: Any  # the JITFunction (its guards are checked before every replay)
    entry: Any  # fastlaunch._Entry: the compiled specialization and its C launch
    grid: tuple[int, ...]
    args: tuple[Any, ...]  # as launched (expanded), with None where each replay puts a tensor
    slots: tuple[tuple[int, int], ...]  # (argument position, index of the call's tensor)
    device: int


class Recording:
    """The launches of one recorded call. ``replay(tensors)`` makes them again with ``tensors``
    (in the order :func:`record` got them, of the recorded call's signature) in place of the
    recorded ones, on the current stream, and returns True; or launches nothing and returns
    False where a Launcher's fast path would not launch now (fast launches off, a launch hook
    registered, a global the kernel read changed, another current device). It is made in C++
    where it can be (:mod:`tkreg.launch.native`; ``native`` says so), else one function generated
    for these launches (:func:`_replay_function`)."""

    __slots__ = ("launches", "native", "replay")

    def __init__(self, launches: Sequence[_Launch]) -> None:
        self.launches = tuple(launches)
        made = native.replayer(self.launches)
        self.native = made is not None
        self.replay: Callable[[Sequence[Any]], bool] = made if made is not None else _replay_function(self.launches)

    def __len__(self) -> int:
        return len(self.launches)


def _replay_function(launches: Sequence[_Launch]) -> Callable[[Sequence[Any]], bool]:
    """``replay(tensors) -> bool`` for these launches, written out: what a Launcher's fast path
    checks on every call, then each launch straight into its C launch function with its grid,
    head and constant arguments bound once and each tensor's address in its place: no loop
    over launches and slots, no argument list copied per launch, no method between it and the
    C launch. A replay is most of a replayed call's Python. The module's functions are looked
    up at each call, so turning fast launches off or a test's fake device applies at once."""
    scope: dict[str, Any] = {"_fl": fastlaunch}

    def bound(value: Any) -> str:  # a value the function reads, by a name in its scope
        name = f"_v{len(scope)}"
        scope[name] = value
        return name

    devices = sorted({launch.device for launch in launches})
    lines = ["def replay(tensors):"]
    if devices:  # none: nothing to launch, nothing to check
        lines.append("    device = _fl._current_device()")
        lines.append(f"    if {' or '.join(f'device != {int(d)}' for d in devices)}:")
        lines.append("        return False")
    for launch in launches:
        fn, grid = bound(launch.fn), bound(launch.grid)
        lines.append(f"    if not _fl._fast_path_open({fn}, {grid}) or ({fn}.used_global_vals "
                     f"and not _fl._globals_unchanged({fn})):")  # fmt: skip
        lines.append("        return False")
    if launches:
        lines.append(f"    stream = _fl._current_stream({int(launches[0].device)})")
    for index in sorted({index for launch in launches for _, index in launch.slots}):
        lines.append(f"    t{index} = tensors[{index}].data_ptr()")  # an address: the C launcher asks nothing
    for launch in launches:
        entry, slots = launch.entry, dict(launch.slots)
        names = [*(bound(g) for g in (*launch.grid, 1, 1)[:3]), "stream", bound(entry.function),
                 *(bound(h) for h in entry.head),
                 *(f"t{slots[p]}" if p in slots else bound(arg) for p, arg in enumerate(launch.args))]  # fmt: skip
        lines.append(f"    {bound(entry.launcher)}({', '.join(names)})")
    lines.append("    return True")
    return generated("\n".join(lines) + "\n", "replay", scope)


class _Recorder:
    """What fastlaunch reports while a call is recorded (fastlaunch._recorder)."""

    def __init__(self, tensors: Sequence[Any]) -> None:
        self.thread = threading.get_ident()
        self.index = {t.data_ptr(): i for i, t in enumerate(tensors) if t is not None}
        self.launches: list[_Launch] = []
        self.refusal = ""

    def launched(self, fn: Any, entry: Any, grid: tuple[int, ...], args: Sequence[Any], device: int) -> None:
        if threading.get_ident() != self.thread or self.refusal:
            return
        slots = []
        kept = list(args)
        for position, arg in enumerate(args):
            if isinstance(arg, torch.Tensor):
                index = self.index.get(arg.data_ptr())
                if index is None:
                    self.refuse(f"{_name(fn)} got a tensor that is not one of the call's (argument {position})")
                    return
                slots.append((position, index))
                kept[position] = None  # a replay puts its own tensor here; keep no memory alive
            elif type(arg) not in _PLAIN_ARGS:
                self.refuse(f"{_name(fn)} got a {type(arg).__name__} (argument {position}), which a replay cannot renew")
                return
            elif type(arg) is int and arg in self.index:
                self.refuse(f"{_name(fn)} got one of the call's addresses as an integer (argument {position})")
                return
        self.launches.append(_Launch(fn, entry, tuple(grid), tuple(kept), tuple(slots), device))

    def refuse(self, reason: str) -> None:
        if threading.get_ident() == self.thread and not self.refusal:
            self.refusal = reason


class _TorchOperations(TorchDispatchMode):
    """The torch operations a recorded call runs, views left out."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func._schema.name
        if not (getattr(func, "is_view", False) or name in _ALWAYS_ALLOWED):
            self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


@dataclass(frozen=True)
class Outcome:
    """What :func:`record` saw: the call's result, the recording (None where it was refused),
    why it was refused, and whether another call of the signature may be recorded instead
    (``again``: the refusal came from this call's circumstances, not from the launcher)."""

    result: Any
    recording: Recording | None
    reason: str = ""
    again: bool = False


def record(call: Callable[[], Any], tensors: Sequence[Any]) -> Outcome:
    """Run ``call()`` once (it launches for real) while watching it. ``tensors``: every tensor the
    call's launches may take (the call's inputs and outputs; None for an absent optional input,
    which no launch takes); they need distinct, non-zero addresses, or a launch's tensor would be
    ambiguous."""
    addresses = [t.data_ptr() for t in tensors if t is not None]
    if 0 in addresses or len(set(addresses)) != len(addresses):
        return Outcome(call(), None, "the call's tensors share an address, or one is empty", again=True)
    if not _RECORDING.acquire(blocking=False):
        return Outcome(call(), None, "another thread was recording", again=True)
    recorder = _Recorder(tensors)
    other_launches = [0]
    original_run = JITFunction.run

    def counted_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        other_launches[0] += 1
        return original_run(self, *args, **kwargs)

    try:
        JITFunction.run = counted_run  # type: ignore[method-assign]
        fastlaunch._recorder = recorder
        with _TorchOperations() as operations:
            result = call()
    finally:
        fastlaunch._recorder = None
        JITFunction.run = original_run  # type: ignore[method-assign]
        _RECORDING.release()
    reason = recorder.refusal
    if not reason and other_launches[0]:
        reason = f"{other_launches[0]} launch(es) took triton's ordinary path (a first launch, or not through a Launcher)"
    if not reason and operations.seen:
        reason = "it ran torch operations a replay would leave out: " + ", ".join(sorted(set(operations.seen)))
    if not reason and not recorder.launches:
        reason = "it launched nothing through a Launcher"
    return Outcome(result, None if reason else Recording(recorder.launches), reason)


def _name(fn: Any) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__
