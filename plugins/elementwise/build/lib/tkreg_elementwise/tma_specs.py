"""Spec pieces the Gluon add kernels share (no torch or triton here, so plugin modules can use
them): where they run and what their compiled code must show."""

from __future__ import annotations

from tkreg import CompileTarget, Requirements

# TMA tile loads (global -> shared, completing on an mbarrier) and tile stores (shared -> global).
TMA_LOAD_PTX = r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.mbarrier"
TMA_STORE_PTX = r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta"
TMA_SASS = (r"UTMALDG", r"UTMASTG")
GLUON_ARCHES = ("sm_90a", "sm_100a")


def tma_targets(ptx: tuple[str, ...] = (), sass: tuple[str, ...] = ()) -> tuple[CompileTarget, ...]:
    """sm_90a and sm_100a targets that must hold TMA loads and stores, plus ``ptx``/``sass``."""
    return tuple(CompileTarget(arch, ptx=(TMA_LOAD_PTX, TMA_STORE_PTX, *ptx), sass=(*TMA_SASS, *sass)) for arch in GLUON_ARCHES)


def tma_requirements(*features: str) -> Requirements:
    """Hopper and data-centre Blackwell: their 227 KiB of shared memory per block hold the
    default tiles (consumer Blackwell, 12.x, has about 99 KiB). triton 3.6 only: the Gluon API
    these kernels use (warp_specialize's argument form, aggregates) changes between 3.5, 3.6
    and 3.7 (shared/notes/gluon-3.6.md)."""
    return Requirements(
        min_capability="9.0",
        max_capability="10.3",
        triton=">=3.6,<3.7",
        features=("tma", "mbarrier", *features),
        inputs="tkreg_elementwise.add_checks:tma_add_reasons",
        note="its default tiles need about 150 KiB of shared memory per block; 12.x parts have 99 KiB",
    )
