"""The resourceclaim controller's claim creation, offline: ResourceClaims for pods that use templates.

Upstream (``kubernetes/kubernetes`` ``pkg/controller/resourceclaim/controller.go``, ``syncPod`` /
``handleClaim``): for every pod claim ``spec.resourceClaims[i]`` with ``resourceClaimTemplateName`` and no
entry in ``pod.status.resourceClaimStatuses``, kube-controller-manager creates a ResourceClaim from the
template and records ``{name: <podClaimName>, resourceClaimName: <claim>}`` in the pod status. The claim is::

    metadata:
      generateName: <pod>-<podClaimName>-   (both parts cut proportionally when longer than 57 characters)
      name:         <generateName><5 characters>  (apiserver names.SimpleNameGenerator)
      namespace:    <pod namespace>
      labels:       template.spec.metadata.labels
      annotations:  template.spec.metadata.annotations + resource.kubernetes.io/pod-claim-name: <podClaimName>
      ownerReferences: [{apiVersion: v1, kind: Pod, name, uid, controller: true, blockOwnerDeletion: true}]
    spec: template.spec.spec

Differences from upstream, on purpose:

* The 5 characters are not random: they are derived from a hash of ``namespace/pod/podClaimName`` (same
  alphabet as ``k8s.io/apimachinery/pkg/util/rand``), so reloading a state directory gives the same names.
  The claim ``uid`` is ``stable_uid`` of its name for the same reason.
* A pod status that already names a claim is left alone even when that claim is missing (upstream would
  re-create it); the scheduler reports the missing claim.
* A missing template leaves the pod alone (upstream retries); the scheduler reports it.

As upstream, pods being deleted (``metadata.deletionTimestamp``) are skipped, and an existing claim that is
controlled by the pod and annotated with the pod claim name is adopted instead of creating a second one
(``findPodResourceClaim``). Admin-access gating is not checked here (DRAAdminAccess is GA and locked).
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from app.state.convert import V1
from app.state.podgroups import GROUP, POD_GROUP_VERSIONS, group_claim_entry, pod_group_key
from app.state.statedir import ClusterObjects
from app.state.uids import stable_uid

__all__ = [
    "GENERATE_NAME_MAX_BASE_LENGTH",
    "POD_CLAIM_NAME_ANNOTATION",
    "claim_generate_name",
    "claim_name",
    "generate_template_claims",
    "name_suffix",
]

Obj = dict[str, Any]

POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
GENERATE_NAME_MAX_BASE_LENGTH = 57
"""Upstream ``maxBaseLen``: leaves room for the generated suffix in a 63-character name."""

_SUFFIX_LENGTH = 5
# k8s.io/apimachinery/pkg/util/rand: no vowels (no accidental words), no 0/1/3 (look like letters).
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def name_suffix(seed: str) -> str:
    """The 5 characters the apiserver appends to a ``generateName``, derived from a hash of ``seed`` instead
    of drawn at random (same seed, same suffix)."""
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(_SUFFIX_ALPHABET[byte % len(_SUFFIX_ALPHABET)] for byte in digest[:_SUFFIX_LENGTH])


def claim_generate_name(pod_name: str, pod_claim_name: str) -> str:
    """``generateName`` of a template claim, exactly as ``handleClaim`` computes it.

    ``<pod>-<podClaimName>-``; when that is longer than 57 characters both names are cut in proportion to
    their lengths and joined by one ``-`` (upstream then has no trailing hyphen, and neither do we).
    """
    base = f"{pod_name}-{pod_claim_name}-"
    if len(base) <= GENERATE_NAME_MAX_BASE_LENGTH:
        return base
    # Go's integer division on non-negative ints is Python's floor division.
    pod_part = pod_name[: len(pod_name) * GENERATE_NAME_MAX_BASE_LENGTH // len(base)]
    claim_part = pod_claim_name[: len(pod_claim_name) * GENERATE_NAME_MAX_BASE_LENGTH // len(base)]
    return f"{pod_part}-{claim_part}"


def claim_name(namespace: str, pod_name: str, pod_claim_name: str, attempt: int = 0) -> str:
    """The deterministic generated name: ``claim_generate_name`` plus 5 characters from a hash.

    ``attempt`` > 0 gives another suffix (used when the first name is already taken in the namespace).
    """
    return claim_generate_name(pod_name, pod_claim_name) + name_suffix(
        f"{namespace}/{pod_name}/{pod_claim_name}#{attempt}"
    )


def generate_template_claims(objects: ClusterObjects, *, workload_claims: bool = False) -> list[str]:
    """Create the missing template claims of all pods in ``objects`` (in place) and return notes.

    Adds ResourceClaims to ``objects.resource_claims`` and appends ``{name, resourceClaimName}`` entries to
    the pods' ``status.resourceClaimStatuses``. Pods without ``metadata.uid`` get ``stable_uid`` first.
    With ``workload_claims`` (``app.state.podgroups``) PodGroups get their template claims first (owned by the
    group, recorded in its status) and a member pod's matching claim records the group's claim.
    Notes: one line per created or adopted claim and per pod claim whose template is missing.
    """
    templates = {_key(t): t for t in objects.resource_claim_templates}
    taken = {_key(c) for c in objects.resource_claims}
    notes: list[str] = []
    groups: dict[tuple[str, str], Obj] = {}
    if workload_claims:
        for group in objects.pod_groups:
            if not (group.get("metadata") or {}).get("deletionTimestamp"):
                groups[_key(group)] = group
                notes.extend(_sync_group(group, templates, taken, objects.resource_claims))
    for pod in objects.pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        notes.extend(_sync_pod(pod, templates, taken, objects.resource_claims, groups))
    return notes


def _sync_group(
    group: Obj, templates: dict[tuple[str, str], Obj], taken: set[tuple[str, str]], claims: list[Obj]
) -> list[str]:
    """Upstream ``syncPodGroup`` / ``handlePodGroupClaim``: one claim per template entry of the group."""
    metadata = group.setdefault("metadata", {})
    metadata.setdefault("namespace", "default")
    if not metadata.get("uid"):
        metadata["uid"] = stable_uid("PodGroup", metadata["namespace"], metadata["name"])
    recorded = {e.get("name") for e in (group.get("status") or {}).get("resourceClaimStatuses") or ()}
    owner = {
        "apiVersion": f"{GROUP}/{POD_GROUP_VERSIONS[0]}",
        "kind": "PodGroup",
        "name": metadata["name"],
        "uid": metadata["uid"],
        "controller": True,
    }
    notes = []
    for entry in (group.get("spec") or {}).get("resourceClaims") or ():
        template_name = entry.get("resourceClaimTemplateName")
        if not template_name or entry["name"] in recorded:
            continue
        claim, note = _claim_for(group, owner, entry["name"], template_name, templates, taken, claims)
        notes.append(f"PodGroup {metadata['namespace']}/{metadata['name']}: claim {entry['name']}: {note}")
        if claim is not None:
            recorded_as = {"name": entry["name"], "resourceClaimName": claim["metadata"]["name"]}
            _claim_statuses(group).append(recorded_as)
    return notes


def _sync_pod(
    pod: Obj,
    templates: dict[tuple[str, str], Obj],
    taken: set[tuple[str, str]],
    claims: list[Obj],
    groups: dict[tuple[str, str], Obj],
) -> list[str]:
    metadata = pod.setdefault("metadata", {})
    metadata.setdefault("namespace", "default")
    if not metadata.get("uid"):
        metadata["uid"] = stable_uid("Pod", metadata["namespace"], metadata["name"])
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    recorded = {entry.get("name") for entry in statuses if isinstance(entry, dict)}
    notes: list[str] = []
    group_key = pod_group_key(pod)
    group = groups.get(_key_of(group_key)) if group_key else None
    owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": metadata["name"],
        "uid": metadata["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    for pod_claim in (pod.get("spec") or {}).get("resourceClaims") or []:
        template_name = pod_claim.get("resourceClaimTemplateName")
        if not template_name or pod_claim.get("name") in recorded:
            continue
        if group is not None and group_claim_entry(group, pod_claim) is not None:
            # The group's claim: recorded once the group has one (upstream handleClaim).
            name = _group_claim_name(group, pod_claim["name"])
            if name:
                _claim_statuses(pod).append({"name": pod_claim["name"], "resourceClaimName": name})
            continue
        claim, note = _claim_for(pod, owner, pod_claim["name"], template_name, templates, taken, claims)
        notes.append(f"pod {metadata['namespace']}/{metadata['name']}: pod claim {pod_claim['name']}: {note}")
        if claim is not None:
            # Upstream applies the status with server-side apply (list map keyed by name); the entry is new.
            _claim_statuses(pod).append(
                {"name": pod_claim["name"], "resourceClaimName": claim["metadata"]["name"]}
            )
    return notes


def _group_claim_name(group: Obj, claim_name: str) -> str | None:
    for entry in (group.get("status") or {}).get("resourceClaimStatuses") or ():
        if entry.get("name") == claim_name:
            return entry.get("resourceClaimName")
    return None


def _key_of(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


def _claim_for(
    consumer: Obj,
    owner: Obj,
    pod_claim_name: str,
    template_name: str,
    templates: dict[tuple[str, str], Obj],
    taken: set[tuple[str, str]],
    claims: list[Obj],
) -> tuple[Obj | None, str]:
    """The claim to record for a pod's (or PodGroup's) claim, adopted or created, and a note; None:
    template missing. ``owner``: the claim's controller ownerReference."""
    claim = _find_claim(claims, consumer, owner, pod_claim_name)
    if claim is not None:
        return claim, f"adopted ResourceClaim {claim['metadata']['name']}"
    namespace = consumer["metadata"]["namespace"]
    template = templates.get((namespace, template_name))
    if template is None:
        return None, f"ResourceClaimTemplate {namespace}/{template_name} not found; no claim created"
    name = _free_name(consumer, pod_claim_name, taken)
    claim = _claim_from_template(consumer, owner, pod_claim_name, template, name)
    claims.append(claim)
    taken.add(_key(claim))
    return (
        claim,
        f"created ResourceClaim {claim['metadata']['name']} from ResourceClaimTemplate {template_name}",
    )


def _claim_statuses(pod: Obj) -> list[Any]:
    """``pod.status.resourceClaimStatuses``, created empty when absent (the pod is our own copy)."""
    status = pod.get("status")
    if not isinstance(status, dict):
        status = pod["status"] = {}
    statuses = status.get("resourceClaimStatuses")
    if not isinstance(statuses, list):
        statuses = status["resourceClaimStatuses"] = []
    return statuses


def _find_claim(claims: list[Obj], consumer: Obj, owner: Obj, pod_claim_name: str) -> Obj | None:
    """A claim controlled by ``owner`` (the pod or PodGroup ``consumer``), annotated with this claim's name
    (upstream findPodResourceClaim / findPodGroupResourceClaim)."""
    metadata = consumer["metadata"]
    for claim in claims:
        claim_meta = claim.get("metadata") or {}
        if claim_meta.get("namespace") != metadata["namespace"]:
            continue
        if (claim_meta.get("annotations") or {}).get(POD_CLAIM_NAME_ANNOTATION) != pod_claim_name:
            continue
        if any(_controls(ref, owner) for ref in claim_meta.get("ownerReferences") or []):
            return claim
    return None


def _controls(ref: object, owner: Obj) -> bool:
    return (
        isinstance(ref, dict)
        and ref.get("controller") is True
        and all(ref.get(k) == owner[k] for k in ("apiVersion", "kind", "uid"))
    )


def _free_name(pod: Obj, pod_claim_name: str, taken: set[tuple[str, str]]) -> str:
    # The apiserver retries generateName on a conflict with a new random suffix; we take the next hash.
    metadata = pod["metadata"]
    attempt = 0
    while True:
        name = claim_name(metadata["namespace"], metadata["name"], pod_claim_name, attempt)
        if (metadata["namespace"], name) not in taken:
            return name
        attempt += 1


def _claim_from_template(consumer: Obj, owner: Obj, pod_claim_name: str, template: Obj, name: str) -> Obj:
    pod_meta = consumer["metadata"]
    template_spec = template.get("spec") or {}
    template_meta = template_spec.get("metadata") or {}
    annotations = dict(template_meta.get("annotations") or {})
    annotations[POD_CLAIM_NAME_ANNOTATION] = pod_claim_name
    metadata: Obj = {
        "name": name,
        "generateName": claim_generate_name(pod_meta["name"], pod_claim_name),
        "namespace": pod_meta["namespace"],
        "uid": stable_uid("ResourceClaim", pod_meta["namespace"], name),
        "annotations": annotations,
    }
    if template_meta.get("labels"):
        metadata["labels"] = dict(template_meta["labels"])
    metadata["ownerReferences"] = [dict(owner)]
    return {
        "apiVersion": V1,
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": copy.deepcopy(template_spec.get("spec") or {}),
    }


def _key(obj: Obj) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return (metadata.get("namespace") or "default", metadata.get("name") or "")
