"""The host suite's summary: tkreg.ops against torch's own allocating call, the torch operator's
cost beyond tkreg.ops, and tkreg.ops against torch on inputs that want a gradient, from the paths
that play those roles."""

from __future__ import annotations

import pytest

from tkreg.bench import host
from tkreg.bench.calls import HostTime


def test_the_summary_holds_each_goal_from_the_paths_of_its_role() -> None:
    figures = {host.OPS: HostTime(10.0, 9.5), host.TORCH: HostTime(8.0, 8.0), host.OPERATOR: HostTime(13.5, 13.0)}
    assert host._summary(figures) == {"ops_over_torch": pytest.approx(1.25), "operator_extra_us": pytest.approx(3.5)}
    assert host._summary({host.OPS: HostTime(10.0, 9.5)}) == {}  # nothing to hold it against
    graded = {host.OPS_GRAD: HostTime(15.0, 14.0), host.TORCH_GRAD: HostTime(12.0, 11.0)}
    assert host._summary(graded) == {"grad_ops_over_torch": pytest.approx(1.25)}
    mixed = {host.OPS_AMP: HostTime(9.0, 8.0), host.TORCH_AMP: HostTime(10.0, 9.0)}
    assert host._summary(mixed) == {"amp_ops_over_torch": pytest.approx(0.9)}
    absent = {host.OPS_ABSENT: HostTime(8.0, 7.5), host.TORCH_ABSENT: HostTime(10.0, 9.0)}
    assert host._summary(absent) == {"absent_ops_over_torch": pytest.approx(0.8)}


def test_an_op_with_optional_inputs_is_timed_with_them_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """The peer and tkreg.ops with None for every optional input, each held against the other;
    an op without optional inputs has no such rows."""
    import torch

    from tests.ops_support import ToyPlugin, registry_with, toy_kernel, toy_mul_torch
    from tests.test_ops_optional import FORWARD, AffinePlugin

    registry = registry_with(AffinePlugin(FORWARD), ToyPlugin(toy_kernel("toy_mul_kernel", toy_mul_torch)))
    monkeypatch.setattr(host, "make_output", lambda registry, sig, inputs: torch.empty(5, 7))
    monkeypatch.setattr(host, "launchers", lambda registry, op, inputs: {})
    monkeypatch.setattr(host, "make_inputs", lambda registry, sig: (torch.randn(5, 7), torch.randn(5, 7)))
    mul = registry.op("toy_mul")
    assert not [p for p in host.paths(registry, mul, host.signature(mul)) if p.absent]
    x, w, b = torch.randn(5, 7), torch.randn(7), torch.randn(7)
    monkeypatch.setattr(host, "make_inputs", lambda registry, sig: (x, w, b))
    affine = registry.op("toy_affine")
    found = [p for p in host.paths(registry, affine, host.signature(affine)) if p.absent]
    assert [p.role for p in found] == [host.TORCH_ABSENT, host.OPS_ABSENT] and all(p.allocates for p in found)
    assert "weight=None, bias=None" in found[0].what
    peer = found[0].make()
    assert peer is not None and torch.equal(peer(), x)  # y = x with neither weight nor bias


def test_an_op_that_declares_an_autocast_policy_is_timed_under_autocast_on_float32_inputs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mixed precision's calls: the peer and tkreg.ops on float32 inputs under autocast(bfloat16),
    each held against the other; an op that declares no policy has no such rows."""
    import torch

    from tests.ops_support import ToyPlugin, registry_with, toy_kernel, toy_mul_torch

    monkeypatch.setattr(host, "make_inputs", lambda registry, sig: (torch.randn(5, 7).half(), torch.randn(5, 7).half()))
    monkeypatch.setattr(host, "make_output", lambda registry, sig, inputs: torch.empty(5, 7).half())
    monkeypatch.setattr(host, "launchers", lambda registry, op, inputs: {})
    for policy, expected in ((None, []), ("lower", [host.TORCH_AMP, host.OPS_AMP])):
        registry = registry_with(ToyPlugin(toy_kernel("toy_mul_kernel", toy_mul_torch), autocast=policy))
        op = registry.op("toy_mul")
        found = [p for p in host.paths(registry, op, host.signature(op)) if p.autocast]
        assert [p.role for p in found] == expected and all(p.autocast == "bfloat16" and p.allocates for p in found)
        if found:
            torch_amp = found[0].make()
            assert torch_amp is not None and torch_amp().dtype == torch.float32  # float32 inputs, the region outside


def test_a_replayable_kernel_is_timed_allocating_as_a_plan_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suites time a kernel as tkreg.ops runs it: a new output per call, of the layout the
    op's make_output gives, worked out once (a plan's allocation, not make_output's Python per
    call, which would charge kernels a few microseconds the peer never pays)."""
    import torch

    from tests import ops_support
    from tests.ops_support import ToyPlugin, registry_with, toy_kernel, toy_mul_torch
    from tkreg.bench.calls import kernel_call

    made: list[int] = []
    original = ops_support.toy_make_output
    monkeypatch.setattr(ops_support, "toy_make_output", lambda x, y: made.append(1) or original(x, y))
    registry = registry_with(ToyPlugin(toy_kernel("toy_mul_replayed", toy_mul_torch, replay=True)))
    op, kernel = registry.op("toy_mul"), registry.kernel("toy_mul_replayed")
    x, y = torch.randn(5, 7), torch.randn(5, 7)
    call = kernel_call(op, kernel, kernel.load(), (x, y))
    outs = [call() for _ in range(4)]
    assert made == [1]  # the layout, once
    assert len({o.data_ptr() for o in outs}) == len(outs)  # every call its own output, kept alive here
    for out in outs:
        assert out.shape == (5, 7) and out.dtype == torch.float32
        torch.testing.assert_close(out, x * y, rtol=0, atol=0)
