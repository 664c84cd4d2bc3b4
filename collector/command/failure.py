"""What stops a ``ringtrace`` subcommand: one line on stderr, and the exit status."""

from __future__ import annotations

__all__ = ["CommandError"]


class CommandError(Exception):
    """What stops a subcommand: printed as one line, and the exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status
