"""What one bind wrote (``Journal``) and how it is undone (``roll_back``), newest first: the pod status
patches, then per claim the ``reservedFor`` entry and the allocation (re-read, then ``PUT .../status``), the
finalizer the bind added and the claim it created (``app.kube.binder``'s module docstring has the order
of the writes)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from allocator.deviceuse import AllocatedDevice
from app.kube.bindwait import Wait
from app.kube.claimbodies import meta_of, release_pod, split_key, uid_of, without_finalizer
from app.kube.client import CORE_PODS, ConflictError, KubeAPIError, NotFoundError, Resource
from app.kube.reservations import WrittenReservations
from app.scheduling.binder import BindPlan
from app.state.podclaims import pod_key

__all__ = ["CONFLICT_ATTEMPTS", "Journal", "Written", "roll_back"]

log = logging.getLogger(__name__)

CONFLICT_ATTEMPTS = 5
"""Attempts per claim on 409 Conflict (client-go ``retry.DefaultRetry``: 5 steps)."""


@dataclass(slots=True)
class Written:
    """What this bind wrote to one claim (for rollback)."""

    key: str
    uid: str
    allocated: bool = False
    finalizer_added: bool = False
    status_written: bool = False
    created: bool = False
    consumer_uid: str = ""
    """The UID of the ``reservedFor`` entry written when not the pod's (its PodGroup's): the rollback leaves
    that entry and its allocation."""
    devices: tuple[AllocatedDevice, ...] = ()
    """The devices the last status write allocates (none when it only adds a ``reservedFor`` entry)."""
    sent_version: str = ""
    """The claim's resourceVersion the last status write was sent with: its precondition."""
    unconfirmed: bool = False
    """The last status write went out and neither succeeded nor was refused: the server may carry it out
    still (``WrittenReservations.fence``)."""


@dataclass(slots=True)
class Journal:
    """What one bind wrote and found, in order: what its rollback undoes and its last checks read."""

    claims: list[Written]
    pod_status: dict[str, Any] = field(default_factory=dict)
    """Each field of the pod's status the bind patched (or may have: a 5xx, or a patch its deadline cut
    short), in order, with the value that clears it."""
    outcome_unknown: bool = False
    binding_sent: bool = False
    """The binding request went out: if the bind's deadline cuts it short, the pod is read before any
    rollback (the server may have bound it)."""
    waits: list[Wait] = field(default_factory=list)
    reserved: list[tuple[str, str, Mapping[str, Any] | None]] = field(default_factory=list)
    """(key, UID, consumer) of every claim of the pod found or written reserved for it (or for the
    consumer, its PodGroup), checked before the binding."""
    fresh: str = ""
    """The claim whose status write was the bind's last request: its answer says as much as a re-read
    before the binding would (a wrong UID or a deleted claim fails the write), so it is not read again."""

    def entry(self, key: str, uid: str) -> Written:
        for written in self.claims:
            if written.key == key:
                return written
        written = Written(key, uid)
        self.claims.append(written)
        return written


async def roll_back(
    client: Any, claims: Resource, reservations: WrittenReservations, plan: BindPlan, journal: Journal
) -> None:
    """Undo what ``journal`` says the bind of ``plan`` wrote; a write that cannot be undone is logged and
    its devices stay reserved until the ResourceClaim watch shows the claim."""
    pod_uid = uid_of(plan.pod)
    namespace, name = split_key(pod_key(plan.pod))
    for status_field, cleared in reversed(journal.pod_status.items()):
        try:
            await client.patch(
                CORE_PODS, namespace, name, {"status": {status_field: cleared}}, subresource="status"
            )
        except KubeAPIError as e:
            log.error("rollback pod=%s: clearing %s: %s", pod_key(plan.pod), status_field, e)
    for written in reversed(journal.claims):
        if written.unconfirmed and written.devices:
            # Re-read or not, the server may still carry the write out later, its precondition met.
            reservations.fence(written.key, written.devices, written.sent_version)
        try:
            now_at = await _roll_back_claim(client, claims, written, pod_uid)
        except KubeAPIError as e:
            # The write stays in the API; its devices stay reserved until the watch shows the claim.
            log.error(
                "rollback pod=%s: ResourceClaim %s: %s",
                pod_key(plan.pod),
                written.key,
                e,
                extra={"pod": pod_key(plan.pod), "node": plan.node, "claim": written.key},
            )
            continue
        reservations.passed(written.key, now_at)
        reservations.release(written.key)


async def _roll_back_claim(client: Any, claims: Resource, written: Written, pod_uid: str) -> str | None:
    """Undo ``written`` on its claim. Returns the claim's resourceVersion as the rollback left it, or None
    when the claim the bind wrote is gone (deleted, or replaced by another of that name)."""
    namespace, name = split_key(written.key)
    last: ConflictError | None = None
    for _attempt in range(CONFLICT_ATTEMPTS):
        try:
            claim = await client.get(claims, namespace, name)
        except NotFoundError:
            return None
        if written.uid and uid_of(claim) != written.uid:
            return None
        try:
            # A PodGroup's entry and the allocation it holds are every member's: another member may run on
            # them, whoever wrote them. Left as they are, as upstream's Unreserve leaves claims reserved for
            # the group.
            if written.status_written and not written.consumer_uid:
                body, unreserved, deallocated = release_pod(claim, pod_uid, deallocate=written.allocated)
                if unreserved or deallocated:
                    claim = await client.replace(claims, body, subresource="status")
            if written.finalizer_added and not (claim.get("status") or {}).get("allocation"):
                unprotected = without_finalizer(claim)
                if unprotected is not None:
                    claim = await client.replace(claims, unprotected)
            if written.created:
                await client.delete(claims, namespace, name, uid=written.uid or None)
                return None
            return str(meta_of(claim).get("resourceVersion") or "")
        except ConflictError as e:
            last = e
    raise last or ConflictError(409, "Conflict", "rollback kept conflicting")
