"""Time as a dependency: the informers, the binder and the recovery loop never call ``asyncio.sleep`` or
``time.monotonic`` directly, so tests run backoff, bind deadlines and grace periods without real waits.

``Clock.now()`` is monotonic seconds (only differences matter); ``wall()`` is seconds since the epoch, to
compare with timestamps the API server stores (a Lease's ``renewTime``); ``sleep`` waits; ``timeout`` is an
async context manager that cancels its body after the given number of seconds (``asyncio.timeout``
semantics: ``TimeoutError`` leaves the block).
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AbstractAsyncContextManager
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds."""
        ...

    def wall(self) -> float:
        """Seconds since the epoch."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        """Cancel the block after ``seconds``; raises ``TimeoutError`` when it fires."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        return asyncio.timeout(seconds)
