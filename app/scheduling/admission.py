"""The guardrail: one allocator per DRA pod (admission of Pods, served by ``app.http.webhook``).

A pod that uses DRA devices and is scheduled by kube-scheduler's default profile is allocated by the
in-tree DynamicResources plugin from the same devices this extender gives out: two allocators that do not
see each other's in-flight decisions. The admission webhook keeps such pods on this extender's profile:

* **mutate**: a pod that uses DRA and whose ``spec.schedulerName`` is empty or ``default-scheduler`` gets
  ``schedulerName: <our profile>`` (a JSONPatch); a pod aimed at any other scheduler is left alone (its
  owner chose it);
* **validate**: a pod that uses DRA and is aimed at a scheduler other than ours is refused, the message
  naming the claim (or extended resource) and the scheduler.

"Uses DRA": ``spec.resourceClaims`` is not empty, or a container or init container requests (non-zero) an
extended resource a DeviceClass maps (``spec.extendedResourceName`` or the implicit
``deviceclass.resource.kubernetes.io/<class>``, gate DRAExtendedResource; ``app.scheduling.extended``).
A pod without either is never patched nor refused. Only CREATE is looked at: ``schedulerName`` cannot
change afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from allocator.errors import InvalidInputError
from app.scheduling.extended import DeviceClassResolver, requested_extended_resources

__all__ = ["DEFAULT_SCHEDULER", "AdmissionDecision", "dra_use", "mutate", "validate"]

DEFAULT_SCHEDULER = "default-scheduler"
"""What the API server writes into a pod's empty ``spec.schedulerName`` (before admission runs)."""

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    """An admission answer: allowed or not, the JSONPatch operations to apply, why (for a refusal)."""

    allowed: bool = True
    patch: tuple[dict[str, Any], ...] = ()
    message: str = ""


def dra_use(pod: Obj, device_classes: Callable[[], Iterable[Obj]] | None) -> str | None:
    """What makes ``pod`` use DRA devices, for messages (``ResourceClaim "x" (spec.resourceClaims[0] "gpu")``,
    ``extended resource "example.com/gpu" (DeviceClass "gpu.example.com")``), or None when nothing does.

    ``device_classes`` gives the DeviceClass dicts, called only when a container requests an extended
    resource; None when DRAExtendedResource is off (extended resources are then never DRA's)."""
    claims = (pod.get("spec") or {}).get("resourceClaims") or ()
    if claims:
        return _claim_use(claims[0] if isinstance(claims[0], Mapping) else {})
    if device_classes is None:
        return None
    try:
        names = requested_extended_resources(pod)
    except InvalidInputError:
        return None  # a malformed quantity: the API server's validation refuses the pod anyway
    if not names:
        return None
    resolver = DeviceClassResolver(device_classes())
    for name in names:
        class_name = resolver.class_for(name)
        if class_name:
            return f'extended resource "{name}" (DeviceClass "{class_name}")'
    return None


def _claim_use(entry: Obj) -> str:
    where = f'spec.resourceClaims[0] "{entry.get("name") or ""}"'
    if entry.get("resourceClaimName"):
        return f'ResourceClaim "{entry["resourceClaimName"]}" ({where})'
    if entry.get("resourceClaimTemplateName"):
        return f'a ResourceClaim of template "{entry["resourceClaimTemplateName"]}" ({where})'
    return where


def _scheduler(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("schedulerName") or DEFAULT_SCHEDULER)


def mutate(
    pod: Obj, scheduler_names: Sequence[str], device_classes: Callable[[], Iterable[Obj]] | None
) -> AdmissionDecision:
    """Allowed; with a patch setting ``spec.schedulerName`` to ``scheduler_names[0]`` when ``pod`` uses DRA
    and is aimed at the default scheduler (``dra_use`` for ``device_classes``)."""
    if _scheduler(pod) != DEFAULT_SCHEDULER or dra_use(pod, device_classes) is None:
        return AdmissionDecision()
    # "add" sets a member whether or not it exists (RFC 6902 §4.1); the API server has defaulted it already.
    return AdmissionDecision(
        patch=({"op": "add", "path": "/spec/schedulerName", "value": scheduler_names[0]},)
    )


def validate(
    pod: Obj, scheduler_names: Sequence[str], device_classes: Callable[[], Iterable[Obj]] | None
) -> AdmissionDecision:
    """Refused when ``pod`` uses DRA (``dra_use``) and its ``spec.schedulerName`` is none of
    ``scheduler_names``, with a message naming what it uses and the scheduler; else allowed."""
    scheduler = _scheduler(pod)
    if scheduler in scheduler_names:
        return AdmissionDecision()
    use = dra_use(pod, device_classes)
    if use is None:
        return AdmissionDecision()
    return AdmissionDecision(
        allowed=False,
        message=f'pod uses {use} but spec.schedulerName is "{scheduler}": DRA devices here are allocated '
        f'by the dra-extender only; set spec.schedulerName: "{scheduler_names[0]}"',
    )
