"""``python -m tkreg.bench``: the same command as ``tkreg bench``."""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
