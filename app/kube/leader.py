"""Is this replica the active one? The HA model is a sidecar of a dedicated kube-scheduler (docs/operations.md
"HA model"): kube-scheduler elects its leader with a coordination.k8s.io Lease and only the leader calls its
extender. Two extenders that both bind give devices out twice (each index sees the other's writes late),
so that is enforced here, not assumed: the binder refuses to bind, and the orphan releaser, the requeue
signal (``app.kube.requeue``) and filter's claim writes stay idle, unless this replica's kube-scheduler
holds the Lease.

kube-scheduler's leader identity is ``<hostname>_<uuid>``; the sidecar shares the pod's hostname, so the
Lease is ours when ``spec.holderIdentity`` is ``<identity>_...``. A Lease whose ``renewTime`` plus
``leaseDurationSeconds`` has passed is held by nobody: the holder stopped renewing it and a standby may
take it any moment. Our kube-scheduler writes ``renewTime`` with this node's clock, which is the clock
compared against, so no skew enters. Without a configured Lease the replica takes itself as the only one.

Cost: no API request per bind. ``run`` reads the Lease every ``scheduler_lease_retry_seconds`` (2 s,
kube-scheduler's default ``leaderElection.retryPeriod``), and ``refusal`` answers from that record. Only
an answer of "not ours" is checked again with one read before it counts (``refusal_now``), so the first
bind after a failover does not wait for the next refresh. A Lease that cannot be read keeps the last
record, which expires by itself; before any read it is not ours: a replica that writes nothing is always
safe, two that write are not.

How long two replicas may overlap: a standby's kube-scheduler takes the Lease only once it has seen no
renewal for ``leaseDurationSeconds``, by which time the record here has expired too; a kube-scheduler that
releases the Lease on shutdown (``ReleaseOnCancel``) stops calling its extender first. What is left is a
bind already running when the Lease moved, and binds arriving before the next refresh after a release:
at most ``scheduler_lease_retry_seconds``. Device conflicts that get through anyway are reported
(``app.kube.conflicts``).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.kube.client import COORDINATION_LEASES, KubeAPIError
from app.kube.clock import Clock, SystemClock

__all__ = ["LeaseRecord", "SchedulerLease"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """What a read of the Lease said (``spec``)."""

    holder: str
    renewed: float | None
    """``renewTime`` in seconds since the epoch; None when absent or unreadable."""
    duration: float | None
    """``leaseDurationSeconds``; None when absent."""

    @classmethod
    def from_lease(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        """Fields of the wrong type read as absent."""
        spec = lease.get("spec")
        if not isinstance(spec, Mapping):
            spec = {}
        duration = spec.get("leaseDurationSeconds")
        return cls(
            str(spec.get("holderIdentity") or ""),
            _epoch(spec.get("renewTime")),
            float(duration) if isinstance(duration, int | float) and not isinstance(duration, bool) else None,
        )

    def expired(self, now: float) -> bool:
        """Whether the holder stopped renewing: ``renewTime + leaseDurationSeconds`` is past ``now``
        (epoch seconds). A record without them cannot be judged and never expires."""
        return self.renewed is not None and self.duration is not None and self.renewed + self.duration < now


def _epoch(value: object) -> float | None:
    """A metav1.MicroTime (``2026-12-06T05:25:00.123456Z``) in seconds since the epoch, or None."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class SchedulerLease:
    """``lease``: ``namespace/name`` of the scheduler's Lease, or None (single replica); ``identity``: this
    pod's hostname, the prefix of its kube-scheduler's identity; ``retry_seconds``: the refresh period."""

    def __init__(
        self,
        client: Any,
        lease: str | None,
        identity: str | None = None,
        *,
        clock: Clock | None = None,
        retry_seconds: float = 2.0,
    ) -> None:
        self.client = client
        self.lease = lease
        self.identity = identity or socket.gethostname()
        self.clock: Clock = clock or SystemClock()
        self.retry_seconds = retry_seconds
        self.record: LeaseRecord | None = None
        """The last Lease read (None before the first)."""
        self._read_error = "not read yet"

    async def run(self) -> None:
        """Refresh every ``retry_seconds`` until cancelled."""
        if self.lease is None:
            return
        while True:
            await self.refresh()
            await self.clock.sleep(self.retry_seconds)

    async def refresh(self) -> None:
        """Read the Lease. A failed read keeps the previous record (it expires by itself), logged."""
        if self.lease is None:
            return
        namespace, _, name = self.lease.partition("/")
        try:
            lease = await self.client.get(COORDINATION_LEASES, namespace, name)
        except KubeAPIError as e:
            self._read_error = str(e)
            log.warning("reading Lease %s: %s", self.lease, e)
            return
        record = LeaseRecord.from_lease(lease)
        if self.record is not None and self._ours(record) != self._ours(self.record):
            log.info(
                "Lease %s: now held by %r (this replica is %s)",
                self.lease,
                record.holder,
                "active" if self._ours(record) else "a standby",
            )
        self.record = record

    def _ours(self, record: LeaseRecord) -> bool:
        return record.holder == self.identity or record.holder.startswith(f"{self.identity}_")

    def refusal(self) -> str | None:
        """From the last read: None when this replica's kube-scheduler holds the Lease (or none is
        configured), else why this replica must not write. No I/O."""
        if self.lease is None:
            return None
        record = self.record
        whose = f"this replica's kube-scheduler ({self.identity}_...)"
        if record is None:
            return (
                f"the leader Lease {self.lease} could not be read ({self._read_error}): "
                f"{whose} may not hold it"
            )
        if not self._ours(record):
            holder = f"held by {record.holder!r}" if record.holder else "held by nobody"
            return f"the leader Lease {self.lease} is {holder}, not by {whose}"
        if record.expired(self.clock.wall()):
            return (
                f"the leader Lease {self.lease} held by {record.holder!r} ({whose}) was not renewed "
                f"within its {record.duration:g}s"
            )
        return None

    async def refusal_now(self) -> str | None:
        """``refusal``, read again once when it is not None (the Lease may have just moved here)."""
        if self.refusal() is None:
            return None
        await self.refresh()
        return self.refusal()

    async def is_leader(self) -> bool:
        return await self.refusal_now() is None
