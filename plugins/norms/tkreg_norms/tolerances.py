"""Per-dtype tolerances of rms_norm and layer_norm, from the arithmetic. No torch.

The harness compares each output with the float64 reference rounded once to the output's dtype:
|got - want| <= atol + rtol * |want| elementwise. The kernels compute in fp32 and round once, so
each tolerance is the sum of
- one rounding: the kernel's fp32 value and the exact value may round to neighbouring values of
  the output dtype when they straddle a rounding boundary: one ulp, at most 2u |want| (u: the
  dtype's unit roundoff); rtol 2u. (Measured: the 16-bit outputs do reach 0.99 of it.)
- the fp32 arithmetic's own error before that rounding, in units of u32 = 2^-24:

fp32 sums. Row statistics and the sums dx needs are fp32 sums of a row's N terms, in chains of at
most SUM_DEPTH additions (within a thread, then across a looped row's chunks, then a tree across
threads; plans.sum_depth, bounded by a test for every plan and test config). Rounding errors are
independent and of random sign, so a sum of terms x_i along chains of D errs by at most
LAMBDA * sqrt(D) * u32 * sum|x_i| except with probability 2 exp(-LAMBDA^2 / 2) (Higham and Mary,
"A new approach to probabilistic rounding error analysis", SIAM J. Sci. Comput. 2019); LAMBDA = 6
makes that 3e-8 per sum. SUM_REL = LAMBDA * sqrt(SUM_DEPTH) * u32 is that bound relative to
sum|x_i| (for a mean: relative to mean|x_i|).

Data. x, the weight, the bias and the upstream gradient are standard normal (make_inputs, the
harness): |values| < VALUE_MAX = 6 (a 2e-9 chance per element), and the mean |term| of every row
sum is below MEAN_TERM = 1 (E|z| = 0.8; E|z1 z2| = 0.64).

Forward, y = x * rstd * w (+ b):
- rstd: the sum of squares (of deviations, for layer_norm: the mean's own error enters only
  squared) errs by SUM_REL relative, halved by the square root; dividing by N, adding eps, the
  square root and the division are each correctly rounded: rtol 2 u32 + SUM_REL / 2 + 4 u32.
- rms_norm y: two more products: rtol 2u + SUM_REL / 2 + 6 u32. No cancellation; atol only for
  fp16's subnormals (|y| < 6e-5 rounds to a multiple of 2^-24).
- layer_norm y: as rms_norm's, plus absolute errors: the mean's SUM_REL * MEAN_TERM times
  rstd * |w| (rstd ~ 1 for unit-variance rows, |w| < VALUE_MAX), and adding the bias, which
  cancels where y ~ 0, rounds |t| + |b| < 2 VALUE_MAX^2 at u32.
- the mean (fp32 output): a signed sum, so an absolute error SUM_REL * MEAN_TERM; rtol 2 u32 for
  its own rounding and division.

Backward, from the forward's rstd and mean (given, rounded to fp32):
- dx = rstd * (w dy - xhat * c1 [- c2]) with c1 = mean(xhat w dy), c2 = mean(w dy): each mean errs
  by SUM_REL * MEAN_TERM, c1's times |xhat| < VALUE_MAX; the products and differences of terms below
  VALUE_MAX^2 round at a few u32 each: atol VALUE_MAX * SUM_REL * MEAN_TERM + 8 VALUE_MAX^2 u32.
- dweight = sum over rows of dy * xhat, dbias = sum of dy: M terms of standard deviation <= 1 and
  random sign, in chains of at most ROW_CHAIN (a program's rows in turn, then the programs'
  partial sums; plans.gradient_chain). Partial sums grow like sqrt(k); the rounding errors, each
  up to u32 times a partial sum, add up to a standard deviation of u32 * sqrt(M * D / 6) for
  chains of D, and 6 of those is the bound: at most 6 * sqrt(MAX_ROWS * ROW_CHAIN / 6) u32
  (about 5000 u32 = 3e-4) over the checked cases, none of which has more than MAX_ROWS rows.
  This error grows with M; tkreg's tolerance_scale would grow every atol of the op with it (the
  forward's too), and an op has one gradient table, so dx shares this atol.
- rtol 2u + SUM_REL / 2 + 8 u32: the products' and rstd's relative errors.
"""

from __future__ import annotations

import math

from tkreg import Tolerance
from tkreg.core.tolerances import UNIT_ROUNDOFF

DTYPES = ("float32", "float16", "bfloat16")
U32 = UNIT_ROUNDOFF["float32"]
SUM_DEPTH = 1024  # longest chain of fp32 additions in a row sum, any plan or test config
ROW_CHAIN = 1024  # longest chain of additions in a gradient's sum over rows
MAX_ROWS = 4099  # rows of the tallest case the tests check
LAMBDA = 6.0
SUM_REL = LAMBDA * math.sqrt(SUM_DEPTH) * U32  # 192 u32 ~ 1.1e-5
MEAN_TERM = 1.0
VALUE_MAX = 6.0
FP16_SUBNORMAL_STEP = 2.0**-24


def _one_rounding(dtype: str) -> float:
    return 2 * UNIT_ROUNDOFF[dtype]


_Y_REL = SUM_REL / 2 + 6 * U32
RMS_ATOL = {"float32": 0.0, "float16": FP16_SUBNORMAL_STEP, "bfloat16": 0.0}
LN_ATOL = SUM_REL * MEAN_TERM * VALUE_MAX + 2 * VALUE_MAX**2 * U32
DX_ATOL = VALUE_MAX * SUM_REL * MEAN_TERM + 8 * VALUE_MAX**2 * U32
DWEIGHT_ATOL = 6 * math.sqrt(MAX_ROWS * ROW_CHAIN / 6) * U32
_GRAD_REL = SUM_REL / 2 + 8 * U32

RMS_NORM = {d: Tolerance(atol=RMS_ATOL[d], rtol=_one_rounding(d) + _Y_REL) for d in DTYPES}
LAYER_NORM = {d: Tolerance(atol=LN_ATOL, rtol=_one_rounding(d) + _Y_REL) for d in DTYPES}
# The statistics are fp32 whatever the case's dtype: the same tolerance for every dtype.
RSTD = {d: Tolerance(atol=0.0, rtol=2 * U32 + SUM_REL / 2 + 4 * U32) for d in DTYPES}
MEAN = {d: Tolerance(atol=SUM_REL * MEAN_TERM, rtol=2 * U32) for d in DTYPES}
GRADS = {d: Tolerance(atol=max(DX_ATOL, DWEIGHT_ATOL), rtol=_one_rounding(d) + _GRAD_REL) for d in DTYPES}
