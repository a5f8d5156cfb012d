"""Checks of a pod's claims around the allocator, as upstream's DynamicResources plugin makes them.

* a request with ``firstAvailable`` while DRAPrioritizedList is off makes the pod unschedulable on every
  node (the plugin's PreFilter, ``dynamicresources.go``), before the allocator would fail it;
* admin access (KEP-5018, ``DRAAdminAccess``): only in a namespace labelled
  ``resource.kubernetes.io/admin-access: "true"``. The API server checks it when a claim is created and
  when an allocation with adminAccess results is written (``pkg/registry/resource/utils.go``
  ``AuthorizedForAdmin`` / ``AuthorizedForAdminStatus``); kube-scheduler never does, so a claim whose
  namespace lost the label is allocated like any other and only its write is refused
  (``admin_access_refusal`` gives the API server's reason);
* an allocated claim admits a node through its allocation's ``nodeSelector``, its
  ``skipNodeOperations`` devices need a node declaring ``DRAOptionalNodeOperations`` (KEP-5945), and its
  ``status.reservedFor`` holds at most ``ResourceClaimReservedForMaxSize`` consumers;
* an allocated claim that can never be bound (a binding failure condition True, or its binding timeout
  passed: ``app.scheduling.bindingconditions``) fails every node;
* a pod without claims and without domain-qualified resources needs no devices at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from allocator.features import FeatureGates
from allocator.model import Claim
from allocator.nodeoperations import DECLARED_FEATURE, requires_declared_feature
from allocator.nodeselector import Node, parse_node_selector
from app.scheduling.bindingconditions import unusable_reason
from app.scheduling.extended import ExtendedClaim
from app.state.cluster import ClusterState
from app.state.podclaims import PodClaim
from app.state.podgroups import reserves

__all__ = [
    "EffectiveClaims",
    "admin_access_refusal",
    "allocated_claims_reason",
    "has_allocation",
    "is_allocated",
    "needs_no_devices",
    "prefilter_reason",
    "unusable_claim",
]

ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"

MAX_RESERVED_FOR = 256
"""``ResourceClaimReservedForMaxSize``."""


@dataclass(frozen=True, slots=True)
class EffectiveClaims:
    """The claims a pod needs on one node: ``allocated`` ones (their ``nodeSelector`` must admit the
    node) and ``pending`` ones to allocate together, in order, the node's extended-resource claim last
    (``extended``; None when the pod needs none there)."""

    allocated: list[PodClaim]
    pending: list[Claim]
    extended: ExtendedClaim | None


def prefilter_reason(claims: list[Claim], gates: FeatureGates) -> str:
    """Why kube-scheduler's PreFilter finds ``claims`` (pending, in the pod's order) unschedulable on every
    node before any allocation, or '': a request with subrequests while DRAPrioritizedList is off."""
    if gates.DRAPrioritizedList:
        return ""
    for claim in claims:
        for request in claim.requests:
            if request.first_available:
                return (
                    f"resource claim {claim.key}, request {request.name}: has subrequests, but the "
                    "DRAPrioritizedList feature is disabled"
                )
    return ""


def admin_access_refusal(state: ClusterState, claim_key: str) -> str:
    """Why the API server refuses admin access for the claim ``namespace/name`` (KEP-5018: only in
    namespaces labelled ``resource.kubernetes.io/admin-access: "true"``), or '' when it admits it. The
    caller asks only for a claim requesting (or an allocation granting) admin access."""
    namespace_name = claim_key.partition("/")[0]
    namespace = state.get("Namespace", namespace_name) or {}
    labels = (namespace.get("metadata") or {}).get("labels") or {}
    if labels.get(ADMIN_ACCESS_LABEL) == "true":
        return ""
    return (
        f"claim {claim_key}: admin access to devices requires the `{ADMIN_ACCESS_LABEL}: true` label "
        f"on the containing namespace {namespace_name}"
    )


def allocated_claims_reason(allocated: list[PodClaim], node: Node, pod: Mapping[str, Any]) -> str:
    """Why the pod's ``allocated`` claims rule ``node`` out for it, or '' when they admit it."""
    uid = (pod.get("metadata") or {}).get("uid")
    for pc in allocated:
        status = pc.claim.get("status") or {}
        selector = status["allocation"].get("nodeSelector")
        where = f"ResourceClaim {pc.key}: nodeSelector"
        if selector and not parse_node_selector(selector, where).matches(node):
            return f"claim {pc.key} is allocated for other nodes"
        if requires_declared_feature(status["allocation"]) and DECLARED_FEATURE not in node.declared_features:
            return f"claim {pc.key} allocation requires {DECLARED_FEATURE} feature on the node"
        reserved = status.get("reservedFor") or []
        if len(reserved) >= MAX_RESERVED_FOR and not reserves(reserved, str(uid), pc.consumer):
            return f"claim {pc.key} is reserved for {MAX_RESERVED_FOR} consumers already"
    return ""


def unusable_claim(
    allocated: list[PodClaim], gates: FeatureGates, binding_timeout_seconds: float
) -> tuple[PodClaim, str] | None:
    """The first allocated claim that can never be bound, and why. Raises InvalidInputError for a
    malformed ``allocationTimestamp``."""
    now = datetime.now(UTC)
    for pc in allocated:
        why = unusable_reason(pc.claim, gates, binding_timeout_seconds, now, f"ResourceClaim {pc.key}")
        if why:
            return pc, why
    return None


def needs_no_devices(pod: Mapping[str, Any]) -> bool:
    """No pod claims and no resource name with a domain (every extended resource, and so every resource a
    DeviceClass can back, is domain-qualified): the pod fits every node as far as DRA goes."""
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return False
    for container in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
        resources = container.get("resources") if isinstance(container, Mapping) else None
        if not isinstance(resources, Mapping):
            continue
        for kind in ("requests", "limits"):
            if any("/" in str(name) for name in resources.get(kind) or {}):
                return False
    return True


def is_allocated(pc: PodClaim) -> bool:
    return has_allocation(pc.claim)


def has_allocation(claim: Mapping[str, Any] | None) -> bool:
    return bool(((claim or {}).get("status") or {}).get("allocation"))
