"""Pure-Python statements of each scheduler's tile order: per program, the (pid_m, pid_n) tiles it
visits, computed with exactly the integer arithmetic of the Gluon code in :mod:`.gluon_impl`."""

from __future__ import annotations

Order = list[list[tuple[int, int]]]


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def persistent(M: int, N: int, BLOCK_M: int, BLOCK_N: int, num_programs: int) -> Order:
    """Program p takes tile ids [p * chunk, min((p + 1) * chunk, tiles)), chunk = ceil(tiles / P)."""
    num_pid_m = _cdiv(M, BLOCK_M)
    num_pid = num_pid_m * _cdiv(N, BLOCK_N)
    chunk = _cdiv(num_pid, num_programs)
    order = []
    for program in range(num_programs):
        start = program * chunk
        count = max(min(start + chunk, num_pid) - start, 0)
        order.append([((start + i) % num_pid_m, (start + i) // num_pid_m) for i in range(count)])
    return order


def grouped(group_size_m: int, M: int, N: int, BLOCK_M: int, BLOCK_N: int, num_programs: int) -> Order:
    """Program p takes tile ids p, p + P, ...; id t lies in group t // (G * tiles_n) of G tile rows
    (fewer in the last group), walked column by column inside the group."""
    num_pid_m = _cdiv(M, BLOCK_M)
    num_pid_n = _cdiv(N, BLOCK_N)
    num_pid_in_group = group_size_m * num_pid_n
    num_pid = num_pid_m * num_pid_n
    order = []
    for program in range(num_programs):
        tiles = []
        for idx in range(max(_cdiv(num_pid - program, num_programs), 0)):
            tile_id = program + idx * num_programs
            first_pid_m = (tile_id // num_pid_in_group) * group_size_m
            rows = min(num_pid_m - first_pid_m, group_size_m)
            local = tile_id % num_pid_in_group
            tiles.append((first_pid_m + local % rows, local // rows))
        order.append(tiles)
    return order


def grouped_1(M: int, N: int, BLOCK_M: int, BLOCK_N: int, num_programs: int) -> Order:
    return grouped(1, M, N, BLOCK_M, BLOCK_N, num_programs)


def grouped_8(M: int, N: int, BLOCK_M: int, BLOCK_N: int, num_programs: int) -> Order:
    return grouped(8, M, N, BLOCK_M, BLOCK_N, num_programs)
