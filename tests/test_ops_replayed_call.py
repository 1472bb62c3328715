"""A replayed plan's call made in C++ (tkreg/ops/native/replayed_call.cpp) answers every call as
the Python function it stands for (tkreg/ops/replaying.py): the same output handed back, the same
calls of allocate, replay and the declined run, the same errors. Fakes stand for the recording and
the launcher, so this runs without a GPU."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tkreg.ops import native  # noqa: E402
from tkreg.ops.replaying import Replayer  # noqa: E402

built = pytest.mark.skipif(native.replayed_maker() is None, reason=f"the C++ extension is not in use here: {native.status()}")
WAYS = ["cpp", "python"]


class Fakes:
    """What a call did: each allocation, each replay's tensors, each declined run's inputs."""

    def __init__(self, replays: Any, outputs: int, as_list: bool, several: bool) -> None:
        self.replays, self.outputs, self.as_list, self.several = replays, outputs, as_list, several
        self.allocated: list[tuple[Any, ...]] = []
        self.replayed: list[tuple[Any, ...]] = []
        self.declined: list[tuple[Any, ...]] = []
        self.installed: list[Any] = []

    def allocate(self) -> Any:
        outs = tuple(torch.empty(2) for _ in range(self.outputs))
        self.allocated.append(outs)
        return list(outs) if self.as_list else outs

    def replay(self, tensors: Any) -> Any:
        self.replayed.append(tensors)
        if isinstance(self.replays, Exception):
            raise self.replays
        return self.replays

    def launched(self, *inputs: Any) -> Any:
        self.declined.append(inputs)
        made = tuple(torch.zeros(3) for _ in range(self.outputs))
        return made if self.several else made[0]

    def install(self, run: Any, returned: Any = None) -> None:
        self.installed.append((run, returned))


class Recording:
    def __init__(self, replay: Any) -> None:
        self.replay, self.native = replay, True

    def __len__(self) -> int:
        return 1


def _call(way: str, monkeypatch: pytest.MonkeyPatch, fakes: Fakes, returned: tuple[int, ...] | None,
          inputs: tuple[Any, ...], **given: Any) -> tuple[Any, Any]:
    """(what the caller's call returned or raised, the run it called)."""
    if way == "python":
        monkeypatch.setattr(native, "replayed_maker", lambda: None)
    replayer = Replayer("toy", "toy_kernel", fakes.install, fakes.launched, allocate=fakes.allocate,
                        launch_into=lambda inputs, outs: None, tensors_of=None, several=fakes.several,
                        returned=returned)  # fmt: skip
    run, picked = replayer._replaying(Recording(fakes.replay))
    call = picked if picked is not None else run
    try:
        return call(*inputs, **given), call
    except Exception as e:  # the error is what is compared
        return e, call


CASES = {
    # (replay answers, outputs, allocate gives a list, several, returned)
    "replayed, one output": (True, 1, False, False, None),
    "replayed, picks y of (y, rstd)": (True, 2, False, True, (0,)),
    "replayed, picks the second": (True, 2, False, True, (1,)),
    "replayed, allocate gives a list": (True, 2, True, True, (1,)),
    "replay answers 1": (1, 1, False, False, None),
    "declined, one output": (False, 1, False, False, None),
    "declined, picks": (False, 2, False, True, (1,)),
    "declined by 0": (0, 1, False, False, None),
    "replay raises": (RuntimeError("Triton Error [CUDA]: invalid argument"), 1, False, False, None),
}


def _outcome(got: Any, fakes: Fakes, inputs: tuple[Any, ...]) -> dict[str, Any]:
    """The call's answer in terms both ways can be held to: which tensor came back, what ran."""
    outs = fakes.allocated[-1]
    if isinstance(got, Exception):
        answer: Any = (type(got).__name__, str(got))
    elif any(got is o for o in outs):
        answer = ("allocated", next(i for i, o in enumerate(outs) if got is o))
    else:
        answer = ("declined", got.shape)
    # each replay's tensors: the call's inputs, then its outputs, as one tuple
    replayed = [type(tensors) is tuple and [id(t) for t in tensors] == [id(t) for t in (*inputs, *outs)]
                for tensors in fakes.replayed]  # fmt: skip
    declined = [[id(t) for t in given] == [id(t) for t in inputs] for given in fakes.declined]
    return {"answer": answer, "allocations": len(fakes.allocated), "replayed": replayed, "declined": declined}


@built
@pytest.mark.parametrize("case", CASES)
def test_the_cpp_call_answers_as_the_python_one(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    replays, outputs, as_list, several, returned = CASES[case]
    inputs = (torch.randn(2), torch.randn(2))
    got: dict[str, Any] = {}
    for way in WAYS:
        with monkeypatch.context() as m:
            fakes = Fakes(replays, outputs, as_list, several)
            answer, call = _call(way, m, fakes, returned, inputs)
            got[way] = _outcome(answer, fakes, inputs)
            assert (type(call).__name__ == "builtin_function_or_method") == (way == "cpp")
    assert got["cpp"] == got["python"]
    assert got["cpp"]["allocations"] == 1 and got["cpp"]["replayed"] == [True]
    declines = not isinstance(replays, Exception) and not replays
    assert got["cpp"]["declined"] == ([True] if declines else [])


@built
def test_a_call_by_keyword_is_refused_as_the_python_call_refuses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for way in WAYS:
        with monkeypatch.context() as m:
            fakes = Fakes(True, 1, False, False)
            answer, _ = _call(way, m, fakes, None, (torch.randn(2),), other=torch.randn(2))
            assert isinstance(answer, TypeError), (way, answer)
            assert fakes.allocated == []


@built
def test_bad_parts_are_refused_when_the_call_is_made() -> None:
    make = native.replayed_maker()
    with pytest.raises(TypeError, match="must be callable"):
        make(lambda: (), None, lambda: None, 0, False)
    with pytest.raises(TypeError, match="an index"):
        make(lambda: (), lambda t: True, lambda: None, -1, False)
    outside = make(lambda: (torch.empty(1),), lambda t: True, lambda *i: None, 3, False)
    with pytest.raises(IndexError):
        outside(torch.empty(1))
