"""The last bind outcome per pod: when, on which node, and the error ("" when it succeeded).

A failed bind leaves nothing in the cluster (it is rolled back), so without this explain would show the node
as fitting with no trace of why the pod is still pending. Bounded like every cache here: beyond ``max_pods``
the least recently bound pod goes first. Not thread-safe: the scheduling service uses it under its lock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = ["MAX_PODS", "BindLog", "BindOutcome"]

MAX_PODS = 10_000
"""Pods whose last bind outcome is kept (a few hundred bytes each)."""


@dataclass(frozen=True, slots=True)
class BindOutcome:
    pod_uid: str
    at: str
    """RFC 3339, UTC, whole seconds."""
    node: str
    error: str
    """'' when the bind succeeded."""


def _utc_now() -> datetime:
    return datetime.now(UTC)


class BindLog:
    def __init__(self, max_pods: int = MAX_PODS, now: Callable[[], datetime] = _utc_now) -> None:
        if max_pods < 1:
            raise ValueError(f"max_pods: must be at least 1, got {max_pods}")
        self.max_pods = max_pods
        self._now = now
        self._entries: OrderedDict[str, BindOutcome] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def record(self, pod_key: str, pod_uid: str, node: str, error: str) -> None:
        at = self._now().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._entries[pod_key] = BindOutcome(pod_uid, at, node, error)
        self._entries.move_to_end(pod_key)
        while len(self._entries) > self.max_pods:
            self._entries.popitem(last=False)

    def last(self, pod_key: str, pod_uid: str) -> BindOutcome | None:
        """The last outcome of pod ``pod_key``; None when there is none, or it was another pod of that name
        (a bind without a UID is taken as this pod's)."""
        outcome = self._entries.get(pod_key)
        if outcome is None or outcome.pod_uid not in ("", pod_uid):
            return None
        return outcome
