"""tkreg plugin wrapping liger-kernel 0.8.5. Registration lives in tkreg_liger.plugin (no torch, no triton)."""
