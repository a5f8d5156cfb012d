"""Pod claims of a state that point nowhere: ``spec.resourceClaims[i]`` naming a ResourceClaim or
ResourceClaimTemplate the state does not have.

In a cluster such a pod waits (kube-scheduler's DynamicResources plugin: ``resourceclaim "x" not found``,
retried when the claim appears), so the state loader accepts it; in a state directory it is usually a
typo, which ``dra-extender validate`` reports. A template entry is satisfied by the template, or by the
claim the pod's ``status.resourceClaimStatuses`` already names (a dump taken after the resourceclaim
controller ran, the template since deleted). Pods that have finished (phase Succeeded or Failed) need no
claim any more: a live cluster keeps them after their claims are deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.state.statedir import ClusterObjects

__all__ = ["missing_pod_claims"]

_FINISHED = frozenset({"Succeeded", "Failed"})


def missing_pod_claims(objects: ClusterObjects) -> list[str]:
    """``<file>: Pod <ns>/<name>: spec.resourceClaims[i].<field>: <Kind> <ns>/<name> not found``, one per
    pod claim entry whose claim or template is not in ``objects``, in file order. Run before template
    claims are generated (``app.state.claimgen``): a generated claim exists because its template does."""
    claims = {_key(c) for c in objects.resource_claims}
    templates = {_key(t) for t in objects.resource_claim_templates}
    problems = []
    for pod in objects.pods:
        if (pod.get("status") or {}).get("phase") in _FINISHED:
            continue
        namespace, name = _key(pod)
        recorded = _recorded_claims(pod)
        where = f"{objects.source_of('Pod', pod) or '(generated)'}: Pod {namespace}/{name}"
        for i, entry in enumerate((pod.get("spec") or {}).get("resourceClaims") or ()):
            claim, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
            if claim and (namespace, claim) not in claims:
                path, missing = "resourceClaimName", f"ResourceClaim {namespace}/{claim}"
            elif template and (namespace, template) not in templates:
                if (namespace, recorded.get(entry.get("name"))) in claims:
                    continue
                path, missing = "resourceClaimTemplateName", f"ResourceClaimTemplate {namespace}/{template}"
            else:
                continue
            problems.append(f"{where}: spec.resourceClaims[{i}].{path}: {missing} not found")
    return problems


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return metadata.get("namespace") or "default", metadata.get("name") or ""


def _recorded_claims(pod: Mapping[str, Any]) -> dict[str, str]:
    """Pod claim name → the claim ``status.resourceClaimStatuses`` names for it."""
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or ()
    return {
        s["name"]: s["resourceClaimName"]
        for s in statuses
        if isinstance(s, Mapping) and s.get("name") and s.get("resourceClaimName")
    }
