"""tkreg plugin: ``add_warp_specialized``, the add op with TMA load, compute and TMA store
partitions talking through mbarriers (the warp-specialization seed, ported to triton 3.6)."""
