"""Is this replica the active one? The HA model is a sidecar of a dedicated kube-scheduler (README "Cluster
mode"): kube-scheduler elects its leader with a coordination.k8s.io Lease, only the leader calls its extender,
so binds reach one extender only. The extender writes outside binds only to release orphaned allocations
(``app.kube.recovery``) and to signal rejected pods (``app.kube.requeue``); ``SchedulerLease`` lets it do
that only next to the leader.

kube-scheduler's leader identity is ``<hostname>_<uuid>``; the sidecar shares the pod's hostname, so the
replica is active when the Lease's ``spec.holderIdentity`` starts with ``<hostname>_``. Without a configured
Lease the replica takes itself as the only one. When the Lease cannot be read the answer is "not leader":
releasing nothing is always safe, releasing from two replicas is not.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

from app.kube.client import COORDINATION_LEASES, KubeAPIError

__all__ = ["SchedulerLease"]

log = logging.getLogger(__name__)


class SchedulerLease:
    """``lease``: ``namespace/name`` of the scheduler's Lease, or None (single replica)."""

    def __init__(self, client: Any, lease: str | None, identity: str | None = None) -> None:
        self.client = client
        self.lease = lease
        self.identity = identity or socket.gethostname()

    async def is_leader(self) -> bool:
        if self.lease is None:
            return True
        namespace, _, name = self.lease.partition("/")
        try:
            lease = await self.client.get(COORDINATION_LEASES, namespace, name)
        except KubeAPIError as e:
            log.warning("reading Lease %s: %s; acting as a standby", self.lease, e)
            return False
        holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
        return holder == self.identity or holder.startswith(f"{self.identity}_")
