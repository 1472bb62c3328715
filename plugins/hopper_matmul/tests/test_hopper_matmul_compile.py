"""Every registered config compiles for sm_90a (no GPU needed), and the code is what the design
needs: the widest wgmma for the tile, B read in the layout it is stored in (wgmma's transpose bit set
for a row-major (K, N) B, clear for an (N, K) weight), TMA loads and stores (3-D into the split-K
workspace), the register split between producer and consumers, no spills, shared memory within an
H100 block's limit. The bias epilogue: a kernel without a bias has no bias code; with one, each
consumer thread loads just the bias columns it holds (a vector load per adjacent pair inside N, a
masked one per column in the last column of tiles), adds them to the fp32 accumulator before the
one rounding, without spills and without touching the main loop. The generated compile items check
every config in both layouts against the kernel's declared patterns; these tests check the rest,
each config once (layout, scheduler and dtype taken in turn)."""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest
from tkreg_hopper_matmul import config as cfg
from tkreg_hopper_matmul.config import HopperConfig
from tkreg_hopper_matmul.plugin import KERNEL

from tkreg.core.capability import arch
from tkreg.core.loading import build_registry
from tkreg.core.refs import resolve
from tkreg.launch.aot import AotSpec, CompiledCode, check_code, compile_spec, cuobjdump_path

SM90A = arch("sm_90a")
DTYPES = ("float16", "bfloat16")
LAYOUTS = ("kn", "nk")


@functools.cache
def registry() -> Any:
    """Every installed plugin, whatever TKREG_PLUGINS selects: the kernel needs the schedulers'."""
    return build_registry(env={})


def schedulers() -> tuple[str, ...]:
    return tuple(s.name for s in registry().schedulers())


def test_the_schedulers_plugin_is_loaded():
    assert {"persistent", "grouped-1", "grouped-8"} <= set(schedulers())


def spec_for(config: dict, scheduler: str, dtype: str, layout: str, bias: bool = False) -> AotSpec:
    config = {**config, "scheduler": registry().scheduler(scheduler), "b_layout": layout}
    return resolve(KERNEL.aot)(SM90A, dtype, {**config, "bias": True} if bias else config)


@functools.cache
def compiled(index: int, scheduler: str, dtype: str, layout: str, bias: bool = False) -> CompiledCode:
    return compile_spec(spec_for(KERNEL.configs[index], scheduler, dtype, layout, bias), "sm_90a")


def in_turn(index: int) -> tuple[int, str, str, str]:
    return index, schedulers()[index % len(schedulers())], DTYPES[index % 2], LAYOUTS[(index // 2) % 2]


CASES = [in_turn(i) for i in range(len(KERNEL.configs))]


def case_id(case: tuple[int, str, str, str]) -> str:
    index, scheduler, dtype, layout = case
    c = HopperConfig.from_params(KERNEL.configs[index])
    kind = "pp" if c.PINGPONG else "coop"
    split = f"-k{c.SPLIT_K}" if c.SPLIT_K > 1 else ""
    tile = f"{c.BLOCK_M}x{c.BLOCK_N}x{c.BLOCK_K}-s{c.NUM_STAGES}-c{c.CONSUMERS}-{kind}-e{c.EPILOGUE_SPLIT}{split}"
    return f"{tile}-{scheduler}-{dtype}-{layout}"


needs_cuobjdump = pytest.mark.skipif(cuobjdump_path() is None, reason="cuobjdump (shipped with triton) not found")


def hgmma_lines(code: CompiledCode) -> list[str]:
    return [line for line in code.sass.splitlines() if "HGMMA." in line]


def count(code: CompiledCode, opcode: str) -> int:
    """SASS instructions whose opcode (with its modifiers) matches ``opcode`` exactly."""
    return len(re.findall(rf"(?<![.\w]){opcode}(?![.\w])", code.sass))


def wgmma_sequence(code: CompiledCode) -> list[str]:
    """The order of wgmma issues, fences and waits (opcodes with their modifiers and operands
    other than registers), which a register-starved epilogue would change (ptxas serializes the
    wgmmas it cannot keep in flight)."""
    ops = re.findall(r"\b((?:HGMMA|WARPGROUP)\.[^;]*);", code.sass)
    return [re.sub(r"\bU?R\d+\b", "R", op) for op in ops]


@needs_cuobjdump
@pytest.mark.parametrize(("index", "scheduler", "dtype", "layout"), CASES, ids=[case_id(c) for c in CASES])
def test_compiles_with_the_intended_code(index, scheduler, dtype, layout):
    config = HopperConfig.from_params(KERNEL.configs[index])
    code = compiled(index, scheduler, dtype, layout)

    # The kernel's declared targets hold (wgmma, TMA in PTX; HGMMA, UTMALDG, UTMASTG in SASS).
    check = check_code(code, KERNEL.targets[0])
    assert check.ok, (check.missing_ptx, check.missing_sass)
    # Every wgmma is the widest for the tile: 64 x BLOCK_N x 16, fp32 accumulate.
    shapes = set(re.findall(r"HGMMA\.(\d+x\d+x\d+)\.F32", code.sass))
    assert shapes == {f"64x{config.BLOCK_N}x16"}, shapes
    ptx_type = {"float16": "f16.f16", "bfloat16": "bf16.bf16"}[dtype]
    assert f"m64n{config.BLOCK_N}k16.f32.{ptx_type}" in code.ptx
    # B as stored: a row-major (K, N) B is N-major, which wgmma reads with its transpose bit; an
    # (N, K) weight is K-major, read without it.
    transposed = {".tnspB" in line for line in hgmma_lines(code)}
    assert transposed == {layout == "kn"}, hgmma_lines(code)[:2]
    # TMA stores: 2-D into C, or 3-D into the (SPLIT_K, M, N) fp32 workspace.
    stores = set(re.findall(r"UTMASTG\.(\dD)", code.sass))
    assert stores == ({"3D"} if config.SPLIT_K > 1 else {"2D"}), stores
    # No register spills to local memory.
    assert not re.search(r"\b(?:LDL|STL)\b", code.sass)
    assert "LOCAL:0" in code.resources and "STACK:0" in code.resources, code.resources
    # No bias: no bias code (nothing is read but through TMA, nothing added to the accumulator).
    assert not re.search(r"\bLDG\b", code.sass) and "ld.global" not in code.ptx
    assert count(code, r"FADD") == 0
    # The register split the config asks for: the producer drops to PRODUCER_REGS, a worker
    # consumer (with two) rises to consumer_regs.
    regs = {int(n) for n in re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+);", code.ptx)}
    assert config.PRODUCER_REGS in regs
    if config.CONSUMERS == 2:
        assert config.consumer_regs in regs
    # Shared memory fits an H100 block, and the config check's estimate is not below it.
    assert code.shared <= cfg.SMEM_PER_BLOCK
    assert code.shared <= config.smem_bytes(2)


# The bias epilogue of every config without split-K (split-K gives its bias to the reduce kernel).
BIAS_CASES = [c for c in CASES if HopperConfig.from_params(KERNEL.configs[c[0]]).SPLIT_K == 1]


@needs_cuobjdump
@pytest.mark.parametrize(("index", "scheduler", "dtype", "layout"), BIAS_CASES, ids=[case_id(c) for c in BIAS_CASES])
def test_the_bias_epilogue_adds_each_threads_columns_in_fp32(index, scheduler, dtype, layout):
    config = HopperConfig.from_params(KERNEL.configs[index])
    code = compiled(index, scheduler, dtype, layout, bias=True)
    plain = compiled(index, scheduler, dtype, layout)

    check = check_code(code, KERNEL.targets[0])
    assert check.ok, (check.missing_ptx, check.missing_sass)
    # No spills: the bias's registers fit beside the accumulator within the consumers' share.
    assert not re.search(r"\b(?:LDL|STL)\b", code.sass)
    assert "LOCAL:0" in code.resources and "STACK:0" in code.resources, code.resources
    # Each consumer thread holds BLOCK_N / 4 columns of its accumulator (two of every eight) and
    # loads exactly those: as BLOCK_N / 8 four-byte loads of adjacent pairs for a tile inside N,
    # as BLOCK_N / 4 masked two-byte loads for the last column of tiles. (Each consumer's code
    # appears once in the SASS.)
    assert count(code, r"LDG\.E") == config.CONSUMERS * config.BLOCK_N // 8
    assert count(code, r"LDG\.E\.U16") == config.CONSUMERS * config.BLOCK_N // 4
    assert not re.search(r"\bLDG\.E\.(?!U16\b)", code.sass), "a bias load other than the 4-byte and 2-byte ones"
    # One fp32 add per accumulator element, then as many roundings to C's dtype as without a bias:
    # the bias is added before the one rounding, not after it.
    assert count(code, r"FADD") == config.CONSUMERS * config.acc_regs
    assert count(code, r"F2FP\.[A-Z0-9]+\.F32\.PACK_AB") == count(plain, r"F2FP\.[A-Z0-9]+\.F32\.PACK_AB") > 0
    # The main loop is the same: wgmma issues, fences and waits in the same order.
    assert wgmma_sequence(code) == wgmma_sequence(plain) and wgmma_sequence(plain)
    regs = re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+);", code.ptx)
    assert regs == re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+);", plain.ptx)
    assert code.shared == plain.shared


@needs_cuobjdump
@pytest.mark.parametrize("scheduler", ["persistent", "grouped-1", "grouped-8"])
def test_default_compiles_with_every_scheduler_for_a_weight(scheduler):
    code = compiled(0, scheduler, "bfloat16", "nk")
    assert check_code(code, KERNEL.targets[0]).ok
    assert hgmma_lines(code) and not any(".tnspB" in line for line in hgmma_lines(code))


def test_aot_refuses_other_architectures_and_layouts():
    with pytest.raises(ValueError, match="built for sm_90a only"):
        resolve(KERNEL.aot)(arch("sm_100a"), "float16", dict(KERNEL.configs[0]))
    with pytest.raises(ValueError, match="b_layout='mn'"):
        resolve(KERNEL.aot)(SM90A, "float16", {**KERNEL.configs[0], "b_layout": "mn"})


@pytest.mark.parametrize("layout", LAYOUTS)
def test_aot_compiles_what_the_launcher_runs(layout):
    """The AOT spec's constexprs and block shapes are the launcher's plan for the same config."""
    from tkreg_hopper_matmul.launch import launch_plan

    spec = spec_for(KERNEL.configs[0], "grouped-8", "bfloat16", layout)
    config = HopperConfig.from_params(KERNEL.configs[0])
    plan = launch_plan(4096, 4096, 4096, layout, 132, config, build_registry().scheduler("grouped-8"))
    # Without a bias the launcher passes None, a constexpr to triton.
    assert spec.constexprs == {"bias_ptr": None, **plan.constexprs}
    assert spec.signature["bias_ptr"] == "constexpr" and spec.aligned == ()
    assert spec.options == {"num_warps": 4}
    b = [256, 64] if layout == "nk" else [64, 256]
    assert plan.blocks == {"a": [64, 64], "b": b, "c": [64, 256]}
    for name, shape in plan.blocks.items():
        dims = ", ".join(map(str, shape))
        assert spec.signature[f"{name}_desc"].startswith(f"tensordesc<bf16[{dims}]")


@pytest.mark.parametrize(("dtype", "pointer"), [("float16", "*fp16"), ("bfloat16", "*bf16")])
def test_aot_with_a_bias_compiles_a_pointer_of_the_operands_dtype(dtype, pointer):
    plain = spec_for(KERNEL.configs[0], "grouped-8", dtype, "nk")
    spec = spec_for(KERNEL.configs[0], "grouped-8", dtype, "nk", bias=True)
    # 16-byte aligned, as torch allocates it (the JIT specializes it so too).
    assert spec.signature["bias_ptr"] == pointer and spec.aligned == ("bias_ptr",)
    assert "bias_ptr" not in spec.constexprs
    assert {k: v for k, v in plain.constexprs.items() if k != "bias_ptr"} == spec.constexprs
    with pytest.raises(ValueError, match="bias='yes'; must be True or False"):
        resolve(KERNEL.aot)(SM90A, dtype, {**KERNEL.configs[0], "bias": "yes"})


def test_aot_split_k_describes_an_fp32_workspace():
    split = next(c for c in KERNEL.configs if c.get("SPLIT_K", 1) > 1)
    spec = spec_for(split, "persistent", "float16", "nk")
    assert spec.signature["c_desc"].startswith("tensordesc<fp32[1, ")
    assert spec.signature["a_desc"].startswith("tensordesc<fp16[")


def test_aot_split_k_with_a_bias_is_the_kernel_without_one():
    """Split-K's bias goes to the reduce kernel: the matmul kernel the launcher runs takes None."""
    split = next(c for c in KERNEL.configs if c.get("SPLIT_K", 1) > 1)
    plain = spec_for(split, "persistent", "float16", "kn")
    spec = spec_for(split, "persistent", "float16", "kn", bias=True)
    assert (spec.signature, spec.constexprs, spec.aligned) == (plain.signature, plain.constexprs, plain.aligned)
    assert spec.constexprs["bias_ptr"] is None


def test_compile_items_cover_the_bias_epilogue_in_both_layouts():
    """Every config without split-K is a bias compile item in each layout; the rest are unchanged."""
    with_bias = [c for c in KERNEL.compile_configs if c.get("bias")]
    unsplit = [c for c in KERNEL.configs if c.get("SPLIT_K", 1) == 1]
    for layout in LAYOUTS:
        listed = [c for c in with_bias if c["b_layout"] == layout]
        assert [{k: v for k, v in c.items() if k not in ("b_layout", "scheduler", "bias")} for c in listed] == unsplit
    assert not any(c.get("SPLIT_K", 1) > 1 for c in with_bias)
    assert len(KERNEL.compile_configs) - len(with_bias) == 2 * (len(KERNEL.configs) + 2)
