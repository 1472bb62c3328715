"""Tile schedulers for persistent Gluon kernels: the order in which the programs of a persistent
launch visit the output tiles of an (M, N) matrix cut into BLOCK_M x BLOCK_N tiles.

Registered schedulers (see :mod:`tkreg_schedulers.plugin`):

- ``persistent``: program p takes one contiguous chunk of ceil(tiles / programs) tile ids,
  tile ids running down M first (tile id t -> pid_m = t % tiles_m, pid_n = t // tiles_m).
- ``grouped-1``, ``grouped-8``: tile ids strided over the programs (program p takes p, p + P,
  p + 2P, ...), each id mapped to a tile in groups of GROUP_SIZE_M rows of tiles walked column by
  column, so programs running at the same time share A rows and B columns in L2.

Adding a scheduler (any plugin can, through ``tkreg_register_schedulers``) takes two things:

1. A Gluon object ``SchedulerImpl`` that a kernel receives as a ``gl.constexpr`` argument, with

   - ``SchedulerImpl.initialize(M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr)``, a
     ``@gluon.jit`` function (no ``self``) returning a scheduler value for this program. The program
     is ``gl.program_id(0)`` and the number of programs ``gl.num_programs(0)`` (a 1-D launch grid).
   - ``scheduler.get_num_tiles()``: how many tiles this program handles (>= 0).
   - ``scheduler.get_tile(idx)`` for ``0 <= idx < get_num_tiles()``: ``(pid_m, pid_n)``, the tile's
     row and column index in tiles. Over all programs every tile must come exactly once.

   On triton 3.6 it is an ``@aggregate`` class (``triton.language.core._aggregate``) whose
   ``__init__`` is decorated ``@gluon.constexpr_function``; kernels call ``initialize`` once per
   partition, so it must be cheap and deterministic.
2. A pure-Python ``model(M, N, BLOCK_M, BLOCK_N, num_programs) -> list[list[tuple[int, int]]]``
   giving, per program, the tiles in visit order, with the same integer arithmetic. The CPU tests
   check the model's coverage; the GPU test (``tests/test_schedulers_gpu.py``) runs
   :func:`tkreg_schedulers.trace.visited_order` and compares the kernel's real order with the model.

Register both with ``tkreg.Scheduler(name, gluon="pkg.mod:Impl", model="pkg.mod:model")``.
"""

from __future__ import annotations

__all__: list[str] = []
