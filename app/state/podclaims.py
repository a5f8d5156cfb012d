"""Which ResourceClaims a pod uses (upstream ``resourceclaim.Name`` and ``IsForPod``).

``spec.resourceClaims[i]`` names a claim directly (``resourceClaimName``) or through a template, in
which case the generated name is read from ``status.resourceClaimStatuses`` (entry missing: the claim
is not created yet; entry with no name: no claim is needed). A generated claim must be controlled by the
pod (ownerReference with ``controller: true`` and the pod's UID) or, with workload claims on
(``app.state.podgroups``), by the pod's PodGroup; a claim the pod shares with its group is reserved for the
group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.state.cluster import ClusterState, object_key
from app.state.podgroups import group_claim_entry, group_reference, owned_by_pod_group, pod_group_key

__all__ = [
    "ClaimNotReady",
    "PodClaim",
    "claim_names",
    "claim_references",
    "pod_claims",
    "pod_key",
    "state_pod_claims",
]


class ClaimNotReady(Exception):
    """A claim the pod needs does not exist yet or is not usable by it (all nodes fail, retried later)."""


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One claim of the pod: the pod-level name, the claim key and the claim object."""

    pod_claim_name: str
    key: str
    claim: Mapping[str, Any]
    consumer: Mapping[str, Any] | None = None
    """The ``reservedFor`` entry to write instead of the pod's: its PodGroup's (None: the pod)."""


def pod_key(pod: Mapping[str, Any]) -> str:
    return object_key("Pod", pod)


def claim_names(pod: Mapping[str, Any]) -> list[str]:
    """ResourceClaim names of the pod, in ``spec.resourceClaims`` order (unresolvable entries skipped),
    then the extended-resource claim of ``status.extendedResourceClaimStatus`` (KEP-5004) if any. Unlike
    ``pod_claims`` it needs no claim objects and never raises."""
    names = [name for _, name in claim_references(pod) if name]
    extended = (pod.get("status") or {}).get("extendedResourceClaimStatus")
    if isinstance(extended, Mapping) and extended.get("resourceClaimName"):
        names.append(extended["resourceClaimName"])
    return names


def claim_references(pod: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(pod claim name, ResourceClaim name)`` of each ``spec.resourceClaims`` entry, in order; the
    ResourceClaim name is '' for a template the resourceclaim controller has made no claim from yet
    (``status.resourceClaimStatuses``) or an entry naming neither."""
    statuses = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
        if isinstance(s, Mapping)
    }
    return [
        (
            str(entry.get("name") or ""),
            str(
                entry.get("resourceClaimName")
                or (statuses.get(entry.get("name")) if entry.get("resourceClaimTemplateName") else None)
                or ""
            ),
        )
        for entry in (pod.get("spec") or {}).get("resourceClaims") or ()
    ]


def controlled_by(claim: Mapping[str, Any], pod_uid: str) -> bool:
    """Whether pod ``pod_uid`` controls the claim: the resourceclaim controller made it from one of the
    pod's templates, and no other pod can use it."""
    owners = (claim.get("metadata") or {}).get("ownerReferences") or []
    return any(o.get("controller") and o.get("kind") == "Pod" and o.get("uid") == pod_uid for o in owners)


def state_pod_claims(state: ClusterState, pod: Mapping[str, Any]) -> list[PodClaim]:
    """``pod_claims`` against the state, with its PodGroups when the workload-claim gates are on."""
    groups = state.objects["PodGroup"] if state.gates.workload_claims else None
    return pod_claims(pod, state.objects["ResourceClaim"], groups)


def pod_claims(
    pod: Mapping[str, Any],
    claims: Mapping[str, Mapping[str, Any]],
    groups: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[PodClaim]:
    """Resolve the pod's claims against ``claims`` (keyed ``namespace/name``); ``groups``: PodGroups by
    key when workload claims are on (None: off).

    Raises ClaimNotReady naming the pod claim when a claim is missing, deleting or not owned by the pod
    (nor by its PodGroup), or naming the PodGroup when the pod's group is not known.
    """
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    group_key = pod_group_key(pod) if groups is not None else None
    group = groups.get(group_key) if groups is not None and group_key else None
    if group_key and group is None and (pod.get("spec") or {}).get("resourceClaims"):
        raise ClaimNotReady(f"PodGroup {group_key} of the pod not found")
    statuses = {
        s.get("name"): s
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        if isinstance(s, Mapping)
    }
    resolved = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = entry.get("name")
        if entry.get("resourceClaimName"):
            claim_name, from_template = entry["resourceClaimName"], False
        elif entry.get("resourceClaimTemplateName"):
            status = statuses.get(name)
            if status is None:
                raise ClaimNotReady(
                    f"pod claim {name}: ResourceClaim not created yet (template "
                    f"{entry['resourceClaimTemplateName']})"
                )
            if not status.get("resourceClaimName"):
                continue
            claim_name, from_template = status["resourceClaimName"], True
        else:
            raise ClaimNotReady(
                f"pod claim {name}: neither resourceClaimName nor resourceClaimTemplateName set"
            )
        key = f"{namespace}/{claim_name}"
        claim = claims.get(key)
        if claim is None:
            raise ClaimNotReady(f'pod claim {name}: resourceclaim "{claim_name}" not found')
        if (claim.get("metadata") or {}).get("deletionTimestamp"):
            raise ClaimNotReady(f'pod claim {name}: resourceclaim "{claim_name}" is being deleted')
        if (
            from_template
            and not controlled_by(claim, str(meta.get("uid") or ""))
            and not (group_key and owned_by_pod_group(claim, pod))
        ):
            raise ClaimNotReady(
                f'pod claim {name}: resourceclaim "{claim_name}" was not created for this pod'
            )
        joined = group is not None and group_claim_entry(group, entry) is not None
        reserved_for = group_reference(group) if group is not None and joined else None
        resolved.append(PodClaim(name, key, claim, reserved_for))
    return resolved
