"""The peer's calls for a plan: as torch code calls it (``out=None``), with nothing of tkreg's in
between, where its outputs are what the op lays out; else into outputs laid out here; and with the
kernels' own outputs (an rstd a backward reads) added where it returns only what callers get.
Mixed into :class:`.dispatch.Dispatcher`."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any

from ..core import refs
from ..core.errors import InputError
from . import remembered
from .binding import bound_call, reordered_call
from .forms import OutputLayout, as_tuple, outputs_allocator
from .plans import PLAN_CACHE_SIZE, Plan

log = logging.getLogger("tkreg.ops")


class PeerCalls:
    """How a dispatcher calls its op's peer for a plan (reads the dispatcher's op, params,
    outputs and plans)."""

    def peer_run(self, plan: Plan) -> Callable[..., Any]:
        """Calls of the peer for inputs of this signature. The peer is called as torch code is
        (``out=None``: it returns its outputs), which costs the caller least; where its outputs
        are not what the op lays out (a dtype, a shape), or it wants ``out=``, it writes into
        outputs allocated here, their shapes, dtypes and devices worked out once."""
        if self.op.peer is None:
            raise InputError(f"tkreg.ops.{self.op.name}: {plan.peer_reason}; and op {self.op.name!r} has no peer to fall back to")
        import torch

        peer = refs.resolve(self.op.peer)
        params, several, reason = plan.params, self.several, plan.peer_reason
        layouts = plan.outputs
        new_outputs = outputs_allocator(layouts)
        returned = self.returned

        def failed(e: Exception) -> InputError:
            return InputError(f"tkreg.ops.{self.op.name}: {reason}; and the peer {self.op.peer_name} failed: {e}")

        def into_outputs(*inputs: Any) -> Any:
            outs = new_outputs()
            try:
                peer(*inputs, out=outs if several else outs[0], **params)
            except torch.OutOfMemoryError:
                raise
            except (RuntimeError, TypeError, ValueError) as e:  # inputs even the peer cannot take
                raise failed(e) from e
            return outs if several else outs[0]

        plan.autograd_peer = True  # until its first call finds the peer wants out= (outputs_given)

        def outputs_given(inputs: Sequence[Any]) -> Any:
            """From now on the peer writes into outputs allocated here (it may fill only those it
            returns: the kernels' own may stay unwritten)."""
            plan.complete = not self.kernels_own_outputs
            plan.autograd_peer = False
            self._set_run(plan, into_outputs)
            self._note_partial(plan)
            return into_outputs(*inputs)

        def first(*inputs: Any) -> Any:
            """The first call decides which way the peer is called for this signature."""
            functional = self.torch_call(params, shapes_of(inputs))
            try:
                raw = functional(*inputs)
            except torch.OutOfMemoryError:
                raise
            except (RuntimeError, TypeError, ValueError):
                return outputs_given(inputs)
            got, bare = as_tuple(raw), not isinstance(raw, (tuple, list))
            fits = len(got) in (len(layouts), len(returned)) and all(
                tuple(t.shape) == tuple(layout.shape) and t.dtype == layout.dtype
                for t, layout in zip(got, layouts if len(got) == len(layouts) else [layouts[i] for i in returned])
            )
            if not fits:
                return outputs_given(inputs)
            if len(got) == len(layouts):
                self._set_run(plan, functional)
                self._remember(plan, inputs, {"way": remembered.FUNCTIONAL})
                return got if several else got[0]

            internal = [(i, layouts[i]) for i in range(len(layouts)) if i not in returned]
            full, full_outs = self._full_peer_fitting(params, inputs, layouts)
            self._peer_with_internal(plan, functional, internal, full, bare)
            self._remember(plan, inputs, {"way": remembered.WITH_INTERNAL, "full": full is not None, "bare": bare, "internal": [
                [i, list(o.shape), None if o.stride is None else list(o.stride), str(o.dtype).removeprefix("torch.")]
                for i, o in internal
            ]})  # fmt: skip
            if full_outs is not None:
                return full_outs
            outs = [None] * len(layouts)
            for i, t in zip(returned, got):
                outs[i] = t
            for i, layout in internal:
                outs[i] = layout.empty()
            return tuple(outs)

        return first

    def _full_peer_fitting(
        self, params: dict[str, Any], inputs: Sequence[Any], layouts: Sequence[OutputLayout]
    ) -> tuple[Callable[..., Any] | None, tuple[Any, ...] | None]:
        """The op's full peer (every output) and what it gave for ``inputs``, where it has one
        that runs them and gives every output as the op lays it out; (None, None) otherwise."""
        if self.op.full_peer is None:
            return None, None
        import torch

        full = self._full_peer(params)
        try:
            got = as_tuple(full(*inputs))
        except torch.OutOfMemoryError:
            raise
        except (RuntimeError, TypeError, ValueError, AttributeError) as e:  # a torch without it, or inputs it refuses
            log.debug("tkreg.ops.%s: the full peer does not run these inputs (%s)", self.op.name, e)
            return None, None
        fits = len(got) == len(layouts) and all(
            tuple(t.shape) == tuple(layout.shape) and t.dtype == layout.dtype for t, layout in zip(got, layouts)
        )
        return (full, got) if fits else (None, None)

    def _full_peer(self, params: dict[str, Any]) -> Callable[..., Any]:
        full = refs.resolve(self.op.full_peer)
        return functools.partial(full, **params) if params else full

    def _peer_with_internal(
        self, plan: Plan, functional: Callable[..., Any], internal: Sequence[tuple[int, OutputLayout]],
        full: Callable[..., Any] | None = None, bare: bool = False,
    ) -> None:
        """Runs of a peer that returns what callers get (y) but not the kernels' own outputs
        (``internal``: index and layout). Where every output is returned, the op's full peer
        (``full``) computes them all; without one they are allocated, unwritten. tkreg.ops.<op>
        calls the peer alone: the peer itself where it returns the one tensor callers get
        (``bare``), with nothing of tkreg's in between."""
        count, returned = len(self.op.outputs), self.returned
        allocate = [(i, layout.allocator()) for i, layout in internal]

        def with_internal(*inputs: Any) -> Any:
            outs: list[Any] = [None] * count
            for i, t in zip(returned, as_tuple(functional(*inputs))):
                outs[i] = t
            for i, new in allocate:
                outs[i] = new()
            return tuple(outs)

        returned_only: Callable[..., Any]
        if len(returned) == 1 and bare:
            returned_only = functional
        elif len(returned) == 1:

            def returned_only(*inputs: Any) -> Any:
                return as_tuple(functional(*inputs))[0]
        else:

            def returned_only(*inputs: Any) -> Any:
                return tuple(as_tuple(functional(*inputs)))

        if full is not None:
            self._set_run(plan, full, returned_only)
            return
        plan.complete = False
        self._set_run(plan, with_internal, returned_only)
        self._note_partial(plan)

    def _peer_defaults_out(self) -> bool:
        """Whether the peer's ``out`` defaults to None (read once from its signature; a builtin
        without one is taken to, as torch's functions do)."""
        if self._peer_out_default is None:
            try:
                out = inspect.signature(refs.resolve(self.op.peer)).parameters.get("out")
                self._peer_out_default = (out is not None and out.default is None
                                          and out.kind is not inspect.Parameter.VAR_KEYWORD)  # fmt: skip
            except (TypeError, ValueError):  # a builtin without a signature
                self._peer_out_default = True
        return self._peer_out_default

    def torch_call(self, params: dict[str, Any], shapes: Sequence[tuple[int, ...] | None]) -> Callable[..., Any]:
        """The peer's own call as torch code makes it, for inputs of these shapes (None: an absent
        optional input): its one torch call where the op names it (:meth:`_direct_peer`), else
        the peer itself (:meth:`_functional_peer`)."""
        return self._direct_peer(params, shapes) or self._functional_peer(params)

    def _direct_peer(self, params: dict[str, Any], shapes: Sequence[tuple[int, ...] | None]) -> Callable[..., Any] | None:
        """The one torch call the peer makes for inputs of these shapes, made with no frame of the
        peer's own (Op.peer_direct, :func:`.binding.reordered_call`); None where the op names none
        for them, has parameters, or its peer is not called as torch code calls it."""
        if self.op.peer_direct is None or params or not self._peer_defaults_out():
            return None
        try:
            found = refs.resolve(self.op.peer_direct)(tuple(shapes))
            if found is None:
                return None
            target, order = found
            return reordered_call(target, order, len(self.op.inputs))
        except Exception as e:  # a plugin's error: the peer's own call serves, and says nothing wrong
            log.warning("tkreg.ops.%s: peer_direct failed for shapes %s (%s: %s); the peer is called",
                        self.op.name, list(shapes), type(e).__name__, e)  # fmt: skip
            return None

    def _functional_peer(self, params: dict[str, Any]) -> Callable[..., Any]:
        """The peer as torch code calls it (``out=None``: it returns its outputs), with nothing of
        tkreg's own in between: the peer itself where that is its default and there are no
        parameters, else one function that passes them by keyword (:func:`.binding.bound_call`:
        a partial's keywords cost a quarter of a microsecond a call).
        A peer whose signature cannot be read (a torch builtin such as ``torch.add``, the cheapest
        peer there is) is taken to default ``out`` to None, as torch's functions do; one that
        does not fails its first call here, and the plan then gives it outputs (``outputs_given``)."""
        peer = refs.resolve(self.op.peer)
        if not params and self._peer_defaults_out():
            return peer
        # plans with the same parameter values share one bound call (each is a compiled function)
        key: tuple[Any, ...] | None = tuple((name, type(value), value) for name, value in params.items())
        try:
            bound = self._bound_peers.get(key)  # type: ignore[arg-type]
        except TypeError:  # an unhashable value: a call of its own
            bound = key = None
        if bound is None:
            bound = bound_call(peer, len(self.op.inputs), {"out": None, **params})
            if key is not None:
                if len(self._bound_peers) >= PLAN_CACHE_SIZE:  # bounded as the plans are
                    self._bound_peers.clear()
                self._bound_peers[key] = bound
        return bound


def shapes_of(inputs: Sequence[Any]) -> list[tuple[int, ...] | None]:
    """Each input's shape, None for an absent optional input (what :meth:`PeerCalls.torch_call` takes)."""
    return [None if t is None else tuple(t.shape) for t in inputs]
