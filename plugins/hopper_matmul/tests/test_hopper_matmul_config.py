"""The config arithmetic and the launcher's choice of config (pure Python, no compile)."""

from __future__ import annotations

import pytest
from tkreg_hopper_matmul import config as cfg
from tkreg_hopper_matmul.config import HopperConfig
from tkreg_hopper_matmul.plugin import KERNEL

from tkreg import InputError

H100_SMS = 132


def test_every_listed_config_is_buildable():
    for params in KERNEL.configs + KERNEL.bench_configs:
        config = HopperConfig.from_params(params)
        assert config.problems() == [], params
        assert config.smem_bytes(2) <= cfg.SMEM_PER_BLOCK


def test_default_is_first_config_and_launcher_default():
    assert HopperConfig.from_params(KERNEL.configs[0]) == cfg.DEFAULT == cfg.CANDIDATES[0]
    assert (cfg.DEFAULT.BLOCK_M, cfg.DEFAULT.BLOCK_N, cfg.DEFAULT.BLOCK_K) == (128, 256, 64)
    assert cfg.DEFAULT.rows == 64 and cfg.DEFAULT.acc_regs == 128


def test_launcher_candidates_are_listed_configs():
    listed = [HopperConfig.from_params(p) for p in KERNEL.configs]
    for candidate in cfg.CANDIDATES:
        assert candidate in listed


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


@pytest.mark.parametrize(
    ("M", "N", "expected"),
    [
        (8192, 8192, cfg.CANDIDATES[0]),  # 2048 tiles of 128x256
        (2048, 4096, cfg.CANDIDATES[0]),  # 16 x 16 = 256 tiles
        (2048, 2048, cfg.CANDIDATES[1]),  # 128 tiles of 128x256 < 132 SMs; 256 of 128x128
        (1024, 2048, cfg.CANDIDATES[2]),  # 128 tiles of 128x128; 256 of 64x128
        (1024, 1024, cfg.CANDIDATES[2]),  # nothing fills 132 SMs: the smallest tile
        (1, 1, cfg.CANDIDATES[2]),
    ],
)
def test_choose_takes_the_largest_tile_that_fills_the_gpu(M, N, expected):
    assert cfg.choose(M, N, H100_SMS) == expected


def test_choose_fills_every_sm_when_it_can():
    for M, N in [(4096, 1024), (300, 20000), (8192, 8192), (2000, 1000)]:
        chosen = cfg.choose(M, N, H100_SMS)
        larger = cfg.CANDIDATES[: cfg.CANDIDATES.index(chosen)]
        assert all(cfg.tiles(M, N, c) < H100_SMS for c in larger)
        assert cfg.tiles(M, N, chosen) >= H100_SMS or chosen == cfg.CANDIDATES[-1]
