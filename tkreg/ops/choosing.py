"""Which implementation a call's plan runs: the measured choice of its bucket, else the prior.

For a signature the registry has ranked (the kernels that take the inputs, and the op's peer),
the chooser looks for the choice of the signature's bucket (:mod:`.tuning`): made earlier in this
process, read from the tuning cache, or timed now on the caller's own inputs. Timing happens
only on a CUDA device, with tuning on (``TKREG_TUNE``), outside CUDA-graph capture and compile
traces, and where there is something to choose between. Without a choice the registry's order
stands: the prior (ranking by the plugin's shipped measurements, else priority and score).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from ..core import refs
from ..core.platform import driver_version, installed_version
from ..core.registry import Registry
from ..core.specs import Kernel, Op
from . import tuning
from .deferred import loaded
from .forms import Form, OutputLayout, as_tuple, outputs_allocator
from .measuring import PEER
from .replaying import RecordedCall
from .tuning import Candidate, Tuner
from .tuning_cache import Choice, TuningCache

MAX_TUNE_CONFIGS = 6  # configs of one kernel timed besides its launcher's own choice
ALIGN = 16  # bytes: the alignment a kernel's checks ask of a base address (TMA's); part of a bucket
TRAINING = "training"  # a bucket's training choice is kept under the bucket with this qualifier

log = logging.getLogger("tkreg.ops")


@dataclass
class Decision:
    """The order a plan tries implementations in, and why: ``launchers`` (label, callable), the
    first the choice; empty when the peer is the choice."""

    launchers: list[tuple[str, Callable[..., Any]]]
    why: str
    source: str  # "tuning", "cache" or "prior"
    choice: Choice | None = None
    # what a call captured in a CUDA graph runs instead (label, launcher; None: the peer), where
    # the bucket's choice names another candidate for those (Choice.graphed)
    graphed: tuple[str, Callable[..., Any] | None] | None = None
    bucket: str | None = None  # the bucket the inputs' choice is kept under (Chooser.resolved)

    @property
    def peer(self) -> bool:
        return not self.launchers


class Chooser:
    """Measured choices of one op, per device."""

    def __init__(self, registry: Registry, op: Op, form: Form) -> None:
        self.registry, self.op, self.form = registry, op, form
        self._tuners: dict[Any, Tuner] = {}
        self._lock = threading.Lock()

    @staticmethod
    def device(tensors: Sequence[Any]) -> int | None:
        """The CUDA device the tensors are on (None: not on one)."""
        return cuda_device(tensors)

    # -- the bucket --------------------------------------------------------------------------
    def bucket(self, kernel_inputs: Sequence[Any], params: dict[str, Any]) -> str | None:
        """The bucket of these kernel inputs; None where their dims cannot be named."""
        tensors = [t for t in kernel_inputs if hasattr(t, "data_ptr")]
        dims = self.form.dims(kernel_inputs)
        if dims is None:
            dims = {f"d{i}.{j}": int(s) for i, t in enumerate(tensors) for j, s in enumerate(t.shape)}
        # an absent optional input is "none": a call without a bias is another bucket than one with
        kinds = ",".join("none" if t is None else str(t.dtype).removeprefix("torch.") for t in kernel_inputs
                         if t is None or hasattr(t, "data_ptr"))  # fmt: skip
        aligned = "".join("a" if t.data_ptr() % ALIGN == 0 else "u" for t in tensors)
        rows = "".join(_rows_class(t) for t in tensors)
        shown = ",".join(f"{k}={v}" for k, v in params.items())
        return tuning.bucket_key(dims, kinds, self.form.layout(kernel_inputs), f"align={aligned}", f"rows={rows}", shown)

    # -- choosing ----------------------------------------------------------------------------
    def decide(
        self,
        kernels: Sequence[Kernel],
        launcher: Callable[[Kernel], Callable[..., Any]],
        inputs: Sequence[Any],
        kernel_inputs: Sequence[Any],
        layouts: Sequence[OutputLayout],
        params: dict[str, Any],
        prior: Decision,
        tune: bool = True,
    ) -> Decision:
        """The plan's order: the bucket's measured choice first (timing it if ``tune`` and nobody
        has), else ``prior`` (the registry's order, or its peer)."""
        found = self.measured(kernel_inputs, params, kernels)
        if found is None:
            return prior
        device, bucket, choice = found
        tuner = self.tuner(device)
        if choice is None:
            # What would be timed, named without calling or importing anything: a plan that does
            # not time (tuning off, a capture, explain) runs no candidate and loads no launcher.
            named = self.candidate_names(kernels, kernel_inputs, params)
            if len(named) < 2:
                return prior
            if not (tune and tuning.enabled() and not capturing_or_tracing()):
                labels = ", ".join(c.label for c in named)
                return Decision(prior.launchers, f"{prior.why} (prior: the bucket {bucket} is not measured on this GPU; "
                                f"a call with tuning on times {labels})", "prior", bucket=bucket)
            candidates = self.candidates(kernels, launcher, inputs, kernel_inputs, layouts, params, named)
            shape = _shapes(kernel_inputs)
            with on_device(device):
                choice = tuner.choose(bucket, candidates, shape, _device_name(device))
            if choice is None:
                return Decision(prior.launchers, f"{prior.why} (prior: no candidate could be timed)", "prior", bucket=bucket)
        return self._ordered(choice, kernels, launcher, bucket)

    def cached(
        self, kernels: Sequence[Kernel], launcher: Callable[[Kernel], Callable[..., Any]], kernel_inputs: Sequence[Any],
        params: dict[str, Any],
    ) -> Decision | None:
        """The order the bucket's choice (made in this process or read from the cache) gives,
        without timing or the prior; None where the bucket has none."""
        found = self.measured(kernel_inputs, params, kernels)
        if found is None or found[2] is None:
            return None
        _, bucket, choice = found
        return self._ordered(choice, kernels, launcher, bucket)

    def measured(
        self, kernel_inputs: Sequence[Any], params: dict[str, Any], kernels: Sequence[Kernel]
    ) -> tuple[int, str, Choice | None] | None:
        """The inputs' CUDA device, the bucket their choice is kept under (:meth:`resolved`, given
        the ``kernels`` that take them) and that choice (None: not made yet); None off a CUDA
        device, or where their dims cannot be named. Never times."""
        device = self.device(kernel_inputs)
        bucket = self.bucket(kernel_inputs, params) if device is not None else None
        if device is None or bucket is None:
            return None
        return (device, *self.resolved(self.tuner(device), bucket, kernels))

    @staticmethod
    def resolved(tuner: Tuner, bucket: str, kernels: Sequence[Kernel]) -> tuple[str, Choice | None]:
        """The bucket these inputs' choice is kept under, and that choice (None: not made yet).
        Where the bucket's winner is a kernel that does not take these inputs (one size of the
        bucket off the alignment TMA needs, say), the shapes it refuses have a bucket of their own,
        ``<bucket>|without=<kernel>``, timed at its first call like any other: the registry's order
        would run whichever kernel comes first, never measured against the others for them."""
        takers = {k.name for k in kernels}
        choice = tuner.known(bucket)
        for _ in range(len(takers) + 1):  # a derived bucket's winner is none it was derived without
            if choice is None or choice.kernel is None or choice.kernel in takers:
                break
            bucket = f"{bucket}|without={choice.kernel}"
            choice = tuner.known(bucket)
        return bucket, choice

    def _ordered(self, choice: Choice, kernels: Sequence[Kernel], launcher: Callable[[Kernel], Callable[..., Any]],
                 bucket: str | None = None) -> Decision:
        """The choice first, then the other kernels in the registry's order (fallbacks should the
        first refuse a call)."""
        why = choice.describe()
        by_name = {k.name: k for k in kernels}
        graphed = self._graphed(choice, by_name, launcher)
        if choice.winner == PEER:
            return Decision([], why, choice.source, choice, graphed, bucket)
        rest = [(k.name, launcher(k)) for k in kernels]
        if choice.kernel not in by_name:  # the cached winner no longer takes these inputs
            return Decision(rest, f"the measured winner {choice.winner} does not take these inputs now; registry order",
                            "prior", choice, bucket=bucket)
        first = _configured(launcher(by_name[choice.kernel]), choice.config)
        return Decision([(choice.winner, first), *(r for r in rest if r[0] != choice.kernel)], why, choice.source, choice,
                        graphed, bucket)

    @staticmethod
    def _graphed(choice: Choice, by_name: dict[str, Kernel],
                 launcher: Callable[[Kernel], Callable[..., Any]]) -> tuple[str, Callable[..., Any] | None] | None:
        """What a captured call runs instead of the winner (None: the winner, or a kernel that no
        longer takes these inputs)."""
        if not choice.graphed:
            return None
        if choice.graphed_kernel is None:
            return (choice.graphed, None)
        kernel = by_name.get(choice.graphed_kernel)
        return None if kernel is None else (choice.graphed, _configured(launcher(kernel), choice.graphed_config))

    def candidate_names(self, kernels: Sequence[Kernel], kernel_inputs: Sequence[Any], params: dict[str, Any]) -> list[Candidate]:
        """The candidates :meth:`candidates` makes, in its order, without making them."""
        named = [Candidate(None)] if self.op.peer is not None else []
        extra = []
        for kernel in kernels:
            for i, config in enumerate(self.tune_configs(kernel, kernel_inputs, params)):
                (named if i == 0 else extra).append(Candidate(kernel.name, config))
        return named + extra

    def candidates(
        self,
        kernels: Sequence[Kernel],
        launcher: Callable[[Kernel], Callable[..., Any]],
        inputs: Sequence[Any],
        kernel_inputs: Sequence[Any],
        layouts: Sequence[OutputLayout],
        params: dict[str, Any],
        named: Sequence[Candidate] | None = None,
    ) -> dict[Candidate, Callable[[], Any]]:
        """Every way to run these inputs (``named``, else :meth:`candidate_names`), as calls that
        write only into scratch outputs, in the order they are timed: the peer (nothing to
        compile), each kernel at its launcher's own choice, then the configs kernels offer for
        tuning, so a tuning budget that runs out leaves out the least likely first."""
        by_name = {k.name: k for k in kernels}
        calls: dict[Candidate, Callable[[], Any]] = {}
        for candidate in named if named is not None else self.candidate_names(kernels, kernel_inputs, params):
            if candidate.kernel is None:
                calls[candidate] = self._peer_call(inputs, layouts, params)
            else:
                launch = loaded(launcher(by_name[candidate.kernel]))  # timed now: imported now
                calls[candidate] = kernel_call(launch, kernel_inputs, layouts, {**params, **dict(candidate.config)},
                                               by_name[candidate.kernel].replayable)
        return calls

    def _peer_call(self, inputs: Sequence[Any], layouts: Sequence[OutputLayout], params: dict[str, Any]) -> Callable[[], Any]:
        """The peer as a plan that chose it calls it: as torch code (``out=None``) where its
        outputs fit the op's layout, else into outputs allocated per call."""
        peer = refs.resolve(self.op.peer)
        returned = [layouts[i] for i, o in enumerate(self.op.outputs) if o.returned]
        try:
            got = as_tuple(peer(*inputs, out=None, **params))
            fits = len(got) in (len(layouts), len(returned)) and all(
                tuple(t.shape) == tuple(layout.shape) and t.dtype == layout.dtype
                for t, layout in zip(got, layouts if len(got) == len(layouts) else returned)
            )
        except (RuntimeError, TypeError, ValueError):
            fits = False
        if fits:
            return functools.partial(peer, *inputs, out=None, **params)
        several = len(layouts) > 1

        def into_outputs() -> Any:
            outs = tuple(layout.empty() for layout in layouts)
            return peer(*inputs, out=outs if several else outs[0], **params)

        return into_outputs

    @staticmethod
    def tune_configs(kernel: Kernel, kernel_inputs: Sequence[Any], params: dict[str, Any]) -> list[dict[str, Any]]:
        """The launcher's own choice ({}) and the configs the kernel offers for tuning."""
        offered = kernel.tune_configs
        if offered is None:
            return [{}]
        if not isinstance(offered, (tuple, list)):
            offered = refs.resolve(offered)(*kernel_inputs, **params)
        configs: list[dict[str, Any]] = [{}]
        for config in offered:
            if dict(config) not in configs:
                configs.append(dict(config))
        return configs[: MAX_TUNE_CONFIGS + 1]

    def tuner(self, device: int) -> Tuner:
        tuner = self._tuners.get(device)
        if tuner is None:
            with self._lock:
                tuner = self._tuners.get(device)
                if tuner is None:
                    tuner = self._tuners[device] = Tuner(self.op.name, TuningCache(tuning.cache_dir(), self.environment(device)))
        return tuner

    def known(
        self, kernel_inputs: Sequence[Any], params: dict[str, Any], device: int, bucket: str | None = None
    ) -> Choice | None:
        """The bucket's choice where one is made or cached (never times); ``bucket``: the one a
        plan's decision resolved (:meth:`resolved`), else the inputs' own."""
        bucket = bucket or self.bucket(kernel_inputs, params)
        return None if bucket is None else self.tuner(device).known(bucket)

    def training(
        self, kernel_inputs: Sequence[Any], params: dict[str, Any], device: int,
        steps: Callable[[], dict[Candidate, Callable[[], Any]] | None] | None, bucket: str | None = None,
    ) -> Choice | None:
        """The bucket's training choice: the peer, or the kernel's way (its forward, then its
        backward kernel or formula), each timed as a forward and a backward by the calls
        ``steps()`` makes, where tuning may time and nobody has; None where there is none.
        ``bucket`` as for :meth:`known`."""
        bucket = bucket or self.bucket(kernel_inputs, params)
        if bucket is None:
            return None
        key = f"{bucket}|{TRAINING}"
        tuner = self.tuner(device)
        choice = tuner.known(key)
        if choice is not None or steps is None or not tuning.enabled() or capturing_or_tracing():
            return choice
        try:
            candidates = steps()
        except Exception as e:  # no room for copies of the inputs, say: the prior rule decides
            log.debug("tkreg.ops.%s: the training choice was not timed (%s: %s)", self.op.name, type(e).__name__, e)
            return None
        if not candidates:
            return None
        shape = _shapes(kernel_inputs)
        with on_device(device):
            return tuner.choose(key, candidates, shape, _device_name(device), exclusive=False, graphs=False)

    def environment(self, device: int) -> dict[str, str]:
        """What a choice holds for: the GPU, the driver, and the versions of everything that runs."""
        plugins = ",".join(f"{p.name}={p.version or 'in-process'}" for p in sorted(self.registry.plugins, key=lambda p: p.name))
        return dict(_environment(device, plugins))

    def forget(self) -> None:
        for tuner in self._tuners.values():
            tuner.forget()


def kernel_call(launch: Callable[..., Any], kernel_inputs: Sequence[Any], layouts: Sequence[OutputLayout],
                keywords: dict[str, Any], replayable: bool) -> RecordedCall:
    """A kernel as a plan calls it: new outputs each call (viewed as the kernel sees them), so the
    allocation a caller pays is timed too, and recorded launches replayed where the kernel lets
    them be. Timing writes into these outputs, never the caller's tensors."""
    several = len(layouts) > 1

    def launch_into(outs: tuple[Any, ...]) -> Any:
        views = tuple([layout.kernel(o) for layout, o in zip(layouts, outs)])
        return launch(*kernel_inputs, out=views if several else views[0], **keywords)

    allocate = outputs_allocator(layouts)  # as the plan allocates
    return RecordedCall(launch_into, allocate, kernel_inputs, several, replayable, launch)


def _configured(launch: Callable[..., Any], config: dict[str, Any]) -> Callable[..., Any]:
    return functools.partial(launch, **config) if config else launch


def cuda_device(tensors: Sequence[Any]) -> int | None:
    for t in tensors:
        device = getattr(t, "device", None)
        if getattr(device, "type", None) == "cuda":
            import torch

            return device.index if device.index is not None else torch.cuda.current_device()
    return None


def on_device(device: Any) -> AbstractContextManager[Any]:
    """The inputs' GPU made current while their candidates are timed: Triton launches on the
    current device, and the clock's events and synchronize act there, while a model may call with
    tensors on another GPU than the current one (no ``torch.cuda.set_device``). ``device``: an
    index or a ``torch.device``."""
    import torch

    return torch.cuda.device(device)


def on_device_of(device: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, each call made with ``device`` current (a launcher of inputs on another GPU)."""

    def on_their_device(*args: Any) -> Any:
        with on_device(device):
            return fn(*args)

    return on_their_device


def replayed_on_device_of(device: Any, plan: Any, launcher: Callable[..., Any]) -> Callable[..., Any]:
    """What ``plan``'s declined replays fall back to, its inputs being on ``device``: called from
    another current GPU (a model split across GPUs in one process, its layers' inputs on each), the
    plan's run again with theirs made current, where its replay (recorded there) runs; called on
    that GPU, ``launcher`` (the replay declined for another reason: a launch hook, say)."""
    import torch

    index = device.index

    def declined(*inputs: Any) -> Any:
        if torch.cuda.current_device() != index:
            with on_device(index):
                return plan.run(*inputs)
        return launcher(*inputs)

    return declined


@functools.lru_cache(maxsize=64)
def _environment(device: int, plugins: str) -> tuple[tuple[str, str], ...]:
    """Chooser.environment, worked out once per process for every op (the versions are read from
    files): plain strings, so that comparing it with a file's is cheap (torch.__version__ compares
    by parsing)."""
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return (
        ("device", _device_name(device)),
        ("capability", f"{major}.{minor}"),
        ("driver", driver_version()),
        ("torch", str(torch.__version__)),
        ("triton", installed_version("triton") or ""),
        ("tkreg", installed_version("tkreg") or ""),
        ("plugins", plugins),
    )


def _rows_class(t: Any) -> str:
    """"a" where a tensor's rows (its last dim) and every stride but a unit one span a multiple of
    ALIGN bytes, else "u": sizes of one bucket on either side run different kernels. TMA kernels
    refuse the "u" ones, and cuBLAS runs slower kernels there: a product the peer won at
    110x12352x4352 ran at 0.26 of matmul_triton's speed at 103x12519x5056 (H200, 2026-12-03)."""
    size = t.element_size()
    spans = [*t.shape[-1:], *(s for s in t.stride() if s != 1)]
    return "a" if all(n * size % ALIGN == 0 for n in spans) else "u"


def _shapes(kernel_inputs: Sequence[Any]) -> str:
    """The shape a choice was measured on, as it names it: "16x4096; 4096x4096"."""
    return "; ".join("x".join(str(s) for s in t.shape) for t in kernel_inputs if hasattr(t, "shape"))


@functools.lru_cache(maxsize=16)
def _device_name(device: int) -> str:
    import torch

    return torch.cuda.get_device_name(device)


def capturing_or_tracing() -> bool:
    import torch

    return torch.cuda.is_current_stream_capturing() or torch.compiler.is_compiling()
