"""Each registered scheduler compiles inside a Gluon kernel (the trace probe) for sm_90a and sm_100a."""

from __future__ import annotations

import pytest
from tkreg_schedulers.aot import trace_aot

from tkreg.aot import compile_spec
from tkreg.loading import build_registry

NAMES = ("persistent", "grouped-1", "grouped-8")


@pytest.fixture(scope="module")
def registry():
    return build_registry()


@pytest.mark.parametrize("arch", ("sm_90a", "sm_100a"))
@pytest.mark.parametrize("name", NAMES)
def test_trace_probe_compiles(registry, name, arch):
    code = compile_spec(trace_aot(registry.scheduler(name)), arch)
    assert code.cubin, "no cubin"
    # The probe stores the tile count and the tiles through global stores.
    assert "st.global" in code.ptx
    if code.sass:  # cuobjdump available: the probe must not spill to local memory
        assert "LOCAL:0" in code.resources, code.resources
