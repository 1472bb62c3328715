"""The registry's concepts: Op, Case, Kernel, Requirements, CompileTarget, Scheduler.

Each is a frozen dataclass validated in ``__post_init__``; a bad field raises :class:`SpecError`
naming the spec and the field. Nothing here imports torch or triton: callables that need them are
given as lazy references ("package.module:function", see :mod:`tkreg.core.refs`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from . import capability as caps
from . import dtypes, refs
from .contracts import Contract, plain
from .errors import SpecError
from .interface import DEFAULT_OUTPUTS, Output, Param, ParamValue, Writes, check_identifier
from .refs import Ref

Config = Mapping[str, ParamValue]

_NAME = re.compile(r"^[a-z][a-z0-9_.-]*$")
# default: every `pytest --tkreg`; gpu: default runs on a GPU only (too slow for the interpreter);
# full: `--tkreg-full`; bench: benchmarks only.
CASE_SETS = ("default", "gpu", "full", "bench", "timer", "ranking")
BOUNDS = ("memory", "compute")

# What a kernel may say it relies on, and the capabilities that have it.
FEATURES: dict[str, tuple[caps.Capability, caps.Capability]] = {
    "tma": ((9, 0), (99, 99)),
    "mbarrier": ((8, 0), (99, 99)),
    "warp_specialization": ((9, 0), (99, 99)),
    "wgmma": ((9, 0), (9, 0)),
    "setmaxnreg": ((9, 0), (99, 99)),
    "tcgen05": ((10, 0), (10, 3)),
    "tensor_memory": ((10, 0), (10, 3)),
}


# What torch.autocast may do to an op's floating inputs (Op.autocast), after torch's own lists.
AUTOCAST_POLICIES = ("lower", "float32", "unchanged")
ANY_DEVICE = "*"  # Op.autocast given as one word: every device type


def _check_autocast(name: str, value: object) -> Mapping[str, str] | None:
    """``Op.autocast`` as a mapping from device type (or ANY_DEVICE) to a policy."""
    if value is None:
        return None
    given = {ANY_DEVICE: value} if isinstance(value, str) else value
    if not isinstance(given, Mapping) or not given:
        raise SpecError("op", name, "autocast", f"must be a policy or map device types to policies, got {value!r}")
    for device_type, policy in given.items():
        if not isinstance(device_type, str) or not device_type:
            raise SpecError("op", name, "autocast", f"device types are names such as 'cuda', got {device_type!r}")
        if policy not in AUTOCAST_POLICIES:
            raise SpecError("op", name, "autocast", f"{device_type}: {policy!r} is not one of {', '.join(AUTOCAST_POLICIES)}")
    return dict(given)


def _check_name(kind: str, name: object) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise SpecError(kind, str(name), "name", "must be lower-case letters, digits, '_', '-' or '.', starting with a letter")


def _check_ref(kind: str, name: str, field_name: str, ref: object, optional: bool = False) -> None:
    if ref is None and optional:
        return
    if not refs.is_valid(ref):
        raise SpecError(kind, name, field_name, f"must be a callable or a 'package.module:attribute' string, got {ref!r}")


def _check_dtypes(kind: str, name: str, field_name: str, values: object, allow_empty: bool) -> tuple[str, ...]:
    if isinstance(values, str) or not isinstance(values, (tuple, list)):
        raise SpecError(kind, name, field_name, f"must be a tuple of dtype names, got {values!r}")
    if not values and not allow_empty:
        raise SpecError(kind, name, field_name, "must name at least one dtype")
    for value in values:
        if value not in dtypes.KNOWN:
            raise SpecError(kind, name, field_name, f"unknown dtype {value!r}; known: {', '.join(dtypes.KNOWN)}")
    return tuple(values)


@dataclass(frozen=True)
class Tolerance:
    """Elementwise check |out - ref| <= atol + rtol * |ref|."""

    atol: float
    rtol: float

    def __post_init__(self) -> None:
        for name in ("atol", "rtol"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0 or math.isnan(value):
                raise SpecError("tolerance", "-", name, f"must be a number >= 0, got {value!r}")

    def scaled(self, factor: float) -> Tolerance:
        """Scale the absolute part, e.g. by sqrt(K) for a dot product of length K."""
        return Tolerance(self.atol * factor, self.rtol)


@dataclass(frozen=True)
class Cost:
    """Fewest bytes the op must move through device memory, and its arithmetic."""

    bytes: int
    flops: int = 0


@dataclass(frozen=True)
class Case:
    """One input shape of an op. ``dims`` names the sizes (M, N, K); ``variant`` names a layout
    the op's input factory understands (e.g. "strided"); ``sets`` says which runs include it."""

    dims: Mapping[str, int]
    sets: tuple[str, ...] = ("default", "full")
    variant: str = ""
    dtypes: tuple[str, ...] = ()  # benchmarks of this case: only these of the op's bench dtypes (default: all)

    def __post_init__(self) -> None:
        label = self.id if isinstance(self.dims, Mapping) else repr(self.dims)
        if not isinstance(self.dims, Mapping) or not self.dims:
            raise SpecError("case", label, "dims", "must be a non-empty mapping of size names to integers")
        for key, value in self.dims.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SpecError("case", label, "dims", f"size {key} must be an integer >= 1, got {value!r}")
        object.__setattr__(self, "dims", dict(self.dims))
        for s in self.sets:
            if s not in CASE_SETS:
                raise SpecError("case", label, "sets", f"unknown set {s!r}; known: {', '.join(CASE_SETS)}")
        if self.variant and not _NAME.match(self.variant):
            raise SpecError("case", label, "variant", "must be a short lower-case word")
        object.__setattr__(self, "dtypes", _check_dtypes("case", label, "dtypes", self.dtypes, allow_empty=True))

    @property
    def id(self) -> str:
        shape = "x".join(str(v) for v in self.dims.values())
        return f"{shape}-{self.variant}" if self.variant else shape

    def __getitem__(self, key: str) -> int:
        return self.dims[key]


def case(sets: tuple[str, ...] = ("default", "full"), variant: str = "", dtypes: tuple[str, ...] = (), **dims: int) -> Case:
    """Shorthand: ``case(M=4097, N=33)``."""
    return Case(dims=dims, sets=sets, variant=variant, dtypes=dtypes)


@dataclass(frozen=True, repr=False)
class Op:
    """The contract every kernel of one computation shares.

    reference(*inputs, **params) -> the output, or a tuple with one tensor per declared output;
    it runs on copies of the inputs with the floating ones in float64 (integer and bool inputs
    stay as they are).
    make_inputs(case, dtype, generator, device) -> tuple of input tensors (fresh random data);
    it also receives the params it names as keywords.
    make_output(*inputs) -> the empty output a kernel writes into, or a tuple with one per
    declared output (also receiving the params it names).
    cost(dims, itemsize) -> Cost, for throughput figures; ``bound`` says which ceiling it meets;
    ``backward_cost`` the same for the backward (the gradients' bytes and FLOPs).
    peer(*inputs, out=..., **params) is the library implementation benchmarks compare with; with
    ``out=None`` it returns new outputs, which is how gradients flow through it. A peer fills the
    outputs the op returns; internal outputs (``Output(returned=False)``) are the kernels' own.
    ``full_peer(*inputs, **params)``, where the library has one, returns every output, the
    internal ones too (``torch.native_layer_norm`` gives the mean and rstd F.layer_norm drops):
    tkreg.ops runs it where a caller gets every output (the torch operator, a forward that keeps
    its outputs for the backward), so those hold values and backward kernels can read them.
    ``peer_direct(shapes)``, optional, names the one torch call the peer makes for inputs of these
    shapes (one tuple per input, None for an absent optional input), as ``(target, order)``:
    ``peer(*inputs)`` is ``target(*(inputs[i] for i in order))``, or None where the peer's own
    code is needed. A plan whose signature the peer runs then makes that call with no frame of the
    peer's own (matmul: ``torch.addmm(bias, a, b)`` for ``(a, b, bias)``); ops with parameters
    call the peer itself.
    ``rivals`` maps names to more implementations benchmarks time beside the peer, called the
    same way (torch.compile of the same function, another library); speed-ups stay against the
    peer.
    tolerance_scale(dims) -> float multiplies the table's atol (e.g. sqrt(K) for a dot product of length K).
    bench_dtypes: the dtypes benchmarks cover (default: all of ``dtypes``).

    The interface beyond float tensors in and one out:
    ``inputs`` names the input tensors (default: the reference's positional parameters);
    ``params`` the scalar parameters (:class:`Param`); ``outputs`` the outputs
    (:class:`Output`, default one named "out"); ``grads`` the inputs that have gradients, which
    backward kernels (``Kernel(backward=True)``) compute and tests check against float64 autograd
    of the reference, with ``grad_tolerances`` (default: the op's table). ``backward(inputs,
    outputs, grad_outputs, **params)`` is an optional formula in torch operations that tkreg.ops
    uses when no backward kernel takes a call; it receives one upstream gradient per differentiable
    output (zeros where none flowed) and, if it names the keyword ``needs_input_grad``, which
    gradients are wanted (it may return None for the others). ``optional`` names inputs a caller
    may pass as None (a LayerNorm's bias=None, as torch's functions take it): references, peers,
    make_output, backward formulas and every kernel's launcher then receive None in its place
    (a kernel that cannot take it says so from ``Requirements.inputs``), and its gradient, where
    it has one, is None; ``make_inputs`` gives None there for the cases that test it.
    ``contract`` says how callers'
    tensors of any rank map onto kernel inputs (:mod:`tkreg.core.contracts`). ``measured`` names a
    package folder ("package:folder") of wall-time measurements of the op's kernels per GPU
    (``<device-name>.json``): the prior tkreg.ops ranks by where it does not time calls itself.
    ``autocast`` says what torch.autocast does to the op, as torch's own lists say for its peer:
    "lower" (cast floating inputs to autocast's dtype, as for torch.matmul), "float32" (cast them
    to float32, as for F.layer_norm on CUDA) or "unchanged" (the inputs' own dtypes, as for
    torch.add); one word for every device type, or a mapping from device type ("cuda", "cpu") to
    one (torch's lists differ between them). Under autocast, tkreg.ops casts as declared and runs
    the kernels; where the op declares nothing for the inputs' device type, the call is the peer's
    own (or, without a peer, computes in the inputs' dtypes).
    """

    name: str
    reference: Ref
    make_inputs: Ref
    make_output: Ref
    cases: tuple[Case, ...]
    dtypes: tuple[str, ...]
    tolerances: Mapping[str, Tolerance]
    cost: Ref
    bound: str = "memory"
    peer: Ref | None = None
    peer_name: str = ""
    full_peer: Ref | None = None
    peer_direct: Ref | None = None
    tolerance_scale: Ref | None = None
    bench_dtypes: tuple[str, ...] = ()
    description: str = ""
    inputs: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    params: tuple[Param, ...] = ()
    outputs: tuple[Output, ...] = DEFAULT_OUTPUTS
    grads: tuple[str, ...] = ()
    grad_tolerances: Mapping[str, Tolerance] | None = None
    backward: Ref | None = None
    backward_cost: Ref | None = None
    contract: Contract = field(default_factory=plain)
    rivals: Mapping[str, Ref] = field(default_factory=dict)
    measured: str | None = None
    autocast: str | Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        kind = "op"
        _check_name(kind, self.name)
        for f in ("reference", "make_inputs", "make_output", "cost"):
            _check_ref(kind, self.name, f, getattr(self, f))
        for f in ("peer", "full_peer", "peer_direct", "tolerance_scale", "backward", "backward_cost"):
            _check_ref(kind, self.name, f, getattr(self, f), optional=True)
        self._check_interface()
        if not isinstance(self.rivals, Mapping):
            raise SpecError(kind, self.name, "rivals", "must map names to implementations")
        for rival, ref in self.rivals.items():
            if not isinstance(rival, str) or not rival or rival == self.peer_name:
                raise SpecError(kind, self.name, "rivals", f"names must be non-empty and differ from the peer's, got {rival!r}")
            _check_ref(kind, self.name, f"rivals[{rival}]", ref)
        object.__setattr__(self, "rivals", dict(self.rivals))
        object.__setattr__(self, "autocast", _check_autocast(self.name, self.autocast))
        if self.measured is not None and (not isinstance(self.measured, str) or ":" not in self.measured):
            raise SpecError(kind, self.name, "measured", f"must be 'package:folder', got {self.measured!r}")
        object.__setattr__(self, "dtypes", _check_dtypes(kind, self.name, "dtypes", self.dtypes, allow_empty=False))
        bench = _check_dtypes(kind, self.name, "bench_dtypes", self.bench_dtypes, allow_empty=True)
        if not set(bench) <= set(self.dtypes):
            raise SpecError(kind, self.name, "bench_dtypes", f"must be among the op's dtypes ({', '.join(self.dtypes)})")
        object.__setattr__(self, "bench_dtypes", bench or self.dtypes)
        for c in self.cases if isinstance(self.cases, (tuple, list)) else ():
            if isinstance(c, Case) and c.dtypes and not set(c.dtypes) & set(self.bench_dtypes):
                raise SpecError(kind, self.name, "cases", f"case {c.id}: none of its dtypes is among the bench dtypes")
        if not isinstance(self.cases, (tuple, list)) or not self.cases:
            raise SpecError(kind, self.name, "cases", "must be a non-empty tuple of Case")
        for c in self.cases:
            if not isinstance(c, Case):
                raise SpecError(kind, self.name, "cases", f"must hold Case objects, got {c!r}")
        object.__setattr__(self, "cases", tuple(self.cases))
        ids = [c.id for c in self.cases]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise SpecError(kind, self.name, "cases", f"duplicate case ids: {', '.join(dup)}")
        if not isinstance(self.tolerances, Mapping):
            raise SpecError(kind, self.name, "tolerances", "must map dtype names to Tolerance")
        missing = [d for d in self.dtypes if d not in self.tolerances]
        if missing:
            raise SpecError(kind, self.name, "tolerances", f"no tolerance for {', '.join(missing)}")
        for d, tol in self.tolerances.items():
            if not isinstance(tol, Tolerance):
                raise SpecError(kind, self.name, "tolerances", f"{d}: expected Tolerance, got {tol!r}")
        if self.bound not in BOUNDS:
            raise SpecError(kind, self.name, "bound", f"must be one of {BOUNDS}, got {self.bound!r}")
        if self.full_peer is not None and self.peer is None:
            raise SpecError(kind, self.name, "full_peer", "is another form of the peer: give the op a peer too")
        if self.peer_direct is not None and self.peer is None:
            raise SpecError(kind, self.name, "peer_direct", "names the peer's own call: give the op a peer too")
        if self.peer is not None and not self.peer_name:
            object.__setattr__(self, "peer_name", refs.describe(self.peer).rpartition(":")[2])

    def _check_interface(self) -> None:
        kind, name = "op", self.name
        for f in ("inputs", "optional", "params", "outputs", "grads"):
            value = getattr(self, f)
            if isinstance(value, (str, Param, Output)) or not isinstance(value, (tuple, list)):
                raise SpecError(kind, name, f, f"must be a tuple, got {value!r}")
            object.__setattr__(self, f, tuple(value))
        for n in self.inputs:
            check_identifier(kind, name, "inputs", n)
        _no_duplicates(kind, name, "inputs", self.inputs)
        if self.optional:
            if not self.inputs:
                raise SpecError(kind, name, "optional", "name the op's inputs (inputs=...) to say which may be None")
            unknown = [n for n in self.optional if n not in self.inputs]
            if unknown:
                among = ", ".join(self.inputs)
                raise SpecError(kind, name, "optional", f"{', '.join(map(str, unknown))} not among inputs ({among})")
            _no_duplicates(kind, name, "optional", self.optional)
            if self.inputs[0] in self.optional:
                raise SpecError(kind, name, "optional", f"the first input ({self.inputs[0]}) is the one contracts read shapes "
                                "from: it cannot be optional")
        for p in self.params:
            if not isinstance(p, Param):
                raise SpecError(kind, name, "params", f"must hold Param objects, got {p!r}")
        taken = {*self.inputs, "out"}
        _no_duplicates(kind, name, "params", [p.name for p in self.params])
        clash = sorted(taken & {p.name for p in self.params})
        if clash:
            raise SpecError(kind, name, "params", f"{', '.join(clash)} already name an input (or out=)")
        if not self.outputs:
            raise SpecError(kind, name, "outputs", "an op has at least one output")
        for o in self.outputs:
            if not isinstance(o, Output):
                raise SpecError(kind, name, "outputs", f"must hold Output objects, got {o!r}")
            if o.tolerances is not None:
                _check_tolerance_table(kind, name, f"outputs[{o.name}].tolerances", o.tolerances, self.dtypes)
        _no_duplicates(kind, name, "outputs", [o.name for o in self.outputs])
        if not any(o.returned for o in self.outputs):
            raise SpecError(kind, name, "outputs", "at least one output must be returned")
        if self.grads:
            if not self.inputs:
                raise SpecError(kind, name, "grads", "name the op's inputs (inputs=...) to say which have gradients")
            unknown = [g for g in self.grads if g not in self.inputs]
            if unknown:
                raise SpecError(kind, name, "grads", f"{', '.join(unknown)} not among inputs ({', '.join(self.inputs)})")
            _no_duplicates(kind, name, "grads", self.grads)
            if not any(o.differentiable for o in self.outputs):
                raise SpecError(kind, name, "grads", "no output is differentiable, so no gradient can flow back")
        if self.grad_tolerances is not None:
            _check_tolerance_table(kind, name, "grad_tolerances", self.grad_tolerances, self.dtypes)
        if not isinstance(self.contract, Contract):
            raise SpecError(kind, name, "contract", f"must be a Contract (see tkreg.contracts), got {self.contract!r}")

    def __repr__(self) -> str:
        return f"Op({self.name!r}, dtypes={self.dtypes!r}, cases={len(self.cases)})"

    def autocast_policy(self, device_type: str) -> str | None:
        """What torch.autocast does to the op on ``device_type`` (see ``autocast``); None where
        the op does not say."""
        policies = self.autocast
        if policies is None:
            return None
        return policies.get(device_type, policies.get(ANY_DEVICE))  # type: ignore[union-attr]

    def cases_in(self, *case_sets: str) -> tuple[Case, ...]:
        return tuple(c for c in self.cases if any(s in c.sets for s in case_sets))

    def bench_dtypes_of(self, case: Case) -> tuple[str, ...]:
        """The dtypes benchmarks run ``case`` in: the case's own choice among the op's bench dtypes."""
        return tuple(d for d in self.bench_dtypes if not case.dtypes or d in case.dtypes)

    def tolerance(self, dtype: str, case: Case, output: Output | None = None) -> Tolerance:
        """The check for one output (default: the first) in cases of ``dtype``."""
        table = self.tolerances if output is None or output.tolerances is None else output.tolerances
        return self._scaled(table[dtype], case)  # type: ignore[arg-type]

    def grad_tolerance(self, dtype: str, case: Case) -> Tolerance:
        return self._scaled((self.grad_tolerances or self.tolerances)[dtype], case)

    def _scaled(self, tol: Tolerance, case: Case) -> Tolerance:
        if self.tolerance_scale is not None:
            tol = tol.scaled(float(refs.resolve(self.tolerance_scale)(case.dims)))
        return tol

    def implementation(self, peer_name: str) -> Ref:
        """The peer or the rival benchmarks know as ``peer_name``."""
        if peer_name == self.peer_name and self.peer is not None:
            return self.peer
        return self.rivals[peer_name]

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def defaults(self) -> dict[str, ParamValue]:
        return {p.name: p.default for p in self.params}

    @property
    def differentiable(self) -> bool:
        return bool(self.grads)

    @property
    def required_inputs(self) -> int:
        """How many leading inputs a call must pass: the optional inputs after the last required
        one may be left out, and are None then (as ``F.layer_norm(x, shape)`` leaves out weight
        and bias)."""
        names, optional = self.inputs, self.optional
        return next((i + 1 for i in range(len(names) - 1, -1, -1) if names[i] not in optional), len(names))

    @property
    def returned(self) -> tuple[Output, ...]:
        return tuple(o for o in self.outputs if o.returned)

    def input_names(self) -> tuple[str, ...] | None:
        """The inputs' names: declared, else the reference's positional parameters (resolving the
        reference, which may import torch); None when they cannot be told."""
        if self.inputs:
            return self.inputs
        import inspect

        try:
            signature = inspect.signature(refs.resolve(self.reference))
        except (TypeError, ValueError):
            return None
        names = []
        for p in signature.parameters.values():
            if p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) or (p.kind == p.POSITIONAL_OR_KEYWORD and p.name in self.defaults):
                break
            if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or p.default is not p.empty:
                return None
            names.append(p.name)
        return tuple(names) if names and all(n.isidentifier() for n in names) else None

    def cost_of(self, case: Case, dtype: str, backward: bool = False) -> Cost | None:
        """The case's cost: forward, or backward (None where the op declares no backward cost)."""
        model = self.backward_cost if backward else self.cost
        return None if model is None else refs.resolve(model)(case.dims, dtypes.ITEMSIZE[dtype])


def _no_duplicates(kind: str, name: str, field_name: str, names: Any) -> None:
    names = list(names)
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise SpecError(kind, name, field_name, f"duplicate names: {', '.join(dup)}")


def _check_tolerance_table(kind: str, name: str, field_name: str, table: object, needed: tuple[str, ...]) -> None:
    if not isinstance(table, Mapping):
        raise SpecError(kind, name, field_name, "must map dtype names to Tolerance")
    missing = [d for d in needed if d not in table]
    if missing:
        raise SpecError(kind, name, field_name, f"no tolerance for {', '.join(missing)}")
    for d, tol in table.items():
        if not isinstance(tol, Tolerance):
            raise SpecError(kind, name, field_name, f"{d}: expected Tolerance, got {tol!r}")


@dataclass(frozen=True)
class Requirements:
    """Where a kernel can run.

    ``arch`` names an exact architecture variant ("sm_90a", "sm_100a") and implies its capability
    range; otherwise ``min_capability``/``max_capability`` (inclusive) bound it. ``triton`` is a
    version specifier (">=3.6,<3.7"). ``features`` says what the kernel relies on (see FEATURES).
    ``dtypes`` restricts the op's dtypes. ``inputs(*tensors) -> list[str]`` gives the reasons a
    kernel cannot take concrete inputs (empty list: it can), e.g. TMA's 16-byte alignment; if it
    has a ``config`` parameter it also receives the parameters the launcher will be called with
    (None: the launcher's own choice).
    """

    min_capability: caps.Capability | None = None
    max_capability: caps.Capability | None = None
    arch: str | None = None
    triton: str | None = None
    features: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    inputs: Ref | None = None
    note: str = ""  # why the capability range is what it is, where features do not say it

    def validate(self, kernel: str) -> None:
        kind = "kernel"
        if self.arch is not None and self.arch not in caps.ARCHES:
            raise SpecError(kind, kernel, "requires.arch", f"unknown architecture {self.arch!r}; known: {', '.join(caps.ARCHES)}")
        if self.arch is not None and (self.min_capability or self.max_capability):
            raise SpecError(kind, kernel, "requires.arch", "give either arch or a capability range, not both")
        for f in ("min_capability", "max_capability"):
            value = getattr(self, f)
            if value is not None:
                try:
                    caps.parse(value)
                except ValueError as e:
                    raise SpecError(kind, kernel, f"requires.{f}", str(e)) from None
        lo, hi = self.capability_range()
        if lo > hi:
            raise SpecError(kind, kernel, "requires", f"empty capability range {caps.fmt(lo)} .. {caps.fmt(hi)}")
        if self.triton is not None:
            try:
                SpecifierSet(self.triton)
            except InvalidSpecifier:
                raise SpecError(kind, kernel, "requires.triton", f"not a version specifier: {self.triton!r}") from None
        for feat in self.features:
            if feat not in FEATURES:
                raise SpecError(kind, kernel, "requires.features", f"unknown feature {feat!r}; known: {', '.join(FEATURES)}")
            f_lo, f_hi = FEATURES[feat]
            if lo < f_lo or hi > f_hi:
                raise SpecError(
                    kind,
                    kernel,
                    "requires.features",
                    f"{feat} exists on {caps.fmt(f_lo)}..{caps.fmt(f_hi)}, but the kernel claims {caps.fmt(lo)}..{caps.fmt(hi)}",
                )
        _check_dtypes(kind, kernel, "requires.dtypes", self.dtypes, allow_empty=True)
        _check_ref(kind, kernel, "requires.inputs", self.inputs, optional=True)

    def capability_range(self) -> tuple[caps.Capability, caps.Capability]:
        if self.arch is not None:
            a = caps.ARCHES[self.arch]
            return a.first, a.last
        lo = caps.parse(self.min_capability) if self.min_capability else (0, 0)
        hi = caps.parse(self.max_capability) if self.max_capability else (99, 99)
        return lo, hi

    def describe(self) -> str:
        parts = []
        lo, hi = self.capability_range()
        if self.arch:
            parts.append(f"{self.arch} ({caps.fmt(lo)}" + (")" if lo == hi else f"..{caps.fmt(hi)})"))
        elif (lo, hi) != ((0, 0), (99, 99)):
            parts.append(f"capability {caps.fmt(lo)}" + ("+" if hi == (99, 99) else f"..{caps.fmt(hi)}"))
        else:
            parts.append("any CUDA GPU")
        if self.triton:
            parts.append(f"triton{self.triton}")
        if self.features:
            parts.append("+".join(self.features))
        if self.inputs is not None:
            parts.append("input constraints")
        return ", ".join(parts)


@dataclass(frozen=True)
class CompileTarget:
    """An architecture a kernel must compile for, and what its code must then hold: regular
    expressions over the PTX (``ptx``) and over the SASS from cuobjdump (``sass``)."""

    arch: str
    ptx: tuple[str, ...] = ()
    sass: tuple[str, ...] = ()

    def validate(self, kernel: str) -> None:
        if self.arch not in caps.ARCHES:
            raise SpecError("kernel", kernel, "targets", f"unknown architecture {self.arch!r}; known: {', '.join(caps.ARCHES)}")
        for pattern in (*self.ptx, *self.sass):
            try:
                re.compile(pattern)
            except re.error as e:
                raise SpecError("kernel", kernel, "targets", f"bad pattern {pattern!r}: {e}") from None


@dataclass(frozen=True, repr=False)
class Kernel:
    """One implementation of an op.

    launcher(*inputs, out=..., **params, **config) -> out runs it (validating inputs first);
    ``out`` is the output tensor, or a tuple with one tensor per output where the op has several.
    A backward kernel (``backward=True``) computes the op's gradients:
    launcher(*inputs, *outputs, *grad_outputs, out=grads, **params, **config), with one upstream
    gradient per differentiable output and ``grads`` a tuple holding one tensor per input the op
    lists in ``grads``. ``writes`` declares inputs the launcher overwrites (:class:`Writes`); any
    other input it changes fails its tests. ``tune_configs``: the configs tkreg.ops times beside
    the launcher's own choice when it tunes a call: a tuple, or a function
    ``(*kernel_inputs, **params) -> configs`` (a few plausible ones for those inputs).
    ``replay=True`` declares that for calls of one signature (every tensor's dtype, shape,
    strides, device and alignment class, every parameter value) the launcher makes the same
    launches through tkreg.launch.fastlaunch Launchers, whose only tensors are the call's own
    (inputs and outputs), and runs no torch operation but views: tkreg.ops then records one call's
    launches and repeats them for later calls of that signature, without the launcher's Python
    (tkreg.launch.recording checks what it can see and refuses the rest).
    configs are the parameter combinations tests cover (the first is the default); benchmarks time
    ``bench_configs``, by default ``({},)``: the launcher's own choice, what a user gets.
    ``compile_configs`` (default: ``configs``) are the ones compile items build and check, where
    test-only configs (tiny blocks) are not built for the instructions the targets require.
    With ``takes_scheduler`` every config is crossed with every
    registered scheduler (config key "scheduler").
    aot(arch, dtype, config) -> tkreg.launch.aot.AotSpec describes one ahead-of-time compile for targets.
    priority ranks kernels in lookup (higher first); score(*inputs) -> (value, why) ranks kernels of
    one priority for concrete inputs (higher value first).
    """

    name: str
    op: str
    launcher: Ref
    requires: Requirements = field(default_factory=Requirements)
    interpretable: bool = False
    targets: tuple[CompileTarget, ...] = ()
    aot: Ref | None = None
    configs: tuple[Config, ...] = ({},)
    bench_configs: tuple[Config, ...] | None = None
    compile_configs: tuple[Config, ...] | None = None
    takes_scheduler: bool = False
    priority: int = 0
    score: Ref | None = None
    description: str = ""
    backward: bool = False
    writes: tuple[Writes, ...] = ()
    tune_configs: Ref | tuple[Config, ...] | None = None
    replay: bool = False

    def __post_init__(self) -> None:
        kind = "kernel"
        _check_name(kind, self.name)
        if not isinstance(self.replay, bool):
            raise SpecError(kind, self.name, "replay", f"must be True or False, got {self.replay!r}")
        if not isinstance(self.writes, (tuple, list)) or not all(isinstance(w, Writes) for w in self.writes):
            raise SpecError(kind, self.name, "writes", f"must be a tuple of Writes, got {self.writes!r}")
        object.__setattr__(self, "writes", tuple(self.writes))
        for w in self.writes:
            w.validate(self.name)
        if not isinstance(self.op, str) or not _NAME.match(self.op):
            raise SpecError(kind, self.name, "op", f"must be an op name, got {self.op!r}")
        _check_ref(kind, self.name, "launcher", self.launcher)
        _check_ref(kind, self.name, "aot", self.aot, optional=True)
        _check_ref(kind, self.name, "score", self.score, optional=True)
        if not isinstance(self.requires, Requirements):
            raise SpecError(kind, self.name, "requires", f"must be Requirements, got {self.requires!r}")
        self.requires.validate(self.name)
        if not isinstance(self.targets, (tuple, list)):
            raise SpecError(kind, self.name, "targets", "must be a tuple of CompileTarget")
        for t in self.targets:
            if not isinstance(t, CompileTarget):
                raise SpecError(kind, self.name, "targets", f"must hold CompileTarget objects, got {t!r}")
            t.validate(self.name)
        object.__setattr__(self, "targets", tuple(self.targets))
        if self.targets and self.aot is None:
            raise SpecError(kind, self.name, "aot", "kernels with compile targets must say how to compile them (aot=...)")
        if self.tune_configs is not None and not isinstance(self.tune_configs, (tuple, list)):
            _check_ref(kind, self.name, "tune_configs", self.tune_configs)
        for f in ("configs", "bench_configs", "compile_configs", "tune_configs"):
            value = getattr(self, f)
            if f == "tune_configs" and not isinstance(value, (tuple, list)):
                continue
            if value is None and f != "configs":
                continue
            if not isinstance(value, (tuple, list)) or not value:
                raise SpecError(kind, self.name, f, "must be a non-empty tuple of parameter mappings")
            for config in value:
                _check_config(self.name, f, config)
            object.__setattr__(self, f, tuple(dict(c) for c in value))
        if not isinstance(self.priority, int):
            raise SpecError(kind, self.name, "priority", f"must be an integer, got {self.priority!r}")

    def __repr__(self) -> str:
        return f"Kernel({self.name!r}, op={self.op!r}{', backward' if self.backward else ''})"

    @property
    def direction(self) -> str:
        return "backward" if self.backward else "forward"

    @property
    def replayable(self) -> bool:
        """tkreg.ops may record and replay this kernel's launches: it declares ``replay`` and is a
        forward kernel (gradient calls are never replayed)."""
        return self.replay and not self.backward

    @property
    def default_config(self) -> dict[str, ParamValue]:
        return dict(self.configs[0])

    def load(self) -> Callable[..., Any]:
        """Import and return the launcher."""
        return refs.resolve(self.launcher)


def _check_config(kernel: str, field_name: str, config: object) -> None:
    if not isinstance(config, Mapping):
        raise SpecError("kernel", kernel, field_name, f"each config must be a mapping, got {config!r}")
    for key, value in config.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise SpecError("kernel", kernel, field_name, f"parameter names must be identifiers, got {key!r}")
        if not isinstance(value, (int, str, bool, float)):
            raise SpecError("kernel", kernel, field_name, f"parameter {key} must be int, str, bool or float, got {value!r}")


def config_id(config: Config) -> str:
    return "-".join(f"{k}={v}" for k, v in config.items())


@dataclass(frozen=True)
class Scheduler:
    """A tile order for persistent kernels.

    gluon: the Gluon aggregate a kernel takes as its ``SchedulerImpl`` constexpr (interface:
    ``initialize(M, N, BLOCK_M, BLOCK_N)``, ``get_num_tiles()``, ``get_tile(idx) -> (pid_m, pid_n)``).
    model(M, N, BLOCK_M, BLOCK_N, num_programs) -> per program, the list of (pid_m, pid_n) it
    visits in order: a pure-Python statement of the order, checked against the GPU.
    """

    name: str
    gluon: Ref
    model: Ref
    description: str = ""

    def __post_init__(self) -> None:
        _check_name("scheduler", self.name)
        _check_ref("scheduler", self.name, "gluon", self.gluon)
        _check_ref("scheduler", self.name, "model", self.model)
