"""The schedulers' Python models: every tile exactly once, in the order each scheduler promises."""

from __future__ import annotations

import itertools

import pytest
from tkreg_schedulers import model

from tkreg.core.loading import build_registry
from tkreg.core.refs import resolve

SIZES = (1, 7, 128, 129, 1000, 2048, 8192)
BLOCKS = ((128, 256), (64, 64), (128, 128))
PROGRAMS = (1, 3, 8, 132, 1000)
NAMES = ("persistent", "grouped-1", "grouped-8")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def grid(M: int, N: int, bm: int, bn: int) -> tuple[int, int]:
    return cdiv(M, bm), cdiv(N, bn)


def combos():
    for M, N, (bm, bn), p in itertools.product(SIZES, SIZES, BLOCKS, PROGRAMS):
        yield M, N, bm, bn, p


@pytest.fixture(scope="module")
def registry():
    return build_registry()


@pytest.mark.parametrize("name", NAMES)
def test_registered_with_model(registry, name):
    assert registry.problems == []
    scheduler = registry.scheduler(name)
    assert callable(resolve(scheduler.model))


@pytest.mark.parametrize("name", NAMES)
def test_every_tile_exactly_once(registry, name):
    fn = resolve(registry.scheduler(name).model)
    for M, N, bm, bn, p in combos():
        order = fn(M, N, bm, bn, p)
        assert len(order) == p
        visited = [t for tiles in order for t in tiles]
        tm, tn = grid(M, N, bm, bn)
        expected = {(i, j) for i in range(tm) for j in range(tn)}
        assert len(visited) == len(expected), (name, M, N, bm, bn, p)
        assert set(visited) == expected, (name, M, N, bm, bn, p)


def test_persistent_contiguous_chunks():
    for M, N, bm, bn, p in combos():
        tm, tn = grid(M, N, bm, bn)
        chunk = cdiv(tm * tn, p)
        for program, tiles in enumerate(model.persistent(M, N, bm, bn, p)):
            ids = [pid_n * tm + pid_m for pid_m, pid_n in tiles]
            start = program * chunk
            assert ids == list(range(start, min(start + chunk, tm * tn))), (M, N, bm, bn, p, program)


def test_persistent_small_example():
    # 3 x 2 tiles over 4 programs: chunks of 2 ids, the last program idle; ids run down M first.
    order = model.persistent(300, 200, 128, 128, 4)
    assert order == [[(0, 0), (1, 0)], [(2, 0), (0, 1)], [(1, 1), (2, 1)], []]


def grouped_reference(group: int, tm: int, tn: int) -> list[tuple[int, int]]:
    """The grouped order written independently: groups of `group` tile rows, columns left to
    right, inside a column the group's rows top to bottom."""
    order = []
    for first in range(0, tm, group):
        rows = range(first, min(first + group, tm))
        order.extend((r, c) for c in range(tn) for r in rows)
    return order


@pytest.mark.parametrize("group", (1, 3, 8))
def test_grouped_strided_over_programs(group):
    for M, N, bm, bn, p in combos():
        tm, tn = grid(M, N, bm, bn)
        linear = grouped_reference(group, tm, tn)
        order = model.grouped(group, M, N, bm, bn, p)
        for program, tiles in enumerate(order):
            assert tiles == linear[program::p], (group, M, N, bm, bn, p, program)


def test_grouped_1_is_row_major():
    order = model.grouped_1(300, 300, 128, 128, 1)
    assert order == [[(i, j) for i in range(3) for j in range(3)]]


def test_grouped_8_example():
    # 10 tile rows, 2 tile columns, one program: first group of 8 rows column by column, then the
    # short group of 2 rows.
    (tiles,) = model.grouped_8(10 * 128, 2 * 256, 128, 256, 1)
    assert tiles[:9] == [(r, 0) for r in range(8)] + [(0, 1)]
    assert tiles[16:] == [(8, 0), (9, 0), (8, 1), (9, 1)]
