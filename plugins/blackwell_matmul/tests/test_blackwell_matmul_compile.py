"""matmul_blackwell_ws on a CPU machine: every buffer count x scheduler x dtype compiles for sm_100a
with tcgen05 and TMA in its code and fits shared and tensor memory, with B in either layout (the MMA's
instruction descriptor says which); the epilogue hands the accumulator back only after all its
warps have read it."""

from __future__ import annotations

import re

import pytest
from tkreg_blackwell_matmul.launcher import SHARED_MEMORY_BYTES, TMEM_COLUMNS

from tkreg.core.capability import arch
from tkreg.core.loading import build_registry
from tkreg.core.refs import resolve
from tkreg.launch.aot import compile_and_check

DTYPES = ("float16", "bfloat16")


@pytest.fixture(scope="module")
def registry():
    registry = build_registry(env={"TKREG_PLUGINS": "matmul,schedulers,blackwell_matmul"})
    assert registry.problems == []
    return registry


@pytest.fixture(scope="module")
def kernel(registry):
    return registry.kernel("matmul_blackwell_ws")


def test_configs_cover_buffers_and_schedulers(registry, kernel):
    configs = registry.configs(kernel)
    assert {(c["num_buffers"], c["scheduler"]) for c in configs} == {
        (n, s) for n in (2, 3, 4) for s in ("persistent", "grouped-1", "grouped-8")
    }
    assert kernel.default_config["num_buffers"] == 4


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("buffers", (2, 3, 4))
@pytest.mark.parametrize("scheduler", ("persistent", "grouped-1", "grouped-8"))
def test_compiles_for_sm100a(registry, kernel, scheduler, buffers, dtype):
    config = next(c for c in registry.configs(kernel) if c["num_buffers"] == buffers and c["scheduler"] == scheduler)
    check, code = compile_and_check(kernel, kernel.targets[0], dtype, config)
    assert check.ok, (check.missing_ptx, check.missing_sass)
    if code.sass:
        assert "LOCAL:0" in code.resources, code.resources
        assert not re.search(r"\b(LDL|STL)\b", code.sass), "register spills to local memory"


# PTX ISA, tcgen05 instruction descriptor for .kind::f16: bit 16 transposes B (B is N-major).
IDESC_TRANSPOSE_B = 1 << 16


def mma_instruction_descriptor(ptx: str) -> int:
    """The constant instruction descriptor of the kernel's tcgen05.mma."""
    mma = re.search(r"tcgen05\.mma\.cta_group::1\.kind::f16 \[[^]]*\], %rd\d+, %rd\d+, (%r\d+)", ptx)
    assert mma, "no tcgen05.mma in the PTX"
    value = re.search(rf"mov\.b32\s+{re.escape(mma.group(1))}, (\d+);", ptx)
    assert value, f"the descriptor {mma.group(1)} is not a constant"
    return int(value.group(1))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_b_is_read_in_its_stored_layout(kernel, dtype, layout):
    """A row-major (K, N) B is N-major: the MMA transposes it. An (N, K) weight is K-major: it does not.
    Both load B through TMA as stored (BLOCK_K x BLOCK_N or BLOCK_N x BLOCK_K blocks)."""
    config = {**kernel.default_config, "scheduler": "grouped-8", "b_layout": layout}
    check, code = compile_and_check(kernel, kernel.targets[0], dtype, config)
    assert check.ok, (check.missing_ptx, check.missing_sass)
    assert bool(mma_instruction_descriptor(code.ptx) & IDESC_TRANSPOSE_B) == (layout == "kn")
    spec = resolve(kernel.aot)(arch("sm_100a"), dtype, config)
    b_block = "256, 64" if layout == "nk" else "64, 256"
    assert spec.signature["b_desc"].startswith(f"tensordesc<{'bf16' if dtype == 'bfloat16' else 'fp16'}[{b_block}]")


@pytest.mark.parametrize("dtype", DTYPES)
def test_fits_shared_and_tensor_memory(kernel, dtype):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from tkreg.core import capability as caps
    from tkreg.core.refs import resolve

    for config in kernel.configs:
        spec = resolve(kernel.aot)(caps.arch("sm_100a"), dtype, {**config, "scheduler": "grouped-8"})
        compiled = triton.compile(
            GluonASTSource(spec.fn, spec.signature, spec.constexprs), target=GPUTarget("cuda", 100, 32), options=spec.options
        )
        assert compiled.metadata.shared <= SHARED_MEMORY_BYTES, (config, compiled.metadata.shared)
        assert compiled.metadata.tmem_size <= TMEM_COLUMNS, (config, compiled.metadata.tmem_size)


def test_accumulator_released_after_all_warps_read_it(kernel):
    _, code = compile_and_check(kernel, kernel.targets[0], "float16", {**kernel.default_config, "scheduler": "persistent"})
    lines = [line.strip() for line in code.ptx.splitlines()]
    last_ld_wait = max(i for i, line in enumerate(lines) if line.startswith("tcgen05.wait::ld"))
    arrive = next(i for i in range(last_ld_wait, len(lines)) if "mbarrier.arrive" in lines[i])
    assert any(line.startswith("bar.sync") for line in lines[last_ld_wait:arrive]), lines[last_ld_wait : arrive + 1]
