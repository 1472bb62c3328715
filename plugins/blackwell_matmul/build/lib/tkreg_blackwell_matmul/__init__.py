"""tkreg-blackwell-matmul: ``matmul_blackwell_ws``, a persistent warp-specialized matmul for
data-centre Blackwell (sm_100a): a TMA load warp, a tcgen05 MMA warp, and a subtiled TMA-store
epilogue reading a double-buffered accumulator in tensor memory. Ported to triton 3.6 from the
Gluon warp-specialization tutorial.

Nobody has run it: no Blackwell GPU was available. It is verified by compiling every buffer count,
scheduler and dtype for sm_100a on a CPU machine and checking the PTX and SASS hold the tcgen05 MMA
and TMA instructions; its correctness and benchmark items skip on other GPUs with the reason.
"""

from __future__ import annotations

__all__: list[str] = []
