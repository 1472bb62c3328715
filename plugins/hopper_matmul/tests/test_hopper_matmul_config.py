"""The config arithmetic, the time model and the launcher's choice of config (pure Python, no compile)."""

from __future__ import annotations

from dataclasses import asdict, replace

import pytest
from tkreg_hopper_matmul import choice, model
from tkreg_hopper_matmul import config as cfg
from tkreg_hopper_matmul.config import HopperConfig, effective_split_k
from tkreg_hopper_matmul.plugin import KERNEL
from tkreg_matmul.choice_table import Entry, Table

from tkreg import InputError

H100_SMS = 132


def test_every_listed_config_is_buildable():
    for params in KERNEL.configs:
        config = HopperConfig.from_params(params)
        assert config.problems() == [], params
        assert config.smem_bytes(2) <= cfg.SMEM_PER_BLOCK


def test_default_is_first_config():
    assert HopperConfig.from_params(KERNEL.configs[0]) == cfg.DEFAULT == cfg.TILES[0]
    assert (cfg.DEFAULT.BLOCK_M, cfg.DEFAULT.BLOCK_N, cfg.DEFAULT.BLOCK_K) == (128, 256, 64)
    assert cfg.DEFAULT.rows == 64 and cfg.DEFAULT.acc_regs == 128


def test_every_tile_the_launcher_may_pick_is_a_registered_config():
    """Correctness items cover every config x scheduler; the choice picks tiles among TILES (with a
    K split, which is a runtime value of the same compiled split-K kernel as a registered one)."""
    listed = [HopperConfig.from_params(p) for p in KERNEL.configs]
    for tile in cfg.TILES:
        assert tile in listed
    assert any(c.SPLIT_K > 1 and not c.PINGPONG and c.CONSUMERS == 1 for c in listed)
    assert any(c.SPLIT_K > 1 and c.CONSUMERS == 2 and not c.PINGPONG for c in listed)
    assert any(c.SPLIT_K > 1 and c.PINGPONG for c in listed)


@pytest.mark.parametrize(
    ("consumers", "producer_regs", "expected"),
    [(2, 24, 240), (2, 40, 232), (1, 24, 256)],
)
def test_consumer_registers_fill_the_register_file(consumers, producer_regs, expected):
    config = HopperConfig(CONSUMERS=consumers, PRODUCER_REGS=producer_regs, BLOCK_M=64 * consumers)
    assert config.consumer_regs == expected
    # Consumers plus the producer's warpgroup fit the 64K-register file.
    used = (consumers * config.consumer_regs + producer_regs) * cfg.THREADS_PER_WARPGROUP
    assert used <= cfg.REGISTERS_PER_SM


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"CONSUMERS": 3, "BLOCK_M": 192}, "BLOCK_M=192 must be one of"),
        ({"CONSUMERS": 3}, "CONSUMERS=3 must be 1..2"),
        ({"BLOCK_N": 512}, "BLOCK_N=512 must be one of"),
        ({"BLOCK_M": 64}, "must be a multiple of 64"),
        ({"BLOCK_M": 256}, "takes 256 registers per thread"),
        ({"PINGPONG": True, "CONSUMERS": 1, "BLOCK_M": 64}, "PINGPONG needs CONSUMERS >= 2"),
        ({"NUM_STAGES": 5}, "bytes of shared memory"),
        ({"NUM_STAGES": 1}, "NUM_STAGES=1 must be >= 2"),
        ({"EPILOGUE_SPLIT": 3}, "EPILOGUE_SPLIT=3 must be one of"),
        ({"PRODUCER_REGS": 20}, "PRODUCER_REGS=20 must be a multiple of 8"),
        ({"SPLIT_K": 0}, "SPLIT_K=0 must be 1..32"),
        # Split-K stages fp32 partial sums: twice the staging of the default's bf16 tile.
        ({"SPLIT_K": 2}, "bytes of shared memory"),
        ({"BLOCK_SIZE": 64}, "unknown parameter(s) BLOCK_SIZE"),
    ],
)
def test_bad_configs_are_refused_with_a_reason(params, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        HopperConfig.from_params(params)


def test_smem_estimate_counts_ring_and_staging():
    # 3 stages of (2 A blocks 64x64 + one B block 64x256) and two 64x256 staging buffers, fp16.
    ring = 3 * (2 * 64 * 64 + 64 * 256) * 2
    staging = 2 * 64 * 256 * 2
    assert cfg.DEFAULT.smem_bytes(2) == ring + staging + cfg.SMEM_SLACK
    split = HopperConfig(NUM_STAGES=4, EPILOGUE_SPLIT=2)
    assert split.smem_bytes(2) == 4 * (2 * 64 * 64 + 64 * 256) * 2 + 2 * 64 * 128 * 2 + cfg.SMEM_SLACK
    # Split-K: the staging buffer holds fp32.
    sk = HopperConfig(BLOCK_M=64, BLOCK_N=128, NUM_STAGES=4, CONSUMERS=1, SPLIT_K=4)
    assert sk.smem_bytes(2) == 4 * (64 * 64 + 64 * 128) * 2 + 64 * 128 * 4 + cfg.SMEM_SLACK


@pytest.mark.parametrize(
    ("K", "split", "expected"),
    [
        (4096, 4, 4),  # 64 steps: 16 per slice
        (1000, 3, 3),  # 16 steps: 6, 6, 4 (the last slice ends past K)
        (72, 3, 2),  # 2 steps: one per slice
        (64, 8, 1),  # one step cannot be split
        (14336, 7, 7),  # 224 steps: 32 per slice
        (4096, 6, 6),  # 64 steps: 11 per slice, the sixth gets 9
        (4096, 12, 11),  # 64 steps: 6 per slice need only 11 slices
    ],
)
def test_effective_split_k_starts_every_slice_inside_k(K, split, expected):
    config = replace(cfg.TILES[7], SPLIT_K=split)
    got = effective_split_k(K, config)
    assert got == expected
    steps = -(-K // config.BLOCK_K)
    per = -(-steps // got)
    assert (got - 1) * per < steps <= got * per


def test_model_fits_the_measured_tile_ratios():
    """The two SM constants reproduce the measured 4096^3 ratios (H100, 2026-11-22) of the tiles to the 128x256 tile."""
    big = model.estimate(4096, 4096, 4096, cfg.DEFAULT, H100_SMS)
    for tile, measured in ((HopperConfig(BLOCK_M=128, BLOCK_N=128, NUM_STAGES=4), 0.87), (cfg.TILES[7], 0.60)):
        ratio = big.seconds / model.estimate(4096, 4096, 4096, tile, H100_SMS).seconds
        assert ratio == pytest.approx(measured, abs=0.07), tile


def test_model_prefers_big_tiles_for_big_problems_and_splits_or_narrow_tiles_for_decode():
    best = model.ranked(16384, 14336, 4096, cfg.TILES, H100_SMS)[0][1]
    assert (best.BLOCK_M * best.BLOCK_N, best.SPLIT_K) == (128 * 256, 1)
    for N, K in ((4096, 4096), (4096, 14336), (14336, 4096)):
        estimate, best = model.ranked(16, N, K, cfg.TILES, H100_SMS)[0]
        # Decode: one row of 64-row tiles, and enough units for (nearly) every SM.
        assert best.BLOCK_M == 64, best
        assert estimate.units >= 0.8 * H100_SMS, (N, K, estimate)
        assert estimate.bound == "dram"


def test_model_candidates_skip_splits_a_tile_cannot_build():
    configs = model.candidates(cfg.TILES, 4096)
    assert all(not c.problems() for c in configs)
    assert not any(c.SPLIT_K > 1 and (c.BLOCK_M, c.BLOCK_N, c.BLOCK_K) == (128, 256, 64) for c in configs)
    # Each split once, as launched: 12 slices of 64 steps are 11 (6 steps each).
    tile = cfg.TILES[7]
    launched = {effective_split_k(4096, replace(tile, SPLIT_K=s)) for s in model.SPLITS}
    assert {c.SPLIT_K for c in configs if c == replace(tile, SPLIT_K=c.SPLIT_K)} == launched == {1, 2, 3, 4, 6, 8, 11, 16}


def _table(*entries: Entry) -> Table:
    return Table(choice.TABLE_KIND, entries, {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-24T00:00:00Z"})


def test_choice_takes_the_measured_config_on_a_measured_shape():
    measured = replace(cfg.TILES[3], SPLIT_K=1)
    table = _table(Entry(4096, 4096, 4096, "nk", asdict(measured), "persistent"))
    pick = choice.choose_from(table, 4096, 4096, 4096, "nk", H100_SMS)
    assert (pick.config, pick.scheduler) == (measured, "persistent")
    assert "measured best at 4096x4096x4096 nk (NVIDIA H100 80GB HBM3, 2026-11-24)" in pick.why


def test_choice_uses_a_near_entry_unless_the_model_finds_it_much_worse_there():
    entry = Entry(2048, 4096, 4096, "kn", asdict(cfg.DEFAULT), "grouped-1")
    near = choice.choose_from(_table(entry), 2000, 4096, 4096, "kn", H100_SMS)
    assert (near.config, near.scheduler) == (cfg.DEFAULT, "grouped-1") and "distance 0.03" in near.why
    # A decode tile measured at M = 16 is no choice for M = 24 ... unless the model agrees; a
    # 128x256 tile measured at 8192^2 is far worse than the model's pick for 5000 x 8192 (one more
    # round of units), so the model's pick wins there.
    big = Entry(8192, 8192, 4096, "kn", asdict(replace(cfg.TILES[7], SPLIT_K=1)), "grouped-8")
    far = choice.choose_from(_table(big), 5000, 8192, 4096, "kn", H100_SMS)
    assert far.why.startswith("model:") and "slower here" in far.why


def test_choice_far_from_every_entry_is_the_models():
    table = _table(Entry(16, 4096, 4096, "nk", asdict(cfg.TILES[9]), "grouped-8"))
    pick = choice.choose_from(table, 8192, 8192, 8192, "kn", H100_SMS)
    assert pick.why.startswith("model:")
    assert pick.config == model.ranked(8192, 8192, 8192, cfg.TILES, H100_SMS)[0][1]
    assert pick.scheduler == choice.MODEL_SCHEDULER


def test_explain_choice_is_one_line():
    line = choice.explain_choice(16, 4096, 4096, "nk", H100_SMS)
    assert "\n" not in line and "split-K" in line and ("model:" in line or "measured" in line)


def test_choice_ignores_a_table_entry_the_kernel_cannot_build():
    table = _table(Entry(4096, 4096, 4096, "kn", {"BLOCK_M": 96}, "grouped-8"))
    pick = choice.choose_from(table, 4096, 4096, 4096, "kn", H100_SMS)
    assert pick.why.startswith("model:") and "unusable" in pick.why and "BLOCK_M=96" in pick.why


def test_benchmarks_time_the_launchers_own_choice_and_tests_cross_every_scheduler() -> None:
    """The benchmark item of the launcher's choice ({}) is not crossed with the schedulers (the
    choice names its own, a measured table entry may name "persistent"); test configs are."""
    import tkreg

    registry = tkreg.default_registry()
    hopper = registry.kernel("matmul_hopper_ws")
    assert registry.configs(hopper, "bench") == [{}]
    tested = registry.configs(hopper, "test")
    assert {c["scheduler"] for c in tested} == {s.name for s in registry.schedulers()}
