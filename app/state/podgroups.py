"""Workload-level ResourceClaims (gates ``DRAWorkloadResourceClaims`` + ``GenericWorkload``, beta, off).

A PodGroup (``scheduling.k8s.io/v1beta1``; ``v1alpha3`` and 1.36's ``v1alpha2`` read too) lists
``spec.resourceClaims``, each naming a ResourceClaim or a ResourceClaimTemplate. A pod joins the group through
``spec.schedulingGroup.podGroupName``; a pod claim whose name and source equal one of the group's claims is
the group's claim, as upstream's ``resourceclaim.BindTo`` decides:

* the resourceclaim controller creates a template's claim once for the group, owned (controller) by the
  PodGroup, named ``<group>-<claim>-<5 characters>``, recorded in the group's
  ``status.resourceClaimStatuses`` and in each member pod's ``status.resourceClaimStatuses``;
* a pod may use a generated claim owned by its PodGroup (upstream ``IsForPod`` with PodGroup owners:
  controller kind PodGroup of the pod's group name, API group ``scheduling.k8s.io``);
* ``status.reservedFor`` holds one entry for the whole group, ``{apiGroup: scheduling.k8s.io, resource:
  podgroups, name, uid}``, so the 256-entry limit counts the group once; a member pod is reserved through
  it (upstream ``IsReservedForPod``: group, resource and name match, pods do not know the group's UID).

With the gates off none of this applies: PodGroups are not read and such claims are "not created for this
pod", as upstream.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from app.state.convert import ConversionError

__all__ = [
    "GROUP",
    "POD_GROUP_VERSIONS",
    "check_pod_group",
    "check_scheduling_group",
    "group_claim_entry",
    "group_reference",
    "owned_by_pod_group",
    "pod_group_key",
    "reserves",
]

Obj = Mapping[str, Any]

GROUP = "scheduling.k8s.io"
_CLAIM_FIELDS = ("name", "resourceClaimName", "resourceClaimTemplateName")
POD_GROUP_VERSIONS = ("v1beta1", "v1alpha3", "v1alpha2")
"""PodGroup versions read, newest first: 1.37 serves v1beta1 and v1alpha3; v1alpha2 (1.36) has the same
``resourceClaims`` fields."""


def pod_group_key(pod: Obj) -> str | None:
    """``namespace/name`` of the pod's PodGroup (``spec.schedulingGroup.podGroupName``), or None."""
    group = (pod.get("spec") or {}).get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, Mapping) else None
    if not isinstance(name, str) or not name:
        return None
    return f"{(pod.get('metadata') or {}).get('namespace') or 'default'}/{name}"


def owned_by_pod_group(claim: Obj, pod: Obj) -> bool:
    """Whether ``claim``'s controller is the pod's PodGroup (by kind, name and API group; the version is
    ignored, as upstream, since it may change)."""
    key = pod_group_key(pod)
    if key is None:
        return False
    name = key.partition("/")[2]
    return any(
        isinstance(o, Mapping)
        and o.get("controller") is True
        and o.get("kind") == "PodGroup"
        and o.get("name") == name
        and str(o.get("apiVersion") or "").startswith(f"{GROUP}/")
        for o in (claim.get("metadata") or {}).get("ownerReferences") or ()
    )


def group_claim_entry(group: Obj, pod_claim: Obj) -> Obj | None:
    """The PodGroup's ``spec.resourceClaims`` entry the pod claim joins: same name, same
    ``resourceClaimName`` and ``resourceClaimTemplateName`` (upstream ``BindTo``); None: the pod's own."""
    for entry in (group.get("spec") or {}).get("resourceClaims") or ():
        if all(entry.get(k) == pod_claim.get(k) for k in _CLAIM_FIELDS):
            return entry
    return None


def group_reference(group: Obj) -> dict[str, Any]:
    """The ``status.reservedFor`` entry of a PodGroup."""
    meta = group.get("metadata") or {}
    return {"apiGroup": GROUP, "resource": "podgroups", "name": meta.get("name"), "uid": meta.get("uid")}


def reserves(reserved: Iterable[Obj], pod_uid: str, consumer: Obj | None) -> bool:
    """Whether ``reservedFor`` holds the pod, or ``consumer`` (its PodGroup) by group, resource and name."""
    for entry in reserved:
        if entry.get("uid") == pod_uid:
            return True
        if consumer is not None and all(
            entry.get(k) == consumer.get(k) for k in ("apiGroup", "resource", "name")
        ):
            return True
    return False


def check_scheduling_group(pod: Obj) -> None:
    """A pod's ``spec.schedulingGroup``, when set: an object whose ``podGroupName`` is a string (anything
    else would read as "in no group" and schedule the pod alone). Raises ConversionError naming the field."""
    group = (pod.get("spec") or {}).get("schedulingGroup")
    if group is None:
        return
    if not isinstance(group, Mapping):
        raise ConversionError("spec.schedulingGroup", f"must be an object, got {group!r}")
    name = group.get("podGroupName")
    if name is not None and not isinstance(name, str):
        raise ConversionError("spec.schedulingGroup.podGroupName", f"must be a string, got {name!r}")


def check_pod_group(obj: Obj, api_version: str) -> None:
    """The PodGroup fields the extender reads. Raises ConversionError naming the field."""
    if api_version not in tuple(f"{GROUP}/{v}" for v in POD_GROUP_VERSIONS):
        known = ", ".join(f"{GROUP}/{v}" for v in POD_GROUP_VERSIONS)
        raise ConversionError("apiVersion", f"PodGroup must be one of {known}, got {api_version!r}")
    for section in ("spec", "status"):
        if not isinstance(obj.get(section) or {}, Mapping):
            raise ConversionError(section, "must be an object")
    claims = (obj.get("spec") or {}).get("resourceClaims") or []
    if not isinstance(claims, list):
        raise ConversionError("spec.resourceClaims", "must be a list")
    for i, entry in enumerate(claims):
        at = f"spec.resourceClaims[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise ConversionError(f"{at}.name", "Required value")
        sources = [k for k in ("resourceClaimName", "resourceClaimTemplateName") if entry.get(k)]
        if len(sources) != 1:
            raise ConversionError(
                at, "exactly one of resourceClaimName and resourceClaimTemplateName must be set"
            )
        if not isinstance(entry[sources[0]], str):
            raise ConversionError(f"{at}.{sources[0]}", "must be a string")
    statuses = (obj.get("status") or {}).get("resourceClaimStatuses") or []
    if not isinstance(statuses, list) or not all(isinstance(s, Mapping) for s in statuses):
        raise ConversionError("status.resourceClaimStatuses", "must be a list of objects")
