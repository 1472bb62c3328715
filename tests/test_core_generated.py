"""Functions from tkreg's source templates: one compile per text, each function its own values
and its own code object."""

from __future__ import annotations

from tkreg.core import generated as module
from tkreg.core.generated import generated

TEXT = "def f(x=DEFAULT, /):\n    return (x, ADDED)\n"


def test_functions_of_one_text_keep_their_own_values_defaults_and_code() -> None:
    module._compiled.cache_clear()
    first = generated(TEXT, "f", {"DEFAULT": 1, "ADDED": "a"})
    second = generated(TEXT, "f", {"DEFAULT": 2, "ADDED": "b"})
    assert (first(), second(), first(5), second(6)) == ((1, "a"), (2, "b"), (5, "a"), (6, "b"))
    assert module._compiled.cache_info().misses == 1  # compiled once for both
    assert first.__code__ is not second.__code__  # each specializes for its own globals
    assert first.__code__.co_code == second.__code__.co_code
    for _ in range(100):  # specialized on one function's globals, the other still reads its own
        assert first() == (1, "a")
    assert second() == (2, "b")
