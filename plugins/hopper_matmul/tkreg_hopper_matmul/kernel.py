"""The Gluon kernel: a persistent, warp-specialized matmul for Hopper (sm_90a).

One program per SM walks its work units in the order the tile scheduler gives. Inside it:

- a producer warp (``_load_partition``) fills a ring of NUM_STAGES shared-memory stages with TMA
  loads of A and B, each stage guarded by a "ready" mbarrier (TMA bytes arrived) and an "empty"
  mbarrier (its consumers are done reading it);
- CONSUMERS warpgroups (``_mma_partition``; the first is the default partition) run wgmma on the
  stages, keep one wgmma in flight, and store their fp32 accumulators, converted to the output
  dtype, through shared memory with TMA. A consumer waits for its previous TMA store only when it
  needs the staging buffer again, so a store overlaps the next unit's main loop.

B comes in either layout without a copy (``B_NK``): row-major (K, N), loaded as BLOCK_K x BLOCK_N
blocks; or the transposed view of a row-major (N, K) weight (``x @ W.t()``), described by a TMA
descriptor over W itself and loaded as BLOCK_N x BLOCK_K blocks, which wgmma reads through a
permuted shared-memory view (it takes B K-major or N-major alike).

Split-K (``SPLIT``: C is a 3-D fp32 workspace (SPLIT_K, M, N)): the K steps of every output tile are
cut into SPLIT_K slices of ``k_per`` steps, one work unit each, and unit (split, tile) stores its
fp32 partial sum at ``[split, rows, columns]``; a second kernel (tkreg_matmul.reduce) adds the
slices in a fixed order, so the result does not depend on timing. The schedulers see the units as
the tiles of a virtual (SPLIT_K * tiles_m * BLOCK_M) x N output, split-major, so any registered
tile order walks them unchanged. The launcher picks SPLIT_K so that every slice starts inside K;
the last slice's steps past K read TMA's zero fill and add nothing.

Bias (``bias_ptr``: a contiguous (N,) vector of the operands' dtype, or None): C = A @ B + bias, as
``F.linear`` computes it. A consumer loads the BLOCK_N bias values of its tile's columns once the
main loop is done, while its last wgmma runs (masked at N only in the last column of tiles), in the
slice of the accumulator's own layout, so every thread gets exactly the columns it holds, and adds
them to the fp32 accumulator before the one rounding to C's dtype (as cuBLAS's bias epilogue does).
None is a constexpr to triton: the kernel without a bias has no bias code at all. Split-K never
takes a bias here (the partial sums must not each carry it): the reduce kernel adds it once.

Every partition derives a ring slot and phase parity from the running stage count ``pos`` (unit
index times ``k_per`` plus the k-step): slot ``pos % NUM_STAGES``, pass ``pos // NUM_STAGES``.
An mbarrier wait only tells phase parities apart, so a waiter must never be two passes ahead of
the barrier. Cooperative consumers read every stage in order, which keeps them within one pass.
Ping-pong consumers skip their peers' units, so each starts a unit only when the consumer of the
unit before has seen that unit's last stage arrive (the "turn" mbarriers): by then every stage
before its own first one has been filled.

No ``from __future__ import annotations`` here: ``@aggregate`` checks field values against the
class annotations, which must therefore be evaluated.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.language.core import _aggregate as aggregate

# Warps per partition: the producer needs one (one thread issues the TMA copies); a consumer is one
# warpgroup, the unit wgmma runs on.
PRODUCER_WARPS = gl.constexpr(1)
CONSUMER_WARPS = gl.constexpr(4)


@aggregate
class Shared:
    """What the partitions share: the operand ring, its mbarriers and the epilogue staging buffers.
    a_bufs: [NUM_STAGES * A_BLOCKS, ROWS, BLOCK_K]; b_bufs: [NUM_STAGES, BLOCK_K, BLOCK_N] (or
    [NUM_STAGES, BLOCK_N, BLOCK_K] with B_NK); c_bufs: [CONSUMERS, ROWS, BLOCK_N / EPILOGUE_SPLIT];
    ready/empty: [NUM_STAGES, 1]; turn: [CONSUMERS, 1] (ping-pong only)."""

    a_bufs: gl.shared_memory_descriptor
    b_bufs: gl.shared_memory_descriptor
    c_bufs: gl.shared_memory_descriptor
    ready: gl.shared_memory_descriptor
    empty: gl.shared_memory_descriptor
    turn: gl.shared_memory_descriptor

    @gluon.constexpr_function
    def __init__(self, a_bufs, b_bufs, c_bufs, ready, empty, turn):
        self.a_bufs = a_bufs
        self.b_bufs = b_bufs
        self.c_bufs = c_bufs
        self.ready = ready
        self.empty = empty
        self.turn = turn


@aggregate
class Plan:
    """The compile-time shape of the work: the tile, the consumers and how they split it, B's
    layout and whether C is a split-K workspace."""

    SchedulerImpl: gl.constexpr
    BLOCK_M: gl.constexpr
    BLOCK_N: gl.constexpr
    BLOCK_K: gl.constexpr
    ROWS: gl.constexpr
    NUM_STAGES: gl.constexpr
    CONSUMERS: gl.constexpr
    PINGPONG: gl.constexpr
    A_BLOCKS: gl.constexpr
    EPILOGUE_SPLIT: gl.constexpr
    B_NK: gl.constexpr
    SPLIT: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, SchedulerImpl, BLOCK_M, BLOCK_N, BLOCK_K, ROWS, NUM_STAGES, CONSUMERS, PINGPONG, EPILOGUE_SPLIT, B_NK,
                 SPLIT):  # fmt: skip
        self.SchedulerImpl = gl.constexpr(SchedulerImpl)
        self.BLOCK_M = gl.constexpr(BLOCK_M)
        self.BLOCK_N = gl.constexpr(BLOCK_N)
        self.BLOCK_K = gl.constexpr(BLOCK_K)
        self.ROWS = gl.constexpr(ROWS)
        self.NUM_STAGES = gl.constexpr(NUM_STAGES)
        self.CONSUMERS = gl.constexpr(CONSUMERS)
        self.PINGPONG = gl.constexpr(PINGPONG)
        # Cooperative consumers each read their own A block of every stage; ping-pong ones one.
        self.A_BLOCKS = gl.constexpr(1 if PINGPONG else CONSUMERS)
        self.EPILOGUE_SPLIT = gl.constexpr(EPILOGUE_SPLIT)
        self.B_NK = gl.constexpr(B_NK)
        self.SPLIT = gl.constexpr(SPLIT)


@gluon.jit
def _work(M, N, K, SPLIT_K, p: Plan):
    """The scheduler for SPLIT_K slices of every tile (split-major rows of tiles), the tile rows
    per slice and the K steps per slice."""
    tiles_m = gl.cdiv(M, p.BLOCK_M)
    k_per = gl.cdiv(gl.cdiv(K, p.BLOCK_K), SPLIT_K)
    scheduler = p.SchedulerImpl.initialize(SPLIT_K * tiles_m * p.BLOCK_M, N, p.BLOCK_M, p.BLOCK_N)
    return scheduler, tiles_m, k_per


@gluon.jit
def _unit(scheduler, t, tiles_m):
    """(split, pid_m, pid_n) of this program's t-th unit."""
    pid_v, pid_n = scheduler.get_tile(t)
    return pid_v // tiles_m, pid_v % tiles_m, pid_n


@gluon.jit
def _ring(pos, NUM_STAGES: gl.constexpr):
    """Slot and phase parity of the pos-th use of the ring."""
    return pos % NUM_STAGES, (pos // NUM_STAGES) & 1


@gluon.jit
def _load_partition(a_desc, b_desc, M, N, K, SPLIT_K, s: Shared, p: Plan):
    # TMA counts a box's full size even where it lies past the tensor's edge (zero-filled).
    STAGE_BYTES: gl.constexpr = p.A_BLOCKS * a_desc.block_type.nbytes + b_desc.block_type.nbytes
    scheduler, tiles_m, k_per = _work(M, N, K, SPLIT_K, p)
    for t in range(scheduler.get_num_tiles()):
        split, pid_m, pid_n = _unit(scheduler, t, tiles_m)
        off_m = pid_m * p.BLOCK_M
        off_n = pid_n * p.BLOCK_N
        k_first = split * k_per
        for ki in range(k_per):
            slot, phase = _ring(t * k_per + ki, p.NUM_STAGES)
            # Wait until the consumers released the slot's previous contents. A fresh mbarrier
            # counts the phase before its first as complete, so the first pass does not block.
            mbarrier.wait(s.empty.index(slot), phase ^ 1)
            ready = s.ready.index(slot)
            mbarrier.expect(ready, STAGE_BYTES)
            k = (k_first + ki) * p.BLOCK_K
            for i in gl.static_range(p.A_BLOCKS):
                tma.async_copy_global_to_shared(a_desc, [off_m + i * p.ROWS, k], ready, s.a_bufs.index(slot * p.A_BLOCKS + i))
            if p.B_NK:
                tma.async_copy_global_to_shared(b_desc, [off_n, k], ready, s.b_bufs.index(slot))
            else:
                tma.async_copy_global_to_shared(b_desc, [k, off_n], ready, s.b_bufs.index(slot))


@gluon.jit
def _split_columns(x, PARTS: gl.constexpr):
    """(R, C) -> PARTS tensors of (R, C / PARTS), left to right. Each halving pairs column j with
    column j + C/2 on one thread's registers (reshape to (R, 2, C/2), move the pair last, split),
    so no data moves between threads."""
    parts = (x,)
    for _ in gl.static_range(PARTS.bit_length() - 1):
        halves = ()
        for i in gl.static_range(len(parts)):
            part = parts[i]
            halves += part.reshape([part.shape[0], 2, part.shape[1] // 2]).permute(0, 2, 1).split()
        parts = halves
    return parts


@gluon.jit
def _load_bias(bias_ptr, off_n, N, BLOCK_N: gl.constexpr, acc_layout: gl.constexpr):
    """bias[off_n : off_n + BLOCK_N] (0 past N, where the TMA store clips the tile) in the
    accumulator's column layout, in the bias's own dtype."""
    # The accumulator's layout with the rows taken away: each thread loads the columns it holds
    # (pairs of adjacent ones), so the add needs no data from other threads.
    cols = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
    if off_n + BLOCK_N <= N:
        # A tile inside N (all but the last column of tiles): no mask, so each adjacent pair is
        # one 4-byte load at a constant offset, with no per-column compare.
        bias = gl.load(bias_ptr + cols)
    else:
        bias = gl.load(bias_ptr + cols, mask=cols < N, other=0.0)
    return bias


@gluon.jit
def _store_tile(c_desc, c_smem, acc, split, off_m, off_n, EPILOGUE_SPLIT: gl.constexpr, SPLIT: gl.constexpr):
    SLICE_N: gl.constexpr = c_smem.shape[1]
    parts = _split_columns(acc.to(c_desc.dtype), EPILOGUE_SPLIT)
    for i in gl.static_range(EPILOGUE_SPLIT):
        # The previous TMA store must have finished reading the staging buffer.
        tma.store_wait(0)
        c_smem.store(parts[i])
        # Order the generic-proxy writes above before the async-proxy (TMA) read.
        fence_async_shared()
        if SPLIT:
            # The workspace is (SPLIT_K, M, N): TMA clips each slice at M rows and N columns.
            tma.async_copy_shared_to_global(c_desc, [split, off_m, off_n + i * SLICE_N], c_smem.reshape(c_desc.block_type.shape))
        else:
            tma.async_copy_shared_to_global(c_desc, [off_m, off_n + i * SLICE_N], c_smem)


@gluon.jit
def _mma_partition(c_desc, bias_ptr, M, N, K, SPLIT_K, s: Shared, p: Plan, CONSUMER: gl.constexpr):
    # One wgmma instruction covers 64 x BLOCK_N x 16 per warpgroup (k = 256 bits of fp16/bf16).
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[CONSUMER_WARPS, 1], instr_shape=[16, p.BLOCK_N, 16]
    )
    NEXT: gl.constexpr = (CONSUMER + 1) % p.CONSUMERS
    if p.PINGPONG:
        # Units t = CONSUMER, CONSUMER + CONSUMERS, ...; each stage holds one A block.
        first: gl.constexpr = CONSUMER
        step: gl.constexpr = p.CONSUMERS
        a_block: gl.constexpr = 0
        row_offset: gl.constexpr = 0
    else:
        # Every unit; this consumer's rows of it, from its own A block of each stage.
        first: gl.constexpr = 0
        step: gl.constexpr = 1
        a_block: gl.constexpr = CONSUMER
        row_offset: gl.constexpr = CONSUMER * p.ROWS
    c_smem = s.c_bufs.index(CONSUMER)
    scheduler, tiles_m, k_per = _work(M, N, K, SPLIT_K, p)
    acc = gl.zeros([p.ROWS, p.BLOCK_N], gl.float32, acc_layout)
    for t in range(first, scheduler.get_num_tiles(), step):
        split, pid_m, pid_n = _unit(scheduler, t, tiles_m)
        if p.PINGPONG:
            # This consumer's (t // CONSUMERS)-th unit; its turn is that arrival on turn[CONSUMER].
            mbarrier.wait(s.turn.index(CONSUMER), (t // p.CONSUMERS) & 1)
        base = t * k_per
        prev = 0
        for ki in range(k_per):
            slot, phase = _ring(base + ki, p.NUM_STAGES)
            mbarrier.wait(s.ready.index(slot), phase)
            if p.PINGPONG:
                # The unit's last stage is in: the next unit's consumer may start.
                mbarrier.arrive(s.turn.index(NEXT), pred=ki == k_per - 1)
            b = s.b_bufs.index(slot)
            if p.B_NK:
                # A BLOCK_N x BLOCK_K block of W read as its transpose: wgmma takes either major order.
                b = b.permute((1, 0))
            acc = warpgroup_mma(s.a_bufs.index(slot * p.A_BLOCKS + a_block), b, acc, use_acc=ki > 0, is_async=True)
            # Keep this wgmma in flight; the one before it has finished reading its stage.
            acc = warpgroup_mma_wait(1, deps=(acc,))
            mbarrier.arrive(s.empty.index(prev), pred=ki > 0)
            prev = slot
        if bias_ptr is not None:
            # Issued after the main loop (its registers are not held through it) but before the
            # last wgmma is waited for, so the load's latency hides behind that wgmma.
            bias = _load_bias(bias_ptr, pid_n * p.BLOCK_N, N, p.BLOCK_N, acc_layout)
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(s.empty.index(prev))
        if bias_ptr is not None:
            acc = acc + gl.expand_dims(bias.to(gl.float32), 0)
        _store_tile(c_desc, c_smem, acc, split, pid_m * p.BLOCK_M + row_offset, pid_n * p.BLOCK_N, p.EPILOGUE_SPLIT, p.SPLIT)
    tma.store_wait(0)


@gluon.constexpr_function
def _block_n(b_block_shape, B_NK):
    return b_block_shape[0] if B_NK else b_block_shape[1]


@gluon.constexpr_function
def _staging_layout(c_block_shape, c_dtype):
    """The 2-D layout of one epilogue staging buffer: the last two dimensions of C's block (a
    split-K workspace block is [1, ROWS, SLICE_N])."""
    return gl.NVMMASharedLayout.get_default_for(list(c_block_shape[-2:]), c_dtype)


@gluon.jit
def matmul_hopper_ws_kernel(
    a_desc,
    b_desc,
    c_desc,
    bias_ptr,
    SchedulerImpl: gl.constexpr,
    BLOCK_M: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    CONSUMERS: gl.constexpr,
    PINGPONG: gl.constexpr,
    EPILOGUE_SPLIT: gl.constexpr,
    CONSUMER_REGS: gl.constexpr,
    PRODUCER_REGS: gl.constexpr,
    B_NK: gl.constexpr,
):
    """C = A @ B with A (M, K) and C as TMA descriptors, B as (K, N) or, with B_NK, as the (N, K)
    tensor it is the transpose of: A blocks ROWS x BLOCK_K, B blocks BLOCK_K x BLOCK_N (BLOCK_N x
    BLOCK_K with B_NK), C blocks ROWS x BLOCK_N / EPILOGUE_SPLIT (ROWS: one consumer's rows); a 3-D C
    descriptor is a (SPLIT_K, M, N) fp32 workspace for split-K, blocks [1, ROWS, ...]. ``bias_ptr``: a
    contiguous (N,) bias of A's dtype added to every row of C, or None (no bias code; always None
    with split-K, whose reduce kernel adds the bias). Launch with num_warps=4 (the first consumer)
    and at most one program per SM."""
    BLOCK_N: gl.constexpr = _block_n(b_desc.block_type.shape, B_NK)
    SPLIT: gl.constexpr = len(c_desc.block_type.shape) == 3
    p = Plan(
        SchedulerImpl,
        BLOCK_M,
        BLOCK_N,
        a_desc.block_type.shape[1],
        a_desc.block_type.shape[0],
        NUM_STAGES,
        CONSUMERS,
        PINGPONG,
        EPILOGUE_SPLIT,
        B_NK,
        SPLIT,
    )
    dtype: gl.constexpr = a_desc.dtype
    C_BLOCK: gl.constexpr = [p.ROWS, BLOCK_N // EPILOGUE_SPLIT]
    # (List concatenation, not unpacking: Gluon's code generator has no starred expressions.)
    a_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES * p.A_BLOCKS] + a_desc.block_type.shape, a_desc.layout)  # noqa: RUF005
    b_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES] + b_desc.block_type.shape, b_desc.layout)  # noqa: RUF005
    c_bufs = gl.allocate_shared_memory(
        c_desc.dtype,
        [CONSUMERS] + C_BLOCK,  # noqa: RUF005
        _staging_layout(c_desc.block_type.shape, c_desc.dtype),
    )
    ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_STAGES):
        # ready: the producer's expect-arrive, then the TMA bytes; empty: each consumer reading it.
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=p.A_BLOCKS)
    for i in gl.static_range(CONSUMERS):
        mbarrier.init(turn.index(i), count=1)
    # Unit 0 has no predecessor: its turn is given up front.
    mbarrier.arrive(turn.index(0))
    s = Shared(a_bufs, b_bufs, c_bufs, ready, empty, turn)
    M = a_desc.shape[0]
    K = a_desc.shape[1]
    if B_NK:
        N = b_desc.shape[0]
    else:
        N = b_desc.shape[1]
    if SPLIT:
        SPLIT_K = c_desc.shape[0]
        # Every slice's partial sum would carry it: the reduce kernel adds the bias once instead.
        gl.static_assert(bias_ptr is None, "split-K takes no bias_ptr: reduce_partials adds the bias")
    else:
        SPLIT_K = 1

    # The first consumer is the default partition (the kernel's own 4 warps); the other consumer and
    # the producer are workers with CONSUMER_REGS and PRODUCER_REGS registers per thread.
    if CONSUMERS == 1:
        gl.warp_specialize(
            [
                (_mma_partition, (c_desc, bias_ptr, M, N, K, SPLIT_K, s, p, 0)),
                (_load_partition, (a_desc, b_desc, M, N, K, SPLIT_K, s, p)),
            ],
            [PRODUCER_WARPS],
            [PRODUCER_REGS],
        )
    else:
        gl.static_assert(CONSUMERS == 2, "CONSUMERS must be 1 or 2")
        gl.warp_specialize(
            [
                (_mma_partition, (c_desc, bias_ptr, M, N, K, SPLIT_K, s, p, 0)),
                (_mma_partition, (c_desc, bias_ptr, M, N, K, SPLIT_K, s, p, 1)),
                (_load_partition, (a_desc, b_desc, M, N, K, SPLIT_K, s, p)),
            ],
            [CONSUMER_WARPS, PRODUCER_WARPS],
            [CONSUMER_REGS, PRODUCER_REGS],
        )
