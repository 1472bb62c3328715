"""matmul_triton on the CPU: correct under the interpreter on every default case (both dtypes), and
compiles for its targets with the instructions it claims."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from tkreg_matmul.configs import INTERPRETER, LARGE, MEDIUM, SMALL, pick_config

from tkreg.aot import check_code
from tkreg.aot_worker import compile_installed
from tkreg.loading import build_registry

# The interpreter must be switched on before the kernel module is imported, so the run happens in a
# fresh process; it prints one line per failing check and "checked N" at the end.
INTERPRETER_RUN = """
import sys
from tkreg.harness import run_check
from tkreg.loading import build_registry
reg = build_registry(env={"TKREG_PLUGINS": "matmul"})
kernel = reg.kernel("matmul_triton")
config = dict(kernel.configs[int(sys.argv[1])])
count = 0
for case in reg.op("matmul").cases_in("default"):
    for dtype in ("float16", "bfloat16"):
        result = run_check(reg, kernel, case, dtype, config, seed=7, device="cpu")
        count += 1
        if not result.comparison.ok:
            print(result.comparison.report(result.context))
print("checked", count)
"""


@pytest.fixture(scope="module")
def kernel():
    return build_registry(env={"TKREG_PLUGINS": "matmul"}).kernel("matmul_triton")


def test_interpreter_default_cases_small_tiles(kernel):
    index = next(i for i, c in enumerate(kernel.configs) if c == SMALL)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run(
        [sys.executable, "-c", INTERPRETER_RUN, str(index)], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.strip().splitlines()
    cases = build_registry(env={"TKREG_PLUGINS": "matmul"}).op("matmul").cases_in("default")
    assert lines[-1] == f"checked {2 * len(cases)}", run.stdout[-3000:]
    assert len(lines) == 1, run.stdout[-3000:]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_compiles_for_targets(kernel, arch, dtype):
    target = next(t for t in kernel.targets if t.arch == arch)
    code = compile_installed(kernel.name, arch, dtype, dict(kernel.configs[0]))
    check = check_code(code, target)
    assert check.ok, (check.missing_ptx, check.missing_sass)
    if code.sass:
        assert "LOCAL:0" in code.resources, code.resources


def test_pick_config_interpreter_and_configs():
    assert pick_config(100, 100, 100, device=type("D", (), {"type": "cpu"})()) == INTERPRETER
    assert LARGE in [dict(c) for c in build_registry(env={"TKREG_PLUGINS": "matmul"}).kernel("matmul_triton").configs]


class _Props:
    def __init__(self, smem: int, sms: int) -> None:
        self.shared_memory_per_block_optin, self.multi_processor_count = smem, sms


class _Cuda:
    type = "cuda"
    index = 0


@pytest.mark.parametrize(
    ("smem", "sms", "shape", "expected"),
    [
        (232448, 132, (8192, 8192), LARGE),  # H100: large tiles when there are enough of them
        (232448, 132, (2048, 2048), MEDIUM),  # 128 LARGE tiles < 132 SMs; 256 MEDIUM tiles
        (232448, 132, (1024, 1024), SMALL),
        (101376, 84, (8192, 8192), SMALL),  # sm_86: 99 KiB per block fits neither larger config
        (166912, 108, (8192, 8192), LARGE),  # A100: 163 KiB holds the 144 KiB of LARGE
    ],
)
def test_pick_config_on_gpus(monkeypatch, smem, sms, shape, expected):
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: _Props(smem, sms))
    assert pick_config(*shape, 4096, _Cuda()) == expected
