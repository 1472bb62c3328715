"""add_warp_specialized compiles for sm_90a and sm_100a: TMA loads and stores, 24-register 1-warp
workers next to the compute partition, no spills, within shared memory; the seed's test
configurations compile for Hopper."""

from __future__ import annotations

import re

import pytest
from tkreg_elementwise.testing import compile_tma_add
from tkreg_warp_specialized_add.add_ws import KERNEL, WORKER_REGS
from tkreg_warp_specialized_add.plugin import ADD_WARP_SPECIALIZED as SPEC


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("target", SPEC.targets, ids=lambda t: t.arch)
def test_default_config_compiles_for_targets(target, dtype):
    code = compile_tma_add(SPEC, KERNEL, target, dtype, SPEC.configs[0], "num_load_buffers")
    # Both workers shrink to their budget; the compute partition grows past it.
    assert len(re.findall(rf"setmaxnreg\.dec\.sync\.aligned\.u32\s+{WORKER_REGS};", code.ptx)) >= 1
    grown = [int(n) for n in re.findall(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+(\d+);", code.ptx)]
    assert max(grown) > WORKER_REGS


@pytest.mark.parametrize("config", SPEC.configs[1:], ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_seed_configs_compile_for_hopper(config):
    compile_tma_add(SPEC, KERNEL, SPEC.targets[0], "float16", config, "num_load_buffers")
