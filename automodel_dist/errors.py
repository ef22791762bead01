"""Exceptions that map to the CLI's exit codes: 2 for bad input, 1 for a config that fails."""

from __future__ import annotations


class AutomodelDistError(Exception):
    """Base of every error the tool reports to a user (never shown as a traceback)."""

    exit_code = 1


class InputError(AutomodelDistError):
    """The input itself is unusable: missing file, broken YAML, schema violation, unknown preset.

    `where` is "file:line:col" (or a dotted key) and `hint` says how to fix it.
    """

    exit_code = 2

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.where = where
        self.hint = hint

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


class ValidationFailed(AutomodelDistError):
    """A recipe or layout breaks at least one rule; carries the report."""

    exit_code = 1

    def __init__(self, message: str, report: object | None = None) -> None:
        super().__init__(message)
        self.report = report


class InfeasibleError(AutomodelDistError):
    """No layout satisfies the intent; carries the closest candidates and what would make one fit."""

    exit_code = 1

    def __init__(self, message: str, *, closest: list | None = None, suggestions: list[str] | None = None) -> None:
        super().__init__(message)
        self.closest = closest or []
        self.suggestions = suggestions or []
