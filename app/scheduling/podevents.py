"""Events on pods for the extender's own actions, in events.k8s.io/v1 terms (``type``, ``reason``,
``action``, ``note``; ``regarding`` is the pod).

kube-scheduler already records ``FailedScheduling`` with the extender's filter reasons, and ``Preempted``
on each victim it evicts. What only the extender does gets an Event of its own, on the pod it acted for:

==========================  =======  ============  ===========================================================
reason                      type     action        when
==========================  =======  ============  ===========================================================
FailedBinding               Warning  Binding       a bind failed (what it wrote is rolled back)
DeallocatedClaim            Warning  Deallocating  filter deallocated a claim of the pod that can never be
                                                   bound (a binding failure condition, the binding timeout)
ReleasedOrphanedAllocation  Normal   Releasing     recovery released a claim allocated for the pod, which was
                                                   not bound within the grace period (``app.kube.recovery``)
AddedPreemptionVictims      Normal   Preempting    preemption frees the pod's devices only by evicting
                                                   more pods than kube-scheduler chose (``preemption``)
Preempted                   Normal   Preempting    on a victim the extender's own preemption evicted
                                                   (kube-scheduler's reason and note for its victims)
PreemptingForDevices        Normal   Preempting    on the preemptor: the node nominated, the victims
                                                   evicted, the devices kept for it (``app.kube.preemptor``)
==========================  =======  ============  ===========================================================

Each note names the claims and their devices (``driver/pool/device``). A ``PodEvents`` takes them: in
cluster mode ``app.kube.events.EventRecorder`` (deduplicated, rate-limited, written off the hot path); offline
``DiscardEvents``, as a state directory has nowhere to keep them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app.scheduling.bindingconditions import device_label

__all__ = [
    "NORMAL",
    "WARNING",
    "DiscardEvents",
    "PodEvent",
    "PodEvents",
    "added_preemption_victims",
    "claim_with_devices",
    "deallocated_claim",
    "failed_binding",
    "preempted",
    "preempting_for_devices",
    "released_orphaned_allocation",
]

NORMAL = "Normal"
WARNING = "Warning"


@dataclass(frozen=True, slots=True)
class PodEvent:
    """One occurrence of an action on pod ``namespace/name`` (``uid``)."""

    namespace: str
    name: str
    uid: str
    type: str
    """``Normal`` or ``Warning``."""
    reason: str
    action: str
    note: str


class PodEvents(Protocol):
    def record(self, event: PodEvent) -> None:
        """Take ``event`` for writing. Never blocks on I/O and never raises: an Event is a courtesy, the
        action it reports has happened (or failed) either way."""
        ...


class DiscardEvents:
    """Offline mode: nothing to write Events to."""

    def record(self, event: PodEvent) -> None:
        return None


def _devices(allocation: Mapping[str, Any] | None) -> list[str]:
    """``driver/pool/device`` of each ``status.allocation.devices.results[]`` entry ([] when malformed: a
    note must not fail on what the allocator would refuse elsewhere)."""
    devices = (allocation or {}).get("devices") if isinstance(allocation, Mapping) else None
    results = devices.get("results") if isinstance(devices, Mapping) else None
    return [device_label(r) for r in results or () if isinstance(r, Mapping)]


def claim_with_devices(key: str, allocation: Mapping[str, Any] | None) -> str:
    """``ResourceClaim ns/name (driver/pool/device, ...)``, without the parentheses when unallocated."""
    devices = _devices(allocation)
    return f"ResourceClaim {key} ({', '.join(devices)})" if devices else f"ResourceClaim {key}"


def _split(pod_key: str) -> tuple[str, str]:
    namespace, _, name = pod_key.partition("/")
    return namespace, name


def failed_binding(
    pod_key: str, uid: str, node: str, claims: Sequence[tuple[str, Mapping[str, Any] | None]], cause: str
) -> PodEvent:
    """A bind to ``node`` failed with ``cause``; ``claims``: (key, allocation planned or held) of the pod's
    claims, as far as the bind got."""
    named = "; ".join(claim_with_devices(key, allocation) for key, allocation in claims)
    what = f" with {named}" if named else ""
    return PodEvent(
        *_split(pod_key), uid, WARNING, "FailedBinding", "Binding", f"binding to node {node}{what}: {cause}"
    )


def deallocated_claim(pod_key: str, uid: str, claim_key: str, claim: Mapping[str, Any], why: str) -> PodEvent:
    """Filter deallocated ``claim`` (as it was before) of the pod: it can never be bound, ``why``."""
    allocation = (claim.get("status") or {}).get("allocation")
    note = (
        f"deallocated {claim_with_devices(claim_key, allocation)}: it cannot be bound: {why}; "
        "the pod can be scheduled again"
    )
    return PodEvent(*_split(pod_key), uid, WARNING, "DeallocatedClaim", "Deallocating", note)


def released_orphaned_allocation(
    pod_key: str,
    uid: str,
    claim_key: str,
    allocation: Mapping[str, Any] | None,
    *,
    deallocated: bool,
    grace_seconds: float,
) -> PodEvent:
    """Recovery removed the pod from the claim's ``reservedFor`` (and ``deallocated`` it when no consumer
    was left): allocated for the pod, which was not bound within ``grace_seconds``."""
    outcome = "deallocated" if deallocated else "kept allocated for its other consumers"
    note = (
        f"released {claim_with_devices(claim_key, allocation)} ({outcome}): allocated for this pod, "
        f"which was not bound within {grace_seconds:g}s (a bind that never finished)"
    )
    return PodEvent(*_split(pod_key), uid, NORMAL, "ReleasedOrphanedAllocation", "Releasing", note)


def added_preemption_victims(
    pod_key: str, uid: str, by_node: Iterable[tuple[str, Sequence[str], Sequence[str]]]
) -> PodEvent:
    """Preemption frees the pod's devices only by also evicting pods kube-scheduler did not choose:
    ``by_node`` is (node, the added victims' keys, the claims their eviction releases, with devices)."""
    parts = [
        f"node {node}: {', '.join(victims)}" + (f" (releases {'; '.join(claims)})" if claims else "")
        for node, victims, claims in by_node
    ]
    note = "evicting more pods than kube-scheduler chose frees the devices: " + "; ".join(parts)
    return PodEvent(*_split(pod_key), uid, NORMAL, "AddedPreemptionVictims", "Preempting", note)


def preempted(victim_key: str, victim_uid: str, preemptor_uid: str, node: str) -> PodEvent:
    """The extender's own preemption evicted this pod (kube-scheduler's ``Preempted`` reason and note)."""
    note = f"Preempted by pod {preemptor_uid} on node {node}"
    return PodEvent(*_split(victim_key), victim_uid, NORMAL, "Preempted", "Preempting", note)


def preempting_for_devices(
    pod_key: str, uid: str, node: str, victims: Sequence[str], held: Sequence[str], hold_seconds: float
) -> PodEvent:
    """The extender evicted ``victims`` (pod keys) on ``node`` for this pod, nominated it there and keeps
    ``held`` (``driver/pool/device``) for it for ``hold_seconds``."""
    note = (
        f"evicted {', '.join(victims)} on node {node} to free devices; nominated node {node}, keeping "
        f"{', '.join(held) or 'no devices'} for this pod for up to {hold_seconds:g}s"
    )
    return PodEvent(*_split(pod_key), uid, NORMAL, "PreemptingForDevices", "Preempting", note)
