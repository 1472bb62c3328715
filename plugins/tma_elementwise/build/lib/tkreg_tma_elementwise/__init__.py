"""tkreg plugin: ``add_tma``, the add op through multi-buffered TMA loads and TMA stores."""
