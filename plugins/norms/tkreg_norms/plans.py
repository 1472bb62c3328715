"""How the norm kernels are launched for a row width: plain integers, no torch, no triton.

Forward (:func:`forward_plan`):
- rows up to FUSED_FWD_MAX_N elements: the fused kernel, the whole row (BLOCK_N = the next power
  of two) in registers, read once. Rows narrower than a tile of TILE_BYTES share a program: ROWS
  rows per program (1 for rows of TILE_BYTES and more: fp32 from 4096 elements, 16-bit from 8192).
  Warps grow with the tile, BYTES_PER_THREAD per thread, from 1 to MAX_WARPS: 8 warps for a 16 KB
  tile, 16 for 32 KB rows and wider.
- longer rows: the looped kernel, one program per row, LOOP_WARPS warps walking it in chunks of
  LOOP_CHUNK_BYTES (4096 fp32 or 8192 16-bit elements), twice.
Backward (:func:`backward_plan`): persistent programs over contiguous row ranges, as many as the
SMs hold at once (:func:`row_programs`), each holding the weight and its partial weight gradient
in registers:
- rows up to FUSED_BWD_MAX_N: the fused kernel, ROWS rows per step so a step covers at least
  BWD_TILE_ELEMENTS (one row from 4096 elements), BWD_ELEMENTS_PER_THREAD fp32 values per thread
  and tensor (8 warps at 4096 columns, 16 at 8192), the row loop pipelined
  (:func:`backward_stages` deep);
- longer rows: the looped kernel (chunks as in the forward), its partial sums in global memory.
The backward keeps x, dy, w and the partial sum per element: four fp32 tensors in registers where
the forward keeps two, hence its lower fused limit. The programs' partial sums are added by
sum_partials (:func:`sum_plan`).

Callers may force parts of a plan (the kernel's test configs do, to reach the looped path and
several rows per program on small rows under the interpreter): ``block`` is the widest row block
held at once (rows wider than it loop over chunks of ``block``), ``rows``, ``num_warps``.
"""

from __future__ import annotations

from dataclasses import dataclass

# Registers per thread are what bounds a fused row: at MAX_WARPS (512 threads) a 16384-element
# fp32 row is 32 values per thread and tensor; x and w make 64 registers in the forward. The
# backward's four tensors at 8192 elements make the same 64.
FUSED_FWD_MAX_N = 16384
FUSED_BWD_MAX_N = 8192
TILE_BYTES = 16384  # forward: one program reads at least this much when rows are narrow
BYTES_PER_THREAD = 64  # four 16-byte vector loads per thread and tile
MAX_WARPS = 16
MAX_ROWS = 64  # rows per program at most (tiny rows: a 64 x BLOCK_N tile)
LOOP_CHUNK_BYTES = 16384
LOOP_WARPS = 16  # long rows: one program per row, so each needs many loads in flight
BWD_TILE_ELEMENTS = 4096
BWD_ELEMENTS_PER_THREAD = 16
# Backward programs: as many as fit on an SM at once (more would only queue behind them, and
# every program adds a row of N fp32 partial sums, written and read once more). The fused
# backward compiles to 100-120 registers per thread for sm_90a at 4096 and 8192 columns (bf16,
# fp16, fp32; tests/test_norms_compile.py), so an SM's 65536 registers hold 16 warps of it:
# two programs of 8 warps or one of 16.
REGISTERS_PER_SM = 65536
BWD_REGISTERS_PER_THREAD = 128
# Pipeline depth of the fused backward's row loop (kernels.norm_bwd_fused): the rows being copied
# to shared memory while one computes are the loads in flight, and registers, not shared memory,
# bound the rows per step. A 16-bit step carries half the bytes of an fp32 one, and a row padded
# to its power of two fewer still, so those pipeline deeper (H100, 2026-11-25, 16-bit rows at
# 4096-8192 columns: 2 stages 67-85% of the copy ceiling, 3 stages 75-93%; padded rows of 5120:
# 53-67% at 2, 73-88% at 3, 76-91% at 4; fp32 within 3% at 2, 3 or 4 stages).
BWD_STAGES = 2
BWD_STAGES_16BIT = 3
BWD_STAGES_PADDED_16BIT = 4
# Under the interpreter (no SMs): a few programs, so the partial sums and their second pass run.
INTERPRETER_PROGRAMS = 4
# sum_partials: columns per program chosen so about SUM_PROGRAMS_PER_SM programs per SM share the
# reduction (it is a few % of the backward's traffic, but 64 programs on 132 SMs would leave half
# the GPU idle), from SUM_MIN_COLUMNS (32 fp32: one 128-byte line per partial row) up to
# SUM_MAX_COLUMNS; each step adds a tile of SUM_TILE partial values.
SUM_PROGRAMS_PER_SM = 2
SUM_MIN_COLUMNS = 32
SUM_MAX_COLUMNS = 1024
SUM_TILE = 2048
SUM_WARPS = 4
WARP_CHOICES = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True)
class Plan:
    """One launch shape: the looped or the fused kernel, its row block (BLOCK_N), rows per
    program (forward) or per step (backward), warps, and the fused backward's pipeline depth."""

    looped: bool
    block_n: int
    rows: int
    num_warps: int
    stages: int = 1


def next_power_of_2(n: int) -> int:
    # integer arithmetic: triton.next_power_of_2 costs microseconds per host call
    return 1 << (n - 1).bit_length()


def _check_power_of_2(name: str, value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1 or value & (value - 1)):
        raise ValueError(f"{name} must be a power of two >= 1, got {value!r}")


def check_config(block: int | None, rows: int | None, num_warps: int | None) -> None:
    _check_power_of_2("BLOCK", block)
    _check_power_of_2("ROWS", rows)
    if num_warps is not None and num_warps not in WARP_CHOICES:
        raise ValueError(f"num_warps must be one of {WARP_CHOICES}, got {num_warps!r}")


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def forward_plan(n: int, itemsize: int, block: int | None = None, rows: int | None = None,
                 num_warps: int | None = None) -> Plan:
    """The forward's launch for rows of ``n`` elements of ``itemsize`` bytes."""
    check_config(block, rows, num_warps)
    width = next_power_of_2(n)
    if width <= (FUSED_FWD_MAX_N if block is None else block):
        rows = rows or _clamp(TILE_BYTES // (width * itemsize), 1, MAX_ROWS)
        tile_bytes = rows * width * itemsize
        warps = num_warps or _clamp(next_power_of_2(max(1, tile_bytes // (BYTES_PER_THREAD * 32))), 1, MAX_WARPS)
        return Plan(False, width, rows, warps)
    chunk = block or LOOP_CHUNK_BYTES // itemsize
    return Plan(True, chunk, 1, num_warps or LOOP_WARPS)


def backward_plan(n: int, itemsize: int, block: int | None = None, rows: int | None = None,
                  num_warps: int | None = None) -> Plan:
    """The backward's launch for rows of ``n`` elements (the fused kernel's registers are fp32
    whatever the dtype; ``itemsize`` sizes the looped kernel's chunks)."""
    check_config(block, rows, num_warps)
    width = next_power_of_2(n)
    if width <= (FUSED_BWD_MAX_N if block is None else block):
        rows = rows or _clamp(BWD_TILE_ELEMENTS // width, 1, MAX_ROWS)
        threads = rows * width // BWD_ELEMENTS_PER_THREAD
        warps = num_warps or _clamp(next_power_of_2(max(1, threads // 32)), 1, MAX_WARPS)
        return Plan(False, width, rows, warps, backward_stages(n, width, itemsize))
    chunk = block or LOOP_CHUNK_BYTES // itemsize
    return Plan(True, chunk, 1, num_warps or LOOP_WARPS)


def backward_stages(n: int, block_n: int, itemsize: int) -> int:
    """The fused backward's pipeline depth for rows of ``n`` elements held in ``block_n``."""
    if itemsize >= 4:
        return BWD_STAGES
    return BWD_STAGES_16BIT if n == block_n else BWD_STAGES_PADDED_16BIT


def programs_per_sm(num_warps: int) -> int:
    """Fused backward programs of ``num_warps`` warps that an SM holds at once (registers)."""
    return max(1, REGISTERS_PER_SM // (BWD_REGISTERS_PER_THREAD * 32 * num_warps))


def row_programs(m: int, plan: Plan, sms: int | None, programs: int | None = None) -> tuple[int, int]:
    """(programs, rows per program) for the backward over ``m`` rows in steps of ``plan.rows``:
    ``programs`` if given, else as many as the GPU's SMs hold at once (INTERPRETER_PROGRAMS
    without a GPU), never more than there are steps; every program gets rows (the count is what
    it takes to cover ``m`` at that many rows per program)."""
    if programs is not None and (not isinstance(programs, int) or isinstance(programs, bool) or programs < 1):
        raise ValueError(f"programs must be an integer >= 1, got {programs!r}")
    rows = plan.rows
    want = programs or (INTERPRETER_PROGRAMS if sms is None else programs_per_sm(plan.num_warps) * sms)
    steps = -(-m // rows)
    per_program = -(-steps // min(want, steps)) * rows
    return -(-m // per_program), per_program


def sum_plan(n: int, sms: int | None) -> tuple[int, int]:
    """(BLOCK_P, BLOCK_C) of sum_partials for N columns: BLOCK_C columns per program, a power of
    two near N / (SUM_PROGRAMS_PER_SM x SMs) (no GPU: as if 1 SM, few programs to interpret)."""
    per_program = -(-n // (SUM_PROGRAMS_PER_SM * (sms or 1)))
    columns = _clamp(next_power_of_2(per_program), SUM_MIN_COLUMNS, SUM_MAX_COLUMNS)
    return max(1, SUM_TILE // columns), columns


def _log2(n: int) -> int:
    return max(0, (n - 1).bit_length())


def sum_depth(n: int, plan: Plan) -> int:
    """The longest chain of fp32 additions in one of a row's sums (statistics, dx's row sums)
    under ``plan``: a thread's sequential share of a tile (and, looped, one addition per chunk),
    then a tree across the program's threads. tolerances.SUM_DEPTH must bound it."""
    threads = 32 * plan.num_warps
    per_thread = -(-plan.rows * plan.block_n // threads)
    chunks = -(-n // plan.block_n) if plan.looped else 1
    return chunks + per_thread + _log2(threads)


def gradient_chain(m: int, plan: Plan, sms: int | None, programs: int | None, n: int) -> int:
    """The longest chain of fp32 additions in the weight (bias) gradient's sum over ``m`` rows:
    a program's steps, the tree over a step's rows, then sum_partials' steps over the programs'
    partial sums and its tree. tolerances.ROW_CHAIN must bound it."""
    count, per_program = row_programs(m, plan, sms, programs)
    block_p, _ = sum_plan(n, sms)
    steps = -(-per_program // plan.rows)
    return steps + _log2(plan.rows) + -(-count // block_p) + _log2(block_p)
