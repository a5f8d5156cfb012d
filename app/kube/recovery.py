"""Restart safety: allocations left behind by a bind that never finished.

On start the index is rebuilt from the API server (the informers' first list): every allocation written
before a restart is in ``status.allocation`` and counts as in use, nothing else needs restoring.

What a restart (or an API outage during a bind) can leave is an *orphan*: a claim allocated and reserved
for a pod that never got bound (the extender stopped between the claim write and the binding). Two ways
out, whichever comes first:

* kube-scheduler tries the pod again: filter keeps only the nodes the allocation's ``nodeSelector`` admits,
  and bind finds the claim already reserved for the pod, writes nothing to it and binds the pod (reuse);
* the pod stays unbound for ``ClusterSettings.orphan_grace_period_seconds`` → ``OrphanReleaser`` removes
  the pod from ``status.reservedFor`` and, when no other consumer is left, clears the allocation and the
  finalizer (the end state the resourceclaim controller gives a claim whose consumers are gone).

Candidates: an allocated claim, a ``reservedFor`` pod entry whose pod exists with the same UID, is not bound,
not terminal and not being deleted, is not being bound by this process right now, and whose allocation has
no binding conditions (those legitimately wait before binding). Pods that no longer exist are the
resourceclaim controller's job. Before writing, the pod and the claim are re-read from the API server; the
claim write has the re-read resourceVersion as precondition. Only the active replica writes
(``app.kube.leader``). Each release is an Event on the pod (``ReleasedOrphanedAllocation``,
``app.scheduling.podevents``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from app.config.settings import ClusterSettings
from app.kube.claimbodies import release_pod, without_finalizer
from app.kube.client import CORE_PODS, ConflictError, KubeAPIError, NotFoundError, Resource
from app.kube.clock import Clock, SystemClock
from app.kube.leader import SchedulerLease
from app.kube.reservations import WrittenReservations
from app.scheduling.bindingconditions import conditioned_results
from app.scheduling.podevents import DiscardEvents, PodEvents, released_orphaned_allocation
from app.state.cluster import ClusterState, is_pending

__all__ = ["OrphanReleaser"]

log = logging.getLogger(__name__)

_Candidate = tuple[str, str, str]
"""(claim key, pod UID, pod key)"""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


class OrphanReleaser:
    """Finds and releases orphaned allocations (module docstring). ``in_flight``: UIDs of pods being
    bound now (``KubeBinder.in_flight``); ``claims``: the ResourceClaim Resource (set after discovery);
    ``events``: where each release is reported."""

    def __init__(
        self,
        client: Any,
        state: ClusterState,
        lock: AbstractContextManager[Any],
        reservations: WrittenReservations,
        settings: ClusterSettings,
        in_flight: Callable[[], set[str]],
        *,
        clock: Clock | None = None,
        leader: SchedulerLease | None = None,
        claims: Resource | None = None,
        events: PodEvents | None = None,
    ) -> None:
        self.client = client
        self.state = state
        self.lock = lock
        self.reservations = reservations
        self.settings = settings
        self.in_flight = in_flight
        self.clock: Clock = clock or SystemClock()
        self.leader = leader or SchedulerLease(client, None)
        self.claims = claims
        self.events: PodEvents = events or DiscardEvents()
        self._first_seen: dict[_Candidate, float] = {}

    async def run(self) -> None:
        """Sweep every ``orphan_check_interval_seconds`` until cancelled."""
        while True:
            await self.clock.sleep(self.settings.orphan_check_interval_seconds)
            try:
                await self.sweep()
            except KubeAPIError as e:
                log.warning("orphan check: %s", e)

    def _candidates(self) -> list[_Candidate]:
        found = []
        for key, claim in self.state.objects["ResourceClaim"].items():
            status = claim.get("status") or {}
            allocation = status.get("allocation")
            if not allocation or conditioned_results(allocation):
                continue
            namespace = key.partition("/")[0]
            for entry in status.get("reservedFor") or ():
                if not isinstance(entry, Mapping) or entry.get("resource") != "pods" or entry.get("apiGroup"):
                    continue
                pod_key = f"{namespace}/{entry.get('name')}"
                pod = self.state.get("Pod", pod_key)
                if pod is None or _meta(pod).get("uid") != entry.get("uid"):
                    continue
                if not is_pending(pod) or _meta(pod).get("deletionTimestamp"):
                    continue
                scheduler = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
                if scheduler not in self.settings.scheduler_names:
                    continue
                found.append((key, str(entry.get("uid")), pod_key))
        return found

    async def sweep(self) -> list[str]:
        """One check: expire old reservations, release orphans past the grace period. Returns the keys of
        the claims released."""
        self.reservations.expire()
        now = self.clock.now()
        with self.lock:
            candidates = self._candidates()
        current = set(candidates)
        self._first_seen = {c: t for c, t in self._first_seen.items() if c in current}
        for candidate in candidates:
            self._first_seen.setdefault(candidate, now)
        grace = self.settings.orphan_grace_period_seconds
        due = [c for c in candidates if now - self._first_seen[c] >= grace]
        if not due or self.claims is None or not await self.leader.is_leader():
            return []
        released = []
        for candidate in due:
            if candidate[1] in self.in_flight():
                continue
            try:
                if await self._release(*candidate):
                    released.append(candidate[0])
                    self._first_seen.pop(candidate, None)
            except KubeAPIError as e:
                log.warning(
                    "ResourceClaim %s: releasing for pod %s failed: %s",
                    candidate[0],
                    candidate[2],
                    e,
                    extra={"claim": candidate[0], "pod": candidate[2]},
                )
        return released

    async def _release(self, claim_key: str, pod_uid: str, pod_key: str) -> bool:
        assert self.claims is not None
        pod_namespace, _, pod_name = pod_key.partition("/")
        try:
            pod = await self.client.get(CORE_PODS, pod_namespace, pod_name)
        except NotFoundError:
            return False
        if _meta(pod).get("uid") != pod_uid or (pod.get("spec") or {}).get("nodeName"):
            return False
        namespace, _, name = claim_key.partition("/")
        try:
            claim = await self.client.get(self.claims, namespace, name)
        except NotFoundError:
            return False
        if not (claim.get("status") or {}).get("allocation"):
            return False
        body, unreserved, deallocated = release_pod(claim, pod_uid, deallocate=True)
        if not unreserved or pod_uid in self.in_flight():
            return False
        allocation = (claim.get("status") or {}).get("allocation")
        try:
            claim = await self.client.replace(self.claims, body, subresource="status")
        except ConflictError:
            return False  # changed meanwhile: decide again on the next check
        grace = self.settings.orphan_grace_period_seconds
        self.events.record(
            released_orphaned_allocation(
                pod_key, pod_uid, claim_key, allocation, deallocated=deallocated, grace_seconds=grace
            )
        )
        log.warning(
            "ResourceClaim %s: released: allocated for pod %s, which was not bound within %ss",
            claim_key,
            pod_key,
            self.settings.orphan_grace_period_seconds,
            extra={"claim": claim_key, "pod": pod_key},
        )
        unfinalized = without_finalizer(claim) if deallocated else None
        if unfinalized is not None:
            try:
                await self.client.replace(self.claims, unfinalized)
            except KubeAPIError as e:
                log.info(
                    "ResourceClaim %s: finalizer left for the resourceclaim controller: %s", claim_key, e
                )
        return True
