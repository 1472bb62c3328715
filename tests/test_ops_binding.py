"""bound_call: a peer's call with its keywords fixed, as a plan of the peer makes it."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from tkreg.ops.binding import bound_call


def peer(x: Any, w: Any, *, out: Any = None, eps: float) -> tuple[Any, ...]:
    return (x, w, out, eps)


def test_it_passes_the_inputs_and_the_keywords_as_given() -> None:
    call = bound_call(peer, 2, {"out": None, "eps": 0.25})
    assert call("x", "w") == ("x", "w", None, 0.25)
    assert call.func is peer and call.keywords == {"out": None, "eps": 0.25}
    assert not isinstance(call, functools.partial)
    assert "eps=0.25" in (call.__doc__ or "")


def test_another_number_of_inputs_or_a_keyword_input_is_refused() -> None:
    call = bound_call(peer, 2, {"eps": 0.5})
    with pytest.raises(TypeError):
        call("x")
    with pytest.raises(TypeError):
        call("x", "w", "extra")
    with pytest.raises(TypeError):
        call("x", w="w")


def test_values_are_the_objects_given_not_their_text() -> None:
    marker = object()
    call = bound_call(lambda x, *, out, tag: (x, out, tag), 1, {"out": None, "tag": marker})
    assert call(1) == (1, None, marker)


def test_keywords_that_cannot_be_spelled_out_fall_back_to_a_partial() -> None:
    odd = bound_call(lambda x, **kw: kw, 1, {"not a name": 1})
    assert isinstance(odd, functools.partial) and odd(0) == {"not a name": 1}
    reserved = bound_call(lambda x, **kw: kw, 1, {"lambda": 2})
    assert isinstance(reserved, functools.partial) and reserved(0) == {"lambda": 2}
    assert isinstance(bound_call(lambda **kw: kw, 0, {"eps": 1.0}), functools.partial)
