"""add_triton compiles for its targets (sm_80, sm_90a) with 16-byte vector loads and stores."""

from __future__ import annotations

import pytest
from tkreg_elementwise.plugin import ADD_TRITON

from tkreg.launch.aot import check_code
from tkreg.testing.aot_worker import compile_installed


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("target", ADD_TRITON.targets, ids=lambda t: t.arch)
def test_compiles_with_vector_memory_access(target, dtype):
    code = compile_installed(ADD_TRITON.name, target.arch, dtype, dict(ADD_TRITON.configs[0]))
    check = check_code(code, target)
    assert check.ok, (check.missing_ptx, check.missing_sass)
    assert "LOCAL:0" in code.resources, code.resources  # no register spills
