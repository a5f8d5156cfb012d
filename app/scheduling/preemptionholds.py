"""Devices kept for a preemptor while its victims go: the holds of nominated pods.

Once the extender's own preemption (``app.kube.preemptor``) has chosen victims for pod P on node N, and
before it evicts the first of them, the devices P's claims would get there (the victims' devices and any
free ones the allocation takes) are reserved in the inventory under ``preemption:<pod key>``. Every other
pod's filter and bind then sees them in use, so a pod created meanwhile (one of lower priority too, which
kube-scheduler may try first while P waits out its backoff) cannot take them. kube-scheduler keeps a
nominated pod's CPU and memory on its nominated node from pods of lower or equal priority only; a hold
keeps the devices from every other pod, higher-priority ones too, until it ends (below). P's own
decisions (filter, prioritize, bind) run with its hold lifted (``lifted``, under the service lock, so no
other decision sees the gap) and see the devices free.

A hold ends when P is bound (the informer shows ``spec.nodeName``: from then on its claims hold the
devices), deleted or recreated under its name (another UID), or when its deadline passes (``expire``,
from the preemptor's loop). Holds live only in memory: a restart drops them all, and P then competes for
the devices like any pod; no device stays held forever. At most ``max_holds`` are kept (the oldest dropped
first); the eviction rate limit keeps far fewer alive.

Thread-safe through the service lock (re-entrant): the informer observer runs with it held, the other
methods take it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from allocator.deviceuse import AllocatedDevice
from app.state.cluster import ClusterState
from app.state.podclaims import pod_key

__all__ = ["Hold", "PreemptionHolds"]

log = logging.getLogger(__name__)

MAX_HOLDS = 1000
"""Holds kept at most: one per preemptor whose victims are still going."""


@dataclass(frozen=True, slots=True)
class Hold:
    """Devices on ``node`` kept for the pod with ``uid`` until ``until`` (the clock's seconds)."""

    uid: str
    node: str
    devices: tuple[AllocatedDevice, ...]
    until: float


class PreemptionHolds:
    """Pod key -> its ``Hold`` (module docstring). ``clock``: monotonic seconds (injectable for tests)."""

    def __init__(
        self,
        state: ClusterState,
        lock: AbstractContextManager[Any],
        clock: Callable[[], float] = time.monotonic,
        max_holds: int = MAX_HOLDS,
    ) -> None:
        self.state = state
        self.lock = lock
        self.clock = clock
        self.max_holds = max_holds
        self._holds: OrderedDict[str, Hold] = OrderedDict()
        self._lifted: dict[str, int] = {}
        """Pod key -> how many ``lifted`` blocks of it are open (nested decisions lift once)."""

    @staticmethod
    def token(key: str) -> str:
        return f"preemption:{key}"

    def hold(
        self, key: str, uid: str, node: str, devices: tuple[AllocatedDevice, ...], seconds: float
    ) -> None:
        """Keep ``devices`` on ``node`` for pod ``key`` (``uid``) for ``seconds``, replacing its hold."""
        with self.lock:
            self._drop(key)
            self._holds[key] = Hold(uid, node, devices, self.clock() + seconds)
            self.state.inventory.reserve(self.token(key), devices)
            while len(self._holds) > self.max_holds:
                oldest = next(iter(self._holds))
                log.warning("preemption hold of pod %s dropped: more than %d holds", oldest, self.max_holds)
                self._drop(oldest)

    def get(self, key: str) -> Hold | None:
        with self.lock:
            return self._holds.get(key)

    def release(self, key: str) -> bool:
        """End pod ``key``'s hold; False when it had none."""
        with self.lock:
            return self._drop(key)

    def expire(self) -> list[str]:
        """End the holds whose deadline passed; returns their pod keys."""
        now = self.clock()
        with self.lock:
            ended = [key for key, hold in self._holds.items() if hold.until <= now]
            for key in ended:
                log.info("preemption hold of pod %s expired before the pod was bound", key)
                self._drop(key)
        return ended

    def lifted(self, pod: Mapping[str, Any]) -> AbstractContextManager[None]:
        """While the block runs (the service lock held throughout), ``pod``'s own hold is out of the
        inventory, so its decisions see the held devices free. Nothing for a pod without a hold."""
        return self.lifted_for(pod_key(pod), str((pod.get("metadata") or {}).get("uid") or ""))

    @contextlib.contextmanager
    def lifted_for(self, key: str, uid: str) -> Iterator[None]:
        """``lifted`` for pod ``key`` with ``uid`` ("" matches any)."""
        with self.lock:
            hold = self._holds.get(key)
            if hold is None or (uid and hold.uid != uid):
                yield
                return
            depth = self._lifted.get(key, 0)
            self._lifted[key] = depth + 1
            if depth == 0:
                self.state.inventory.release(self.token(key))
            try:
                yield
            finally:
                self._lifted[key] -= 1
                if self._lifted[key] == 0:
                    del self._lifted[key]
                    current = self._holds.get(key)
                    if current is not None:
                        self.state.inventory.reserve(self.token(key), current.devices)

    def observe(self, kind: str, key: str, obj: Mapping[str, Any] | None) -> None:
        """Informer observer (the service lock held): a held pod bound, deleted or recreated ends its hold."""
        if kind != "Pod" or key not in self._holds:
            return
        uid = str(((obj or {}).get("metadata") or {}).get("uid") or "")
        if obj is None or uid != self._holds[key].uid or (obj.get("spec") or {}).get("nodeName"):
            self._drop(key)

    def _drop(self, key: str) -> bool:
        if self._holds.pop(key, None) is None:
            return False
        if key not in self._lifted:
            self.state.inventory.release(self.token(key))
        return True

    def __len__(self) -> int:
        return len(self._holds)

    def __contains__(self, key: object) -> bool:
        return key in self._holds
