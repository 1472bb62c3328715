"""Forms: how an op's calling contract (``Op.contract``, :mod:`tkreg.core.contracts`) maps the
tensors callers pass onto the inputs kernels take.

Kernels take fixed-rank inputs; models pass tensors of any rank. One form per contract kind
carries the contract out for any op that declares it: it checks callers' inputs (what makes
inputs bad, whatever kernels exist), views them as kernel inputs without copying where the layout
allows, lays out the outputs (the op's ``make_output`` on the kernel-level inputs, shapes given the
caller's leading dims back) and describes kernel inputs for the wall-time model (named dims, the
op's shape class, a layout word). No form knows any op: what differs between ops is declared.

- plain: inputs go to kernels as they are; ``make_output``'s outputs as they are (strides kept).
- elementwise: tensors of one shape, any rank, viewed as one 2-D (rows, cols) layout; a
  contiguous 1-D tensor as rows of up to MAX_FLAT_WIDTH elements. Outputs shaped like the kernel
  view get the caller's shape.
- rows: the first input (..., N) viewed as (rows, N); inputs with its leading dims (per-row
  targets) merged the same way; others (per-column weights) as they are. Outputs whose first dim
  is the rows get the caller's leading dims back. (A 1-D first input is one row: only 0-d inputs
  count as per-row then, since a per-row vector and a per-column weight look alike.)
- linear: a (..., K) times b (K, N) (``F.linear``'s transposed weight included), out (..., N).
  Batched: a (B, M, K) times b (B, K, N), out (B, M, N); a b that is the same for every batch
  (B = 1, or a stride-0 expand) is taken as one (K, N) matrix and a's batches merge into rows; any
  other b reaches kernels as 3-D tensors, which a kernel that takes only 2-D refuses.

Importing this module imports no torch: the registry reads dims, classes and layouts of
duck-typed tensors; output layouts import torch when first used.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import refs
from ..core.refs import accepted
from ..core.specs import Op
from ..launch.inputs import is_tensor

# A 1-D contiguous elementwise input is viewed as rows of this many elements at most (a power of
# two dividing its length), so kernels that tile rows (TMA boxes) get wide tiles; below
# MIN_FLAT_WIDTH it stays one row.
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


def _joined(names: Sequence[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def as_tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


@dataclass(frozen=True)
class KernelView:
    """How one input signature reaches kernels: per input, the shape it is viewed as (None: as
    it is); ``selects`` names inputs whose first index 0 is taken before the view (a batch of
    equal matrices, read once). ``batched``: 3-D linear inputs passed as they are. ``note``
    says what about the inputs decided the view (prefixed to reasons for the peer)."""

    shapes: tuple[tuple[int, ...] | None, ...]
    selects: frozenset[int] = frozenset()
    batched: bool = False
    note: str = ""

    @functools.cached_property
    def identity(self) -> bool:
        """Every input reaches kernels as it is."""
        return not self.selects and all(s is None for s in self.shapes)

    def inputs(self, inputs: Sequence[Any]) -> tuple[Any, ...]:
        if self.identity:
            return tuple(inputs)
        taken = [x[0] if i in self.selects else x for i, x in enumerate(inputs)]
        return tuple(x if s is None else x.view(s) for x, s in zip(taken, self.shapes))


@dataclass(frozen=True)
class OutputLayout:
    """One output as a call allocates it (the caller's shape; ``stride`` None: contiguous) and
    the shape kernels see it as (None: as allocated)."""

    shape: tuple[Any, ...]
    stride: tuple[int, ...] | None
    dtype: Any
    device: Any
    kernel_shape: tuple[Any, ...] | None = None

    def empty(self) -> Any:
        """A new tensor of this layout."""
        return self.allocator()()

    def allocator(self) -> Callable[[], Any]:
        """A new tensor of this layout per call, with everything but the allocation bound now."""
        import torch

        if self.stride is None:
            return functools.partial(torch.empty, self.shape, dtype=self.dtype, device=self.device)
        return functools.partial(torch.empty_strided, self.shape, self.stride, dtype=self.dtype, device=self.device)

    @classmethod
    def like(cls, t: Any) -> OutputLayout:
        """The layout of tensor ``t`` (contiguous ones without strides, as plans keep them)."""
        return cls(tuple(t.shape), None if t.is_contiguous() else tuple(t.stride()), t.dtype, t.device)

    def kernel(self, t: Any) -> Any:
        """``t`` (this output, or a tensor of its shape such as its gradient) as kernels see it."""
        return t if self.kernel_shape is None else t.view(self.kernel_shape)


def outputs_allocator(layouts: Sequence[OutputLayout]) -> Callable[[], tuple[Any, ...]]:
    """``allocate()``: new tensors of ``layouts`` per call, as a tuple. In C++ where tkreg.ops'
    extension is in use (:mod:`.native`, outputs.cpp: no arguments parsed per call), else one
    torch.empty per output."""
    from . import native

    make = native.outputs_maker()
    if make is not None:
        return make(tuple((layout.shape, layout.stride, layout.dtype, layout.device) for layout in layouts))
    each = [layout.allocator() for layout in layouts]
    return lambda: tuple([new() for new in each])


def _merged_shape(t: Any, k: int) -> tuple[int, ...] | None:
    """t's shape with its first ``k`` dims merged into one, when its strides allow a view
    (duck-typed: every non-unit dim among them has the stride of the next one times its size);
    k = 0 adds a leading dim of 1."""
    shape, stride = shape_of(t), tuple(t.stride())
    lead = [(s, st) for s, st in zip(shape[:k], stride[:k]) if s != 1]
    for (_, outer), (size, inner) in itertools.pairwise(lead):
        if outer != inner * size:
            return None
    return (math.prod(shape[:k]), *shape[k:])


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
    """Row width for a contiguous 1-D elementwise input of n elements (see MAX_FLAT_WIDTH)."""
    width = math.gcd(n, MAX_FLAT_WIDTH)
    return width if width >= MIN_FLAT_WIDTH else n


class Form:
    """The plain contract: inputs go to kernels as they are; the op's make_output allocates."""

    kind = "plain"
    DIMS: tuple[str, ...] = ()  # the kind's size names where the contract names none

    def __init__(self, op: Op) -> None:
        self.op = op
        self.contract = op.contract

    @functools.cached_property
    def input_names(self) -> tuple[str, ...] | None:
        """The inputs a call takes (declared, else the reference's); None: any number."""
        return self.op.input_names()

    def names_for(self, count: int) -> tuple[str, ...]:
        names = self.input_names
        return names if names is not None and len(names) == count else tuple(f"input {i}" for i in range(count))

    @functools.cached_property
    def optional(self) -> frozenset[int]:
        """Positions of the inputs a call may pass as None (``Op.optional``)."""
        names = self.op.inputs
        return frozenset(names.index(n) for n in self.op.optional)

    @functools.cached_property
    def required(self) -> int:
        """How many leading inputs a call must pass (``Op.required_inputs``; every one where the
        op does not declare its inputs, and so has no optional ones)."""
        if self.op.inputs:
            return self.op.required_inputs
        return len(self.input_names or ())

    def padded(self, inputs: Sequence[Any]) -> Sequence[Any]:
        """``inputs`` with the trailing optional inputs a call left out as None."""
        missing = len(self.op.inputs) - len(inputs)
        if missing <= 0 or len(inputs) < self.required:
            return inputs
        return (*inputs, *(None,) * missing)

    def contract_reasons(self, inputs: Sequence[Any]) -> list[str]:
        """Why these inputs break the op's calling contract, whatever kernels exist."""
        names = self.input_names
        if names is not None and len(inputs) != len(names):
            count = f"{self.required} to {len(names)}" if self.required < len(names) else f"{len(names)}"
            return [f"{self.op.name} takes {count} tensor(s) ({', '.join(names)}), got {len(inputs)}"]
        names = self.names_for(len(inputs))
        reasons = [self._not_a_tensor(n, x) for i, (n, x) in enumerate(zip(names, inputs))
                   if not is_tensor(x) and not (x is None and i in self.optional)]  # fmt: skip
        if reasons:
            return reasons
        at = self._present(inputs)
        return self.tensor_reasons([inputs[i] for i in at], [names[i] for i in at])

    def _not_a_tensor(self, name: str, value: Any) -> str:
        if value is None:  # e.g. a LayerNorm's bias=None, which torch's functions take
            allowed = self.op.optional
            may = f"'s only {_joined(list(allowed))} may be None" if allowed else " has no optional inputs"
            return f"{name} must be a torch.Tensor, got None: {self.op.name}{may}"
        return f"{name} must be a torch.Tensor, got {type(value).__name__}"

    @staticmethod
    def _present(inputs: Sequence[Any]) -> list[int]:
        """Positions of the inputs a call passed (an optional input may be None)."""
        return [i for i, x in enumerate(inputs) if x is not None]

    @staticmethod
    def _placed(at: Sequence[int], shapes: Sequence[Any], count: int) -> tuple[Any, ...]:
        """Per-input ``shapes`` of the inputs at positions ``at``, in place among ``count`` inputs
        (None for an absent one)."""
        placed: list[Any] = [None] * count
        for i, shape in zip(at, shapes):
            placed[i] = shape
        return tuple(placed)

    def tensor_reasons(self, inputs: Sequence[Any], names: Sequence[str]) -> list[str]:
        """The contract beyond "these are tensors" (shapes, dtypes, devices agreeing), for the
        inputs a call passed (absent optional ones left out, the first input never among them)."""
        return []

    def kernel_view(self, inputs: Sequence[Any]) -> KernelView | str:
        """The view of these inputs for kernels, or why they cannot be viewed without a copy; an
        absent optional input (None) reaches kernels as None."""
        at = self._present(inputs)
        if len(at) == len(inputs):
            return self.present_view(inputs)
        view = self.present_view([inputs[i] for i in at])
        if not isinstance(view, KernelView):
            return view
        shapes = self._placed(at, view.shapes, len(inputs))
        return KernelView(shapes, frozenset(at[i] for i in view.selects), view.batched, view.note)

    def present_view(self, inputs: Sequence[Any]) -> KernelView | str:
        """:meth:`kernel_view` of inputs that are all tensors."""
        return KernelView((None,) * len(inputs))

    # -- outputs ---------------------------------------------------------------------------------
    def output_layouts(
        self, inputs: Sequence[Any], view: KernelView | None, params: dict[str, Any], fake: bool = False
    ) -> tuple[OutputLayout, ...]:
        """The outputs a call of these inputs allocates. The op's make_output runs on stand-ins
        of the kernel inputs (``view``; None: the view the contract takes from shapes alone, as
        for a call that goes to the peer): metadata-only (meta) tensors for real inputs, or, with
        ``fake``, the traced (fake) tensors themselves; its outputs get the caller's dims back."""
        import torch

        def probe(t: Any, shape: tuple[Any, ...] | None = None, where: Any = "meta") -> Any:
            if not is_tensor(t):
                return t
            if fake:
                return t if shape is None else t.new_empty(shape)
            where = t.device if where is None else where
            if shape is None:
                return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=where)
            return torch.empty(shape, dtype=t.dtype, device=where)

        def probes(where: Any) -> list[Any]:
            if view is not None:
                made = [probe(x, None, where) for x in view.inputs(inputs)]
            else:
                made = [probe(x, s, where) for x, s in zip(inputs, self.logical_shapes(inputs))]
            return self.probe_inputs(inputs, view, made)

        device = None if fake else next((x.device for x in inputs if is_tensor(x)), None)
        try:
            return self._layouts(inputs, view, probes("meta"), params, device)
        except (NotImplementedError, RuntimeError):
            if fake:
                raise
            # a make_output that cannot run on meta tensors: once more on real (unfilled) ones
            return self._layouts(inputs, view, probes(None), params, device)

    def fake_outputs(self, inputs: Sequence[Any], params: dict[str, Any]) -> tuple[Any, ...]:
        """New outputs for traced (fake, possibly symbolic) inputs, laid out as a call's."""
        return tuple(layout.empty() for layout in self.output_layouts(inputs, None, params, fake=True))

    def logical_shapes(self, inputs: Sequence[Any]) -> tuple[tuple[Any, ...] | None, ...]:
        """Kernel-level shapes of the inputs, from shapes alone (None: as they are, and for an
        absent optional input)."""
        at = self._present(inputs)
        if len(at) == len(inputs):
            return self.present_shapes(inputs)
        return self._placed(at, self.present_shapes([inputs[i] for i in at]), len(inputs))

    def present_shapes(self, inputs: Sequence[Any]) -> tuple[tuple[Any, ...] | None, ...]:
        """:meth:`logical_shapes` of inputs that are all tensors."""
        return (None,) * len(inputs)

    def probe_inputs(self, inputs: Sequence[Any], view: KernelView | None, probes: list[Any]) -> list[Any]:
        """What make_output is called with: the kernel-level inputs (see LinearForm)."""
        return probes

    def _layouts(
        self, inputs: Sequence[Any], view: KernelView | None, probes: Sequence[Any], params: dict[str, Any], device: Any
    ) -> tuple[OutputLayout, ...]:
        allocate = refs.resolve(self.op.make_output)
        made = as_tuple(allocate(*probes, **accepted(allocate, params)))
        if len(made) != len(self.op.outputs):
            names = ", ".join(o.name for o in self.op.outputs)
            raise TypeError(
                f"op {self.op.name}: make_output returned {len(made)} tensor(s) for {len(self.op.outputs)} outputs ({names})"
            )
        layouts = []
        for out in made:
            where = device if device is not None and out.device.type == "meta" else out.device
            layouts.append(self.output_layout(inputs, view, probes, out, where))
        return tuple(layouts)

    def output_layout(self, inputs: Sequence[Any], view: KernelView | None, probes: Sequence[Any], out: Any,
                      device: Any) -> OutputLayout:
        """One output of make_output (on ``probes``) as the caller gets it."""
        stride = None if is_dense_row_major(out) else tuple(out.stride())
        return OutputLayout(shape_of(out), stride, out.dtype, device)

    # -- for the wall-time model (kernel inputs, duck-typed) ----------------------------------
    def dims(self, kernel_inputs: Sequence[Any]) -> dict[str, int] | None:
        """Sizes named as the op's cases name them (``contract.dims``), so the op's cost model
        applies; None when they cannot be told (no wall-time estimate then). Plain: the first
        input's sizes, where the contract names as many."""
        shape = shape_of(kernel_inputs[0]) if kernel_inputs else ()
        names = self.contract.dims
        return dict(zip(names, shape)) if names and len(names) == len(shape) else None

    def _named(self, sizes: tuple[int, ...]) -> dict[str, int]:
        """Sizes in the order the contract kind defines, named as the contract names them."""
        return dict(zip(self.contract.dims or self.DIMS, sizes))

    @functools.cached_property
    def _shape_class(self) -> Callable[[dict[str, int]], str] | None:
        ref = self.contract.shape_class
        return None if ref is None else refs.resolve(ref)

    def shape_class(self, dims: dict[str, int]) -> str:
        """The op's class of these dims (``contract.shape_class``); one class by default."""
        fn = self._shape_class
        return "all" if fn is None else str(fn(dims))

    def layout(self, kernel_inputs: Sequence[Any]) -> str:
        return _layout_word([t for t in kernel_inputs if is_tensor(t)])


def _agreement_reasons(inputs: Sequence[Any], names: Sequence[str], dtypes_too: bool = True) -> list[str]:
    """Tensors on one device, and (``dtypes_too``) the floating ones of one dtype."""
    reasons = []
    devices = [x.device for x in inputs]
    if len(set(devices)) > 1:
        reasons.append(f"{_joined(names)} must be on one device, got {', '.join(map(str, devices))}")
    floating = [(n, x.dtype) for n, x in zip(names, inputs) if getattr(x.dtype, "is_floating_point", True)]
    if dtypes_too and len({d for _, d in floating}) > 1:
        got = " and ".join(str(d) for _, d in floating)
        reasons.append(f"{_joined([n for n, _ in floating])} must have one dtype, got {got}")
    return reasons


class ElementwiseForm(Form):
    """Tensors of one shape, any rank; floating ones of one dtype."""

    kind = "elementwise"
    DIMS = ("M", "N")

    def tensor_reasons(self, inputs: Sequence[Any], names: Sequence[str]) -> list[str]:
        shapes = [shape_of(x) for x in inputs]
        reasons = []
        if len(set(shapes)) > 1:
            reasons.append(f"{_joined(names)} must have one shape, got {' and '.join(map(str, shapes))}")
        return reasons + _agreement_reasons(inputs, names)

    def present_view(self, inputs: Sequence[Any]) -> KernelView | str:
        shape = shape_of(inputs[0])
        if len(shape) == 2:
            return KernelView((None,) * len(inputs))
        numel = math.prod(shape)
        if len(shape) <= 1 and all(is_dense_row_major(x) for x in inputs):
            width = _flat_width(numel) if numel else 1
            rows = (numel // width, width)
            return KernelView((rows,) * len(inputs))
        merged = [_merged_shape(x, len(shape) - 1) for x in inputs]
        rows = merged[0] if len(shape) >= 2 and all(m is not None for m in merged) else None
        if rows is None:
            groups = _coalesced(inputs)
            if len(groups) > 2:
                strides = ", ".join(f"{tuple(x.stride())}" for x in inputs)
                return f"inputs of shape {shape} with strides {strides} cannot be viewed as one 2-D layout without a copy"
            rows = (groups[0] if len(groups) == 2 else 1, groups[-1] if groups else 1)
        return KernelView((rows,) * len(inputs))

    def present_shapes(self, inputs: Sequence[Any]) -> tuple[tuple[Any, ...] | None, ...]:
        shape = shape_of(inputs[0])
        if len(shape) == 2:
            return (None,) * len(inputs)
        rows = (math.prod(shape[:-1]), shape[-1]) if shape else (1, 1)
        return (rows,) * len(inputs)

    def output_layout(self, inputs: Sequence[Any], view: KernelView | None, probes: Sequence[Any], out: Any,
                      device: Any) -> OutputLayout:
        kernel = shape_of(probes[0])
        if shape_of(out) == kernel:
            caller = shape_of(inputs[0])
            return OutputLayout(caller, None, out.dtype, device, None if caller == kernel else kernel)
        return OutputLayout(shape_of(out), None, out.dtype, device)

    def dims(self, kernel_inputs: Sequence[Any]) -> dict[str, int]:
        return self._named(shape_of(kernel_inputs[0]))  # (rows, cols)


class RowsForm(Form):
    """Row-wise over the last dim of the first input, of rank >= 1."""

    kind = "rows"
    DIMS = ("M", "N")

    def tensor_reasons(self, inputs: Sequence[Any], names: Sequence[str]) -> list[str]:
        if len(shape_of(inputs[0])) < 1:
            return [f"{names[0]} must have at least one dimension (its rows are the last), got shape {shape_of(inputs[0])}"]
        return _agreement_reasons(inputs, names, dtypes_too=False)

    @staticmethod
    def _per_row(x: Any, lead: tuple[int, ...]) -> bool:
        """An input with the first input's leading dims (one entry, or one vector, per row)."""
        shape = shape_of(x)
        return len(shape) == 0 if not lead else shape[: len(lead)] == lead

    def present_view(self, inputs: Sequence[Any]) -> KernelView | str:
        x = inputs[0]
        shape = shape_of(x)
        lead = shape[:-1]
        if len(lead) == 1:
            return KernelView((None,) * len(inputs))
        names = self.names_for(len(inputs))
        shapes: list[tuple[int, ...] | None] = []
        for i, t in enumerate(inputs):
            if i and not (is_tensor(t) and self._per_row(t, lead)):
                shapes.append(None)
                continue
            merged = _merged_shape(t, len(lead))
            if merged is None:
                return (
                    f"{names[i]} (shape {shape_of(t)}, strides {tuple(t.stride())}): its leading dims cannot be merged "
                    "into rows without a copy"
                )
            shapes.append(merged)
        return KernelView(tuple(shapes))

    def present_shapes(self, inputs: Sequence[Any]) -> tuple[tuple[Any, ...] | None, ...]:
        lead = shape_of(inputs[0])[:-1]
        if len(lead) == 1:
            return (None,) * len(inputs)
        rows = math.prod(lead)
        return tuple(
            (rows, *shape_of(t)[len(lead):]) if i == 0 or (is_tensor(t) and self._per_row(t, lead)) else None
            for i, t in enumerate(inputs)
        )

    def output_layout(self, inputs: Sequence[Any], view: KernelView | None, probes: Sequence[Any], out: Any,
                      device: Any) -> OutputLayout:
        rows = shape_of(probes[0])[0]
        kernel = shape_of(out)
        if kernel and kernel[0] == rows:
            caller = (*shape_of(inputs[0])[:-1], *kernel[1:])
            return OutputLayout(caller, None, out.dtype, device, None if caller == kernel else kernel)
        return OutputLayout(kernel, None, out.dtype, device)

    def dims(self, kernel_inputs: Sequence[Any]) -> dict[str, int]:
        return self._named(shape_of(kernel_inputs[0]))  # (rows, row length)


class LinearForm(Form):
    """a (..., K) times b (K, N), out (..., N); batched: a (B, M, K) times b (B, K, N)."""

    kind = "linear"
    DIMS = ("M", "N", "K")
    BATCHED_NOTE = "batched a (B, M, K) @ b (B, K, N) with a b per batch, passed to kernels as 3-D tensors"

    def tensor_reasons(self, inputs: Sequence[Any], names: Sequence[str]) -> list[str]:
        if len(inputs) < 2:
            return [f"op {self.op.name}: the linear contract needs two inputs (a (..., K) and b (K, N)), it has {len(inputs)}"]
        a, b = inputs[:2]
        na, nb = names[:2]
        sa, sb = shape_of(a), shape_of(b)
        reasons = []
        if len(sa) < 1:
            reasons.append(f"{na} must have at least one dimension, got shape {sa}")
        if self.contract.batched:
            if len(sb) not in (2, 3):
                reasons.append(f"{nb} must be 2-D (K, N) or 3-D (B, K, N), got shape {sb}")
            elif len(sb) == 3 and (len(sa) != 3 or sa[0] != sb[0]):
                reasons.append(f"a 3-D {nb} (B, K, N) takes a 3-D {na} (B, M, K) with the same B; got {na} {sa}, {nb} {sb}")
        elif len(sb) != 2:
            reasons.append(f"{nb} must be 2-D (K, N), got shape {sb}")
        if not reasons and sa[-1] != sb[-2]:
            reasons.append(f"inner dimensions differ: {na} is {sa}, {nb} is {sb} (need {na} (..., K), {nb} (K, N))")
        return reasons + _agreement_reasons(inputs[:2], names[:2])

    def present_view(self, inputs: Sequence[Any]) -> KernelView | str:
        a, b = inputs[:2]
        rest: tuple[None, ...] = (None,) * (len(inputs) - 2)
        sa, sb = shape_of(a), shape_of(b)
        names = self.names_for(len(inputs))
        if len(sb) == 3:
            if sb[0] == 1 or b.stride(0) == 0:  # one matrix for every batch: a's batches are rows
                rows = _merged_shape(a, 2)
                if rows is not None:
                    return KernelView((rows, sb[1:], *rest), selects=frozenset({1}))
            return KernelView((None, None, *rest), batched=True, note=self.BATCHED_NOTE)
        if len(sa) == 2:
            return KernelView((None, None, *rest))
        rows = _merged_shape(a, len(sa) - 1)
        if rows is None:
            where = f"{names[0]} (shape {sa}, strides {tuple(a.stride())})"
            return f"{where}: its leading dims cannot be merged into rows without a copy"
        return KernelView((rows, None, *rest))

    def present_shapes(self, inputs: Sequence[Any]) -> tuple[tuple[Any, ...] | None, ...]:
        a, b = inputs[:2]
        sa, sb = shape_of(a), shape_of(b)
        rest = (None,) * (len(inputs) - 2)
        if len(sb) == 3 or len(sa) == 2:
            return (None, None, *rest)
        return ((math.prod(sa[:-1]), sa[-1]), None, *rest)

    def probe_inputs(self, inputs: Sequence[Any], view: KernelView | None, probes: list[Any]) -> list[Any]:
        # make_output describes one (M, K) @ (K, N) product: a batch of them gets (M, N) per batch
        if len(shape_of(inputs[1])) == 3:
            if view is not None and not view.batched:
                return probes  # b taken once, a's batches merged into rows: already 2-D
            return [probes[0][0], probes[1][0], *probes[2:]]
        return probes

    def output_layout(self, inputs: Sequence[Any], view: KernelView | None, probes: Sequence[Any], out: Any,
                      device: Any) -> OutputLayout:
        kernel = shape_of(out)
        m, n = shape_of(probes[0])[0], shape_of(probes[1])[1]
        if kernel != (m, n):
            return OutputLayout(kernel, None, out.dtype, device)
        a, b = inputs[:2]
        if len(shape_of(b)) == 3:
            caller = (shape_of(a)[0], *shape_of(a)[1:-1], n)
            if view is None or view.batched:
                return OutputLayout(caller, None, out.dtype, device)
        else:
            caller = (*shape_of(a)[:-1], n)
        return OutputLayout(caller, None, out.dtype, device, None if caller == kernel else kernel)

    def dims(self, kernel_inputs: Sequence[Any]) -> dict[str, int] | None:
        sa, sb = shape_of(kernel_inputs[0]), shape_of(kernel_inputs[1])
        if len(sa) != 2 or len(sb) != 2:
            return None  # 3-D batches: not what the measured points describe
        return self._named((sa[0], sb[1], sa[1]))

    def layout(self, kernel_inputs: Sequence[Any]) -> str:
        """Which operands are row-major ("row") or column-major ("col", e.g. B = W.t())."""
        words = []
        for name, t in zip("ab", kernel_inputs):
            stride = tuple(t.stride())[-2:]
            words.append(f"{name} {'row' if stride[1] == 1 else 'col' if stride[0] == 1 else 'strided'}")
        return ", ".join(words)


FORMS: dict[str, type[Form]] = {"plain": Form, "elementwise": ElementwiseForm, "rows": RowsForm, "linear": LinearForm}


def form_for(op: Op) -> Form:
    """The form of the op's declared contract."""
    return FORMS[op.contract.kind](op)
