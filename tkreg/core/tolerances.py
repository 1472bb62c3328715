"""The per-dtype tolerance tables ops build on.

UNIT_ROUNDOFF is half the gap between 1 and the next number of each dtype: the relative error of
one rounding. An op's table starts from it and states why it needs more (e.g. accumulation over K
terms, see Op.tolerance_scale), never widened to make a test pass.
"""

from __future__ import annotations

from .specs import Tolerance

UNIT_ROUNDOFF: dict[str, float] = {
    "float64": 2.0**-53,
    "float32": 2.0**-24,
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
}

# Bit-exact: elementwise ops whose result is one correctly rounded operation.
EXACT: dict[str, Tolerance] = {d: Tolerance(0.0, 0.0) for d in UNIT_ROUNDOFF}

# One rounding of the output to its dtype (2 ulp of slack for the last rounding step).
ONE_ROUNDING: dict[str, Tolerance] = {d: Tolerance(0.0, 4 * u) for d, u in UNIT_ROUNDOFF.items()}
