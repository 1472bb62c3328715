"""add_tma compiles for sm_90a and sm_100a with TMA loads and stores, fits shared memory and
does not spill; every config the generated items cover compiles for Hopper."""

from __future__ import annotations

import pytest
from tkreg_elementwise.testing import compile_tma_add
from tkreg_tma_elementwise.add_tma import KERNEL
from tkreg_tma_elementwise.plugin import ADD_TMA


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("target", ADD_TMA.targets, ids=lambda t: t.arch)
def test_default_config_compiles_for_targets(target, dtype):
    compile_tma_add(ADD_TMA, KERNEL, target, dtype, ADD_TMA.configs[0], "num_buffers")


@pytest.mark.parametrize("config", ADD_TMA.configs[1:], ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_seed_configs_compile_for_hopper(config):
    compile_tma_add(ADD_TMA, KERNEL, ADD_TMA.targets[0], "float16", config, "num_buffers")
