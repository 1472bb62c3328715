"""Forms: how the inputs people pass map onto the 2-D inputs kernels take, per op.

Kernels take fixed-rank inputs (add: two (M, N) tensors; sum_row: (M, N); matmul: (M, K) and
(K, N)); models pass tensors of any rank. A form states an op's calling contract (what makes
inputs bad, whatever kernels exist), views the inputs as kernel inputs without copying where the
layout allows, allocates the output in the caller's shape, describes kernel inputs for the
wall-time model (named dims, a shape class, a layout) and says how gradients flow.

The three built-in ops have forms; any other op (a third-party plugin's) gets the plain form:
inputs go to kernels as they are and the op's own ``make_output`` allocates the output.

Importing this module imports no torch: the registry reads dims, classes and layouts of
duck-typed tensors; views, outputs and gradients import torch when first used.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import refs
from ..core.specs import Op
from ..launch.inputs import is_tensor

# sum_row shape classes: the rows' width decides how a kernel maps rows to programs.
NARROW_MAX_N = 128  # up to 512 bytes per fp32 row: many rows per program
MEDIUM_MAX_N = 4096  # a row fits one column step
LONG_MIN_N = 65536  # rows of 256 KB and more
FEW_ROWS = 1024  # fewer rows than this cannot fill the GPU with one row block per program
# matmul: an output this thin in M or N leaves most SMs without a tile of the big tile shapes.
SKINNY_MAX = 256
# A 1-D contiguous add is viewed as rows of this many elements at most (a power of two dividing
# its length), so TMA kernels get wide tiles; below MIN_FLAT_WIDTH it stays one row.
MAX_FLAT_WIDTH = 1024
MIN_FLAT_WIDTH = 128


def shape_of(t: Any) -> tuple[int, ...]:
    return tuple(t.shape)


def is_dense_row_major(t: Any) -> bool:
    """Contiguous in row-major order (size-1 dims may have any stride), duck-typed."""
    expected = 1
    for size, stride in zip(reversed(tuple(t.shape)), reversed(tuple(t.stride()))):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _layout_word(tensors: Sequence[Any]) -> str:
    return "contiguous" if all(is_dense_row_major(t) for t in tensors) else "strided"


@dataclass(frozen=True)
class OutputSpec:
    """The output a call returns: a new contiguous tensor of this shape, dtype and device."""

    shape: tuple[Any, ...]
    dtype: Any
    device: Any

    def empty(self) -> Any:
        import torch

        return torch.empty(self.shape, dtype=self.dtype, device=self.device)


@dataclass(frozen=True)
class KernelView:
    """How one input signature reaches the kernels: the 2-D shape each input is viewed as (None:
    passed as it is) and the shape the output is viewed as for the kernel's ``out``."""

    input_shapes: tuple[tuple[int, ...] | None, ...]
    output_shape: tuple[int, ...] | None

    def inputs(self, inputs: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(x if s is None else x.view(s) for x, s in zip(inputs, self.input_shapes))

    def output(self, out: Any) -> Any:
        return out if self.output_shape is None else out.view(self.output_shape)


def argument_names(op: Op) -> tuple[str, ...] | None:
    """The op's input names, from its reference implementation's positional parameters; None
    when they cannot name a fixed list of tensors (varargs, keyword-only or defaulted inputs,
    names that are not identifiers)."""
    try:
        signature = inspect.signature(refs.resolve(op.reference))
    except (TypeError, ValueError):
        return None
    names = []
    for p in signature.parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or p.default is not p.empty:
            return None
        names.append(p.name)
    return tuple(names) if names and all(n.isidentifier() for n in names) else None


class Form:
    """The plain form: inputs go to kernels unchanged; the op's make_output allocates."""

    name = "plain"
    differentiable = False

    def __init__(self, op: Op) -> None:
        self.op = op

    @functools.cached_property
    def input_names(self) -> tuple[str, ...] | None:
        """The inputs a call takes (from the op's reference implementation); None: any number."""
        return argument_names(self.op)

    def contract_reasons(self, inputs: Sequence[Any]) -> list[str]:
        """Why these inputs break the op's calling contract, whatever kernels exist."""
        names = self.input_names or tuple(f"input {i}" for i in range(len(inputs)))
        if len(inputs) != len(names):
            return [f"{self.op.name} takes {len(names)} tensor(s), got {len(inputs)}"]
        reasons = [f"{n} must be a torch.Tensor, got {type(x).__name__}" for n, x in zip(names, inputs) if not is_tensor(x)]
        return reasons or self.tensor_reasons(inputs)

    def tensor_reasons(self, inputs: Sequence[Any]) -> list[str]:
        """The contract beyond "these are tensors" (shapes, dtypes, devices agreeing)."""
        return []

    def kernel_view(self, inputs: Sequence[Any]) -> KernelView | str:
        """The view of these inputs for kernels, or why they cannot be viewed without a copy."""
        return KernelView((None,) * len(inputs), None)

    def output_spec(self, inputs: Sequence[Any]) -> OutputSpec | None:
        """The output shape, dtype and device; None: the op's make_output decides."""
        return None

    def new_output(self, inputs: Sequence[Any]) -> Any:
        spec = self.output_spec(inputs)
        return spec.empty() if spec is not None else refs.resolve(self.op.make_output)(*inputs)

    # -- for the wall-time model (kernel inputs, duck-typed) ----------------------------------
    def dims(self, kernel_inputs: Sequence[Any]) -> dict[str, int] | None:
        """Sizes named as the op's cases name them, so the op's cost model applies; None when
        this form does not know them (no wall-time estimate then)."""
        return None

    def shape_class(self, dims: dict[str, int]) -> str:
        return "all"

    def layout(self, kernel_inputs: Sequence[Any]) -> str:
        return _layout_word(kernel_inputs)

    # -- autograd ----------------------------------------------------------------------------
    def save_for_backward(self, ctx: Any, inputs: Sequence[Any], output: Any) -> None:
        raise NotImplementedError

    def backward(self, ctx: Any, grad: Any, call: Callable[..., Any]) -> tuple[Any, ...]:
        raise NotImplementedError(f"{self.op.name} has no backward")


def _same_dtype_device(a: Any, b: Any) -> list[str]:
    reasons = []
    if a.dtype != b.dtype:
        reasons.append(f"a and b must have one dtype, got {a.dtype} and {b.dtype}")
    if a.device != b.device:
        reasons.append(f"a and b must be on one device, got {a.device} and {b.device}")
    return reasons


def _rows_view(t: Any) -> tuple[int, int] | None:
    """(M, N) for ``t`` with its leading dims merged, when its strides allow a view (duck-typed:
    every non-unit leading dim's stride equals the next one's stride times its size)."""
    shape, stride = shape_of(t), tuple(t.stride())
    lead = [(s, st) for s, st in zip(shape[:-1], stride[:-1]) if s != 1]
    for (_, outer), (size, inner) in itertools.pairwise(lead):
        if outer != inner * size:
            return None
    return math.prod(shape[:-1]), shape[-1]


def _coalesced(tensors: Sequence[Any]) -> list[int]:
    """Sizes of the dim groups that every tensor (of one shape) can merge into a view."""
    shape = shape_of(tensors[0])
    strides = [tuple(t.stride()) for t in tensors]
    groups: list[int] = []
    inner: list[int] = []
    for i, size in enumerate(shape):
        if size == 1:
            continue
        if groups and all(inner[k] == s[i] * size for k, s in enumerate(strides)):
            groups[-1] *= size
        else:
            groups.append(size)
        inner = [s[i] for s in strides]
    return groups


def _flat_width(n: int) -> int:
    """Row width for a contiguous 1-D add of n elements (see MAX_FLAT_WIDTH)."""
    width = math.gcd(n, MAX_FLAT_WIDTH)
    return width if width >= MIN_FLAT_WIDTH else n


class ElementwiseForm(Form):
    """add: two tensors of one shape, dtype and device, any rank; out has their shape."""

    name = "elementwise"
    differentiable = True
    input_names = ("a", "b")

    def tensor_reasons(self, inputs: Sequence[Any]) -> list[str]:
        a, b = inputs
        reasons = [] if shape_of(a) == shape_of(b) else [f"a and b must have one shape, got {shape_of(a)} and {shape_of(b)}"]
        return reasons + _same_dtype_device(a, b)

    def kernel_view(self, inputs: Sequence[Any]) -> KernelView | str:
        a, b = inputs
        shape = shape_of(a)
        if len(shape) == 2:
            return KernelView((None, None), None)
        numel = math.prod(shape)
        if len(shape) <= 1 and is_dense_row_major(a) and is_dense_row_major(b):
            width = _flat_width(numel) if numel else 1
            rows = (numel // width, width)
            return KernelView((rows, rows), rows)
        rows = _rows_view(a) if _rows_view(b) is not None else None
        if rows is None:
            groups = _coalesced(inputs)
            if len(groups) > 2:
                return (
                    f"a (shape {shape}, strides {tuple(a.stride())}) and b (strides {tuple(b.stride())}) "
                    "cannot be viewed as one 2-D layout without a copy"
                )
            rows = (groups[0] if len(groups) == 2 else 1, groups[-1] if groups else 1)
        return KernelView((rows, rows), rows)

    def output_spec(self, inputs: Sequence[Any]) -> OutputSpec:
        return OutputSpec(shape_of(inputs[0]), inputs[0].dtype, inputs[0].device)

    def dims(self, kernel_inputs: Sequence[Any]) -> dict[str, int]:
        m, n = shape_of(kernel_inputs[0])
        return {"M": m, "N": n}

    def save_for_backward(self, ctx: Any, inputs: Sequence[Any], output: Any) -> None:
        pass

    def backward(self, ctx: Any, grad: Any, call: Callable[..., Any]) -> tuple[Any, ...]:
        # d(a + b)/da = d(a + b)/db = 1
        return tuple(grad if need else None for need in ctx.needs_input_grad)


class RowReductionForm(Form):
    """sum_row: sums the last dim of a tensor of rank >= 1; out has the leading dims."""

    name = "row reduction"
    differentiable = True
    input_names = ("x",)

    def tensor_reasons(self, inputs: Sequence[Any]) -> list[str]:
        if len(shape_of(inputs[0])) < 1:
            return [f"x must have at least one dimension to sum over, got shape {shape_of(inputs[0])}"]
        return []

    def kernel_view(self, inputs: Sequence[Any]) -> KernelView | str:
        (x,) = inputs
        shape = shape_of(x)
        if len(shape) == 2:
            return KernelView((None,), None)
        rows = _rows_view(x)
        if rows is None:
            return f"x (shape {shape}, strides {tuple(x.stride())}): its leading dims cannot be merged into rows without a copy"
        return KernelView((rows,), (rows[0],))

    def output_spec(self, inputs: Sequence[Any]) -> OutputSpec:
        (x,) = inputs
        return OutputSpec(shape_of(x)[:-1], x.dtype, x.device)

    def dims(self, kernel_inputs: Sequence[Any]) -> dict[str, int]:
        m, n = shape_of(kernel_inputs[0])
        return {"M": m, "N": n}

    def shape_class(self, dims: dict[str, int]) -> str:
        return row_class(dims["M"], dims["N"])

    def save_for_backward(self, ctx: Any, inputs: Sequence[Any], output: Any) -> None:
        ctx.input_shape = shape_of(inputs[0])

    def backward(self, ctx: Any, grad: Any, call: Callable[..., Any]) -> tuple[Any, ...]:
        # every element of a row contributes once to its sum
        return (grad.unsqueeze(-1).expand(ctx.input_shape),)


def row_class(m: int, n: int) -> str:
    """The sum_row shape class of an (m, n) input."""
    if n <= NARROW_MAX_N:
        return "narrow rows"
    if n <= MEDIUM_MAX_N:
        return "medium rows"
    if m < FEW_ROWS:
        return "few long rows"
    return "long rows" if n >= LONG_MIN_N else "square"


class LinearForm(Form):
    """matmul: A (..., K) times B (K, N), as F.linear uses it (B may be a transposed (N, K)
    weight); out is (..., N)."""

    name = "linear"
    differentiable = True
    input_names = ("a", "b")

    def tensor_reasons(self, inputs: Sequence[Any]) -> list[str]:
        a, b = inputs
        reasons = []
        if len(shape_of(a)) < 1:
            reasons.append(f"a must have at least one dimension, got shape {shape_of(a)}")
        if len(shape_of(b)) != 2:
            reasons.append(f"b must be 2-D (K, N), got shape {shape_of(b)}")
        if not reasons and shape_of(a)[-1] != shape_of(b)[0]:
            reasons.append(f"inner dimensions differ: a is {shape_of(a)}, b is {shape_of(b)} (need a (..., K), b (K, N))")
        return reasons + _same_dtype_device(a, b)

    def kernel_view(self, inputs: Sequence[Any]) -> KernelView | str:
        a, b = inputs
        shape = shape_of(a)
        if len(shape) == 2:
            return KernelView((None, None), None)
        rows = _rows_view(a)
        if rows is None:
            return f"a (shape {shape}, strides {tuple(a.stride())}): its leading dims cannot be merged into rows without a copy"
        return KernelView((rows, None), (rows[0], shape_of(b)[1]))

    def output_spec(self, inputs: Sequence[Any]) -> OutputSpec:
        a, b = inputs
        return OutputSpec((*shape_of(a)[:-1], shape_of(b)[1]), a.dtype, a.device)

    def dims(self, kernel_inputs: Sequence[Any]) -> dict[str, int]:
        (m, k), (_, n) = shape_of(kernel_inputs[0]), shape_of(kernel_inputs[1])
        return {"M": m, "N": n, "K": k}

    def shape_class(self, dims: dict[str, int]) -> str:
        return "skinny" if min(dims["M"], dims["N"]) <= SKINNY_MAX else "large"

    def layout(self, kernel_inputs: Sequence[Any]) -> str:
        """Which operands are row-major ("row") or column-major ("col", e.g. B = W.t())."""
        words = []
        for name, t in zip("ab", kernel_inputs):
            stride = tuple(t.stride())
            words.append(f"{name} {'row' if stride[1] == 1 else 'col' if stride[0] == 1 else 'strided'}")
        return ", ".join(words)

    def save_for_backward(self, ctx: Any, inputs: Sequence[Any], output: Any) -> None:
        ctx.save_for_backward(*inputs)

    def backward(self, ctx: Any, grad: Any, call: Callable[..., Any]) -> tuple[Any, ...]:
        # C = A B: dA = dC B^T; dB = A^T dC with A's and dC's leading dims merged into rows.
        a, b = ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad
        grad_a = call(grad, b.t()) if need_a else None
        grad_b = None
        if need_b:
            k, n = shape_of(b)
            grad_b = call(a.reshape(-1, k).t(), grad.reshape(-1, n))
        return grad_a, grad_b


BUILT_IN: dict[str, type[Form]] = {"add": ElementwiseForm, "sum_row": RowReductionForm, "matmul": LinearForm}


def form_for(op: Op) -> Form:
    """The op's form: a built-in op's own, else the plain form."""
    return BUILT_IN.get(op.name, Form)(op)
