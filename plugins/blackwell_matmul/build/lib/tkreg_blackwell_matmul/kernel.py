"""The Gluon kernel: persistent over output tiles, three partitions talking through mbarriers.

- load (1 warp): for each tile and K step, wait until a ring slot is free, TMA-load an A block
  (BLOCK_M x BLOCK_K) and a B block into it: BLOCK_K x BLOCK_N of a row-major (K, N) B, or, with
  B_NK, BLOCK_N x BLOCK_K of the row-major (N, K) weight W that B is the transpose of (``x @ W.t()``),
  which the MMA reads through a permuted shared-memory view (tcgen05 takes B K-major or N-major).
- mma (1 warp): for each tile, take a free accumulator (2 in tensor memory), issue one tcgen05 MMA
  per K step, each releasing its ring slot when done; then signal the accumulator ready.
- epilogue (default partition, num_warps warps): wait for an accumulator, read it from tensor
  memory in SUBTILE_FACTOR column slices, hand it back to the mma warp, convert each slice to the
  output dtype and TMA-store it, keeping one store in flight.

Partial tiles need no masks: TMA loads fill out-of-bounds elements with zeros (adding nothing to
the sum, so a K tail or K < BLOCK_K is exact) and TMA stores drop out-of-bounds elements.

No ``from __future__ import annotations`` here: ``@aggregate`` checks field values against the class
annotations with isinstance, which needs them evaluated.
"""

from tkreg_matmul.gluon_common import Counter
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.blackwell import (
    TensorMemoryLayout,
    allocate_tensor_memory,
    get_tmem_reg_layout,
    tcgen05_commit,
    tcgen05_mma,
    tensor_memory_descriptor,
)
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.language.core import _aggregate as aggregate

# Double-buffered accumulator: the epilogue of one tile overlaps the next tile's MMAs.
NUM_ACC_BUFFERS = gl.constexpr(2)
WORKER_WARPS = gl.constexpr(1)  # load and mma partitions issue scalar work only
# Registers per thread for the 1-warp workers: 24 is the least setmaxnreg allows (multiples of 8 in
# [24, 256], PTX ISA), enough for scalar loop state.
WORKER_REGS = gl.constexpr(24)


@aggregate
class PartitionArgs:
    a_desc: tma.tensor_descriptor
    b_desc: tma.tensor_descriptor
    c_desc: tma.tensor_descriptor
    a_bufs: gl.shared_memory_descriptor
    b_bufs: gl.shared_memory_descriptor
    load_empty_bars: gl.shared_memory_descriptor
    load_ready_bars: gl.shared_memory_descriptor
    acc_bufs: tensor_memory_descriptor
    acc_empty_bars: gl.shared_memory_descriptor
    acc_ready_bars: gl.shared_memory_descriptor
    SUBTILE_FACTOR: gl.constexpr
    num_warps: gl.constexpr
    B_NK: gl.constexpr
    BLOCK_N: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, a_desc, b_desc, c_desc, a_bufs, b_bufs, load_empty_bars, load_ready_bars,
                 acc_bufs, acc_empty_bars, acc_ready_bars, SUBTILE_FACTOR, num_warps, B_NK):  # fmt: skip
        self.a_desc = a_desc
        self.b_desc = b_desc
        self.c_desc = c_desc
        self.a_bufs = a_bufs
        self.b_bufs = b_bufs
        self.load_empty_bars = load_empty_bars
        self.load_ready_bars = load_ready_bars
        self.acc_bufs = acc_bufs
        self.acc_empty_bars = acc_empty_bars
        self.acc_ready_bars = acc_ready_bars
        self.SUBTILE_FACTOR = gl.constexpr(SUBTILE_FACTOR)
        self.num_warps = gl.constexpr(num_warps)
        self.B_NK = gl.constexpr(B_NK)
        self.BLOCK_N = gl.constexpr(b_desc.block_type.shape[0] if B_NK else b_desc.block_type.shape[1])

    @gluon.jit
    def scheduler(self, SchedulerImpl: gl.constexpr):
        """This program's tiles; every partition walks the same sequence."""
        BLOCK_M: gl.constexpr = self.a_desc.block_type.shape[0]
        return SchedulerImpl.initialize(self.c_desc.shape[0], self.c_desc.shape[1], BLOCK_M, self.BLOCK_N)


@gluon.jit
def load_partition(p, SchedulerImpl: gl.constexpr):
    BLOCK_M: gl.constexpr = p.a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = p.a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = p.BLOCK_N
    K = p.a_desc.shape[1]
    nbytes: gl.constexpr = p.a_desc.block_type.nbytes + p.b_desc.block_type.nbytes
    # Producer of the operand ring: fresh "empty" barriers count as completed, so start at phase 1.
    slot = Counter.create(1, p.load_empty_bars.shape[0])
    scheduler = p.scheduler(SchedulerImpl)
    for idx in range(scheduler.get_num_tiles()):
        pid_m, pid_n = scheduler.get_tile(idx)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        for k in range(0, K, BLOCK_K):
            ready = p.load_ready_bars.index(slot.index)
            mbarrier.wait(p.load_empty_bars.index(slot.index), slot.phase)
            # The full box byte count even for edge blocks: TMA counts the zero-filled part too.
            mbarrier.expect(ready, nbytes)
            tma.async_copy_global_to_shared(p.a_desc, [off_m, k], ready, p.a_bufs.index(slot.index))
            if p.B_NK:
                tma.async_copy_global_to_shared(p.b_desc, [off_n, k], ready, p.b_bufs.index(slot.index))
            else:
                tma.async_copy_global_to_shared(p.b_desc, [k, off_n], ready, p.b_bufs.index(slot.index))
            slot = slot.next()


@gluon.jit
def mma_partition(p, SchedulerImpl: gl.constexpr):
    BLOCK_K: gl.constexpr = p.a_desc.block_type.shape[1]
    K = p.a_desc.shape[1]
    slot = Counter.create(0, p.load_ready_bars.shape[0])
    acc_slot = Counter.create(1, p.acc_empty_bars.shape[0])
    scheduler = p.scheduler(SchedulerImpl)
    for _ in range(scheduler.get_num_tiles()):
        mbarrier.wait(p.acc_empty_bars.index(acc_slot.index), acc_slot.phase)
        acc = p.acc_bufs.index(acc_slot.index)
        # The first MMA of a tile overwrites the accumulator (use_acc=False): no zeroing pass needed.
        use_acc = False
        for _ in range(gl.cdiv(K, BLOCK_K)):  # as many steps as the load partition's range(0, K, BLOCK_K)
            mbarrier.wait(p.load_ready_bars.index(slot.index), slot.phase)
            b = p.b_bufs.index(slot.index)
            if p.B_NK:
                # A BLOCK_N x BLOCK_K block of W, read as its transpose.
                b = b.permute((1, 0))
            tcgen05_mma(p.a_bufs.index(slot.index), b, acc, use_acc=use_acc)
            # Frees the ring slot once this MMA (and every earlier one) has read it.
            tcgen05_commit(p.load_empty_bars.index(slot.index))
            slot = slot.next()
            use_acc = True
        tcgen05_commit(p.acc_ready_bars.index(acc_slot.index))
        acc_slot = acc_slot.next()


@gluon.jit
def epilogue_partition(p, SchedulerImpl: gl.constexpr):
    BLOCK_M: gl.constexpr = p.a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = p.BLOCK_N
    SPLIT_N: gl.constexpr = p.c_desc.block_type.shape[1]
    gl.static_assert(SPLIT_N * p.SUBTILE_FACTOR == BLOCK_N, "C descriptor blocks must be BLOCK_N / SUBTILE_FACTOR wide")
    dtype: gl.constexpr = p.c_desc.dtype
    slice_tmem_layout: gl.constexpr = TensorMemoryLayout([BLOCK_M, SPLIT_N], col_stride=1)
    slice_layout: gl.constexpr = get_tmem_reg_layout(gl.float32, (BLOCK_M, SPLIT_N), slice_tmem_layout, p.num_warps)
    c_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, SPLIT_N], p.c_desc.layout)

    acc_slot = Counter.create(0, p.acc_empty_bars.shape[0])
    scheduler = p.scheduler(SchedulerImpl)
    for idx in range(scheduler.get_num_tiles()):
        pid_m, pid_n = scheduler.get_tile(idx)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        mbarrier.wait(p.acc_ready_bars.index(acc_slot.index), acc_slot.phase)
        acc = p.acc_bufs.index(acc_slot.index)
        for i in gl.static_range(p.SUBTILE_FACTOR):
            # One slice at a time keeps BLOCK_M x SPLIT_N fp32 values in registers, not the whole tile.
            part = acc.slice(i * SPLIT_N, SPLIT_N).load(slice_layout)
            if i == p.SUBTILE_FACTOR - 1:
                # Every warp has read the whole accumulator: hand it back to the mma warp.
                gl.thread_barrier()
                mbarrier.arrive(p.acc_empty_bars.index(acc_slot.index), count=1)
            part = part.to(dtype)
            # c_smem is reused: the previous slice's TMA store must have read it.
            tma.store_wait(pendings=0)
            c_smem.store(part)
            fence_async_shared()
            tma.async_copy_shared_to_global(p.c_desc, [off_m, off_n + i * SPLIT_N], c_smem)
        acc_slot = acc_slot.next()
    tma.store_wait(pendings=0)


@gluon.jit
def matmul_blackwell_ws_kernel(a_desc, b_desc, c_desc, SchedulerImpl: gl.constexpr, num_buffers: gl.constexpr,
                               SUBTILE_FACTOR: gl.constexpr, num_warps: gl.constexpr, B_NK: gl.constexpr):  # fmt: skip
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = c_desc.block_type.shape[1] * SUBTILE_FACTOR
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    dtype: gl.constexpr = a_desc.dtype

    a_bufs = gl.allocate_shared_memory(dtype, [num_buffers, BLOCK_M, BLOCK_K], a_desc.layout)
    # (List concatenation, not unpacking: Gluon's code generator has no starred expressions.)
    b_bufs = gl.allocate_shared_memory(dtype, [num_buffers] + b_desc.block_type.shape, b_desc.layout)  # noqa: RUF005
    load_empty_bars = gl.allocate_shared_memory(gl.int64, [num_buffers, 1], mbarrier.MBarrierLayout())
    load_ready_bars = gl.allocate_shared_memory(gl.int64, [num_buffers, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(num_buffers):
        mbarrier.init(load_empty_bars.index(i), count=1)
        mbarrier.init(load_ready_bars.index(i), count=1)

    tmem_layout: gl.constexpr = TensorMemoryLayout([BLOCK_M, BLOCK_N], col_stride=1)
    acc_bufs = allocate_tensor_memory(gl.float32, [NUM_ACC_BUFFERS, BLOCK_M, BLOCK_N], tmem_layout)
    acc_empty_bars = gl.allocate_shared_memory(gl.int64, [NUM_ACC_BUFFERS, 1], mbarrier.MBarrierLayout())
    acc_ready_bars = gl.allocate_shared_memory(gl.int64, [NUM_ACC_BUFFERS, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_ACC_BUFFERS):
        mbarrier.init(acc_empty_bars.index(i), count=1)
        mbarrier.init(acc_ready_bars.index(i), count=1)

    p = PartitionArgs(a_desc, b_desc, c_desc, a_bufs, b_bufs, load_empty_bars, load_ready_bars,
                      acc_bufs, acc_empty_bars, acc_ready_bars, SUBTILE_FACTOR, num_warps, B_NK)  # fmt: skip
    gl.warp_specialize(
        [
            (epilogue_partition, (p, SchedulerImpl)),
            (load_partition, (p, SchedulerImpl)),
            (mma_partition, (p, SchedulerImpl)),
        ],
        [WORKER_WARPS, WORKER_WARPS],
        [WORKER_REGS, WORKER_REGS],
    )
