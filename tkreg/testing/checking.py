"""Compare a kernel's output with its float64 reference and say, in terms a kernel author can act
on, what is wrong: how many elements mismatch, where the first ones are, the largest absolute and
relative errors, how many are NaN/inf or were never written (still holding the poison), and the
seed that reproduces it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.specs import Tolerance

FIRST_SHOWN = 5


@dataclass(frozen=True)
class Comparison:
    total: int
    mismatched: int
    unwritten: int
    nonfinite: int
    max_abs: float
    max_rel: float
    first: tuple[tuple[tuple[int, ...], float, float], ...]  # (index, got, expected)
    tolerance: Tolerance

    @property
    def ok(self) -> bool:
        return self.mismatched == 0

    def report(self, context: str = "") -> str:
        tol = self.tolerance
        lines = [f"{self.mismatched} of {self.total} elements mismatch (atol={tol.atol:.3g}, rtol={tol.rtol:.3g})"]
        if context:
            lines.insert(0, context)
        if self.unwritten:
            lines.append(f"{self.unwritten} elements never written (still NaN poison where the reference is finite)")
        if self.nonfinite:
            lines.append(f"{self.nonfinite} elements are inf or NaN where the reference is finite")
        lines.append(f"max abs error {self.max_abs:.6g}, max rel error {self.max_rel:.6g} (over finite elements)")
        for index, got, want in self.first:
            lines.append(f"  at {list(index)}: got {got!r}, expected {want!r}")
        return "\n".join(lines)


def compare(out: Any, ref: Any, tol: Tolerance, unwritten: Any = None) -> Comparison:
    """Elementwise |out - ref| <= atol + rtol*|ref|, with NaN and inf never passing unless the
    reference has the same non-finite value. ``unwritten`` marks elements that still hold the
    poison; without it, every NaN where the reference is finite counts as unwritten."""
    import torch

    # On the output's device (a GPU compares large outputs in milliseconds); only the few values
    # reported below come back to the host.
    got = out.detach().to(torch.float64)
    want = ref.detach().to(got.device, torch.float64)
    if got.shape != want.shape:
        raise AssertionError(f"output shape {tuple(got.shape)} differs from the reference's {tuple(want.shape)}")
    want_finite = torch.isfinite(want)
    got_nan = torch.isnan(got)
    got_finite = torch.isfinite(got)
    diff = (got - want).abs()
    allowed = tol.atol + tol.rtol * want.abs()
    close = (diff <= allowed) & got_finite & want_finite
    same_special = ~want_finite & ((got == want) | (torch.isnan(got) & torch.isnan(want)))
    bad = ~(close | same_special)
    poisoned = got_nan if unwritten is None else unwritten.to(got.device).reshape(got.shape)
    unwritten_count = int((poisoned & want_finite).sum())
    nonfinite = int((~got_finite & want_finite).sum()) - unwritten_count
    both = got_finite & want_finite
    max_abs = float(diff[both].max()) if bool(both.any()) else 0.0
    rel = diff[both] / want[both].abs().clamp_min(torch.finfo(torch.float64).tiny)
    max_rel = float(rel.max()) if rel.numel() else 0.0
    idx = bad.nonzero()[:FIRST_SHOWN]
    first = tuple((tuple(int(i) for i in row), float(got[tuple(row)]), float(want[tuple(row)])) for row in idx.tolist())
    return Comparison(
        total=got.numel(),
        mismatched=int(bad.sum()),
        unwritten=unwritten_count,
        nonfinite=nonfinite,
        max_abs=max_abs,
        max_rel=max_rel,
        first=first,
        tolerance=tol,
    )


def compare_exact(out: Any, ref: Any) -> Comparison:
    """Bit-for-bit equality, for integer and bool outputs (indices, counts, masks)."""
    import torch

    got, want = out.detach(), ref.detach().to(out.device, out.dtype)
    if got.shape != want.shape:
        raise AssertionError(f"output shape {tuple(got.shape)} differs from the reference's {tuple(want.shape)}")
    bad = got != want
    idx = bad.nonzero()[:FIRST_SHOWN]
    first = tuple((tuple(int(i) for i in row), float(got[tuple(row)]), float(want[tuple(row)])) for row in idx.tolist())
    diff = (got.to(torch.float64) - want.to(torch.float64)).abs()
    return Comparison(
        total=got.numel(),
        mismatched=int(bad.sum()),
        unwritten=0,
        nonfinite=0,
        max_abs=float(diff.max()) if diff.numel() else 0.0,
        max_rel=0.0,
        first=first,
        tolerance=Tolerance(0.0, 0.0),
    )


_BITS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def _bits(t: Any) -> Any:
    """The tensor's elements as same-size integers, so NaN payloads and -0.0 compare as stored."""
    import torch

    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    size = t.element_size()
    return t if not t.is_floating_point() else t.view(getattr(torch, _BITS[size]))


@dataclass(frozen=True)
class Snapshot:
    """A copy of one input taken before a kernel ran: its elements and its storage's bytes."""

    name: str
    values: Any
    storage: Any

    @classmethod
    def of(cls, name: str, t: Any) -> Snapshot:
        return cls(name, t.detach().clone(), _storage_bytes(t).clone())

    def changes(self, t: Any) -> str:
        """What the kernel changed in this input, in words; empty when nothing."""
        changed = int((_bits(t.detach()) != _bits(self.values)).sum())
        outside = int((_storage_bytes(t) != self.storage).sum())
        if changed:
            return f"{changed} of {t.numel()} elements of input {self.name!r} changed"
        if outside:
            return f"{outside} bytes of input {self.name!r}'s storage outside its elements (padding) changed"
        return ""


def _storage_bytes(t: Any) -> Any:
    import torch

    whole = torch.empty(0, dtype=torch.uint8, device=t.device)
    return whole.set_(t.untyped_storage())
