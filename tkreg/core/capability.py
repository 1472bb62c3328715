"""GPU capabilities and architecture variants, without importing torch.

An architecture-specific variant (the trailing "a" in sm_90a, sm_100a) holds instructions that
exist only on that family: code using wgmma runs on 9.0 alone, code using tcgen05 on the 10.x
data-centre Blackwell parts and not on 12.x consumer Blackwell.
"""

from __future__ import annotations

from dataclasses import dataclass

Capability = tuple[int, int]


@dataclass(frozen=True)
class Arch:
    name: str
    first: Capability  # lowest capability the variant runs on
    last: Capability  # highest capability the variant runs on
    compile_capability: int  # what triton's GPUTarget takes to emit this variant
    family: str


ARCHES: dict[str, Arch] = {
    a.name: a
    for a in (
        Arch("sm_80", (8, 0), (8, 9), 80, "Ampere/Ada"),
        Arch("sm_89", (8, 9), (8, 9), 89, "Ada"),
        Arch("sm_90a", (9, 0), (9, 0), 90, "Hopper"),
        # triton emits sm_100a for 10.0 and sm_103a for 10.3 from the same Gluon source.
        Arch("sm_100a", (10, 0), (10, 3), 100, "data-centre Blackwell"),
        Arch("sm_120a", (12, 0), (12, 1), 120, "consumer Blackwell"),
    )
}


def parse(text: str | Capability) -> Capability:
    """'9.0', '9', (9, 0) or 'sm_90' -> (9, 0)."""
    if isinstance(text, tuple):
        if len(text) != 2 or not all(isinstance(x, int) for x in text):
            raise ValueError(f"capability must be (major, minor) integers, got {text!r}")
        return text
    raw = text.strip().lower().removeprefix("sm_").rstrip("a")
    try:
        if "." in raw:
            major, minor = raw.split(".", 1)
            return int(major), int(minor)
        value = int(raw)
        return (value // 10, value % 10) if value >= 10 else (value, 0)
    except ValueError:
        raise ValueError(f"not a GPU capability: {text!r} (expected e.g. '9.0' or 'sm_90')") from None


def fmt(cap: Capability) -> str:
    return f"{cap[0]}.{cap[1]}"


def arch(name: str) -> Arch:
    try:
        return ARCHES[name]
    except KeyError:
        raise ValueError(f"unknown architecture {name!r}; known: {', '.join(ARCHES)}") from None
