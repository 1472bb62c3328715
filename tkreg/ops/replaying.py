"""A kernel plan's run that repeats recorded launches (for kernels declared ``Kernel(replay=True)``).

The first call of a plan runs the launcher: it compiles, and fills the Launchers' caches. The
second is recorded (:func:`tkreg.launch.recording.record`). From the third on, a call allocates
its outputs and replays the recording with its own tensors: no launcher checks, no grid or size
arithmetic, no specialization lookup. Where the recording was refused (the reason is kept for
``explain``) or a replay is not ready (a launch hook registered since, another current device),
the launcher runs as before. Nothing here reads a tensor's values or waits for the device, so a
CUDA-graph capture records the same launches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from ..core.errors import InputError
from . import native

log = logging.getLogger("tkreg.ops")

Run = Callable[..., Any]


def _all(outs: tuple[Any, ...]) -> Any:
    return outs


def _first(outs: tuple[Any, ...]) -> Any:
    return outs[0]


def _inputs_then_outputs(inputs: Sequence[Any], outs: tuple[Any, ...]) -> tuple[Any, ...]:
    return (*inputs, *outs)


# Calls recorded at most where a refusal came from the call (tensors sharing an address, another
# thread recording), before the launcher takes every call of the signature.
ATTEMPTS = 8
_WAITING = "not recorded yet"


class Replayer:
    """Builds and swaps a plan's runs: ``install(run, returned=None)`` gives the plan a run and,
    where given, what tkreg.ops calls (see Dispatcher._set_run); ``launched`` is the plan's
    ordinary run; ``allocate()`` makes a call's outputs; ``launch_into(inputs, outs)`` runs the
    launcher into them; ``tensors_of(inputs, outs)`` gives the tensors a launch may take, in one
    fixed order (None: the inputs, then the outputs; a replay then builds that tuple itself, a
    function call less on a launch-bound call); a run returns every output where the op has
    ``several``, else the one; ``returned``: the indices of the outputs tkreg.ops returns, where
    it returns fewer; ``declined``: what a call runs where its replay declines it (a launch hook,
    another current device), returning what a run returns (default: ``launched``)."""

    def __init__(
        self,
        op: str,
        kernel: str,
        install: Callable[[Run], None],
        launched: Run,
        allocate: Callable[[], tuple[Any, ...]],
        launch_into: Callable[[Sequence[Any], tuple[Any, ...]], None],
        tensors_of: Callable[[Sequence[Any], tuple[Any, ...]], tuple[Any, ...]] | None,
        several: bool,
        returned: tuple[int, ...] | None = None,
        declined: Run | None = None,
    ) -> None:
        self.op, self.kernel = op, kernel
        self.install, self.launched = install, launched
        # what a replay that declines a call falls back to (default: the launcher)
        self.declined = declined if declined is not None else launched
        self.allocate, self.launch_into, self.tensors_of = allocate, launch_into, tensors_of
        self.result_of = _all if several else _first
        self.returned = returned
        self.state = f"{_WAITING}: the launcher runs the first call of a signature; the second is recorded"
        self.attempts = 0

    def first(self, *inputs: Any) -> Any:
        """The plan's first run: the launcher; the next call records."""
        self.install(self.recording)
        return self.launched(*inputs)

    def recording(self, *inputs: Any) -> Any:
        from ..launch import recording

        outs = self.allocate()
        try:
            tensors = (self.tensors_of or _inputs_then_outputs)(inputs, outs)
            seen = recording.record(lambda: self.launch_into(inputs, outs), tensors)
        except InputError:  # the launcher refused: the ordinary run passes the call on and replans
            self.install(self.launched)
            self.state = "the launcher runs every call (it refused a call while it was recorded)"
            return self.launched(*inputs)
        got = seen.recording
        if got is not None:
            how = "in C++" if got.native else "without the launcher's Python"
            self.state = f"its {len(got)} recorded launch(es) are replayed, {how}"
            self.install(*self._replaying(got))
        elif seen.again and self.attempts < ATTEMPTS:
            self.attempts += 1  # the next call of the signature is recorded instead
            if self.state.startswith(_WAITING):  # not where another thread's recording settled it
                self.state = f"{_WAITING} ({seen.reason})"
        else:
            self.state = f"the launcher runs every call: its launches cannot be replayed ({seen.reason})"
            log.info("tkreg.ops.%s: %s: %s", self.op, self.kernel, self.state)
            self.install(self.launched)
        return self.result_of(outs)

    def _replaying(self, got: Any) -> tuple[Run, Run | None]:
        """The plan's run (every output), and where callers get fewer outputs than the op makes
        (``returned``: their indices), what tkreg.ops calls: the same replay, handing back those
        outputs itself rather than through a second function (a launch-bound call pays for each).
        Where the launch takes the inputs then the outputs and the caller gets one output (add,
        matmul, a norm's y), the run calls nothing but the allocation and the replay."""
        replay, allocate, result_of = got.replay, self.allocate, self.result_of
        launched = self.declined  # every output where the op has several, else the one, as the launcher's
        tensors_of = self.tensors_of if self.tensors_of is not None else _inputs_then_outputs
        picks = self.returned is not None
        # the indices of what the caller gets: the returned ones, or the one output of an op with one
        wanted = self.returned if picks else (0,) if result_of is _first else ()

        def run(*inputs: Any) -> Any:
            outs = allocate()
            if replay(tensors_of(inputs, outs)):
                return result_of(outs)
            return launched(*inputs)  # not ready now (a launch hook, another device): the launcher

        if self.tensors_of is None and len(wanted) == 1:
            (at,) = wanted
            # the same three steps in C++ where the extension is in use: no frame between
            # tkreg.ops.<op>'s C++ call and the replay (native/replayed_call.cpp)
            make = native.replayed_maker()
            if make is not None:
                single = make(allocate, replay, launched, at, picks)
            else:

                def single(*inputs: Any) -> Any:
                    outs = allocate()
                    if replay((*inputs, *outs)):
                        return outs[at]
                    made = launched(*inputs)  # every output where the op has several, else the one
                    return made[at] if picks else made

            return (run, single) if picks else (single, None)
        if self.returned is None:
            return run, None
        indices = self.returned
        if len(indices) == 1:
            (at,) = indices

            def returned(*inputs: Any) -> Any:
                outs = allocate()
                if replay(tensors_of(inputs, outs)):
                    return outs[at]
                return launched(*inputs)[at]

        else:

            def returned(*inputs: Any) -> Any:
                outs = allocate()
                if not replay(tensors_of(inputs, outs)):
                    outs = launched(*inputs)
                return tuple([outs[i] for i in indices])

        return run, returned


class RecordedCall:
    """``call()``: a launch on fixed ``inputs`` into new outputs each call (``allocate()``), as a
    plan's calls make it; the tuner's candidates and the benchmarks' are these. ``launch_into(outs)``
    launches; a call returns every output where the op has ``several``, else the one. Where the kernel declares replay
    (``replayable``), the second call is recorded and later calls replay it, so a kernel is timed
    at what tkreg.ops' callers pay for it."""

    __slots__ = ("allocate", "calls", "inputs", "launch_into", "launcher", "recording", "result_of")

    def __init__(self, launch_into: Callable[[tuple[Any, ...]], Any], allocate: Callable[[], tuple[Any, ...]],
                 inputs: Sequence[Any], several: bool, replayable: bool, launcher: Any = None) -> None:
        self.launch_into, self.allocate, self.inputs = launch_into, allocate, tuple(inputs)
        self.result_of = _all if several else _first
        self.launcher = launcher  # what launch_into calls (for reports and tests)
        self.calls = 0 if replayable else -1  # -1: never recorded
        self.recording: Any = None

    def __call__(self) -> Any:
        outs = self.allocate()
        recording = self.recording
        if recording is not None and recording.replay((*self.inputs, *outs)):
            return self.result_of(outs)
        if self.calls != 1:
            if self.calls == 0:
                self.calls = 1  # the next call is recorded
            self.launch_into(outs)
            return self.result_of(outs)
        from ..launch import recording as recorder

        self.calls = -1  # one recording at most
        self.recording = recorder.record(lambda: self.launch_into(outs), (*self.inputs, *outs)).recording
        return self.result_of(outs)
