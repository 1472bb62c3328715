"""tkreg plugin: the ``add`` op (C = A + B on 2-D tensors) and its portable Triton kernel.

The op's checks (:mod:`.add_checks`) and the TMA tile helpers (:mod:`.tma_tiles`) are shared with
the Gluon add kernels of the ``tkreg-tma-elementwise`` and ``tkreg-warp-specialized-add`` plugins.
"""
