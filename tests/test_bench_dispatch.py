"""The dispatch suite's shapes nobody chose: drawn at run time from a recorded seed, across the
sizes each op's contract names, within the memory bound, in the op's benchmark dtypes and layouts."""

from __future__ import annotations

import random

import tkreg
from tkreg.bench import dispatch


def test_random_shapes_follow_each_contract_and_repeat_for_a_seed() -> None:
    registry = tkreg.default_registry()
    for op in registry.ops():
        if op.contract.kind == "plain" or not op.cases_in("bench"):
            continue
        first = dispatch.unseen(op, random.Random(7))
        assert first == dispatch.unseen(op, random.Random(7))  # the seed in the record reproduces them
        assert len(first) == dispatch.SHAPES_PER_OP.get(op.contract.kind, dispatch.DEFAULT_SHAPES)
        variants = {c.variant for c in op.cases_in("bench")} | {""}
        for sig in first:
            dims = dict(sig.dims)
            assert tuple(dims) == (op.contract.dims or tuple(op.cases_in("bench")[0].dims))
            assert max(dispatch._elements(op.contract.kind, dims)) <= dispatch.MAX_ELEMENTS
            assert sig.dtype in op.bench_dtypes and sig.variant in variants
            if op.contract.kind == "linear":
                assert dims["N"] % 64 == 0 and dims["K"] % 64 == 0 and 1 <= dims["M"] <= 8192
