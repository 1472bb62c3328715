"""Functions defined from tkreg's own source templates: the plan keys and fast paths of tkreg.ops
and a recording's replay, written out for one arity or one set of launches because a call made
millions of times pays for every loop and lookup a general function would do.

A template's text names the values it reads, never holds them, so many functions share one text
(every replay of one kernel's recordings, for instance): it is compiled once per process (a
compile costs about 300 us on the CPU machine, most of a recorded call's own work), and each
function gets its own copy of the compiled code, whose specializations then follow its own globals.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import CodeType
from typing import Any


def generated(text: str, name: str, scope: dict[str, Any]) -> Callable[..., Any]:
    """The function ``name`` defined by ``text`` in a namespace holding ``scope``."""
    namespace = dict(scope)
    exec(_compiled(text, name), namespace)  # our own template, never outside text
    made = namespace[name]
    made.__code__ = made.__code__.replace()  # its own code object: inline caches are per code object
    return made


GENERATED_FILE = "<tkreg generated"  # how the file name of every function made here begins


@functools.lru_cache(maxsize=1024)
def _compiled(text: str, name: str) -> CodeType:
    return compile(text, f"{GENERATED_FILE} {name}>", "exec")
