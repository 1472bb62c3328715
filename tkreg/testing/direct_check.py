"""An op's ``peer_direct`` held against its peer: the ``peer_direct`` items of ``pytest --tkreg``.

Where an op names the torch call its peer makes for inputs of given shapes (``Op.peer_direct``),
tkreg.ops makes that call in the peer's place, so a wrong name or order gives wrong answers that
no kernel check would see. The check makes the op's default cases in each of its dtypes and, where
``peer_direct`` names a call for their shapes, makes it and the peer's own call (``out=None``):
each output must have the peer's dtype and shape, and values within the op's tolerance of it.
"""

from __future__ import annotations

from typing import Any

from ..core import dtypes, refs
from ..core.specs import Op
from .checking import compare, compare_exact
from .harness import as_tuple, make_inputs


def check(op: Op, device: str, seed: int) -> tuple[str | None, int]:
    """(None where every call ``peer_direct`` names agrees with the peer, else what differs; how
    many (case, dtype) pairs it named a call for)."""
    if op.peer is None or op.peer_direct is None:
        raise ValueError(f"op {op.name!r} has no peer_direct to check")
    peer, direct = refs.resolve(op.peer), refs.resolve(op.peer_direct)
    params = dict(op.defaults)
    problems: list[str] = []
    named = 0
    for case in op.cases_in("default"):
        for dtype in (d for d in op.dtypes if not case.dtypes or d in case.dtypes):
            inputs = make_inputs(op, case, dtype, seed, device, op.defaults)
            shapes = tuple(None if t is None else tuple(t.shape) for t in inputs)
            where = f"case {case.id}, {dtypes.short(dtype)}, shapes {list(shapes)}"
            found = direct(shapes)
            if found is None:
                continue
            named += 1
            problem = _differs(op, case, found, inputs, peer, params, dtype)
            if problem is not None:
                problems.append(f"{where}: {problem}")
    if not problems:
        return None, named
    return f"op {op.name!r}: its peer_direct names a call that is not its peer's:\n  " + "\n  ".join(problems), named


def _differs(op: Op, case: Any, found: Any, inputs: tuple[Any, ...], peer: Any, params: dict[str, Any],
             dtype: str) -> str | None:  # fmt: skip
    try:
        target, order = found
        got = as_tuple(target(*(inputs[i] for i in order)))
    except Exception as e:  # a wrong order or a call that cannot take the inputs: the finding
        return f"the named call failed: {type(e).__name__}: {e}"
    want = as_tuple(peer(*inputs, out=None, **params))
    if len(got) != len(want):
        return f"{len(got)} outputs, the peer {len(want)}"
    returned = [o for o in op.outputs if o.returned]
    outputs = returned if len(want) == len(returned) else list(op.outputs)
    for i, (g, w, output) in enumerate(zip(got, want, outputs)):
        if g.dtype != w.dtype or tuple(g.shape) != tuple(w.shape):
            return f"output {i} is {tuple(g.shape)} {g.dtype}, the peer's {tuple(w.shape)} {w.dtype}"
        exact = not (g.dtype.is_floating_point or g.dtype.is_complex)  # indices, counts: bit for bit
        result = compare_exact(g, w) if exact else compare(g, w, op.tolerance(dtype, case, output))
        if not result.ok:
            return f"output {i} against the peer's: {result.report()}"
    return None
