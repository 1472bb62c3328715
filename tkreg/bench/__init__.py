"""tkreg.bench: the measurements worth repeating, as one command (``tkreg bench``, or
``python -m tkreg.bench``), each suite writing one data file that the benchmark record
(BENCHMARKS.md, built by ``python -m tkreg.report.record``) is made from.

Suites (tkreg.bench.suites): ``main`` (the main job's benchmark items), ``timer`` (the device
timer against CUPTI and do_bench), ``host`` (host time per call), ``linear`` (ops with a linear
contract on model shapes against their peer), ``dispatch`` (tkreg.ops' choices, compiled and
training use) and ``ranking`` (the wall-time ranking data of tkreg.ops). docs/benchmarks.md describes
each. Importing this package imports neither torch nor triton.
"""

from __future__ import annotations

from .cli import main
from .suites import SUITES, Suite

__all__ = ["SUITES", "Suite", "main"]
