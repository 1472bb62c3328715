"""Plans of signatures earlier processes remembered (:mod:`.remembered`): each measured plan is
remembered for later processes; the first call on a GPU reads what every op remembers there, makes
the plans of those the peer runs without planning, and preloads those kernels run
(:func:`.warming.preload`). Mixed into :class:`.dispatch.Dispatcher`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from . import keys, remembered, warming
from .forms import OutputLayout
from .plans import PLAN_CACHE_SIZE, Plan

log = logging.getLogger("tkreg.ops")


class RememberedPlans:
    """A dispatcher's signatures remembered across processes."""

    def _remember(self, plan: Plan, inputs: Sequence[Any], entry: dict[str, Any]) -> None:
        """Remember a plan that follows a measured choice, for later processes."""
        if plan.key is None or plan.fallback or plan.source not in ("cache", "tuning"):
            return
        device = self.chooser.device(inputs)
        cache = self.chooser.tuner(device).cache if device is not None else None
        if cache is not None:
            why = plan.peer_reason if not plan.launchers else plan.why
            if plan.graphed is not None:  # a kernel runs its captured calls: planned, and preloaded, as a kernel's
                entry = {"way": remembered.KERNEL}
            signature = remembered.text(plan.key, bool(self.params.names))
            remembered.remember(cache, self.op.name, signature, {**entry, "why": why})

    def remembered_signatures(self, device: int) -> dict[Any, dict[str, Any]]:
        """The signatures earlier processes remembered on this CUDA device, by plan key (read once;
        the plans of those the peer runs are made then, so that their first calls find them on
        tkreg.ops' fast path, as later calls do)."""
        known = self._remembered.get(device)
        if known is None:
            known = self._read_remembered(device)
            for other in self.siblings.values():
                if device not in other._remembered:
                    try:
                        other._read_remembered(device)
                    except Exception as e:  # that op's own first call reads them again and says why
                        log.debug("tkreg.ops.%s: remembered signatures not read ahead (%r)", other.op.name, e)
        return known

    def _read_remembered(self, device: int) -> dict[Any, dict[str, Any]]:
        """Read this op's remembered signatures on ``device`` (not read yet) and make the plans of
        the peer's."""
        cache = self.chooser.tuner(device).cache
        entries = cache.signatures(self.op.name) if cache is not None else {}
        known = self._remembered[device] = remembered.parse(entries, bool(self.params.names))
        room = PLAN_CACHE_SIZE - len(self._plans)
        for key, entry in known.items():
            if room <= 0:
                break
            if key not in self._plans:
                plan = self._recalled_plan(key, entry)
                if plan is not None:
                    self._plans[key] = plan
                    room -= 1
        return known

    def _recalled(self, inputs: Sequence[Any], key: Any) -> Plan | None:
        """The plan of a signature an earlier process remembered running the peer, made without
        planning; None where none did (or the inputs are not on a GPU, or a kernel runs it). The
        first call on a device reads what every op remembers there and preloads the signatures
        kernels run (:func:`.warming.preload`): this call's own may be among them."""
        device = self.chooser.device(inputs)
        if device is None:
            return None
        if device not in self._remembered:  # the first call on this device: read, then preload
            self.remembered_signatures(device)
            warming.preload(self.siblings or {self.op.name: self}, device)
        entry = self._remembered[device].get(key)
        if entry is None:
            return None
        return self._plans.get(key) or self._recalled_plan(key, entry)  # reading or preloading them may have made it

    def _recalled_plan(self, key: Any, entry: dict[str, Any]) -> Plan | None:
        """The plan of a remembered signature whose measured choice is the peer (None for others)."""
        if self.op.peer is None or entry.get("way") not in (remembered.FUNCTIONAL, remembered.WITH_INTERNAL):
            return None
        import torch

        has_params = bool(self.params.names)
        params = self.params.as_dict(key[-1] if has_params else self.params.defaults)
        plan = Plan(None, (), params, peer_reason=str(entry.get("why", "")), source="cache", key=key, autograd_peer=True)
        specs = keys.tensor_specs(key, has_params)
        shapes = [None if spec == keys.ABSENT else tuple(spec[1]) for spec in specs]
        functional = self.torch_call(params, shapes)
        if entry["way"] == remembered.FUNCTIONAL:
            self._set_run(plan, functional)
            return plan
        device = specs[0][3]
        try:
            internal = [(i, OutputLayout(tuple(shape), None if stride is None else tuple(stride), getattr(torch, dtype), device))
                        for i, shape, stride, dtype in entry.get("internal", ())]  # fmt: skip
        except (TypeError, ValueError):  # a damaged entry: plan the signature anew
            return None
        full = self._full_peer(params) if entry.get("full") and self.op.full_peer is not None else None
        self._peer_with_internal(plan, functional, internal, full, bool(entry.get("bare")))
        return plan
