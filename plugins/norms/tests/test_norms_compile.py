"""The kernels compile for sm_90a (no GPU needed) with the code their plans rely on: 16-byte
global loads (and stores, forward), no register spills, and the fused backward's row loop
pipelined with 16-byte cp.async copies, within the registers per thread the backward's program
count assumes (plans.BWD_REGISTERS_PER_THREAD) and the shared memory of every GPU the kernels
admit (their pipeline stages are sized for the H100's; sm_86 and sm_89 give a block 99 KB)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from tkreg_norms import plans, plugin

from tkreg.launch.aot import check_code
from tkreg.testing.aot_worker import compile_installed

SMALLEST_SHARED_PER_BLOCK = 99 * 1024  # sm_86 / sm_89, the smallest of min_capability 8.0's GPUs

ITEMS = [
    (kernel, config, dtype)
    for kernel in plugin.KERNELS
    for config in kernel.compile_configs or ()
    for dtype in ("bfloat16", "float32")
]


def _fused_backward(kernel: Any, config: dict[str, Any], dtype: str) -> bool:
    itemsize = 4 if dtype == "float32" else 2
    return kernel.backward and "stage" not in config and not plans.backward_plan(config["N"], itemsize).looped


@pytest.mark.parametrize(("kernel", "config", "dtype"), ITEMS,
                         ids=[f"{k.name}-{'-'.join(f'{a}={b}' for a, b in c.items())}-{d}" for k, c, d in ITEMS])
def test_compiles_for_sm_90a_with_the_code_the_plan_relies_on(kernel: Any, config: dict[str, Any], dtype: str) -> None:
    (target,) = kernel.targets
    assert target.arch == "sm_90a"
    code = compile_installed(kernel.name, target.arch, dtype, dict(config))
    check = check_code(code, target)
    assert check.ok, (check.missing_ptx, check.missing_sass)
    assert "LOCAL:0" in code.resources, code.resources  # no spills
    if _fused_backward(kernel, config, dtype):
        _check_pipelined_backward(code)


def _check_pipelined_backward(code: Any) -> None:
    """A fused backward's rows reach shared memory by 16-byte cp.async, within the plan's
    register and shared-memory budgets."""
    registers = int(re.search(r"REG:(\d+)", code.resources).group(1))  # type: ignore[union-attr]
    assert registers <= plans.BWD_REGISTERS_PER_THREAD, code.resources
    assert re.search(r"LDGSTS\.E(\.\w+)*\.128", code.sass), "the row loop is not pipelined"
    assert 0 < code.shared <= SMALLEST_SHARED_PER_BLOCK, code.shared


# Absent inputs: the launchers pass None for a weight or bias left out (and for its gradient),
# which triton compiles as a kernel of its own; the aot functions build that specialization from
# a config's "weight": False / "bias": False. The partial-sum stage runs only where a gradient of
# a vector is wanted.
ABSENT = [(True, False), (False, True), (False, False)]  # (weight, bias) present
ABSENT_ITEMS = [
    (kernel, {**config, "weight": weight, "bias": bias}, dtype)
    for kernel in plugin.KERNELS
    for config in kernel.compile_configs or ()
    for weight, bias in (ABSENT if kernel.op == "layer_norm" else [(False, False)])
    if "stage" not in config or weight or (bias and kernel.op == "layer_norm")
    for dtype in ("bfloat16", "float32")
]


@pytest.mark.parametrize(("kernel", "config", "dtype"), ABSENT_ITEMS,
                         ids=[f"{k.name}-{'-'.join(f'{a}={b}' for a, b in c.items())}-{d}" for k, c, d in ABSENT_ITEMS])
def test_the_specializations_without_weight_or_bias_compile_for_sm_90a(kernel: Any, config: dict[str, Any],
                                                                        dtype: str) -> None:
    (target,) = kernel.targets
    code = compile_installed(kernel.name, target.arch, dtype, dict(config))
    assert "LOCAL:0" in code.resources, code.resources  # no spills
    if _fused_backward(kernel, config, dtype):
        # rows are read by 16-byte cp.async; the weight, where present, by 16-byte loads
        _check_pipelined_backward(code)
        if not config["weight"]:
            return
    check = check_code(code, target)
    assert check.ok, (check.missing_ptx, check.missing_sass)
