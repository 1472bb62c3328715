"""On a GPU: the order the Gluon schedulers really visit tiles in equals their Python models."""

from __future__ import annotations

import itertools

import pytest

from tkreg.core.loading import build_registry
from tkreg.core.refs import resolve


def _gpu_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "needs a CUDA GPU (capability >= 9.0) to run the Gluon trace probe; this machine has none"
    if torch.cuda.get_device_capability()[0] < 9:
        return f"Gluon needs capability >= 9.0; this device is {torch.cuda.get_device_capability()}"
    return None


REASON = _gpu_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

SHAPES = ((1, 1), (208, 416), (2000, 1000), (1000, 2000), (8192, 8192), (1234, 5678))
BLOCKS = ((128, 256), (128, 128), (64, 64))
PROGRAMS = (1, 7, 132)


@pytest.mark.parametrize("name", ("persistent", "grouped-1", "grouped-8"))
def test_visited_order_matches_model(name):
    from tkreg_schedulers.trace import visited_order

    scheduler = build_registry().scheduler(name)
    model = resolve(scheduler.model)
    for (M, N), (bm, bn), p in itertools.product(SHAPES, BLOCKS, PROGRAMS):
        got = visited_order(scheduler, M, N, bm, bn, p)
        want = model(M, N, bm, bn, p)
        assert got == want, f"{name} M={M} N={N} blocks={bm}x{bn} programs={p}: first differing program " + str(
            next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
        )
