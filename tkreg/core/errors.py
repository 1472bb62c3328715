"""Exceptions raised by tkreg; each carries what went wrong and what would be right."""

from __future__ import annotations


class TkregError(Exception):
    """Base class of every error tkreg raises on purpose."""


class SpecError(TkregError, ValueError):
    """An op, kernel or scheduler spec is invalid. Names the spec and the field."""

    def __init__(self, kind: str, name: str, field: str, problem: str) -> None:
        self.kind, self.name, self.field, self.problem = kind, name, field, problem
        super().__init__(f"{kind} {name!r}: field {field!r}: {problem}")


class UnknownNameError(TkregError, LookupError):
    """A name (op, kernel, scheduler, plugin) that nobody registered; lists the known ones."""

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        self.kind, self.name, self.known = kind, name, sorted(known)
        listing = ", ".join(self.known) if self.known else "none registered"
        super().__init__(f"unknown {kind} {name!r}; known {kind}s: {listing}")

    def __str__(self) -> str:  # KeyError-style quoting would hide the message
        return self.args[0]


class RegistrationError(TkregError):
    """A spec could not be registered (duplicate name, op nobody defines, ...)."""


class InputError(TkregError, ValueError):
    """A kernel was called with inputs it cannot handle; raised before any launch."""


class RequirementError(TkregError, RuntimeError):
    """A kernel was asked to run where its requirements do not hold."""
