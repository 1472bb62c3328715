"""What an op's callers and kernels exchange besides input tensors: scalar parameters, named
outputs, and the inputs a kernel declares it writes. (How callers' tensors map onto kernel inputs is
:mod:`tkreg.core.contracts`.)

Each declaration is a frozen dataclass validated in ``__post_init__`` (a bad field raises
:class:`SpecError` naming it). Nothing here imports torch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Union

from . import dtypes, refs
from .errors import SpecError
from .refs import Ref

ParamValue = Union[int, str, bool, float]
PARAM_KINDS = (bool, int, float, str)  # bool first: it is also an int
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_identifier(kind: str, owner: str, field_name: str, name: object) -> str:
    if not isinstance(name, str) or not _IDENT.match(name):
        raise SpecError(kind, owner, field_name, f"must be a Python identifier, got {name!r}")
    return name


def param_kind(value: object) -> type:
    for kind in PARAM_KINDS:
        if isinstance(value, kind):
            return kind
    raise TypeError(f"{value!r} is not a bool, int, float or str")


def format_value(value: ParamValue) -> str:
    """A parameter value as item ids show it: ``1e-06``, ``True``, ``-100``, ``mean``."""
    return repr(value) if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Param:
    """A named scalar an op takes besides its tensors (eps, a softmax scale, a causal flag).

    ``default`` sets its type (bool, int, float or str; an int value is accepted for a float);
    ``values`` are the values generated tests cover (default: the default alone). References,
    launchers and peers receive it by keyword, as do ``tkreg.ops.<op>`` and ``torch.ops.tkreg.<op>``.
    """

    name: str
    default: ParamValue
    values: tuple[ParamValue, ...] = ()
    description: str = ""

    def __post_init__(self) -> None:
        check_identifier("param", self.name, "name", self.name)
        try:
            kind = param_kind(self.default)
        except TypeError as e:
            raise SpecError("param", self.name, "default", str(e)) from None
        values = tuple(self.values) or (self.default,)
        for value in values:
            ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                ok = True
            if not ok:
                raise SpecError("param", self.name, "values", f"{value!r} is not a {kind.__name__} like the default")
            if kind is float and math.isnan(float(value)):
                raise SpecError("param", self.name, "values", "NaN cannot be a tested value (it equals nothing)")
        if len(set(values)) != len(values):
            raise SpecError("param", self.name, "values", f"duplicate values in {values!r}")
        object.__setattr__(self, "values", tuple(float(v) if kind is float else v for v in values))

    @property
    def kind(self) -> type:
        return param_kind(self.default)

    def check(self, op: str, value: object) -> ParamValue:
        """``value`` as this parameter takes it, or a TypeError a caller can act on."""
        kind = self.kind
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise TypeError(f"{op}: parameter {self.name} must be a {kind.__name__}, got {value!r}")
        return value  # type: ignore[return-value]


@dataclass(frozen=True)
class Output:
    """One named output of an op.

    ``dtype``: a dtype name ("float32" for a statistic kept in fp32, "int64" for indices), or None
    for the dtype of the case (the op's dtype axis). ``tolerances`` (per case dtype) replaces the
    op's table for this output; integer and bool outputs always compare exactly.
    ``differentiable``: gradients flow back from it (False for statistics and indices).
    ``returned``: ``tkreg.ops.<op>`` returns it (False: kept for the backward, like a norm's rstd;
    kernels still compute it and tests still check it).
    """

    name: str
    dtype: str | None = None
    tolerances: Mapping[str, object] | None = None
    differentiable: bool = True
    returned: bool = True
    description: str = ""

    def __post_init__(self) -> None:
        check_identifier("output", self.name, "name", self.name)
        if self.dtype is not None and self.dtype not in dtypes.KNOWN:
            raise SpecError("output", self.name, "dtype", f"unknown dtype {self.dtype!r}; known: {', '.join(dtypes.KNOWN)}")
        if self.tolerances is not None and not isinstance(self.tolerances, Mapping):
            raise SpecError("output", self.name, "tolerances", "must map dtype names to Tolerance")
        if self.differentiable and self.dtype is not None and not dtypes.is_floating(self.dtype):
            object.__setattr__(self, "differentiable", False)  # integers carry no gradient

    @property
    def exact(self) -> bool:
        """Compared bit for bit (integer and bool outputs)."""
        return self.dtype is not None and not dtypes.is_floating(self.dtype)


DEFAULT_OUTPUTS = (Output("out"),)


@dataclass(frozen=True)
class Writes:
    """An input a kernel overwrites (an in-place op, a fused loss that stores its gradient in the
    logits). ``expect(*inputs, **params)`` runs on float64 copies of the inputs, like the op's
    reference, and says what the input should hold afterwards, checked with ``tolerances`` (per
    case dtype; default: the op's); without it, ``reason`` says why its content is not checked."""

    input: str
    expect: Ref | None = None
    reason: str = ""
    tolerances: Mapping[str, object] | None = None

    def validate(self, kernel: str) -> None:
        check_identifier("kernel", kernel, "writes", self.input)
        if self.expect is None and not self.reason.strip():
            raise SpecError(
                "kernel", kernel, "writes", f"{self.input}: give expect= (what it should hold) or reason= (why unchecked)"
            )
        if self.expect is not None and not refs.is_valid(self.expect):
            raise SpecError("kernel", kernel, "writes", f"{self.input}: expect must be a callable or 'pkg.mod:attr'")
