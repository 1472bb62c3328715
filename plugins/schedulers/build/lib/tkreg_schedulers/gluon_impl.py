"""The schedulers as Gluon aggregates (triton 3.6: ``__init__`` is a ``constexpr_function``).

The arithmetic here and in :mod:`.model` must stay the same; the GPU test compares them.

No ``from __future__ import annotations`` in this module: ``@aggregate`` checks field values against
the class annotations with isinstance, which needs them evaluated, not strings.
"""

from typing import Any

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.core import _aggregate as aggregate


@aggregate
class PersistentTileScheduler:
    """Program p handles tile ids [p * chunk, min((p + 1) * chunk, tiles)), chunk = ceil(tiles / P);
    tile id t is tile (t % tiles_m, t // tiles_m)."""

    pid_start: gl.tensor
    pid_end: gl.tensor
    num_pid_m: gl.tensor

    @gluon.constexpr_function
    def __init__(self, pid_start, pid_end, num_pid_m):
        self.pid_start = pid_start
        self.pid_end = pid_end
        self.num_pid_m = num_pid_m

    @gluon.jit
    def initialize(M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
        num_pid_m = gl.cdiv(M, BLOCK_M)
        num_pid = num_pid_m * gl.cdiv(N, BLOCK_N)
        chunk = gl.cdiv(num_pid, gl.num_programs(0))
        pid_start = gl.program_id(0) * chunk
        # Programs past the last chunk get start == end: no tiles, never a negative count.
        pid_end = gl.maximum(gl.minimum(pid_start + chunk, num_pid), pid_start)
        return PersistentTileScheduler(pid_start, pid_end, num_pid_m)

    @gluon.jit
    def get_num_tiles(self):
        return self.pid_end - self.pid_start

    @gluon.jit
    def get_tile(self, idx):
        tile_id = self.pid_start + idx
        return tile_id % self.num_pid_m, tile_id // self.num_pid_m


def GroupedPersistentTileScheduler(GROUP_SIZE_M: int) -> Any:
    """A scheduler type for one group size: tile ids strided over the programs (p, p + P, ...), each id
    placed in a group of GROUP_SIZE_M tile rows (fewer in the last group) walked column by column."""
    group_size = gl.constexpr(GROUP_SIZE_M)

    @aggregate
    class GroupedPersistentTileSchedulerImpl:
        start_pid: gl.tensor
        num_pid_m: gl.tensor
        num_pid_in_group: gl.tensor
        num_pid: gl.tensor

        @gluon.constexpr_function
        def __init__(self, start_pid, num_pid_m, num_pid_in_group, num_pid):
            self.start_pid = start_pid
            self.num_pid_m = num_pid_m
            self.num_pid_in_group = num_pid_in_group
            self.num_pid = num_pid

        @gluon.jit
        def initialize(M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
            num_pid_m = gl.cdiv(M, BLOCK_M)
            num_pid_n = gl.cdiv(N, BLOCK_N)
            return GroupedPersistentTileSchedulerImpl(gl.program_id(0), num_pid_m, group_size * num_pid_n, num_pid_m * num_pid_n)

        @gluon.jit
        def get_num_tiles(self):
            return gl.maximum(gl.cdiv(self.num_pid - self.start_pid, gl.num_programs(0)), 0)

        @gluon.jit
        def get_tile(self, idx):
            tile_id = self.start_pid + idx * gl.num_programs(0)
            first_pid_m = (tile_id // self.num_pid_in_group) * group_size
            rows = gl.minimum(self.num_pid_m - first_pid_m, group_size)
            # Position inside the group (as in tutorial 03's grouped order), so every group, the short
            # last one included, starts at its first tile row.
            local = tile_id % self.num_pid_in_group
            return first_pid_m + local % rows, local // rows

    GroupedPersistentTileSchedulerImpl.__name__ = f"GroupedPersistentTileScheduler({GROUP_SIZE_M})"
    GroupedPersistentTileSchedulerImpl.__qualname__ = GroupedPersistentTileSchedulerImpl.__name__
    return GroupedPersistentTileSchedulerImpl


GROUPED_1 = GroupedPersistentTileScheduler(1)
GROUPED_8 = GroupedPersistentTileScheduler(8)
