"""tkreg-matmul: the ``matmul`` op (C = A @ B, fp16/bf16 inputs, fp32 accumulation, output in the
input dtype), the portable Triton kernel ``matmul_triton``, and what the Gluon matmul plugins share:

- :mod:`tkreg_matmul.op`: reference, inputs, cost, tolerance scale, gradient formula (the op's contract;
  its peer is torch.matmul itself).
- :mod:`tkreg_matmul.triton_kernel`: ``matmul_triton`` (any CUDA GPU >= 8.0, and the interpreter);
  :mod:`tkreg_matmul.configs` its parameter sets and default choice, :mod:`tkreg_matmul.triton_aot`
  its ahead-of-time compile.
- :mod:`tkreg_matmul.output`: ``output_for(a, b, out)``, the output every matmul launcher writes.
- :mod:`tkreg_matmul.checks`: input checks for TMA-based matmuls, duck-typed (no torch/triton import).
- :mod:`tkreg_matmul.gluon_common`: the ``Counter`` aggregate (index and phase over a ring of
  mbarriers), TMA descriptors for A, B and C, and ``validate_gluon_matmul``.
"""

from __future__ import annotations

__all__: list[str] = []
