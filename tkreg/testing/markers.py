"""pytest marks for the tests of tkreg and of plugins."""

from __future__ import annotations

import pytest

from ..core.platform import interpreter_blocker

_BLOCKED = interpreter_blocker()
# For a test that runs kernels under Triton's interpreter whatever the machine (a subprocess with
# TRITON_INTERPRET=1): skipped, with the reason, where the interpreter cannot run (numpy >= 2.4
# under triton 3.6), as the generated interpreter items are.
runs_the_interpreter = pytest.mark.skipif(_BLOCKED is not None, reason=_BLOCKED or "")
