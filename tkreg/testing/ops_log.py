"""What tkreg.ops ran, read from its log: for a plugin's tests that must see their kernels chosen
(a peer fallback would pass a value check too)."""

from __future__ import annotations

import logging

LOGGER = "tkreg.ops"


class ChoiceLog(logging.Handler):
    """Collects the messages of the "tkreg.ops" logger at INFO (each plan's choice: "tkreg.ops.<op>
    calls <kernel> (...)", a backward's way, a replay refused) from :meth:`attach` on."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def attach(self) -> ChoiceLog:
        logger = logging.getLogger(LOGGER)
        logger.addHandler(self)
        logger.setLevel(logging.INFO)
        return self

    def ran(self, kernel: str, since: int = 0) -> bool:
        """Whether a line from ``since`` on says a call ran ``kernel`` (not the peer)."""
        return any(kernel in line and "peer" not in line for line in self.lines[since:])
