"""tkreg.core.bounded.put: a dict that keeps its newest entries."""

from __future__ import annotations

from tkreg.core import bounded


def test_put_keeps_the_newest_entries_up_to_the_limit():
    table: dict[str, int] = {}
    for i in range(5):
        assert bounded.put(table, f"k{i}", i, 3) == i
        assert len(table) <= 3
    assert table == {"k2": 2, "k3": 3, "k4": 4}


def test_put_on_an_empty_table_with_a_zero_limit_still_keeps_the_value():
    table: dict[str, int] = {}
    assert bounded.put(table, "only", 1, 0) == 1
    assert table == {"only": 1}
    bounded.put(table, "next", 2, 1)
    assert table == {"next": 2}


def test_put_when_another_thread_emptied_the_table_does_not_fail():
    class Emptied(dict):
        """Reports itself full, as a table another thread emptied after the size was read."""

        def __len__(self) -> int:
            return 10

    table = Emptied()
    bounded.put(table, "k", 1, 2)
    assert dict(table) == {"k": 1}
