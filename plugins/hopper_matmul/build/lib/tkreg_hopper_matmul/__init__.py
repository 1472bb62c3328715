"""tkreg-hopper-matmul: ``matmul_hopper_ws``, a persistent, warp-specialized Gluon matmul for Hopper
(sm_90a): a producer warp feeding a TMA/mbarrier ring, wgmma consumer warpgroups, TMA-store epilogue.

- :mod:`.plugin`: the kernel spec (imports neither torch nor triton).
- :mod:`.config`: the parameters, their resource arithmetic, the launcher's choice.
- :mod:`.kernel`: the Gluon kernel.
- :mod:`.build`: block shapes, constexprs and options shared by the launcher and the AOT compile.
- :mod:`.launch`: the launcher and the AOT spec.
"""

from __future__ import annotations

__all__: list[str] = []
