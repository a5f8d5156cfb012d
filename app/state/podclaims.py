"""Which ResourceClaims a pod uses (upstream ``resourceclaim.Name`` and ``IsForPod``).

``spec.resourceClaims[i]`` names a claim directly (``resourceClaimName``) or through a template, in
which case the generated name is read from ``status.resourceClaimStatuses`` (entry missing: the claim
is not created yet; entry with no name: no claim is needed). A generated claim must be controlled by the
pod (ownerReference with ``controller: true`` and the pod's UID) or, with workload claims on
(``app.state.podgroups``), by the pod's PodGroup; a claim the pod shares with its group is reserved for the
group.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from app.state.cluster import ClusterState, object_key
from app.state.podgroups import group_claim_entry, group_reference, owned_by_pod_group, pod_group_key

__all__ = [
    "ClaimNotReady",
    "ClaimProblem",
    "PodClaim",
    "claim_names",
    "claim_problems",
    "pod_claims",
    "pod_key",
    "state_claim_problems",
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


@dataclass(frozen=True, slots=True)
class ClaimProblem:
    """Why the pod cannot use one of its claims now (ClaimNotReady's message). ``key`` is '' when no
    claim is named yet (a template's claim not made, an entry naming neither); a missing PodGroup is one
    problem for the whole pod, its names ''."""

    pod_claim_name: str
    key: str
    problem: str


def pod_key(pod: Mapping[str, Any]) -> str:
    return object_key("Pod", pod)


def claim_names(pod: Mapping[str, Any]) -> list[str]:
    """ResourceClaim names of the pod, in ``spec.resourceClaims`` order (unresolvable entries skipped),
    then the extended-resource claim of ``status.extendedResourceClaimStatus`` (KEP-5004) if any. Unlike
    ``pod_claims`` it needs no claim objects and never raises."""
    names = [claim_name for _, claim_name, _ in _references(pod) if claim_name]
    extended = (pod.get("status") or {}).get("extendedResourceClaimStatus")
    if isinstance(extended, Mapping) and extended.get("resourceClaimName"):
        names.append(extended["resourceClaimName"])
    return names


def _references(pod: Mapping[str, Any]) -> Iterator[tuple[Mapping[str, Any], Any, bool]]:
    """Each ``spec.resourceClaims`` entry that needs a ResourceClaim: the entry, the claim's name (None
    when its template has no claim made from it yet in ``status.resourceClaimStatuses``, or the entry
    names neither) and whether it comes from a template. An entry whose status gives no name needs no
    claim (the resourceclaim controller's answer for it) and is left out."""
    statuses = {
        s.get("name"): s
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
        if isinstance(s, Mapping)
    }
    for entry in (pod.get("spec") or {}).get("resourceClaims") or ():
        if entry.get("resourceClaimName"):
            yield entry, entry["resourceClaimName"], False
        elif entry.get("resourceClaimTemplateName"):
            status = statuses.get(entry.get("name"))
            if status is None:
                yield entry, None, True
            elif status.get("resourceClaimName"):
                yield entry, status["resourceClaimName"], True
        else:
            yield entry, None, False


def controlled_by(claim: Mapping[str, Any], pod_uid: str) -> bool:
    """Whether pod ``pod_uid`` controls the claim: the resourceclaim controller made it from one of the
    pod's templates, and no other pod can use it."""
    owners = (claim.get("metadata") or {}).get("ownerReferences") or []
    return any(o.get("controller") and o.get("kind") == "Pod" and o.get("uid") == pod_uid for o in owners)


def state_pod_claims(state: ClusterState, pod: Mapping[str, Any]) -> list[PodClaim]:
    """``pod_claims`` against the state, with its PodGroups when the workload-claim gates are on."""
    return pod_claims(pod, state.objects["ResourceClaim"], _state_groups(state))


def state_claim_problems(state: ClusterState, pod: Mapping[str, Any]) -> list[PodClaim | ClaimProblem]:
    """``claim_problems`` against the state, as ``state_pod_claims``."""
    return claim_problems(pod, state.objects["ResourceClaim"], _state_groups(state))


def _state_groups(state: ClusterState) -> Mapping[str, Mapping[str, Any]] | None:
    return state.objects["PodGroup"] if state.gates.workload_claims else None


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
    resolved = []
    for found in _resolve_each(pod, claims, groups):
        if isinstance(found, ClaimProblem):
            raise ClaimNotReady(found.problem)
        resolved.append(found)
    return resolved


def claim_problems(
    pod: Mapping[str, Any],
    claims: Mapping[str, Mapping[str, Any]],
    groups: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[PodClaim | ClaimProblem]:
    """Each claim the pod needs, ``pod_claims``' rules applied to every one instead of stopping at the
    first: resolved, or its ``ClaimProblem``."""
    return list(_resolve_each(pod, claims, groups))


def _resolve_each(
    pod: Mapping[str, Any],
    claims: Mapping[str, Mapping[str, Any]],
    groups: Mapping[str, Mapping[str, Any]] | None,
) -> Iterator[PodClaim | ClaimProblem]:
    """Each claim the pod needs, resolved or not; only one problem when the pod's PodGroup is missing."""
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    group_key = pod_group_key(pod) if groups is not None else None
    group = groups.get(group_key) if groups is not None and group_key else None
    if group_key and group is None and (pod.get("spec") or {}).get("resourceClaims"):
        yield ClaimProblem("", "", f"PodGroup {group_key} of the pod not found")
        return
    for entry, claim_name, from_template in _references(pod):
        name: Any = entry.get("name")  # kept as the pod has it (PodClaim.pod_claim_name)
        key = f"{namespace}/{claim_name}" if claim_name is not None else ""
        claim = claims.get(key) if key else None
        if claim_name is None:
            template = entry.get("resourceClaimTemplateName")
            problem = (
                f"pod claim {name}: ResourceClaim not created yet (template {template})"
                if from_template
                else f"pod claim {name}: neither resourceClaimName nor resourceClaimTemplateName set"
            )
        elif claim is None:
            problem = f'pod claim {name}: resourceclaim "{claim_name}" not found'
        elif (claim.get("metadata") or {}).get("deletionTimestamp"):
            problem = f'pod claim {name}: resourceclaim "{claim_name}" is being deleted'
        elif (
            from_template
            and not controlled_by(claim, str(meta.get("uid") or ""))
            and not (group_key and owned_by_pod_group(claim, pod))
        ):
            problem = f'pod claim {name}: resourceclaim "{claim_name}" was not created for this pod'
        else:
            joined = group is not None and group_claim_entry(group, entry) is not None
            reserved_for = group_reference(group) if group is not None and joined else None
            yield PodClaim(name, key, claim, reserved_for)
            continue
        yield ClaimProblem(str(name or ""), key, problem)
