"""Reading request bodies: at most ``limit`` bytes, refused early (413) when declared or streamed larger.

Shared by the extender's verbs (``app.api``) and the what-if explanation (``app.explain_api``)."""

from __future__ import annotations

from starlette.requests import Request

__all__ = ["BodyRejected", "read_body"]


class BodyRejected(Exception):
    """Answer ``status`` with ``{"Error": message}`` without deciding anything."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, at most ``limit`` bytes. Raises BodyRejected (413) on a larger declared or streamed
    body, (400) on a Content-Length that is not a number."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            length = int(declared)
        except ValueError:
            raise BodyRejected(400, f"Content-Length: not a number: {declared!r}") from None
        if length > limit:
            raise BodyRejected(413, f"request body exceeds {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    # Counted while streaming as well: chunked bodies carry no Content-Length, and it may lie.
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyRejected(413, f"request body exceeds {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
