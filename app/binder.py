"""Writing a bind decision: the allocation results onto the claims, then the pod onto its node.

``SchedulingService.bind`` decides under its lock and reserves the chosen devices in the inventory; a
``Binder`` then writes the decision, outside the lock, all or nothing. ``StateBinder`` writes into the
in-memory ``ClusterState`` (offline mode); the cluster binder (Kubernetes API writes) implements the
same protocol.

What is written mirrors upstream's PreBind + Bind (extender-protocol.md §4.3, §5): the finalizer
``resource.kubernetes.io/delete-protection``, ``status.allocation`` (with ``allocationTimestamp`` only
where binding conditions apply), the pod appended to ``status.reservedFor`` as
``{resource: pods, name, uid}``, and ``spec.nodeName`` on the pod.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from app.cluster import ClusterState
from app.podclaims import PodClaim

__all__ = ["FINALIZER", "BindError", "BindPlan", "Binder", "StateBinder", "claim_after_bind"]

FINALIZER = "resource.kubernetes.io/delete-protection"


class BindError(Exception):
    """The bind could not be done; nothing was written (or everything written was rolled back)."""


@dataclass(frozen=True, slots=True)
class BindPlan:
    """What a bind writes: the pod, the node, and per claim the new allocation (None: already allocated)."""

    pod: Mapping[str, Any]
    node: str
    claims: tuple[tuple[PodClaim, dict[str, Any] | None], ...]


class Binder(Protocol):
    def bind(self, plan: BindPlan) -> None:
        """Write ``plan``. Raises BindError with nothing left written."""
        ...


def claim_after_bind(
    claim: Mapping[str, Any], allocation: dict[str, Any] | None, pod: Mapping[str, Any]
) -> dict[str, Any]:
    """A copy of ``claim`` with the finalizer, the allocation (if new) and the pod in ``reservedFor``."""
    meta = pod.get("metadata") or {}
    updated = copy.deepcopy(dict(claim))
    status = updated.setdefault("status", {})
    if allocation is not None:
        allocation = copy.deepcopy(allocation)
        if any(r.get("bindingConditions") for r in allocation["devices"]["results"]):
            # Upstream sets it only where binding conditions start the binding timeout.
            allocation["allocationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status["allocation"] = allocation
        finalizers = updated.setdefault("metadata", {}).setdefault("finalizers", [])
        if FINALIZER not in finalizers:
            finalizers.append(FINALIZER)
    reserved = status.setdefault("reservedFor", [])
    if not any(r.get("uid") == meta.get("uid") for r in reserved):
        reserved.append({"resource": "pods", "name": meta.get("name"), "uid": meta.get("uid")})
    return updated


class StateBinder:
    """Offline binder: applies the claims and the pod to the in-memory state under the state's lock."""

    def __init__(self, state: ClusterState, lock: Any) -> None:
        self.state = state
        self.lock = lock

    def bind(self, plan: BindPlan) -> None:
        claims = [claim_after_bind(pc.claim, allocation, plan.pod) for pc, allocation in plan.claims]
        pod = copy.deepcopy(dict(plan.pod))
        pod.setdefault("spec", {})["nodeName"] = plan.node
        with self.lock:
            snapshot = [self.state.get("ResourceClaim", pc.key) for pc, _ in plan.claims]
            try:
                for claim in claims:
                    self.state.apply("ResourceClaim", claim)
                self.state.apply("Pod", pod)
            except Exception as e:
                for (_claim, _), old in zip(plan.claims, snapshot, strict=True):
                    if old is not None:
                        self.state.apply("ResourceClaim", old)
                raise BindError(f"writing the bind failed: {e}") from e
