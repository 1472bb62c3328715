"""Each kind of requirement against the capabilities users have: 7.5, 8.0, 8.9, 9.0, 10.0, 12.0."""

from __future__ import annotations

import pytest

import tkreg
from tests.helpers import kernel
from tkreg.core import platform
from tkreg.core.registry import unmet_requirements

CAPABILITIES = ["7.5", "8.0", "8.9", "9.0", "10.0", "12.0"]

# requirement -> which of CAPABILITIES it runs on
TABLE = [
    (tkreg.Requirements(), [True, True, True, True, True, True]),
    (tkreg.Requirements(min_capability=(8, 0)), [False, True, True, True, True, True]),
    (tkreg.Requirements(min_capability="8.0", max_capability="9.0"), [False, True, True, True, False, False]),
    (tkreg.Requirements(min_capability=(9, 0), features=("tma", "warp_specialization")), [False, False, False, True, True, True]),
    (tkreg.Requirements(arch="sm_90a", features=("wgmma",)), [False, False, False, True, False, False]),
    (tkreg.Requirements(arch="sm_100a", features=("tcgen05",)), [False, False, False, False, True, False]),
    (tkreg.Requirements(arch="sm_120a"), [False, False, False, False, False, True]),
]


@pytest.mark.parametrize(("requires", "expected"), TABLE, ids=lambda v: v.describe() if isinstance(v, tkreg.Requirements) else "")
def test_capability_table(requires: tkreg.Requirements, expected: list[bool]) -> None:
    k = kernel("k", requires=requires)
    got = [not unmet_requirements(k, tkreg.Platform.cuda(c)) for c in CAPABILITIES]
    assert got == expected


def test_rejections_say_what_is_needed_and_what_the_device_is() -> None:
    sm90a = kernel("k", requires=tkreg.Requirements(arch="sm_90a", features=("wgmma",)))
    assert unmet_requirements(sm90a, tkreg.Platform.cuda("10.0")) == [
        "needs sm_90a (capability 9.0) for wgmma; this device is 10.0"
    ]
    sm100a = kernel("k", requires=tkreg.Requirements(arch="sm_100a", features=("tcgen05",)))
    assert unmet_requirements(sm100a, tkreg.Platform.cuda("12.0")) == [
        "needs sm_100a (capability 10.0..10.3) for tcgen05; this device is 12.0"
    ]
    ranged = kernel("k", requires=tkreg.Requirements(min_capability=(8, 0), max_capability=(9, 0)))
    assert unmet_requirements(ranged, tkreg.Platform.cuda("7.5")) == ["needs capability 8.0..9.0; this device is 7.5"]


@pytest.mark.parametrize(
    ("installed", "spec", "runs"),
    [
        ("3.6.0", ">=3.6,<3.7", True),
        ("3.5.1", ">=3.6,<3.7", False),
        ("3.7.0", ">=3.6,<3.7", False),
        ("3.6.0+git1234", ">=3.6", True),
    ],
)
def test_triton_version_ranges(monkeypatch: pytest.MonkeyPatch, installed: str, spec: str, runs: bool) -> None:
    monkeypatch.setattr("tkreg.core.registry.installed_version", lambda dist: installed)
    k = kernel("k", requires=tkreg.Requirements(triton=spec))
    reasons = unmet_requirements(k, tkreg.Platform.cuda("9.0"))
    assert (not reasons) == runs
    if not runs:
        assert reasons == [f"needs triton{spec}; installed is {installed}"]


def test_missing_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tkreg.core.registry.installed_version", lambda dist: None)
    k = kernel("k", requires=tkreg.Requirements(triton=">=3.6"))
    assert unmet_requirements(k, tkreg.Platform.cuda("9.0")) == ["needs triton>=3.6; triton is not installed"]


def test_interpreter_runs_only_interpretable_kernels() -> None:
    assert not unmet_requirements(kernel("k", interpretable=True), tkreg.Platform.interpreter())
    (reason,) = unmet_requirements(kernel("k"), tkreg.Platform.interpreter())
    assert reason == "needs a CUDA GPU (it cannot run under the Triton interpreter); this machine has none"


@pytest.mark.parametrize(
    ("field", "requires", "problem"),
    [
        ("requires.arch", dict(arch="sm_91"), "unknown architecture 'sm_91'"),
        ("requires.arch", dict(arch="sm_90a", min_capability=(9, 0)), "either arch or a capability range"),
        ("requires", dict(min_capability=(10, 0), max_capability=(9, 0)), "empty capability range"),
        ("requires.triton", dict(triton="three point six"), "not a version specifier"),
        ("requires.features", dict(features=("warp_magic",)), "unknown feature 'warp_magic'"),
        ("requires.features", dict(arch="sm_90a", features=("tcgen05",)), "tcgen05 exists on 10.0..10.3"),
        ("requires.dtypes", dict(dtypes=("float13",)), "unknown dtype 'float13'"),
    ],
)
def test_invalid_requirements_name_the_field(field: str, requires: dict, problem: str) -> None:
    with pytest.raises(tkreg.SpecError) as info:
        kernel("k", requires=tkreg.Requirements(**requires))
    assert info.value.field == field
    assert problem in str(info.value)


def test_current_platform_without_a_driver_is_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    platform.current.cache_clear()
    monkeypatch.setattr(platform, "_first_cuda_device", lambda: None)
    try:
        assert platform.current() == tkreg.Platform.interpreter()
    finally:
        platform.current.cache_clear()


def test_a_stated_note_explains_a_bound_no_feature_sets() -> None:
    k = kernel(
        "k",
        requires=tkreg.Requirements(min_capability="9.0", max_capability="10.3", features=("tma",), note="tiles need 150 KiB"),
    )
    assert unmet_requirements(k, tkreg.Platform.cuda("12.0")) == [
        "needs capability 9.0..10.3 (tiles need 150 KiB); this device is 12.0"
    ]
    assert unmet_requirements(k, tkreg.Platform.cuda("8.0")) == ["needs capability 9.0..10.3 for tma; this device is 8.0"]


@pytest.mark.parametrize("distribution", ["pytest", "pluggy", "torch", "triton", "tkreg"])
def test_installed_versions_read_from_the_metadata_header_match_importlib(distribution: str) -> None:
    from importlib import metadata

    platform.installed_version.cache_clear()
    assert platform.installed_version(distribution) == metadata.version(distribution)


def test_a_distribution_that_is_not_installed_has_no_version() -> None:
    assert platform.installed_version("tkreg-no-such-distribution") is None
