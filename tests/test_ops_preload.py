"""The first call's preload on a real GPU: a remembered signature a kernel runs, with inputs over
the old fixed bound (256 MiB) and under today's (a 16th of the free memory, at most 1 GiB), is
loaded ahead by a later process's first call, so its own first call plans nothing. The bound's
logic is tested on simulated GPUs in test_ops_tuning.py; this is the driver's own free memory."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import new_process

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
ROWS, WIDTH = 8192, 16384  # a float32 layer_norm input of 512 MiB

_SETUP = f"""
import json, warnings
import torch, tkreg
from tkreg.ops import remembered

warnings.simplefilter("ignore")
ROWS, WIDTH = {ROWS}, {WIDTH}


def inputs():
    big = (torch.randn(ROWS, WIDTH, device="cuda"), torch.randn(WIDTH, device="cuda"), torch.randn(WIDTH, device="cuda"))
    return big, (torch.randn(37, 915, device="cuda"),)


def runs_a_kernel(op, args):
    dispatcher = tkreg.ops._installed["dispatchers"][op]
    return bool(dispatcher.plan(args, dispatcher.params.values({{}}), tune=False).launchers)
"""

_TUNE = _SETUP + """
big, small = inputs()
tkreg.ops.layer_norm(*big)  # times its bucket on this GPU, and remembers the signature
tkreg.ops.sum_row(*small)
torch.cuda.synchronize()
remembered.flush()
print(json.dumps({"big": runs_a_kernel("layer_norm", big), "small": runs_a_kernel("sum_row", small)}))
"""

_LATER = _SETUP + """
from tkreg.ops import dispatch, warming

big, small = inputs()
planned = []
plan = dispatch.Dispatcher.plan
dispatch.Dispatcher.plan = lambda self, *a, **k: planned.append(self.op.name) or plan(self, *a, **k)
tkreg.ops.sum_row(*small)  # the process's first call on the GPU: it preloads
preload = dict(warming.preloads.get(0) or {})
planned.clear()
got = tkreg.ops.layer_norm(*big)
want = torch.nn.functional.layer_norm(big[0].double(), (WIDTH,), big[1].double(), big[2].double())
print(json.dumps({"preload": preload, "planned": planned, "bound": warming.preload_max_bytes(0),
                  "error": (got.double() - want).abs().max().item()}))
"""


def _process(code: str, cache: Path) -> Any:
    """Runs ``code`` in a new process over the tuning cache ``cache``; what its last line says."""
    env = {**os.environ, "TKREG_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT), "TKREG_PRELOAD_S": "10"}
    env.pop("TRITON_INTERPRET", None)
    return new_process(["-c", code], env, cwd=ROOT)[1]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="preloads on a CUDA GPU; this machine has none")
def test_a_later_process_preloads_a_kernel_signature_over_256_mib_within_the_free_memory_bound(tmp_path: Path) -> None:
    free, _ = torch.cuda.mem_get_info(0)
    needed = (ROWS * WIDTH + 2 * WIDTH) * 4
    if free // 16 < needed or free < 8 * needed:
        pytest.skip(f"the GPU has {free / 2**30:.1f} GiB free: under 16 times a 512 MiB input, it preloads none that large")
    ran = _process(_TUNE, tmp_path)
    if not (ran["big"] and ran["small"]):
        pytest.skip(f"the peer won a bucket on this GPU ({ran}): nothing a kernel runs for the preload to load")
    later = _process(_LATER, tmp_path)
    assert later["bound"] >= needed > 256 << 20
    assert later["preload"]["signatures"] == 2 and later["preload"]["left"] == 0, later
    assert later["planned"] == []  # its first call found the plan the preload made
    assert later["error"] < 1e-4
