"""A token bucket, as client-go's ``flowcontrol`` rate limiter: ``qps`` tokens a second, at most ``burst``
saved up; each request takes one, waiting for it when none is left.

The API client (``app.kube.client``) passes every request through one, with kube-scheduler's
``clientConnection.qps`` / ``burst`` meaning, so the extender and kube-scheduler write under the same
kind of limit; the requeuer (``app.kube.requeue``) takes its own, smaller budget from another.
"""

from __future__ import annotations

from app.kube.clock import Clock, SystemClock

__all__ = ["TokenBucket"]


class TokenBucket:
    """``qps`` tokens a second (> 0), at most ``burst`` (>= 1) at once; starts full."""

    def __init__(self, qps: float, burst: int, clock: Clock | None = None) -> None:
        self.qps = qps
        self.burst = burst
        self.clock: Clock = clock or SystemClock()
        self._tokens = float(burst)
        self._at = self.clock.now()

    def _refill(self) -> None:
        now = self.clock.now()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
        self._at = now

    async def take(self) -> None:
        """Take a token, waiting for it. Waiters reserve in call order: the token is taken before the wait
        (the bucket goes negative), as client-go's limiter does."""
        self._refill()
        self._tokens -= 1.0
        if self._tokens < 0.0:
            await self.clock.sleep(-self._tokens / self.qps)
