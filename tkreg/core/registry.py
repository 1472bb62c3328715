"""The registry: what plugins registered, and which kernels can run where, with reasons.

Lookup by capability imports neither torch nor triton; lookup with concrete inputs inspects them
duck-typed (dtype, device, data_ptr, stride) and calls the kernels' own input checks. Runnable
kernels rank by priority, then by their ``score`` for the inputs. A layer above the core may add
a :data:`Ranker` (``tkreg.ops`` adds one that ranks by measured wall time, beside the op's peer);
the core knows no measurement. Answers with inputs are cached per input signature
(:mod:`tkreg.core.signature`), so a repeated lookup does no ranking.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from . import capability as caps
from . import dtypes, refs
from .errors import RegistrationError, UnknownNameError
from .platform import Platform, installed_version, interpreter_on, platform_for
from .signature import inputs_key
from .specs import FEATURES, Kernel, Op, Scheduler

# Rankings kept per registry; beyond this many signatures the cache starts over (a model with
# shapes that never repeat must not grow memory without bound).
RANKING_CACHE_SIZE = 4096


@dataclass(frozen=True)
class PluginInfo:
    """A loaded plugin: its entry-point (or in-process) name and where it came from."""

    name: str
    distribution: str = ""
    version: str = ""

    def describe(self) -> str:
        if self.distribution:
            return f"{self.name} ({self.distribution} {self.version})"
        return f"{self.name} (in-process)"


@dataclass(frozen=True)
class PluginProblem:
    """Something a plugin did wrong; the plugin's other contributions still load where they can."""

    plugin: PluginInfo
    stage: str  # "import", "register op", "register kernel", ...
    error: str

    def describe(self) -> str:
        return f"{self.plugin.describe()}: {self.stage}: {self.error}"


@dataclass(frozen=True)
class Verdict:
    """Whether one kernel can run on a platform (and inputs), and why not or why ranked lower."""

    kernel: Kernel
    reasons: tuple[str, ...] = ()
    ranking: str = ""
    score: float | None = None
    estimate: Any = None  # what a ranker estimated this kernel to cost, where one ranked it

    @property
    def runs(self) -> bool:
        return not self.reasons


@dataclass(frozen=True)
class Ranking:
    """Every kernel's verdict for one lookup, best first, and where the op's peer stands: the
    peer's estimate when a ranker estimated it, and whether it beats every runnable kernel (then
    tkreg.ops calls the peer)."""

    verdicts: tuple[Verdict, ...]
    peer: Any = None
    prefer_peer: bool = False
    peer_ranking: str = ""

    @property
    def runnable(self) -> tuple[Kernel, ...]:
        return tuple(v.kernel for v in self.verdicts if v.runs)


# A ranker reorders the runnable kernels for concrete inputs: (registry, op, platform, runnable
# verdicts in priority order, inputs) -> a Ranking of the runnable ones, or None to leave the
# priority order. Rankers are asked in the order they were added; the first answer counts.
Ranker = Callable[["Registry", Op, Platform, list[Verdict], Sequence[Any]], "Ranking | None"]


class Registry:
    """Ops, kernels and schedulers by name, with the plugin that registered each."""

    def __init__(self) -> None:
        self._ops: dict[str, Op] = {}
        self._kernels: dict[str, Kernel] = {}
        self._schedulers: dict[str, Scheduler] = {}
        self._owner: dict[tuple[str, str], PluginInfo] = {}
        self.plugins: list[PluginInfo] = []
        self.problems: list[PluginProblem] = []
        self._rankings: dict[Any, Ranking] = {}
        self._rankers: list[Ranker] = []

    # -- registration (used by tkreg.core.loading) ---------------------------------------------
    def add(self, spec: Op | Kernel | Scheduler, plugin: PluginInfo) -> None:
        kind, table = self._table_for(spec)
        if spec.name in table:
            other = self._owner[(kind, spec.name)]
            raise RegistrationError(
                f"{kind} {spec.name!r} is registered twice: by plugin {other.describe()} and by plugin {plugin.describe()}"
            )
        if isinstance(spec, Kernel):
            self._check_kernel(spec)
        table[spec.name] = spec
        self._owner[(kind, spec.name)] = plugin
        self._rankings.clear()

    def _table_for(self, spec: object) -> tuple[str, dict[str, Any]]:
        if isinstance(spec, Op):
            return "op", self._ops
        if isinstance(spec, Kernel):
            return "kernel", self._kernels
        if isinstance(spec, Scheduler):
            return "scheduler", self._schedulers
        raise RegistrationError(f"expected an Op, Kernel or Scheduler, got {type(spec).__name__}: {spec!r}")

    def _check_kernel(self, kernel: Kernel) -> None:
        if kernel.op not in self._ops:
            known = ", ".join(sorted(self._ops)) or "none"
            raise RegistrationError(
                f"kernel {kernel.name!r} computes op {kernel.op!r}, which no loaded plugin defines (defined ops: {known})"
            )
        op = self._ops[kernel.op]
        extra = [d for d in kernel.requires.dtypes if d not in op.dtypes]
        if extra:
            raise RegistrationError(
                f"kernel {kernel.name!r}: field 'requires.dtypes': {', '.join(extra)} "
                f"not among op {op.name!r}'s dtypes ({', '.join(op.dtypes)})"
            )
        if kernel.backward and not op.grads:
            raise RegistrationError(
                f"kernel {kernel.name!r} is a backward kernel, but op {op.name!r} declares no gradients (grads=...)"
            )
        unknown = [w.input for w in kernel.writes if w.input not in op.inputs]
        if unknown:
            raise RegistrationError(
                f"kernel {kernel.name!r}: field 'writes': {', '.join(unknown)} not among op {op.name!r}'s "
                f"declared inputs ({', '.join(op.inputs) or 'none declared: give the op inputs=...'})"
            )
        params = {p.name for p in op.params}
        for config in (*kernel.configs, *(kernel.bench_configs or ()), *(kernel.compile_configs or ())):
            clash = sorted(params & set(config))
            if clash:
                raise RegistrationError(
                    f"kernel {kernel.name!r}: config keys {', '.join(clash)} are parameters of op {op.name!r}; "
                    "configs hold the kernel's own tuning knobs"
                )

    # -- reading ----------------------------------------------------------------------------
    def ops(self) -> list[Op]:
        return [self._ops[n] for n in sorted(self._ops)]

    def kernels(self, op: str | None = None, direction: str | None = None) -> list[Kernel]:
        """Kernels (of ``op``; of one direction, "forward" or "backward"), by name."""
        if op is not None:
            self.op(op)
        return [
            k for _, k in sorted(self._kernels.items())
            if (op is None or k.op == op) and (direction is None or k.direction == direction)
        ]

    def schedulers(self) -> list[Scheduler]:
        return [self._schedulers[n] for n in sorted(self._schedulers)]

    def op(self, name: str) -> Op:
        return self._get("op", self._ops, name)

    def kernel(self, name: str) -> Kernel:
        return self._get("kernel", self._kernels, name)

    def scheduler(self, name: str) -> Scheduler:
        return self._get("scheduler", self._schedulers, name)

    def owner(self, spec: Op | Kernel | Scheduler) -> PluginInfo:
        kind, _ = self._table_for(spec)
        return self._owner[(kind, spec.name)]

    @staticmethod
    def _get(kind: str, table: dict[str, Any], name: str) -> Any:
        try:
            return table[name]
        except KeyError:
            raise UnknownNameError(kind, name, list(table)) from None

    def kernel_dtypes(self, kernel: Kernel) -> tuple[str, ...]:
        return kernel.requires.dtypes or self.op(kernel.op).dtypes

    def configs(self, kernel: Kernel, purpose: str = "test") -> list[dict[str, Any]]:
        """The kernel's parameter combinations for "test", "bench" or "compile", crossed with the
        schedulers if it takes one."""
        if purpose == "bench":
            # Benchmarks time what a user gets: the launcher's own choice, unless the kernel says.
            base = kernel.bench_configs or ({},)
        elif purpose == "compile":
            base = kernel.compile_configs or kernel.configs
        else:
            base = kernel.configs
        if not kernel.takes_scheduler:
            return [dict(c) for c in base]
        # A config that already names its scheduler keeps it; the others take every scheduler, except
        # a benchmark of the launcher's own choice ({}): the launcher picks the scheduler too.
        crossed = []
        for c in base:
            if purpose == "bench" and not c:
                crossed.append({})
                continue
            names = [c["scheduler"]] if "scheduler" in c else [s.name for s in self.schedulers()]
            crossed.extend({**c, "scheduler": n} for n in names)
        return crossed

    # -- where kernels run ------------------------------------------------------------------
    def explain(
        self,
        op: str,
        capability: str | caps.Capability | Platform | None = None,
        inputs: Sequence[Any] | None = None,
        direction: str = "forward",
    ) -> list[Verdict]:
        """Every kernel of ``op``: those that run first (best first), then the rejected, each
        with its reasons. ``capability`` None means this machine's device, and then the inputs
        must also live where it runs; a given capability is a hypothetical device, so only the
        inputs' dtypes, shapes, strides and alignment are judged. ``direction`` "backward" asks
        about the op's backward kernels, whose inputs are (*inputs, *outputs, *grad_outputs)."""
        return list(self.ranking(op, capability, inputs, direction).verdicts)

    def lookup(
        self,
        op: str,
        capability: str | caps.Capability | Platform | None = None,
        inputs: Sequence[Any] | None = None,
        direction: str = "forward",
    ) -> list[Kernel]:
        """Kernels of ``op`` that can run there (and take ``inputs``), best first."""
        return list(self.ranking(op, capability, inputs, direction).runnable)

    def ranking(
        self,
        op: str,
        capability: str | caps.Capability | Platform | None = None,
        inputs: Sequence[Any] | None = None,
        direction: str = "forward",
        ranked: bool = True,
    ) -> Ranking:
        """The answer behind :meth:`explain` and :meth:`lookup`, with the peer's standing;
        cached per (op, platform, input signature). Without ``ranked``, the rankers are not asked:
        the kernels that take the inputs, in priority and score order (for a caller that has a
        measured order of its own)."""
        platform = platform_for(capability)
        signature = () if inputs is None else inputs_key(inputs)
        if direction not in ("forward", "backward"):
            raise ValueError(f"direction must be 'forward' or 'backward', got {direction!r}")
        key = None if signature is None else (op, platform, capability is None, signature, direction, ranked)
        if key is not None:
            cached = self._rankings.get(key)
            if cached is not None:
                return cached
        result = self._rank(op, platform, capability is None, inputs, direction, ranked)
        if key is not None:
            if len(self._rankings) >= RANKING_CACHE_SIZE:
                self._rankings.clear()
            self._rankings[key] = result
        return result

    def add_ranker(self, ranker: Ranker) -> None:
        """Rank runnable kernels for concrete inputs with ``ranker`` too (see :data:`Ranker`);
        adding one that is already there changes nothing. Forgets cached rankings."""
        if ranker not in self._rankers:
            self._rankers.append(ranker)
        self._rankings.clear()

    def remove_ranker(self, ranker: Ranker) -> None:
        if ranker in self._rankers:
            self._rankers.remove(ranker)
        self._rankings.clear()

    def rankers(self) -> list[Ranker]:
        return list(self._rankers)

    def forget_rankings(self) -> None:
        """Drop cached answers (a ranker's data changed)."""
        self._rankings.clear()

    def _rank(
        self, op: str, platform: Platform, here: bool, inputs: Sequence[Any] | None, direction: str, ranked: bool = True
    ) -> Ranking:
        op_spec = self.op(op)
        verdicts = [self._judge(k, platform, inputs, here) for k in self.kernels(op, direction)]
        runnable = sorted((v for v in verdicts if v.runs), key=_rank_key)
        rejected = tuple(v for v in verdicts if not v.runs)
        if ranked and inputs is not None and runnable and direction == "forward":
            for ranker in self._rankers:
                ranked = ranker(self, op_spec, platform, runnable, inputs)
                if ranked is not None:
                    return Ranking(ranked.verdicts + rejected, ranked.peer, ranked.prefer_peer, ranked.peer_ranking)
        return Ranking(tuple(_with_reasons(runnable)) + rejected)

    def _judge(self, kernel: Kernel, platform: Platform, inputs: Sequence[Any] | None, here: bool) -> Verdict:
        reasons = unmet_requirements(kernel, platform)
        if kernel.takes_scheduler and not self._schedulers:
            # its configs name a tile order, which only a plugin's Scheduler supplies
            reasons.append("takes a tile scheduler and no installed plugin registers one")
        if inputs is not None and not reasons:
            reasons = self._input_reasons(kernel, platform, inputs, here)
        score = None
        if not reasons and inputs is not None and kernel.score is not None:
            value, why = refs.resolve(kernel.score)(*inputs)
            score = float(value)
            return Verdict(kernel, (), why, score)
        return Verdict(kernel, tuple(reasons), "", score)

    def _input_reasons(self, kernel: Kernel, platform: Platform, inputs: Sequence[Any], here: bool) -> list[str]:
        reasons = []
        accepted = self.kernel_dtypes(kernel)
        want_device = "cuda" if platform.is_gpu else "cpu"
        # The kernel's dtypes are the op's dtype axis. Where the op names its inputs, they bind its
        # floating inputs only: integer inputs (targets, indices) and, for a backward kernel, the
        # outputs and gradients that follow the inputs have the dtypes the op gives them.
        declared = self.op(kernel.op).inputs
        for i, t in enumerate(inputs):
            if t is None:  # an absent optional input: the kernel's own check says whether it takes that
                continue
            dtype = dtypes.name_of(getattr(t, "dtype", "?"))
            bound = not declared or (i < len(declared) and (dtypes.is_floating(dtype) or dtype == "?"))
            if bound and dtype not in accepted:
                reasons.append(f"input {i} is {dtype}; {kernel.name} takes {', '.join(accepted)}")
            device = getattr(getattr(t, "device", None), "type", None)
            if here and device is not None and device != want_device:
                reasons.append(f"input {i} is on {device}; this platform ({platform.describe()}) needs {want_device} tensors")
        if here and not platform.is_gpu and not interpreter_on():
            # Without a GPU, kernels run only under the interpreter, which triton reads from the
            # environment when a kernel module is imported: off here, a launch would fail.
            reasons.append("this machine has no GPU and the Triton interpreter is off in this process "
                           "(set TRITON_INTERPRET=1 before importing triton to run kernels on the CPU)")
        if not reasons:
            reasons.extend(input_constraint_reasons(kernel, inputs, None))
        return reasons


def input_constraint_reasons(kernel: Kernel, inputs: Sequence[Any], config: dict[str, Any] | None) -> list[str]:
    """What the kernel's declared input constraints say about ``inputs`` (with ``config``, for
    checks that take one)."""
    if kernel.requires.inputs is None:
        return []
    check = refs.resolve(kernel.requires.inputs)
    if _takes_config(check):
        return list(check(*inputs, config=config))
    return list(check(*inputs))


@functools.lru_cache(maxsize=1024)
def _takes_config(check: Callable[..., Any]) -> bool:
    """Whether an input check takes ``config=`` (asked per plan: inspect.signature is slow)."""
    return "config" in inspect.signature(check).parameters


def unmet_requirements(kernel: Kernel, platform: Platform) -> list[str]:
    """Why ``kernel`` cannot run on ``platform``, in words; empty when it can."""
    req = kernel.requires
    reasons = []
    lo, hi = req.capability_range()
    if platform.kind == "interpreter":
        if not kernel.interpretable:
            reasons.append("needs a CUDA GPU (it cannot run under the Triton interpreter); this machine has none")
    else:
        cap = platform.capability
        assert cap is not None  # Platform.cuda always sets it
        if not lo <= cap <= hi:
            reasons.append(f"needs {_capability_words(kernel, lo, hi, cap)}; this device is {caps.fmt(cap)}")
    if req.triton is not None:
        have = installed_version("triton")
        if have is None:
            reasons.append(f"needs triton{req.triton}; triton is not installed")
        elif not _version_in(have, req.triton):
            reasons.append(f"needs triton{req.triton}; installed is {have}")
    return reasons


def _capability_words(kernel: Kernel, lo: caps.Capability, hi: caps.Capability, cap: caps.Capability) -> str:
    """The capability needed, and the features that set the bound the device misses."""
    req = kernel.requires
    span = f"capability {caps.fmt(lo)}" if lo == hi else f"capability {caps.fmt(lo)}..{caps.fmt(hi)}"
    if hi == (99, 99):
        span = f"capability >= {caps.fmt(lo)}"
    words = f"{req.arch} ({span})" if req.arch else span
    if cap < lo:
        tied = [f for f in req.features if FEATURES[f][0] == lo]
    else:
        tied = [f for f in req.features if FEATURES[f][1] == hi]
    if tied:
        return f"{words} for {', '.join(tied)}"
    return f"{words} ({req.note})" if req.note else words


@functools.lru_cache(maxsize=256)  # asked per kernel per plan, with the same few versions and specs
def _version_in(version: str, spec: str) -> bool:
    try:
        # Local build tags (3.6.0+git...) and pre-releases count as the release they build on.
        return SpecifierSet(spec).contains(Version(version).base_version, prereleases=True)
    except InvalidVersion:
        return False


def _rank_key(v: Verdict) -> tuple[int, float, str]:
    return (-v.kernel.priority, -(v.score if v.score is not None else 0.0), v.kernel.name)


def _with_reasons(runnable: list[Verdict]) -> list[Verdict]:
    """The priority/score order's verdicts, each below the first saying why."""
    ranked = runnable[:1]
    for better, v in itertools.pairwise(runnable):
        ranked.append(Verdict(v.kernel, (), _why_below(v, better), v.score))
    return ranked


def _why_below(v: Verdict, better: Verdict) -> str:
    if v.kernel.priority != better.kernel.priority:
        return f"ranked below {better.kernel.name}: priority {v.kernel.priority} < {better.kernel.priority}"
    if v.score is not None and better.score is not None and v.score != better.score:
        return f"ranked below {better.kernel.name}: score {v.score:g} < {better.score:g} ({v.ranking})"
    return f"ranked below {better.kernel.name}: same priority, ordered by name"
