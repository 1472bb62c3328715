"""tkreg plugin: the ``sum_row`` op (sum over the last dim of a 2-D tensor) and its kernels.

- ``seed_kernels``: the three block-pointer kernels of the tutorial, corrected (boundary checks,
  constexpr block sizes, fp32 accumulation, output in the input dtype, strided inputs).
- ``tiled``: ``sum_row_tiled``, built to read memory at bandwidth on every shape: 2-D tiles of
  several rows for narrow rows, and very wide rows split across programs with a deterministic
  second pass when there are too few rows to fill the GPU.
"""
