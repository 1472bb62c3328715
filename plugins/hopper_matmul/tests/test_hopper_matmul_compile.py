"""Every config x registered scheduler x dtype compiles for sm_90a (no GPU needed), and the code is
what the design needs: the widest wgmma for the tile, TMA loads and stores, the register split
between producer and consumers, no spills, shared memory within an H100 block's limit."""

from __future__ import annotations

import functools
import itertools
import re

import pytest
from tkreg_hopper_matmul import config as cfg
from tkreg_hopper_matmul.config import HopperConfig
from tkreg_hopper_matmul.plugin import KERNEL

from tkreg.aot import AotSpec, CompiledCode, check_code, compile_spec, cuobjdump_path
from tkreg.capability import arch
from tkreg.loading import build_registry
from tkreg.refs import resolve

SM90A = arch("sm_90a")
DTYPES = ("float16", "bfloat16")


@functools.cache
def schedulers() -> tuple[str, ...]:
    return tuple(s.name for s in build_registry().schedulers())


def test_the_schedulers_plugin_is_loaded():
    assert {"persistent", "grouped-1", "grouped-8"} <= set(schedulers())


def spec_for(config: dict, scheduler: str, dtype: str) -> AotSpec:
    return resolve(KERNEL.aot)(SM90A, dtype, {**config, "scheduler": build_registry().scheduler(scheduler)})


@functools.cache
def compiled(index: int, scheduler: str, dtype: str) -> tuple[CompiledCode, int]:
    """SASS/PTX of one compile and its shared memory in bytes (from triton's metadata)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    spec = spec_for(KERNEL.configs[index], scheduler, dtype)
    code = compile_spec(spec, "sm_90a")
    # The same compile again is a triton cache hit; it gives the metadata compile_spec drops.
    source = GluonASTSource(spec.fn, spec.signature, spec.constexprs, {})
    shared = triton.compile(source, target=GPUTarget("cuda", SM90A.compile_capability, 32), options=spec.options).metadata.shared
    return code, shared


# Every listed config with every registered scheduler (a new scheduler plugin is covered too).
CASES = list(itertools.product(range(len(KERNEL.configs)), schedulers(), DTYPES))


def case_id(case: tuple[int, str, str]) -> str:
    index, scheduler, dtype = case
    c = HopperConfig.from_params(KERNEL.configs[index])
    kind = "pp" if c.PINGPONG else "coop"
    return f"{c.BLOCK_M}x{c.BLOCK_N}x{c.BLOCK_K}-s{c.NUM_STAGES}-c{c.CONSUMERS}-{kind}-e{c.EPILOGUE_SPLIT}-{scheduler}-{dtype}"


needs_cuobjdump = pytest.mark.skipif(cuobjdump_path() is None, reason="cuobjdump (shipped with triton) not found")


@needs_cuobjdump
@pytest.mark.parametrize(("index", "scheduler", "dtype"), CASES, ids=[case_id(c) for c in CASES])
def test_compiles_with_the_intended_code(index, scheduler, dtype):
    config = HopperConfig.from_params(KERNEL.configs[index])
    code, shared = compiled(index, scheduler, dtype)

    # The kernel's declared targets hold (wgmma, TMA in PTX; HGMMA, UTMALDG, UTMASTG in SASS).
    check = check_code(code, KERNEL.targets[0])
    assert check.ok, (check.missing_ptx, check.missing_sass)
    # Every wgmma is the widest for the tile: 64 x BLOCK_N x 16, fp32 accumulate.
    shapes = set(re.findall(r"HGMMA\.(\d+x\d+x\d+)\.F32", code.sass))
    assert shapes == {f"64x{config.BLOCK_N}x16"}, shapes
    ptx_type = {"float16": "f16.f16", "bfloat16": "bf16.bf16"}[dtype]
    assert f"m64n{config.BLOCK_N}k16.f32.{ptx_type}" in code.ptx
    # No register spills to local memory.
    assert not re.search(r"\b(?:LDL|STL)\b", code.sass)
    assert "LOCAL:0" in code.resources and "STACK:0" in code.resources, code.resources
    # The register split the config asks for: the producer drops to PRODUCER_REGS, a worker
    # consumer (with two) rises to consumer_regs.
    regs = {int(n) for n in re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+);", code.ptx)}
    assert config.PRODUCER_REGS in regs
    if config.CONSUMERS == 2:
        assert config.consumer_regs in regs
    # Shared memory fits an H100 block, and the config check's estimate is not below it.
    assert shared <= cfg.SMEM_PER_BLOCK
    assert shared <= config.smem_bytes(2)


def test_aot_refuses_other_architectures():
    with pytest.raises(ValueError, match="built for sm_90a only"):
        resolve(KERNEL.aot)(arch("sm_100a"), "float16", dict(KERNEL.configs[0]))


def test_aot_compiles_what_the_launcher_runs():
    """The AOT spec's constexprs and block shapes are the launcher's for the same config."""
    from tkreg_hopper_matmul import build

    spec = spec_for(KERNEL.configs[0], "grouped-8", "bfloat16")
    config = HopperConfig.from_params(KERNEL.configs[0])
    impl = resolve(build_registry().scheduler("grouped-8").gluon)
    assert spec.constexprs == build.constexprs(config, impl)
    assert spec.options == build.options() == {"num_warps": 4}
    blocks = build.blocks(config)
    shapes = {"a": [blocks["BLOCK_M"], blocks["BLOCK_K"]], "b": [blocks["BLOCK_K"], blocks["BLOCK_N"]], "c": blocks["c_block"]}
    assert shapes == {"a": [64, 64], "b": [64, 256], "c": [64, 256]}
    for name, shape in shapes.items():
        dims = ", ".join(map(str, shape))
        assert spec.signature[f"{name}_desc"].startswith(f"tensordesc<bf16[{dims}]")
