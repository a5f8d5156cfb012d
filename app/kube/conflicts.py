"""A second writer, detected: devices that the ResourceClaims seen by the informers give to two claims.

The binder refuses to bind unless this replica's kube-scheduler holds the leader Lease (``app.kube.leader``),
but other writers exist: a second extender without ``--scheduler-lease`` (it takes itself as the only one),
the default scheduler's in-tree DynamicResources plugin allocating a pod that forgot ``schedulerName``,
another scheduler or a person. What no correct allocator writes is a device in the allocation of two
claims, one of which has it whole (``Inventory.double_allocations``); every replica checks for that, the
standbys included, since they see the same claims.

Checked every ``orphan_check_interval_seconds`` with one pass over the allocated devices (under the service
lock; a fast path skips a device with a single holder). A conflict counts once it is seen at two checks in
a row: during a relist the index may briefly hold a claim's old allocation next to the new holder's (the
list applies its pages before it drops what is gone), a real double allocation stays until a pod goes.
Each conflict is logged once at ERROR, naming the device and the claims, and counted
(``dra_extender_device_conflicts_total``); only current conflicts are remembered.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from typing import Any

from prometheus_client import Counter
from prometheus_client.registry import Collector

from allocator.model import DeviceID
from app.kube.clock import Clock, SystemClock
from app.state.cluster import ClusterState

__all__ = ["DeviceConflicts"]

log = logging.getLogger(__name__)

_Conflict = tuple[DeviceID, tuple[str, ...]]


class DeviceConflicts:
    """Reports devices allocated to two claims (module docstring); ``collectors()`` for ``/metrics``."""

    def __init__(
        self,
        state: ClusterState,
        lock: AbstractContextManager[Any],
        interval_seconds: float,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.state = state
        self.lock = lock
        self.interval_seconds = interval_seconds
        self.clock: Clock = clock or SystemClock()
        self.reported = Counter(
            "dra_extender_device_conflicts",
            "Devices seen allocated to two ResourceClaims (another writer allocates).",
            registry=None,
        )
        self._seen: set[_Conflict] = set()
        self._reported: set[_Conflict] = set()

    def collectors(self) -> tuple[Collector, ...]:
        return (self.reported,)

    async def run(self) -> None:
        """Check every ``interval_seconds`` until cancelled."""
        while True:
            await self.clock.sleep(self.interval_seconds)
            self.check()

    def check(self) -> list[_Conflict]:
        """One check; returns the conflicts reported now (seen at the previous check too, not yet
        reported)."""
        with self.lock:
            current = set(self.state.inventory.double_allocations())
        new = sorted((current & self._seen) - self._reported)
        for device, claims in new:
            log.error(
                "device %s is allocated to %d ResourceClaims: %s; another writer allocates devices "
                "(a second extender without --scheduler-lease, a scheduler with the DynamicResources plugin "
                "for pods that forgot schedulerName, or a person); delete all but one of the pods",
                "/".join(device),
                len(claims),
                ", ".join(claims),
                extra={"claim": claims[0], "device": "/".join(device)},
            )
        self.reported.inc(len(new))
        self._reported = (self._reported & current) | set(new)
        self._seen = current
        return new
