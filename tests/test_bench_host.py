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
