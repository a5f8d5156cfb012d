"""``Refusal``: an HTTP request answered ``status`` with ``{"Error": message}``, nothing decided."""

from __future__ import annotations

__all__ = ["Refusal"]


class Refusal(Exception):
    """Answer ``status`` with ``{"Error": message}`` without deciding anything."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
