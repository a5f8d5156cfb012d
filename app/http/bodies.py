"""Reading request bodies: at most ``limit`` bytes each, within a read time, and within a byte budget
shared by every body being read at once.

Without the shared budget, clients that open many connections and send large bodies slowly would make
the process hold all of them (150 partial 7 MB bodies: 1 GB); without the read time, a body that stops
arriving holds its bytes and its connection forever. Shared by the extender's verbs (``app.http.api``) and the
what-if explanation (``app.explain.pod``)."""

from __future__ import annotations

import asyncio

from starlette.requests import Request

from app.http.refusal import Refusal

__all__ = ["BODY_READ_SECONDS", "BodyBudget", "BodyRejected", "read_body"]

BODY_READ_SECONDS = 10.0
"""How long a whole body may take to arrive. kube-scheduler sends its bodies at once and gives up after
its ``httpTimeout`` (5 s by default) anyway."""


class BodyRejected(Refusal):
    """The body was not read: too large, too slow, no room, or a bad Content-Length. Answer with
    ``headers``: the connection is closed after the answer, since the rest of the body would otherwise
    still be received and thrown away (150 refused 7 MB bodies kept the event loop busy for seconds)."""

    headers = {"connection": "close"}


class BodyBudget:
    """Bytes of the bodies being read right now, across connections, at most ``max_bytes``; each body
    must arrive within ``read_seconds``. One per app; used on its event loop only."""

    def __init__(self, max_bytes: int, read_seconds: float = BODY_READ_SECONDS) -> None:
        self.max_bytes = max_bytes
        self.read_seconds = read_seconds
        self.in_use = 0


def _take(budget: BodyBudget, size: int) -> None:
    """Count ``size`` more bytes as being read. Raises BodyRejected (503) when they do not fit."""
    if budget.in_use + size > budget.max_bytes:
        raise BodyRejected(
            503, f"too many request bodies being read at once ({budget.max_bytes} bytes); retry"
        )
    budget.in_use += size


async def read_body(request: Request, limit: int, budget: BodyBudget) -> bytes:
    """The raw body, at most ``limit`` bytes. Raises BodyRejected: 413 on a larger declared or streamed
    body, 400 on a Content-Length that is not a number, 503 when ``budget`` has no room for it, 408 when
    it does not arrive within ``budget.read_seconds``."""
    declared = request.headers.get("content-length")
    reserved = 0
    if declared is not None:
        try:
            length = int(declared)
        except ValueError:
            raise BodyRejected(400, f"Content-Length: not a number: {declared!r}") from None
        if length > limit:
            raise BodyRejected(413, f"request body exceeds {limit} bytes")
        # Reserved before reading: a body refused for want of room is refused before its bytes arrive.
        reserved = max(length, 0)
        _take(budget, reserved)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(budget.read_seconds):
            # Counted while streaming as well: chunked bodies carry no Content-Length, and it may lie.
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise BodyRejected(413, f"request body exceeds {limit} bytes")
                if size > reserved:
                    _take(budget, size - reserved)
                    reserved = size
                chunks.append(chunk)
    except TimeoutError:
        raise BodyRejected(408, f"request body not received within {budget.read_seconds:g} s") from None
    finally:
        budget.in_use -= reserved
    return b"".join(chunks)
