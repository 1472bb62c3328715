"""The Triton kernels of rms_norm and layer_norm, forward and backward: one source for both ops,
where the constexpr LAYER adds what layer_norm has beyond rms_norm (centring on the row mean, the
mean as a statistic). Everything is computed in fp32 from inputs read in their own dtype, and each
output is rounded once, when it is stored.

Absent inputs (Op.optional: a LayerNorm without bias, a norm without elementwise affine) arrive as
None: triton specializes a None argument as a constexpr, so ``W is not None`` (and B, DW, DB, PW,
PB) is decided at compile time, selects its own compiled kernel (and the Launcher's cache entry,
which keys on triton's specialization), and an absent vector is neither read nor written. Where
the weight is absent it counts as ones (y = xhat, dx from dy alone); where the bias is absent, as
zeros; where a gradient is None its sums are not formed. rms_norm passes None for the bias and its
gradient.

Which kernel runs for which row width, with which blocks and warps, is :mod:`tkreg_norms.plans`;
the launchers are :mod:`tkreg_norms.launch`. Weight, bias and their gradients are contiguous
vectors (or None); rows of x, y, dy and dx have unit column stride and any row stride.

- ``rms_fwd_fused`` / ``ln_fwd_fused``: a tile of ROWS rows x BLOCK_N columns (BLOCK_N >= N) is
  read once and kept in registers: statistics, then the output. x is read once.
- ``rms_fwd_looped`` / ``ln_fwd_looped``: rows too long for registers, one program per row, walked
  in BLOCK_N chunks twice (statistics, then the output): x is read twice, the second time mostly
  from L2.
- ``norm_bwd_fused`` / ``norm_bwd_looped``: each program takes a contiguous range of rows, computes
  dx row by row and sums its rows' weight (and bias) gradient terms in fp32, in row order; it stores
  that partial sum as its row of an fp32 buffer (programs, N). ``sum_partials`` then adds the
  programs' rows in a fixed order. No atomics: the same inputs give the same bits.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _inverse_rms(mean_square, eps):
    # Correctly rounded square root and division (not rsqrt.approx): rstd is an output checked at
    # fp32 precision, and this runs once per row.
    return tl.div_rn(1.0, tl.sqrt_rn(mean_square + eps))


@triton.jit
def _fwd_fused(X, W, B, Y, MEAN, RSTD, M, N, stride_xm, stride_ym, eps,
               LAYER: tl.constexpr, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N
    mask = row_ok[:, None] & col_ok[None, :]
    r = rows.to(tl.int64)[:, None]  # row offsets may pass 2**31 elements
    x = tl.load(X + r * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if LAYER:
        mean = tl.sum(x, axis=1) / N
        tl.store(MEAN + rows, mean, mask=row_ok)
        x = tl.where(mask, x - mean[:, None], 0.0)  # padding columns must not add to the variance
    rstd = _inverse_rms(tl.sum(x * x, axis=1) / N, eps)
    tl.store(RSTD + rows, rstd, mask=row_ok)
    y = x * rstd[:, None]
    if W is not None:
        y *= tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    if B is not None:
        y += tl.load(B + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(Y + r * stride_ym + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _fwd_looped(X, W, B, Y, MEAN, RSTD, N, stride_xm, stride_ym, eps, LAYER: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    x_row = X + row.to(tl.int64) * stride_xm
    y_row = Y + row.to(tl.int64) * stride_ym
    cols = tl.arange(0, BLOCK_N)
    if LAYER:
        # Mean and sum of squared deviations per chunk, merged into the running pair (Chan, Golub
        # and LeVeque's update): no sum of squares minus squared mean, whose cancellation loses
        # the variance of rows with a large mean.
        mean = 0.0
        m2 = 0.0
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            seen = start * 1.0  # as floats: seen * count overflows int32 on long rows
            count = tl.minimum(N - start, BLOCK_N) * 1.0
            chunk_mean = tl.sum(x, axis=0) / count
            d = tl.where(mask, x - chunk_mean, 0.0)
            total = seen + count
            delta = chunk_mean - mean
            mean += delta * (count / total)
            m2 += tl.sum(d * d, axis=0) + delta * delta * (seen * (count / total))
        tl.store(MEAN + row, mean)
        mean_square = m2 / N
    else:
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            x = tl.load(x_row + start + cols, mask=start + cols < N, other=0.0).to(tl.float32)
            acc += x * x
        mean_square = tl.sum(acc, axis=0) / N
        mean = 0.0
    rstd = _inverse_rms(mean_square, eps)
    tl.store(RSTD + row, rstd)
    for start in range(0, N, BLOCK_N):
        c = start + cols
        mask = c < N
        x = tl.load(x_row + c, mask=mask, other=0.0).to(tl.float32)
        if LAYER:
            y = (x - mean) * rstd
        else:
            y = x * rstd
        if W is not None:
            y *= tl.load(W + c, mask=mask, other=0.0).to(tl.float32)
        if B is not None:
            y += tl.load(B + c, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + c, y.to(Y.dtype.element_ty), mask=mask)


# Forward entry points, one per op: rms_norm's takes no bias and no mean. Every argument costs host
# time on every launch (triton specializes each one), and a decode step's launch is all host time.
@triton.jit
def rms_fwd_fused(X, W, Y, RSTD, M, N, stride_xm, stride_ym, eps, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    _fwd_fused(X, W, None, Y, RSTD, RSTD, M, N, stride_xm, stride_ym, eps, False, ROWS, BLOCK_N)


@triton.jit
def ln_fwd_fused(X, W, B, Y, MEAN, RSTD, M, N, stride_xm, stride_ym, eps, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    _fwd_fused(X, W, B, Y, MEAN, RSTD, M, N, stride_xm, stride_ym, eps, True, ROWS, BLOCK_N)


@triton.jit
def rms_fwd_looped(X, W, Y, RSTD, N, stride_xm, stride_ym, eps, BLOCK_N: tl.constexpr):
    _fwd_looped(X, W, None, Y, RSTD, RSTD, N, stride_xm, stride_ym, eps, False, BLOCK_N)


@triton.jit
def ln_fwd_looped(X, W, B, Y, MEAN, RSTD, N, stride_xm, stride_ym, eps, BLOCK_N: tl.constexpr):
    _fwd_looped(X, W, B, Y, MEAN, RSTD, N, stride_xm, stride_ym, eps, True, BLOCK_N)


@triton.jit
def norm_bwd_fused(
    X, W, DY, MEAN, RSTD, DX, DW, DB,
    M, N, rows_per_program, stride_xm, stride_dym, stride_dxm,
    LAYER: tl.constexpr, ROWS: tl.constexpr, BLOCK_N: tl.constexpr, NUM_STAGES: tl.constexpr,
):
    """Rows [pid * rows_per_program, ...) in steps of ROWS. DW/DB get this program's sums as row
    ``pid`` of an fp32 (programs, N) partial buffer, or are the gradients themselves when one
    program takes every row (None: that gradient is not wanted, its sums are not formed). With
    NUM_STAGES >= 2 triton pipelines the row loop: the next rows' x and dy are copied to shared
    memory (16-byte cp.async) while this step computes, so a program always has loads in flight,
    and x and dy wait there instead of in registers."""
    pid = tl.program_id(0)
    first = pid * rows_per_program
    last = tl.minimum(first + rows_per_program, M)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    if W is not None:
        w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    db = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    for start in tl.range(first, last, ROWS, num_stages=NUM_STAGES):
        rows = start + tl.arange(0, ROWS)
        row_ok = rows < last
        mask = row_ok[:, None] & col_ok[None, :]
        r = rows.to(tl.int64)[:, None]
        x = tl.load(X + r * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + r * stride_dym + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(RSTD + rows, mask=row_ok, other=0.0)
        if LAYER:
            mean = tl.load(MEAN + rows, mask=row_ok, other=0.0)
            xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        else:
            xhat = x * rstd[:, None]
        wdy = dy
        if W is not None:
            wdy = w[None, :] * dy
        c1 = tl.sum(xhat * wdy, axis=1) / N
        if LAYER:
            c2 = tl.sum(wdy, axis=1) / N
            dx = (wdy - (xhat * c1[:, None] + c2[:, None])) * rstd[:, None]
        else:
            dx = (wdy - xhat * c1[:, None]) * rstd[:, None]
        tl.store(DX + r * stride_dxm + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        if DW is not None:
            dw += dy * xhat
        if DB is not None:
            db += dy
    part = pid.to(tl.int64) * N
    if DW is not None:
        tl.store(DW + part + cols, tl.sum(dw, axis=0).to(DW.dtype.element_ty), mask=col_ok)
    if DB is not None:
        tl.store(DB + part + cols, tl.sum(db, axis=0).to(DB.dtype.element_ty), mask=col_ok)


@triton.jit
def norm_bwd_looped(
    X, W, DY, MEAN, RSTD, DX, PW, PB,
    M, N, rows_per_program, stride_xm, stride_dym, stride_dxm,
    LAYER: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Rows too long for registers: each row is walked twice in BLOCK_N chunks (the row sums dx
    needs, then dx), and the program's fp32 partial sums (row ``pid`` of the (programs, N)
    buffers PW/PB, each None where its gradient is not wanted) are read, added to and written
    back chunk by chunk, one row after the other."""
    pid = tl.program_id(0)
    first = pid * rows_per_program
    last = tl.minimum(first + rows_per_program, M)
    cols = tl.arange(0, BLOCK_N)
    part = pid.to(tl.int64) * N
    for row in range(first, last):
        r = tl.cast(row, tl.int64)  # the loop index is a Python int under the interpreter
        x_row = X + r * stride_xm
        dy_row = DY + r * stride_dym
        dx_row = DX + r * stride_dxm
        rstd = tl.load(RSTD + row)
        mean = 0.0
        if LAYER:
            mean = tl.load(MEAN + row)
        acc1 = tl.zeros([BLOCK_N], dtype=tl.float32)
        acc2 = tl.zeros([BLOCK_N], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            c = start + cols
            mask = c < N
            x = tl.load(x_row + c, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_row + c, mask=mask, other=0.0).to(tl.float32)
            wdy = dy
            if W is not None:
                wdy = tl.load(W + c, mask=mask, other=0.0).to(tl.float32) * dy
            acc1 += (x - mean) * rstd * wdy  # zero where masked: wdy is
            if LAYER:
                acc2 += wdy
        c1 = tl.sum(acc1, axis=0) / N
        c2 = tl.sum(acc2, axis=0) / N
        earlier = row > first  # the partial sums already hold this program's earlier rows
        for start in range(0, N, BLOCK_N):
            c = start + cols
            mask = c < N
            x = tl.load(x_row + c, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_row + c, mask=mask, other=0.0).to(tl.float32)
            xhat = (x - mean) * rstd
            wdy = dy
            if W is not None:
                wdy = tl.load(W + c, mask=mask, other=0.0).to(tl.float32) * dy
            if LAYER:
                dx = (wdy - (xhat * c1 + c2)) * rstd
            else:
                dx = (wdy - xhat * c1) * rstd
            tl.store(dx_row + c, dx.to(DX.dtype.element_ty), mask=mask)
            if PW is not None:
                pw = tl.load(PW + part + c, mask=mask & earlier, other=0.0)
                tl.store(PW + part + c, pw + dy * xhat, mask=mask)
            if PB is not None:
                pb = tl.load(PB + part + c, mask=mask & earlier, other=0.0)
                tl.store(PB + part + c, pb + dy, mask=mask)
        # The next row reads back what this one stored. Where a block is narrower than the
        # program's threads, the thread that reads an element may not be the one that stored
        # it: the barrier makes every store visible first.
        tl.debug_barrier()


@triton.jit
def sum_partials(PW, PB, DW, DB, P, N, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    """dw[cols] = sum over p of PW[p, cols] and db from PB (both (P, N); each pair None where
    that gradient is not wanted), BLOCK_C columns per program, the P rows added in a fixed
    order: tiles of BLOCK_P rows in turn, then one tree over the tile."""
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    col_ok = cols < N
    acc_w = tl.zeros([BLOCK_P, BLOCK_C], dtype=tl.float32)
    acc_b = tl.zeros([BLOCK_P, BLOCK_C], dtype=tl.float32)
    for p0 in range(0, P, BLOCK_P):
        ps = p0 + tl.arange(0, BLOCK_P)
        mask = (ps < P)[:, None] & col_ok[None, :]
        offs = ps.to(tl.int64)[:, None] * N + cols[None, :]
        if PW is not None:
            acc_w += tl.load(PW + offs, mask=mask, other=0.0)
        if PB is not None:
            acc_b += tl.load(PB + offs, mask=mask, other=0.0)
    if DW is not None:
        tl.store(DW + cols, tl.sum(acc_w, axis=0).to(DW.dtype.element_ty), mask=col_ok)
    if DB is not None:
        tl.store(DB + cols, tl.sum(acc_b, axis=0).to(DB.dtype.element_ty), mask=col_ok)
