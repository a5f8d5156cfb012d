"""The shape of a Pod's ``spec.resourceClaims`` entries, as core/v1 validation holds it: a name and exactly
one source (``resourceClaimName`` or ``resourceClaimTemplateName``). State files (``app.state.statedir``) and
extender requests (``app.http.wire``) are refused alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.state.fields import ConversionError

__all__ = ["check_pod_claims", "pod_claim_source_problem"]


def check_pod_claims(pod: Mapping[str, Any]) -> None:
    """``spec.resourceClaims[]``: ``{name, resourceClaimName | resourceClaimTemplateName}`` (core/v1).
    Raises ConversionError naming the field."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise ConversionError("spec", "Required value")
    claims = spec.get("resourceClaims")
    if claims is None:
        return
    if not isinstance(claims, list):
        raise ConversionError("spec.resourceClaims", "must be a list")
    for i, claim in enumerate(claims):
        path = f"spec.resourceClaims[{i}]"
        if not isinstance(claim, dict):
            raise ConversionError(path, "must be an object")
        if "source" in claim:
            raise ConversionError(
                f"{path}.source",
                "the pre-1.31 (classic DRA) `source:` wrapper was removed in Kubernetes 1.31; set "
                "resourceClaimName or resourceClaimTemplateName directly",
            )
        if not isinstance(claim.get("name"), str) or not claim["name"]:
            raise ConversionError(f"{path}.name", "Required value")
        for key in ("resourceClaimName", "resourceClaimTemplateName"):
            value = claim.get(key)
            if value is not None and not isinstance(value, str):  # a key of claims and templates
                raise ConversionError(f"{path}.{key}", f"must be a string, got {value!r}")
        problem = pod_claim_source_problem(claim)
        if problem:
            raise ConversionError(path, problem)


def pod_claim_source_problem(claim: Mapping[str, Any]) -> str:
    """Why a pod claim entry (``spec.resourceClaims[i]``) does not name exactly one source, as core/v1
    validation requires, or "". Shared with the wire format (``app.http.wire``), so a state file and a
    request are refused alike."""
    if sum(1 for key in ("resourceClaimName", "resourceClaimTemplateName") if claim.get(key)) != 1:
        return "exactly one of `resourceClaimName`, `resourceClaimTemplateName` is required"
    return ""
