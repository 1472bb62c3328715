"""tkreg plugin: rms_norm and layer_norm, forward and backward, as Triton kernels that also run
under the CPU interpreter.

- :mod:`.plugin`: the ops and kernels it registers (imports neither torch nor triton);
- :mod:`.op`: float64 references, inputs, outputs, cost models, torch as peer and rival;
- :mod:`.tolerances`: the per-dtype tolerances and the arithmetic behind them;
- :mod:`.kernels`: the Triton kernels; :mod:`.plans`: which kernel, blocks and warps per row width;
- :mod:`.launch`: launchers (fast checks, cached plans) and compile specs; :mod:`.checks`: what
  the kernels take, as reasons.
"""
