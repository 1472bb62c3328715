"""Ranking by what users pay: the wall-time model between measured points, the ranking rule
(ties within 3% go to the cheaper launcher, kernels before the peer), lookup and explain on a
measured GPU, the lookup cache, and which data file a platform uses."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import tkreg  # noqa: E402
from tests.ops_support import device_or_skip, install, same_alignment_as  # noqa: E402
from tkreg.core.loading import build_registry  # noqa: E402
from tkreg.core.platform import Platform  # noqa: E402
from tkreg.ops import walltime  # noqa: E402
from tkreg.ops.forms import form_for  # noqa: E402
from tkreg.ops.walltime import Estimate, Measurements, Point  # noqa: E402

GPU = Platform.cuda("9.0", name="Test GPU")
DATE = "2026-11-23T10:00:00Z"


def _points(impl: str, rows: list[tuple[int, float, float, float]], dtype: str = "float32") -> list[Point]:
    """(side, wall, device, host) per square add input."""
    return [Point("add", impl, dtype, {"M": n, "N": n}, "contiguous", w, d, h) for n, w, d, h in rows]


MEASURED = Measurements(
    "Test GPU",
    "9.0",
    DATE,
    "python scripts/gpu/ops_measure.py",
    _points("add_triton", [(1024, 10.0, 9.5, 12.0), (4096, 52.0, 51.0, 12.0)])
    + _points("add_big_tiles", [(1024, 10.2, 9.0, 30.0), (4096, 50.0, 49.5, 30.0)])
    + _points("peer", [(1024, 9.9, 9.5, 5.0), (4096, 53.0, 52.5, 5.0)])
    + _points("add_triton", [(1024, 11.0, 10.5, 12.0)], dtype="float16"),
)


class Kernels:
    @tkreg.hookimpl
    def tkreg_register_kernels(self, register: Any) -> None:
        for name in ("add_big_tiles", "add_unmeasured"):
            register(tkreg.Kernel(name=name, op="add", launcher="tests.helpers:cost", interpretable=True, priority=50))


@pytest.fixture
def registry() -> tkreg.Registry:
    reg = build_registry(plugins=[("extra", Kernels())], env={"TKREG_PLUGINS": "elementwise"})
    walltime.rank_by(reg, MEASURED)
    return reg


def _estimate(registry: tkreg.Registry, impl: str, *inputs: Any) -> Estimate | None:
    op = registry.op("add")
    form = form_for(op)
    dtype = str(inputs[0].dtype).removeprefix("torch.")
    return MEASURED.estimate(op, impl, dtype, form.dims(inputs), form.layout(inputs), form.shape_class)


def _square(n: int, dtype: Any = torch.float32) -> tuple[Any, Any]:
    return torch.empty(n, n, dtype=dtype), torch.empty(n, n, dtype=dtype)


def test_a_measured_point_is_its_own_estimate(registry: tkreg.Registry) -> None:
    e = _estimate(registry, "add_triton", *_square(1024))
    assert (e.wall_us, e.device_us, e.host_us) == (10.0, 9.5, 12.0)
    assert e.basis == "measured at 1024x1024 (Test GPU, 2026-11-23)"


def test_between_points_interpolates_in_log_work(registry: tkreg.Registry) -> None:
    e = _estimate(registry, "add_triton", *_square(2048))  # 4x the bytes of 1024^2, a quarter of 4096^2's
    assert e.wall_us == pytest.approx((10.0 * 52.0) ** 0.5)
    assert e.device_us == pytest.approx((9.5 * 51.0) ** 0.5)
    assert e.basis.startswith("interpolated between 1024x1024 and 4096x4096")


def test_beyond_the_largest_point_device_time_scales_with_work(registry: tkreg.Registry) -> None:
    e = _estimate(registry, "add_triton", *_square(8192))
    assert e.device_us == pytest.approx(51.0 * 4)
    assert e.wall_us == pytest.approx(51.0 * 4 + (52.0 - 51.0))  # the launch overhead stays
    small = _estimate(registry, "add_triton", *_square(100))
    assert small.wall_us == 10.0 and "the smallest measured size" in small.basis


def test_other_dtypes_layouts_and_kernels(registry: tkreg.Registry) -> None:
    bf16 = _estimate(registry, "add_triton", *_square(1024, torch.bfloat16))
    assert bf16.wall_us == 11.0 and "measured as float16" in bf16.basis
    a, b = _square(1024)
    transposed = _estimate(registry, "add_triton", a.t(), b)
    assert transposed.wall_us == 10.0 and "no measurement with layout strided" in transposed.basis
    assert _estimate(registry, "add_unmeasured", a, b) is None


def test_order_ties_go_to_the_cheaper_call_and_kernels_beat_the_peer() -> None:
    def e(wall: float, host: float) -> Estimate:
        return Estimate(wall, wall, host, "b")

    assert [n for n, _ in walltime.order({"slow": e(20, 1), "fast": e(10, 30), "cheap": e(10.2, 8)})] == ["cheap", "fast", "slow"]
    why = dict(walltime.order({"fast": e(10, 30), "cheap": e(10.2, 8)}))
    assert why["fast"].startswith("ranked below cheap: as fast within 3% (10.0 vs 10.2 us) but costs 30.0 us per queued call")
    assert [n for n, _ in walltime.order({"peer x": e(10, 5), "k": e(10, 5)}, peer="peer x")] == ["k", "peer x"]
    beyond_tie = walltime.order({"fast": e(10, 30), "cheap": e(10.4, 8)})
    assert [n for n, _ in beyond_tie] == ["fast", "cheap"]
    assert beyond_tie[1][1].startswith("ranked below fast: estimated 10.4 us per call")


def test_data_measured_as_tkreg_ops_calls_ranks_by_the_cost_per_queued_call() -> None:
    """Where the host times are what tkreg.ops pays (replayed launches), the least max(wall, host)
    wins outright: a kernel 5% behind on wall time but half the peer's host time goes first, which
    the wall-time rule would not put first; on equal terms a kernel beats the peer."""

    def e(wall: float, host: float) -> Estimate:
        return Estimate(wall, wall, host, "b")

    launch_bound = {"peer x": e(10.0, 20.0), "k": e(10.5, 6.0), "slow": e(30.0, 5.0)}
    assert [n for n, _ in walltime.order(launch_bound, peer="peer x")] == ["peer x", "k", "slow"]
    queued = walltime.order(launch_bound, peer="peer x", queued=True)
    assert [n for n, _ in queued] == ["k", "peer x", "slow"]
    assert queued[0][1].startswith("estimated 10.5 us per queued call: 10.5 us per call (device 10.5 us, host 6.0 us)")
    assert queued[1][1].startswith("ranked below k: estimated 20.0 us per queued call")
    assert [n for n, _ in walltime.order({"peer x": e(10, 5), "k": e(10, 5)}, peer="peer x", queued=True)] == ["k", "peer x"]


def _launch_bound_document(calls: str | None) -> dict[str, Any]:
    meta = {"device": "Test GPU", "capability": "9.0", **({"calls": calls} if calls is not None else {})}
    rows = [{"op": "add", "impl": impl, "dtype": "float32", "dims": {"M": 64, "N": 64}, "layout": "contiguous",
             "wall_us": wall, "device_us": wall, "host_us": host} for impl, wall, host in (("add_triton", 10.5, 6.0),
                                                                                          ("peer", 10.0, 20.0))]  # fmt: skip
    return {"kind": "ops_ranking", "meta": meta, "rows": rows}


@pytest.mark.parametrize(("calls", "first"), [(walltime.CALLS_AS_TKREG, "add_triton"), (None, "peer")])
def test_the_rule_follows_how_the_data_was_measured(calls: str | None, first: str) -> None:
    measurements = Measurements.from_document(_launch_bound_document(calls))
    assert measurements.calls == (calls or "")
    reg = build_registry(env={"TKREG_PLUGINS": "elementwise"})
    walltime.rank_by(reg, measurements)
    ranking = reg.ranking("add", GPU, _square(64))
    assert ranking.prefer_peer == (first == "peer")
    if first != "peer":
        assert ranking.verdicts[0].kernel.name == first and "per queued call" in ranking.verdicts[0].ranking


def test_the_ranking_suite_marks_its_data_as_the_ranker_reads_it() -> None:
    from tkreg.bench import ranking

    assert ranking.CALLS == walltime.CALLS_AS_TKREG


def test_the_ranking_suite_leaves_out_kernels_that_overwrite_an_input(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.ops_support import RMS_FORWARD, RmsPlugin, registry_with, rms_kernel, rms_torch
    from tkreg.bench import ranking
    from tkreg.bench.calls import Signature

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")  # the toy kernels (torch code) then take CPU tensors
    writer = rms_kernel("rms_writer", rms_torch, priority=10, writes=(tkreg.Writes("x", reason="scratch"),))
    registry = registry_with(RmsPlugin(writer, RMS_FORWARD))
    inputs = (torch.randn(5, 7, device=device), torch.randn(7, device=device))
    assert {k.name for k in registry.lookup("toy_rms_norm", inputs=inputs)} == {"rms_writer", "rms_torch"}
    sig = Signature.of("toy_rms_norm", {"M": 5, "N": 7}, "float32", "")
    assert set(ranking.candidates(registry, sig, inputs)) == {"rms_torch", ranking.PEER}


def test_lookup_ranks_measured_kernels_by_wall_time_and_says_why(registry: tkreg.Registry) -> None:
    big = _square(4096)
    verdicts = registry.explain("add", GPU, inputs=big)
    assert [v.kernel.name for v in verdicts] == ["add_big_tiles", "add_triton", "add_unmeasured"]
    assert verdicts[0].ranking.startswith("estimated 50.0 us per call (device 49.5 us, host 30.0 us); measured at 4096x4096")
    assert verdicts[1].ranking.startswith("ranked below add_big_tiles: estimated 52.0 us per call")
    assert verdicts[2].ranking == (
        "no wall-time measurement of add_unmeasured for add on Test GPU; ranked after the measured kernels"
    )
    ranking = registry.ranking("add", GPU, big)
    assert not ranking.prefer_peer and ranking.peer.wall_us == 53.0
    # without measurements: priority order as before
    walltime.rank_by(registry, None)
    assert [k.name for k in registry.lookup("add", GPU, inputs=big)] == ["add_big_tiles", "add_unmeasured", "add_triton"]


def test_the_peer_is_preferred_where_it_is_as_fast_and_cheaper_to_call(registry: tkreg.Registry) -> None:
    small = _square(1024)
    ranking = registry.ranking("add", GPU, small)
    assert ranking.prefer_peer
    assert ranking.peer_ranking.startswith("estimated 9.9 us per call (device 9.5 us, host 5.0 us)")
    first = ranking.verdicts[0]
    assert first.kernel.name == "add_triton"  # within 3% of the peer; add_big_tiles is just over 3% slower
    assert first.ranking.startswith("ranked below peer torch.add: as fast within 3%")
    # lookup returns kernels only: the peer's standing is in the ranking and explain's text
    assert registry.lookup("add", GPU, inputs=small)[0].name == "add_triton"


def test_lookup_with_inputs_is_cached_per_signature(registry: tkreg.Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    original = registry._rank
    monkeypatch.setattr(registry, "_rank", lambda *a: calls.append(a) or original(*a))
    a, b = _square(64)
    first = registry.lookup("add", GPU, inputs=(a, b))
    assert registry.lookup("add", GPU, inputs=(a, b)) == first
    assert registry.lookup("add", GPU, inputs=(same_alignment_as(a, seed=1), b)) == first  # new tensors, same signature
    assert len(calls) == 1
    registry.lookup("add", GPU, inputs=(a[:, :32], b[:, :32]))  # another shape
    registry.lookup("add", GPU, inputs=(a.double(), b.double()))  # another dtype
    assert len(calls) == 3
    walltime.rank_by(registry, MEASURED)  # forgets every cached ranking
    registry.lookup("add", GPU, inputs=(a, b))
    assert len(calls) == 4


def _data_file(tmp_path: Path, device: str, capability: str) -> Path:
    rows = [{"op": "add", "impl": "add_triton", "dtype": "float32", "dims": {"M": 8, "N": 8}, "layout": "contiguous",
             "wall_us": 5.0, "device_us": 4.0, "host_us": 9.0}]
    path = tmp_path / f"{device.replace(' ', '-')}.json"
    path.write_text(json.dumps({"kind": "ops_ranking", "meta": {"device": device, "capability": capability}, "rows": rows}))
    return path


def test_a_platform_uses_data_of_its_device_else_of_its_capability(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    op = tkreg.default_registry().op("add")
    monkeypatch.setenv(walltime.ENV_VAR, str(_data_file(tmp_path, "NVIDIA H100 80GB HBM3", "9.0")))
    exact = walltime.for_platform(Platform.cuda("9.0", "NVIDIA H100 80GB HBM3"), op)
    assert exact is not None and exact.points[0].wall_us == 5.0
    assert walltime.for_platform(Platform.cuda("9.0", "NVIDIA H100 PCIe"), op) is exact  # same capability
    assert walltime.for_platform(Platform.cuda("8.0", "NVIDIA A100"), op) is None
    assert walltime.for_platform(Platform.cuda("9.0"), op) is None  # a bare capability: priority and score rank
    assert walltime.for_platform(Platform.interpreter(), op) is None
    monkeypatch.setenv(walltime.ENV_VAR, str(tmp_path / "not-written-yet.json"))  # as while `tkreg bench ranking` runs
    assert walltime.data_files(op) == []


def test_an_ops_data_files_are_described_and_a_bad_one_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    op = tkreg.default_registry().op("add")
    document = _launch_bound_document(walltime.CALLS_AS_TKREG) | {"meta": {"device": "Test GPU", "capability": "9.0",
                                                                          "date": DATE, "calls": walltime.CALLS_AS_TKREG}}
    good = tmp_path / "test-gpu.json"
    good.write_text(json.dumps(document))
    monkeypatch.setenv(walltime.ENV_VAR, str(good))
    assert walltime.described(op) == ["Test GPU (2026-11-23; called as tkreg.ops calls them; 2 points)"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"kind": "host_overhead", "meta": {}, "rows": []}))
    monkeypatch.setenv(walltime.ENV_VAR, str(bad))
    assert walltime.described(op) == ["bad.json: unreadable (ValueError: not a ranking data file: kind 'host_overhead', "
                                      "expected 'ops_ranking')"]  # fmt: skip


def test_a_file_of_another_kind_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"kind": "host_overhead", "meta": {}, "rows": []}))
    with pytest.raises(ValueError, match="not a ranking data file: kind 'host_overhead'"):
        walltime.load(str(path))


def test_each_op_ships_its_own_ranking_data_naming_only_its_kernels() -> None:
    """The data lives with the op's plugin (Op.measured), not in tkreg: every row is the op's."""
    registry = tkreg.default_registry()
    measured = [op for op in registry.ops() if op.measured]
    assert measured, "no op declares measured data"
    for op in measured:
        files = walltime.data_files(op)
        assert files, f"{op.name} names {op.measured} but it holds no data file"
        for path in files:
            data = walltime.load(str(path))
            assert data.device and data.capability and data.date and data.command, path
            kernels = {k.name for k in registry.kernels(op.name)}
            for p in data.points:
                assert p.op == op.name, (path, p)
                assert p.impl in kernels | {walltime.PEER}, (path, p)
                assert p.wall_us > 0 and (p.device_us is None or p.device_us > 0), (path, p)


@pytest.mark.parametrize(("peer_wall", "expect"), [(5.0, "calls its peer: faster for these inputs"), (50.0, "calls add_triton")])
def test_dispatch_follows_the_ranking_to_the_peer_where_it_is_faster(
    peer_wall: float, expect: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    device = device_or_skip()
    # the ranking is the prior: on a GPU a call would time the candidates instead, unless tuning is off
    monkeypatch.setenv("TKREG_TUNE", "0")
    monkeypatch.setenv("TKREG_CACHE_DIR", str(tmp_path))
    points = _points("add_triton", [(16, 10.0, 4.0, 12.0)]) + _points("peer", [(16, peer_wall, 4.0, 5.0)])
    registry = build_registry(env={"TKREG_PLUGINS": "elementwise"})
    walltime.rank_by(registry, Measurements("Test GPU", "9.0", DATE, "test", points))
    ops = install(registry)
    try:
        a, b = (torch.randn(16, 16, device=device) for _ in range(2))
        with warnings.catch_warnings(), caplog.at_level("INFO", logger="tkreg.ops"):
            warnings.simplefilter("error")  # a ranking decision is not a fallback: no warning
            assert torch.equal(ops.add(a, b), a + b)
        told = ops.explain("add", a, b)
        assert expect in told and "faster for these inputs: faster" not in told, told  # the reason said once
        assert expect in caplog.text  # the decision is logged
    finally:
        tkreg.ops.uninstall()
