"""add_tma refuses bad inputs and configs before touching CUDA (so on this CPU machine too), and
lookup with inputs TMA cannot take drops it, saying why, for the portable kernel."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from tkreg_elementwise.testing import bad_calls, explain_add, heavy_imports
from tkreg_tma_elementwise.add_tma import KERNEL, add_tma

from tkreg import InputError

PLUGINS = "elementwise,tma_elementwise"


def test_plugin_module_imports_neither_torch_nor_triton():
    assert heavy_imports("tkreg_tma_elementwise.plugin") == []


@pytest.mark.parametrize("call", bad_calls(tma=True), ids=lambda c: c.id)
def test_bad_inputs_raise_input_error_before_any_launch(call):
    with pytest.raises(InputError, match=re.escape(call.expect)):
        add_tma(*call.args, **call.kwargs)


@pytest.mark.parametrize(
    ("params", "expect"),
    [
        ({"YBLOCK": 512}, "YBLOCK must be a power of two <= 256"),
        ({"XBLOCK": 48}, "XBLOCK must be a power of two"),
        ({"YBLOCK": 2}, "a TMA box row needs >= 16"),
        ({"XBLOCK": 128, "YBLOCK": 128, "num_buffers": 4}, "bytes of shared memory; a block has 232448"),
        ({"num_buffers": 0}, "num_buffers must be an integer >= 1"),
        ({"num_warps": 3}, "num_warps must be one of"),
        ({"BLOCK": 64}, "unknown parameters ['BLOCK']"),
        ({"tiles_per_program": 0}, "tiles_per_program must be an integer >= 1"),
        ({"swizzle": 96}, "swizzle must be one of (0, 32, 64, 128)"),
        ({"XBLOCK": 16, "YBLOCK": 16, "swizzle": 128}, "swizzle=128 needs tile rows of at least that many bytes"),
    ],
)
def test_bad_configs_raise_value_error(params, expect):
    with pytest.raises(ValueError, match=re.escape(expect)):
        KERNEL.resolve("float32", params)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_default_is_the_measured_choice(dtype):
    # notes/tuning.md, "add": unswizzled 16 KB tiles of 256 columns, runs of 3 tiles per program
    config = KERNEL.resolve(dtype, {})
    assert config["YBLOCK"] == 256 and config["swizzle"] == 0 and config["tiles_per_program"] == 3
    assert config["XBLOCK"] * config["YBLOCK"] * getattr(torch, dtype).itemsize == 16 * 1024
    assert (config["num_buffers"], config["num_store_buffers"]) == (3, 2)


def test_slots_are_capped_at_the_tiles_a_program_handles():
    config = KERNEL.resolve("float32", {"tiles_per_program": 1, "num_buffers": 4, "num_store_buffers": 2})
    assert (config["num_buffers"], config["num_store_buffers"]) == (1, 1)


def test_launch_plans_are_cached_per_dtype_and_params():
    assert KERNEL.plan("float32", {"XBLOCK": 8}) is KERNEL.plan("float32", {"XBLOCK": 8})
    assert KERNEL.plan("float32", {"XBLOCK": 8}) is not KERNEL.plan("bfloat16", {"XBLOCK": 8})
    with pytest.raises(ValueError, match="unknown parameters"):
        KERNEL.plan("float32", {"BLOCK": [64]})  # unhashable and unknown: still explained


def test_grid_has_one_program_per_run_of_tiles():
    from tkreg_elementwise.tma_launch import grid

    # 1000 x 2000 in 16 x 256 tiles: 63 x 8 = 504 tiles; runs of 4 -> 126 programs, of 5 -> 101
    assert grid(1000, 2000, {"XBLOCK": 16, "YBLOCK": 256, "tiles_per_program": 4}) == (126,)
    assert grid(1000, 2000, {"XBLOCK": 16, "YBLOCK": 256, "tiles_per_program": 5}) == (101,)


def test_lookup_picks_add_triton_for_rows_tma_cannot_address():
    verdicts = explain_add(PLUGINS, torch.randn(33, 33), torch.randn(33, 33))
    assert [v.kernel.name for v in verdicts if v.runs] == ["add_triton"]
    rejected = next(v for v in verdicts if v.kernel.name == "add_tma")
    assert any("stride of dim 0 is 33 elements (132 bytes), not a multiple of 16 bytes" in r for r in rejected.reasons)


def test_lookup_puts_add_tma_first_for_tma_legal_inputs():
    padded = torch.randn(33, 40)[:, :33]
    assert [v.kernel.name for v in explain_add(PLUGINS, padded, padded) if v.runs] == ["add_tma", "add_triton"]


def test_small_inputs_get_one_tile_per_program_unless_asked(monkeypatch):
    """The launcher's run-length choice per input shape (the SM count is an H100's)."""
    from tkreg_elementwise import tma_launch

    monkeypatch.setattr(tma_launch, "sm_count", lambda index: 132)
    monkeypatch.setattr(tma_launch, "_SHAPE_PLANS", {})

    def run(m, n, **params):
        plan, programs = KERNEL.shape_plan(torch.float32, m, n, 0, params)
        return programs, plan.config["tiles_per_program"], plan.options["num_buffers"]

    # 1024^2 fp32: 256 tiles, 86 runs of 3 < 4 x 132 -> one tile per program, one slot
    assert run(1024, 1024) == ((256,), 1, 1)
    # 8192^2: 16384 tiles, 5462 runs of 3 -> the default
    assert run(8192, 8192) == ((5462,), 3, 3)
    # asked for explicitly: kept
    assert run(1024, 1024, tiles_per_program=3) == ((86,), 3, 3)
    assert KERNEL.shape_plan(torch.float32, 1024, 1024, 0, {}) is KERNEL.shape_plan(torch.float32, 1024, 1024, 0, {})


class RecordingLauncher:
    """Stands in for tkreg.launch.fastlaunch.Launcher in tma_launch: records binds and launches."""

    binds: list[tuple[Any, ...]] = []
    launched: list[tuple[Any, ...]] = []

    def __init__(self, fn, **fixed):
        self.fixed = fixed

    def bind(self, *args):
        RecordingLauncher.binds.append(args)
        return lambda grid: RecordingLauncher.launched.append((grid, args, self.fixed))


@pytest.fixture
def recorded(monkeypatch):
    from tkreg_elementwise import tma_launch

    monkeypatch.setattr(tma_launch, "Launcher", RecordingLauncher)
    for cache in ("_PLANS", "_SHAPE_PLANS", "_BOUND"):
        monkeypatch.setattr(tma_launch, cache, {})
    monkeypatch.setattr(tma_launch, "sm_count", lambda index: 132)
    RecordingLauncher.binds, RecordingLauncher.launched = [], []
    return RecordingLauncher


def test_launch_hands_the_plan_and_descriptors_to_its_launcher(recorded):
    """What launch() launches (no GPU: CPU tensors posing as CUDA tensors pass the full checks,
    which read only metadata)."""
    from tkreg_elementwise.testing import PosingAsCuda

    from tkreg.launch.fastlaunch import FrozenDescriptor

    a, b, out = (PosingAsCuda(torch.empty(100, 64)) for _ in range(3))
    assert add_tma(a, b, out, num_warps=2) is out
    add_tma(a, b, out, num_warps=2)
    (grid, args, fixed), again = recorded.launched
    assert grid == (7,) and args[3:] == (100, 64, 1)  # 7 tiles of 16 x 256, one per program
    assert [d.base.data_ptr() for d in args[:3]] == [a.data_ptr(), b.data_ptr(), out.data_ptr()]
    assert all(isinstance(d, FrozenDescriptor) and d.block_shape == (16, 256) for d in args[:3])
    assert all(x is y for x, y in zip(again[1][:3], args[:3]))  # the descriptors are cached
    assert fixed["num_warps"] == 2 and fixed["XBLOCK"] == 16 and fixed["num_buffers"] == 1


def test_a_repeated_call_repeats_the_prepared_launch(recorded, monkeypatch):
    """Plain tensors (the fast checks pointed at the CPU) that match an earlier call in every
    checked property reuse its bound launch; any difference prepares another."""
    from tkreg.launch import inputs

    monkeypatch.setattr(inputs, "FAST_DEVICE_TYPE", "cpu")
    a, b, out = torch.zeros(64, 64), torch.zeros(64, 64), torch.zeros(64, 64)
    for _ in range(3):
        add_tma(a, b, out)
    assert len(recorded.binds) == 1 and len(recorded.launched) == 3
    add_tma(a, b, torch.zeros(64, 64))  # another output address
    add_tma(a, b, out, num_warps=8)  # other parameters
    add_tma(a[:32], b[:32], out[:32])  # another shape
    assert len(recorded.binds) == 4
    with pytest.raises(InputError, match="a: base address is not 16-byte aligned"):
        add_tma(torch.zeros(64 * 64 + 1)[1:].view(64, 64), b, out)
