"""What launchers use: input checks that raise :class:`tkreg.InputError` before any launch
(:mod:`.inputs`), TMA descriptors (:mod:`.tma`), launches with little host time
(:mod:`.fastlaunch`) and ahead-of-time compile specs (:mod:`.aot`). Builds on the core only."""
