"""The autocast items of ``pytest --tkreg`` (tkreg.testing.autocast_check): an op's declared
autocast policy against what torch.autocast does to its peer, per device type it declares one
for. The built-in ops' CPU declarations hold; a wrong one fails and names the policy the peer
follows. (tests/test_pytest_plugin.py runs such items through pytest.)"""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("torch")

import tkreg
from tkreg.testing import autocast_check
from tkreg.testing.generation import Selection, generate

OPS = ["matmul", "layer_norm", "rms_norm", "sum_row", "add"]


@pytest.mark.parametrize("op", OPS)
def test_the_built_in_declarations_agree_with_their_peers_on_the_cpu(op: str) -> None:
    assert autocast_check.check(tkreg.default_registry().op(op), "cpu", seed=3) is None


@pytest.mark.parametrize(
    ("op", "wrong", "right"),
    [("matmul", "unchanged", "lower"), ("matmul", "float32", "lower"), ("add", "float32", "unchanged"),
     ("layer_norm", "lower", "unchanged"), ("sum_row", "float32", "unchanged")],
)  # fmt: skip
def test_a_wrong_declaration_fails_and_names_the_policy_the_peer_follows(op: str, wrong: str, right: str) -> None:
    declared = replace(tkreg.default_registry().op(op), autocast={"cpu": wrong})
    problem = autocast_check.check(declared, "cpu", seed=3)
    assert problem is not None
    assert f"declares autocast {wrong!r} on cpu" in problem and f"behaves as {right!r} does there" in problem


def test_an_op_without_a_declaration_or_a_peer_has_nothing_to_check() -> None:
    op = tkreg.default_registry().op("add")
    with pytest.raises(ValueError, match="declares no autocast policy for cpu"):
        autocast_check.check(replace(op, autocast={"cuda": "unchanged"}), "cpu", seed=3)


def test_autocast_items_come_per_op_with_a_peer_and_declared_device_type() -> None:
    registry = tkreg.default_registry()
    ids = {s.id for s in generate(registry, Selection()) if s.kind == "autocast"}
    expected = {f"tkreg/{op.name}::autocast[{device_type}-bf16]" for op in registry.ops() if op.peer is not None
                for device_type in ("cpu", "cuda") if op.autocast_policy(device_type) is not None}  # fmt: skip
    assert ids == expected and "tkreg/matmul::autocast[cuda-bf16]" in ids
    # items of the op, not of a kernel: a selection by kernel has none, one by op has the op's
    assert not [s for s in generate(registry, Selection(kernels=("add_triton",))) if s.kind == "autocast"]
    assert {s.op for s in generate(registry, Selection(ops=("add",))) if s.kind == "autocast"} == {"add"}
