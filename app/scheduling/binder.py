"""Writing a bind decision: the allocation results onto the claims, then the pod onto its node.

``SchedulingService.bind`` decides under its lock and reserves the chosen devices in the inventory; a
``Binder`` then writes the decision, outside the lock, all or nothing. ``StateBinder`` writes into the
in-memory ``ClusterState`` (offline mode); the cluster binder (Kubernetes API writes) implements the
same protocol.

What is written mirrors upstream's PreBind + Bind (extender-protocol.md §4.3, §5): the finalizer
``resource.kubernetes.io/delete-protection``, ``status.allocation`` (``allocationTimestamp`` set on every
claim bound when it has none, with DRADeviceBindingConditions and DRAResourceClaimDeviceStatus on, as
upstream's bindClaim does), the pod appended to ``status.reservedFor`` as
``{resource: pods, name, uid}``, and ``spec.nodeName`` on the pod.

A pod with extended resources backed by DRA (``app.scheduling.extended``) also gets its extended-resource
claim created (``BindPlan.extended``: the claim, its allocation, written like the others) and
``pod.status.extendedResourceClaimStatus`` set, before the pod is bound; a failed bind creates nothing. A
``ClaimDeleter`` (``StateBinder`` is one) also removes an extended-resource claim left from an earlier
attempt, as kube-scheduler's PostFilter does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from allocator.deviceuse import allocated_devices, written_token
from allocator.errors import InvalidInputError
from allocator.features import FeatureGates
from app.scheduling.claimrules import admin_access_refusal
from app.scheduling.nodeallocatable import ClaimUse, claim_statuses
from app.state.cluster import ClusterState, object_key
from app.state.compact import editable_copy
from app.state.podclaims import PodClaim
from app.state.podgroups import reserves

__all__ = [
    "FINALIZER",
    "BindError",
    "BindPlan",
    "Binder",
    "ClaimDeleter",
    "ClaimReleaser",
    "ExtendedBind",
    "StateBinder",
    "claim_after_bind",
]

FINALIZER = "resource.kubernetes.io/delete-protection"


class BindError(Exception):
    """The bind could not be done; nothing was written (or everything written was rolled back)."""


@dataclass(frozen=True, slots=True)
class ExtendedBind:
    """The extended-resource claim a bind creates (KEP-5004): ``claim`` is the ResourceClaim to create
    (name chosen, unallocated), ``allocation`` its ``status.allocation``, ``pod_status`` the pod's
    ``status.extendedResourceClaimStatus``."""

    claim: Mapping[str, Any]
    allocation: dict[str, Any]
    pod_status: dict[str, Any]

    @property
    def key(self) -> str:
        return object_key("ResourceClaim", self.claim)


@dataclass(frozen=True, slots=True)
class BindPlan:
    """What a bind writes: the pod, the node, per claim the new allocation (None: already allocated), and
    the extended-resource claim to create (None: the pod needs none on this node)."""

    pod: Mapping[str, Any]
    node: str
    claims: tuple[tuple[PodClaim, dict[str, Any] | None], ...]
    extended: ExtendedBind | None = None


class Binder(Protocol):
    def bind(self, plan: BindPlan) -> None:
        """Write ``plan``. Raises BindError with nothing left written."""
        ...


@runtime_checkable
class ClaimDeleter(Protocol):
    def delete_claim(self, key: str, uid: str) -> bool:
        """Delete the ResourceClaim ``namespace/name`` if it still has ``uid``; True when it is gone."""
        ...


@runtime_checkable
class ClaimReleaser(Protocol):
    def release_claim(self, claim: Mapping[str, Any], pod_uid: str) -> bool:
        """Deallocate ``claim`` as filter saw it (reserved for nobody or only pod ``pod_uid``), with its
        resourceVersion as precondition; True when written, False when it changed meanwhile."""
        ...


def claim_after_bind(
    claim: Mapping[str, Any],
    allocation: dict[str, Any] | None,
    pod: Mapping[str, Any],
    gates: FeatureGates,
    consumer: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A copy of ``claim`` with the finalizer, the allocation (if new) and the pod in ``reservedFor``, or
    ``consumer`` (the pod's PodGroup, ``PodClaim.consumer``) instead once for all its pods."""
    meta = pod.get("metadata") or {}
    updated = editable_copy(dict(claim))
    status = updated.setdefault("status", {})
    if allocation is not None:
        status["allocation"] = editable_copy(allocation)
        finalizers = updated.setdefault("metadata", {}).setdefault("finalizers", [])
        if FINALIZER not in finalizers:
            finalizers.append(FINALIZER)
    if gates.DRADeviceBindingConditions and gates.DRAResourceClaimDeviceStatus:
        # Upstream stamps every claim it binds, new or shared, not only those with binding conditions: the
        # binding timeout of devices with conditions counts from it.
        status["allocation"].setdefault(
            "allocationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        )
    reserved = status.setdefault("reservedFor", [])
    if not reserves(reserved, str(meta.get("uid") or ""), consumer):
        entry = {"resource": "pods", "name": meta.get("name"), "uid": meta.get("uid")}
        reserved.append(dict(consumer) if consumer is not None else entry)
    return updated


def node_allocatable_statuses(state: ClusterState, plan: BindPlan) -> list[dict[str, Any]]:
    """``pod.status.nodeAllocatableResourceClaimStatuses`` for the bind (``app.scheduling.nodeallocatable``;
    [] with DRANodeAllocatableResources off or without such devices). Raises InvalidInputError."""
    if not state.gates.DRANodeAllocatableResources:
        return []
    uses = [
        ClaimUse(
            pc.key, pc.pod_claim_name, allocation or (pc.claim.get("status") or {}).get("allocation") or {}
        )
        for pc, allocation in plan.claims
    ]
    if plan.extended is not None:
        uses.append(ClaimUse(plan.extended.key, None, plan.extended.allocation))
    return claim_statuses(plan.pod, uses, state.node_allocatable_slice_objects())


def _admin_access_refusal(state: ClusterState, key: str, allocation: Mapping[str, Any] | None) -> str:
    """The API server's refusal of an allocation granting admin access in a namespace without the label
    (``AuthorizedForAdminStatus``), or ''."""
    results = ((allocation or {}).get("devices") or {}).get("results") or ()
    return admin_access_refusal(state, key) if any(r.get("adminAccess") for r in results) else ""


def _allocation(claim: Mapping[str, Any]) -> Mapping[str, Any]:
    return (claim.get("status") or {}).get("allocation") or {}


class StateBinder:
    """Offline binder: applies the claims and the pod to the in-memory state under the state's lock."""

    def __init__(self, state: ClusterState, lock: Any) -> None:
        self.state = state
        self.lock = lock

    def bind(self, plan: BindPlan) -> None:
        pod = editable_copy(dict(plan.pod))
        pod.setdefault("spec", {})["nodeName"] = plan.node
        created = None
        if plan.extended is not None:
            created = claim_after_bind(
                plan.extended.claim, plan.extended.allocation, plan.pod, self.state.gates
            )
            status = pod.get("status")
            if not isinstance(status, dict):
                status = pod["status"] = {}
            status["extendedResourceClaimStatus"] = editable_copy(plan.extended.pod_status)
        with self.lock:
            try:
                statuses = node_allocatable_statuses(self.state, plan)
            except InvalidInputError as e:
                raise BindError(str(e)) from e
            if statuses:
                pod.setdefault("status", {})["nodeAllocatableResourceClaimStatuses"] = statuses
            if plan.extended is not None and self.state.get("ResourceClaim", plan.extended.key) is not None:
                raise BindError(f"ResourceClaim {plan.extended.key} already exists")
            snapshot = [self.state.get("ResourceClaim", pc.key) for pc, _ in plan.claims]
            # Written from the claims as they are now, not as planned: a concurrent bind of another pod
            # sharing a claim may have appended its own reservedFor entry meanwhile.
            claims = []
            for (pc, allocation), current in zip(plan.claims, snapshot, strict=True):
                if current is None:
                    raise BindError(f"ResourceClaim {pc.key} was deleted")
                if allocation is not None and (current.get("status") or {}).get("allocation"):
                    raise BindError(f"ResourceClaim {pc.key} got allocated elsewhere in the meantime")
                refusal = _admin_access_refusal(self.state, pc.key, allocation)
                if refusal:
                    raise BindError(refusal)
                claims.append(claim_after_bind(current, allocation, plan.pod, self.state.gates, pc.consumer))
            # Reserved as written while applied, as the live binder's writes are until the watch shows
            # them: holds planned meanwhile on the node stay valid (Inventory.availability_version).
            written = [c for c in (*claims, created) if c is not None]
            keys = [object_key("ResourceClaim", c) for c in written]
            try:
                for key, claim in zip(keys, written, strict=True):
                    devices = allocated_devices(_allocation(claim), f"ResourceClaim {key}")
                    self.state.inventory.reserve(written_token(key), devices)
                for claim in claims:
                    self.state.apply("ResourceClaim", claim)
                if created is not None:
                    self.state.apply("ResourceClaim", created)
                self.state.apply("Pod", pod)
            except Exception as e:
                for old in snapshot:
                    if old is not None:
                        self.state.apply("ResourceClaim", old)
                if plan.extended is not None:
                    self.state.remove("ResourceClaim", plan.extended.key)
                raise BindError(f"writing the bind failed: {e}") from e
            finally:
                for key in keys:
                    self.state.inventory.release(written_token(key))

    def delete_claim(self, key: str, uid: str) -> bool:
        with self.lock:
            current = self.state.get("ResourceClaim", key)
            if current is not None and str((current.get("metadata") or {}).get("uid") or "") == uid:
                self.state.remove("ResourceClaim", key)
                current = None
            return current is None
