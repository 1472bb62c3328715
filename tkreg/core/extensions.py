"""tkreg's C++ extension modules (setup.py builds them against the torch in the build): one is
used only where the torch imported now is the one it was built for, and not where
``TKREG_NATIVE=0``. Where one is not used, the Python path it stands in for serves, with the same
results."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

ENV = "TKREG_NATIVE"


def load(module: str, without: str) -> tuple[ModuleType | None, str]:
    """The extension ``module`` (a dotted name), or None, and a line saying which and why.
    ``without``: what serves instead (ends the line where the extension is not in use)."""
    if os.environ.get(ENV, "1").strip().lower() in ("0", "off", "false", "no"):
        return None, f"off ({ENV}=0): {without}"
    import torch

    try:
        built = importlib.import_module(module)
    except ImportError as e:
        return None, f"not built ({e}); {without} (reinstall with torch in the build to build it)"
    if built.torch_version != torch.__version__:
        return None, (f"built for torch {built.torch_version}, not this torch {torch.__version__}; {without} "
                      "(reinstall tkreg to rebuild it)")  # fmt: skip
    return built, f"in use (built for torch {built.torch_version})"
