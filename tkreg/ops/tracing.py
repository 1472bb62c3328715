"""Deciding at trace time (torch.compile's FakeTensors, which have no address): the kernel a call
runs at any alignment, where its launcher is traceable, or the peer itself where this GPU's
measured choice gives a kernel too small a lead for an opaque call. Mixed into
:class:`.dispatch.Dispatcher`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import refs
from .forms import KernelView, as_tuple
from .measuring import PEER

TRACEABLE = "tkreg_traceable"  # launcher attribute: see tkreg.ops.traceable
# Stand-in base addresses for deciding at trace time: aligned far beyond any check, and aligned
# only to the element size (a real tensor's address is always a multiple of it).
ALIGNED_BASE = 1 << 20
# A compiled graph reaches a chosen kernel through an opaque operator, whose call costs the host
# more than an eager call does (on an H100, a 16-token Llama MLP block compiled ran 2x slower with
# kernels behind opaque calls than with the peer traced, the kernels having won the eager timing by
# a few microseconds each). Where the kernel's measured lead over the peer is under 10%, or under
# what the opaque call costs the host beyond the peer's own (7-12 us for a matmul on an H100 host,
# the host suite of 2026-11-25), a trace holds the peer's torch operations instead.
COMPILED_MARGIN = 1.10
OPAQUE_CALL_US = 10.0


class Tracing:
    """A dispatcher's decisions for traced calls."""

    def static_route(self, inputs: Sequence[Any], params: dict[str, Any] | None = None) -> Callable[..., Any] | None:
        """For tracing (FakeTensors, no addresses): the kernel a call of these inputs runs at any
        alignment, if its launcher is traceable (see tkreg.ops.traceable): this GPU's measured
        choice for their bucket where there is one, else the registry's first; else None, and the
        traced graph calls the op's run-time dispatch instead. Returns a callable of the inputs
        that returns every output."""
        values = self.params.values(params or {})
        view = self.form.kernel_view(inputs)
        if not isinstance(view, KernelView):
            return None
        try:
            kernel_inputs = view.inputs(inputs)
            metas = [None if t is None else TensorMeta.of(t) for t in kernel_inputs]  # None: an absent optional input
        except (RuntimeError, TypeError, ValueError):  # symbolic sizes: decide at run time
            return None
        kwargs = self.params.as_dict(values)
        at = {aligned: _at(metas, aligned) for aligned in (True, False)}
        takers = self._takers(at[True])
        measured = self._measured(at[True], kwargs, takers)
        peer_route = self._traced_peer(view, metas, kwargs, measured)
        if peer_route is not None:
            return peer_route
        # a kernel this GPU measured well ahead: it, where it takes both alignments (a measured peer
        # that cannot be traced, one leaving the kernels' own outputs unwritten, leaves the prior's)
        if measured is not None and measured.kernel is not None:
            first = next((k for k in takers if k.name == measured.kernel), None)
            unaligned_takers = self._takers(at[False])
            unaligned = self._measured(at[False], kwargs, unaligned_takers)
            if (first is None or first.name not in {k.name for k in unaligned_takers}
                    or (unaligned is not None and unaligned.kernel != first.name)):  # fmt: skip
                return None
            config = dict(measured.config)
        else:  # the prior: the registry's first, the same at either alignment
            tops = []
            for aligned in (True, False):
                ranking = self.registry.ranking(self.op.name, None, at[aligned])
                runnable = self._without_writers(ranking.runnable, [])
                tops.append(None if ranking.prefer_peer or not runnable else runnable[0])
            first, other = tops
            if first is None or other is None or first.name != other.name:
                return None
            config = {}
        launch = self.launcher(first)
        if not getattr(launch, TRACEABLE, False):
            return None
        if config:
            launch = functools.partial(launch, **config)
        form, several = self.form, self.several

        def traced(*inputs: Any) -> Any:
            layouts = form.output_layouts(inputs, view, kwargs, fake=True)
            outs = tuple(layout.empty() for layout in layouts)
            kernel_outs = tuple(layout.kernel(o) for layout, o in zip(layouts, outs))
            launch(*view.inputs(inputs), out=kernel_outs if several else kernel_outs[0], **kwargs)
            return outs if several else outs[0]

        return traced

    def _takers(self, at: Sequence[TensorMeta | None]) -> list[Any]:
        """The kernels that take inputs of these metadata (unranked: who, not in what order)."""
        return self._without_writers(self.registry.ranking(self.op.name, None, at, ranked=False).runnable, [])

    def _measured(self, at: Sequence[TensorMeta | None], params: dict[str, Any], takers: Sequence[Any]) -> Any:
        """This GPU's measured choice for the bucket of inputs of these metadata, as an eager call
        resolves it (a bucket of their own where its winner refuses them); None where there is none."""
        found = self.chooser.measured(at, params, takers)
        return None if found is None else found[2]

    def _traced_peer(
        self, view: KernelView, metas: Sequence[TensorMeta | None], params: dict[str, Any], choice: Any
    ) -> Callable[..., Any] | None:
        """Where this GPU's measured ``choice`` for the bucket (aligned inputs) is the peer, or a kernel
        ahead of it by less than COMPILED_MARGIN or OPAQUE_CALL_US, the peer itself, traced: the compiler then sees
        torch's operations (and plans them as it plans the same code written with torch) instead
        of an opaque call."""
        device = self.chooser.device(metas)
        if device is None or self.op.peer is None or (self.kernels_own_outputs and self.op.full_peer is None):
            # a traced peer would leave the kernels' own outputs unwritten, with no plan to say so;
            # a full peer writes them all
            return None
        if choice is None:
            return None
        if choice.winner != PEER:
            peer_us, winner_us = choice.times_us.get(PEER), choice.times_us.get(choice.winner)
            if not (isinstance(peer_us, float) and isinstance(winner_us, float)):
                return None
            if winner_us * COMPILED_MARGIN <= peer_us and peer_us - winner_us >= OPAQUE_CALL_US:
                return None  # a lead worth an opaque call
        if self.kernels_own_outputs:
            return self._traced_full_peer(view, params)
        peer, several = refs.resolve(self.op.peer), self.several

        def traced(*inputs: Any) -> Any:
            outs = as_tuple(peer(*inputs, out=None, **params))  # every output: the op returns them all
            return tuple(outs) if several else outs[0]

        return traced

    def _traced_full_peer(self, view: KernelView, params: dict[str, Any]) -> Callable[..., Any]:
        """The full peer, traced: every output, each as the op lays it out (a full peer that
        lays one out otherwise is a plugin's error, named here rather than traced wrong)."""
        full, form, name = self._full_peer(params), self.form, self.op.name

        def traced(*inputs: Any) -> Any:
            outs = as_tuple(full(*inputs))
            layouts = form.output_layouts(inputs, view, params, fake=True)
            if len(outs) != len(layouts) or any(
                tuple(t.shape) != tuple(layout.shape) or t.dtype != layout.dtype for t, layout in zip(outs, layouts)
            ):
                got = ", ".join(f"{tuple(t.shape)} {t.dtype}" for t in outs)
                want = ", ".join(f"{tuple(layout.shape)} {layout.dtype}" for layout in layouts)
                raise TypeError(f"op {name}: its full peer returned {got}; the op lays its outputs out as {want}")
            return tuple(outs)

        return traced

    def fake_outputs(self, inputs: Sequence[Any], params: dict[str, Any]) -> Any:
        """New outputs for traced inputs, as a call returns them (the run-time op's fake)."""
        outs = self.form.fake_outputs(inputs, self.params.as_dict(self.params.values(params)))
        return outs if self.several else outs[0]


def _at(metas: Sequence[TensorMeta | None], aligned: bool) -> list[TensorMeta | None]:
    return [None if m is None else m.at(aligned) for m in metas]


@dataclass(frozen=True)
class TensorMeta:
    """A tensor's metadata with a stand-in address: what the registry's checks read, for a
    FakeTensor (which has no address) at trace time."""

    dtype: Any
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    device: Any
    itemsize: int
    base: int = ALIGNED_BASE

    @classmethod
    def of(cls, t: Any) -> TensorMeta:
        shape, strides = tuple(t.shape), tuple(t.stride())
        if not all(isinstance(s, int) for s in (*shape, *strides)):
            raise TypeError("symbolic sizes")  # int() would specialize the trace on them
        return cls(t.dtype, shape, strides, t.device, t.element_size())

    def at(self, aligned: bool) -> TensorMeta:
        return TensorMeta(self.dtype, self.shape, self.strides, self.device, self.itemsize,
                          ALIGNED_BASE if aligned else ALIGNED_BASE + self.itemsize)

    def stride(self, dim: int | None = None) -> Any:
        return self.strides if dim is None else self.strides[dim]

    def data_ptr(self) -> int:
        return self.base

    def element_size(self) -> int:
        return self.itemsize

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]
