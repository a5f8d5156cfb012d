"""Filter's node-allocatable fit (gate ``DRANodeAllocatableResources``; the rules:
``app.scheduling.nodeallocatable``).

After filter decided the devices, a passing node whose pools publish devices with
``nodeAllocatableResources`` gets the pod's devices chosen there (filter may have decided by free-device
counts), their statuses computed, and the pod's whole demand fitted into what the node has left; a node
that fails moves to the failed (or, too small even when empty, unresolvable) nodes. Every node fails while
an allocated claim of the pod with a mapped device is reserved for another consumer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from allocator.errors import AllocatorError
from app.scheduling.claimrules import EffectiveClaims
from app.scheduling.cycle import node_object
from app.scheduling.decisions import FilterOutcome, KeptDecision
from app.scheduling.nodeallocatable import (
    ClaimUse,
    claim_statuses,
    has_node_allocatable,
    insufficient,
    node_requests,
    pod_demand,
    shared_mapped_claim,
)
from app.state.cluster import ClusterState
from app.state.podclaims import ClaimNotReady, pod_key, state_pod_claims
from app.state.podgroups import reserves

__all__ = ["DeviceChoice", "fit_node_allocatable"]

Obj = Mapping[str, Any]


class DeviceChoice(Protocol):
    """What the fit asks of the scheduling service (``SchedulingService`` is one), under its lock."""

    @property
    def state(self) -> ClusterState: ...

    def choose_devices(self, pod: Obj, node_names: Sequence[str], nodes: Mapping[str, Obj] | None) -> None:
        """Filter ``node_names`` for ``pod`` with its devices chosen on each (``Want.DEVICES``)."""

    def kept_decision(self, pod: Obj, node_name: str) -> KeptDecision | None:
        """The pod's current decision on the node, or None."""

    def effective_claims(
        self, pod: Obj, node_name: str, nodes: Mapping[str, Obj] | None = None
    ) -> EffectiveClaims:
        """The claims the pod needs on the node, the extended-resource claim included."""


def fit_node_allocatable(
    service: DeviceChoice, pod: Obj, outcome: FilterOutcome, nodes: Mapping[str, Obj] | None
) -> None:
    """Apply the fit to ``outcome`` (module docstring); the caller holds the service's lock. A claim not
    ready or invalid turns into the outcome's error."""
    state = service.state
    uid = str((pod.get("metadata") or {}).get("uid") or pod_key(pod))
    try:
        claims = state_pod_claims(state, pod)
        for pc in claims:
            status = pc.claim.get("status") or {}
            if not status.get("allocation"):
                continue
            mine = reserves(status.get("reservedFor") or [], uid, pc.consumer)
            reason = shared_mapped_claim(pc.key, pc.claim, mine, state.node_allocatable_slice_objects())
            if reason:
                outcome.unresolvable.update(dict.fromkeys(outcome.passed, reason))
                outcome.passed = []
                return
        names = {pc.key: pc.pod_claim_name for pc in claims}
        slices_of = {n: _node_slices(state, n) for n in outcome.passed}
        asked = [n for n, found in slices_of.items() if has_node_allocatable(found)]
        if not asked:
            return
        service.choose_devices(pod, asked, nodes)
        requested = node_requests(state.objects["Pod"].values(), asked, uid)
        failed: dict[str, tuple[str, bool]] = {}
        for name in asked:
            kept = service.kept_decision(pod, name)
            if kept is None or kept.results is None:
                continue
            statuses = _statuses(service, pod, name, nodes, names, kept.results, slices_of[name])
            if statuses:
                node = node_object(state, name, nodes) or {}
                allocatable = (node.get("status") or {}).get("allocatable") or {}
                short = insufficient(pod_demand(pod, statuses), allocatable, requested[name], name)
                if short is not None:
                    failed[name] = short
    except (ClaimNotReady, AllocatorError) as e:
        outcome.error, outcome.passed, outcome.failed, outcome.unresolvable = str(e), [], {}, {}
        return
    outcome.passed = [n for n in outcome.passed if n not in failed]
    for name, (reason, never) in failed.items():
        (outcome.unresolvable if never else outcome.failed)[name] = reason


def _statuses(
    service: DeviceChoice,
    pod: Obj,
    name: str,
    nodes: Mapping[str, Obj] | None,
    names: Mapping[str, str],
    results: Sequence[Obj],
    slices: list[Obj],
) -> list[dict[str, Any]]:
    """The statuses of the pod's claims on ``name``: the allocated ones and the pending ones with the
    chosen ``results`` (the extended-resource claim, named by no container, last)."""
    effective = service.effective_claims(pod, name, nodes)
    uses = [
        ClaimUse(pc.key, pc.pod_claim_name, pc.claim["status"]["allocation"]) for pc in effective.allocated
    ]
    uses += [ClaimUse(c.key, names.get(c.key), r) for c, r in zip(effective.pending, results, strict=False)]
    return claim_statuses(pod, uses, slices)


def _node_slices(state: ClusterState, name: str) -> list[Obj]:
    """The ResourceSlices as published for the pools ``name`` sees."""
    node = state.node(name)
    if node is None:
        return []
    objects = state.objects["ResourceSlice"]
    found = (objects.get(s.name) for pool in state.inventory.pools_for(node) for s in pool.slices)
    return [obj for obj in found if obj is not None]
