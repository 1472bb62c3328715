"""Each registered scheduler compiles inside a Gluon kernel (the trace probe) for sm_90a and sm_100a.

The compile runs in a fresh interpreter without TRITON_INTERPRET: in one CI run (2026-11-22) all
six in-process compiles failed inside gl.cdiv on one pytest-xdist worker, after interpreted
kernels had left triton.language patched (tkreg.testing.interpreter_state, which the pytest plugin now
applies around every test, has the details).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

NAMES = ("persistent", "grouped-1", "grouped-8")

PROBE = """
import json, sys
from tkreg_schedulers.aot import trace_aot
from tkreg.launch.aot import compile_spec
from tkreg.core.loading import build_registry
code = compile_spec(trace_aot(build_registry().scheduler(sys.argv[1])), sys.argv[2])
print(json.dumps({"cubin": len(code.cubin), "ptx": code.ptx, "sass": bool(code.sass), "resources": code.resources}))
"""


def compile_probe(name: str, arch: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", PROBE, name, arch], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("arch", ("sm_90a", "sm_100a"))
@pytest.mark.parametrize("name", NAMES)
def test_trace_probe_compiles(name, arch):
    code = compile_probe(name, arch)
    assert code["cubin"] > 0, "no cubin"
    # The probe stores the tile count and the tiles through global stores.
    assert "st.global" in code["ptx"]
    if code["sass"]:  # cuobjdump available: the probe must not spill to local memory
        assert "LOCAL:0" in code["resources"], code["resources"]
