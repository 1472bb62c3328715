"""tkreg.ops under torch.autocast: a call is torch's own (the peer's), so it computes in the dtypes
autocast gives torch's code, whichever candidate the signature's plan runs outside autocast;
torch.ops.tkreg.<op> computes in its inputs' dtypes. Kernels run under the Triton interpreter
(CPU) or on a GPU."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tests.ops_support import choice_by_priority, device_or_skip, installed_ops  # noqa: E402
from tkreg.ops import PeerFallbackWarning  # noqa: E402

device = pytest.fixture(scope="module")(device_or_skip)
ops = pytest.fixture(installed_ops)


@pytest.fixture(autouse=True)
def kernels_by_priority(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    choice_by_priority(monkeypatch, tmp_path, interpreter=False)  # the interpreter is on for the whole process or not at all


def _calls(ops: Any, device: str) -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """tkreg's call and torch's own of each op, on float32 inputs (bfloat16 for sum_row, which
    autocast computes in float32), as a model under autocast makes them."""
    g = torch.Generator().manual_seed(3)
    a, b = (torch.randn(shape, generator=g).to(device) for shape in ((24, 64), (64, 32)))
    x, w, bias = (torch.randn(shape, generator=g).to(device) for shape in ((6, 40), (40,), (40,)))
    x16 = x.bfloat16()
    return {
        "matmul": (lambda: ops.matmul(a, b), lambda: torch.matmul(a, b)),
        "layer_norm": (lambda: ops.layer_norm(x, w, bias), lambda: F.layer_norm(x, (40,), w, bias, eps=1e-5)),
        "rms_norm": (lambda: ops.rms_norm(x, w), lambda: F.rms_norm(x, (40,), w, eps=1e-6)),
        "sum_row": (lambda: ops.sum_row(x16), lambda: x16.sum(-1)),
        "add": (lambda: ops.add(a, a), lambda: torch.add(a, a)),
    }


@pytest.mark.parametrize("planned", [True, False], ids=["planned outside autocast", "first call under autocast"])
@pytest.mark.parametrize("op", ["matmul", "layer_norm", "rms_norm", "sum_row", "add"])
def test_a_call_under_autocast_gives_torchs_result(ops: Any, device: str, op: str, planned: bool) -> None:
    mine, theirs = _calls(ops, device)[op]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PeerFallbackWarning)
        outside = mine() if planned else None
        with torch.autocast(device, dtype=torch.bfloat16):
            got, want = mine(), theirs()
            again = mine()
            told = ops.explain("add", *(2 * [torch.ones(3, device=device)]))
        after = mine()
    assert got.dtype == want.dtype and torch.equal(got, want) and torch.equal(again, want)
    assert told.endswith("calls its peer torch.add: torch.autocast takes the peer's own code")  # explain says so
    assert after.dtype == theirs().dtype  # outside autocast again: the plan's own call, its own dtype
    if outside is not None:
        assert torch.equal(after, outside)


def test_the_torch_operator_computes_in_its_inputs_dtypes_under_autocast(ops: Any, device: str) -> None:
    g = torch.Generator().manual_seed(4)
    a, b = (torch.randn(shape, generator=g).to(device) for shape in ((24, 64), (64, 32)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PeerFallbackWarning)
        outside = torch.ops.tkreg.matmul(a, b)
        with torch.autocast(device, dtype=torch.bfloat16):
            inside = torch.ops.tkreg.matmul(a, b)
    assert inside.dtype == torch.float32 and torch.equal(inside, outside)
