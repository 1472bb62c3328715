"""Every built-in kernel's callables take what tkreg passes them: the op's inputs, optional ones
included (None in their place), positionally. A function written for fewer inputs fails only
where it is called, which for some (tune_configs, a GPU's tuning) is never on a CPU machine."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from tkreg import default_registry
from tkreg.core import refs


def _forward_kernels() -> list[Any]:
    registry = default_registry()
    return [(registry.op(k.op), k) for k in registry.kernels() if not k.backward]


@pytest.mark.parametrize(("op", "kernel"), _forward_kernels(), ids=lambda x: getattr(x, "name", ""))
def test_forward_callables_take_every_input_of_their_op(op: Any, kernel: Any) -> None:
    inputs = [object()] * len(op.input_names() or ())
    params = {p.name: p.default for p in op.params}
    called = {"launcher": (kernel.launcher, {"out": None, **params})}
    if kernel.requires.inputs is not None:
        called["requires.inputs"] = (kernel.requires.inputs, {})
    if callable(kernel.tune_configs) or isinstance(kernel.tune_configs, str):
        called["tune_configs"] = (kernel.tune_configs, params)
    if kernel.score is not None:
        called["score"] = (kernel.score, {})
    for what, (ref, keywords) in called.items():
        fn = refs.resolve(ref)
        try:
            inspect.signature(fn).bind(*inputs, **keywords)
        except TypeError as e:
            pytest.fail(f"{kernel.name}'s {what} cannot take op {op.name}'s inputs {op.inputs or '(undeclared)'}: {e}")
