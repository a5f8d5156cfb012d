"""PreFilter: a pod's claims resolved once per cycle, and the rules that decide every node at once.

As kube-scheduler's DynamicResources PreFilter (and its Filter's claim-wide checks), in this order:

1. a pod the state shows bound (kube-scheduler's copy may predate a bind that already happened): only
   that node fits, nothing of the pod's is touched;
2. a bind of the pod in flight: every node fails until it is done;
3. a claim the pod names that is missing, being deleted or not the pod's: unresolvable everywhere;
4. a claim another pod's bind is writing for one node: only that node can pass
   (``app.scheduling.inflight``), the claim left out there;
5. an extended-resource claim left from an earlier attempt: unresolvable everywhere, and deleted
   (PostFilter, ``SchedulingService``);
6. a request with ``firstAvailable`` while DRAPrioritizedList is off: unresolvable everywhere;
7. an allocated claim that can never be bound: fails everywhere, and deallocated (PostFilter);
8. admin access the API server would refuse (``claimrules.admin_access_refusal``): said in the reasons of
   the nodes that do not fit.

What passes is a ``CycleState`` for the node decider; what does not is the ``FilterOutcome`` itself.
Callers hold the service's lock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from allocator.errors import AllocatorError
from allocator.model import Claim
from app.scheduling.claimrules import (
    EffectiveClaims,
    admin_access_refusal,
    is_allocated,
    prefilter_reason,
    unusable_claim,
)
from app.scheduling.cycle import CycleState, node_object
from app.scheduling.decisions import FilterOutcome, PodView, claims_shape, spec_key
from app.scheduling.extended import PodExtendedResources, pod_extended_resources
from app.scheduling.inflight import BindsInFlight, elsewhere
from app.state.cluster import ClusterState
from app.state.podclaims import ClaimNotReady, PodClaim, pod_key, state_pod_claims

__all__ = ["ClaimsGate", "pod_uid"]

Obj = Mapping[str, Any]


class ClaimsGate:
    """PreFilter over the cluster state (module docstring)."""

    def __init__(
        self, state: ClusterState, binds: BindsInFlight, binding_timeout_seconds: float = 600.0
    ) -> None:
        self.state = state
        self.binds = binds
        self.binding_timeout_seconds = binding_timeout_seconds
        """kube-scheduler's ``bindingTimeout``: how long allocated devices may wait for their binding
        conditions (``ClusterSettings.binding_timeout_seconds``); set before serving."""

    def pre_filter(
        self, pod: Obj, node_names: Sequence[str], nodes: Mapping[str, Obj] | None
    ) -> CycleState | FilterOutcome:
        """The pod's cycle state, or the answer for every node of ``node_names`` when a claim-wide rule
        settles it (module docstring). Nodes ruled out by rule 4 are the state's ``elsewhere``."""
        outcome = FilterOutcome()
        bound = self._bound_node(pod)
        if bound:
            outcome.passed = [n for n in node_names if n == bound]
            outcome.unresolvable = {
                n: f"pod is already bound to node {bound}" for n in node_names if n != bound
            }
            return outcome
        binding = self.binds.node_of(pod_key(pod))
        if binding:
            # kube-scheduler gave up waiting for the bind and tries the pod again: the claims the bind is
            # creating are not leftovers, and its devices are not free. The bind decides the outcome.
            reason = f"pod {pod_key(pod)} is being bound to node {binding}; retry once that bind is done"
            outcome.failed = dict.fromkeys(node_names, reason)
            return outcome
        try:
            claims = state_pod_claims(self.state, pod)
        except ClaimNotReady as e:
            outcome.unresolvable = {name: str(e) for name in node_names}
            return outcome
        in_flight = self.binds.claims_of(pod, claims)
        failed_elsewhere: dict[str, str] = {}
        if in_flight:
            failed_elsewhere = {name: reason for name in node_names if (reason := elsewhere(in_flight, name))}
            claims = [pc for pc in claims if pc.key not in in_flight]
            node_names = [name for name in node_names if name not in failed_elsewhere]
            if not node_names:
                outcome.failed = failed_elsewhere
                return outcome
        cycle = self._resolve(pod, claims, node_names, nodes)
        if isinstance(cycle, FilterOutcome):
            cycle.failed.update(failed_elsewhere)
        else:
            cycle.beside, cycle.elsewhere = frozenset(in_flight), failed_elsewhere
        return cycle

    def _resolve(
        self, pod: Obj, claims: list[PodClaim], node_names: Sequence[str], nodes: Mapping[str, Obj] | None
    ) -> CycleState | FilterOutcome:
        """Rules 5 to 8 on the pod's ``claims`` (those no other bind is writing)."""
        outcome = FilterOutcome()
        try:
            extended = self.extended(pod)
        except AllocatorError as e:
            outcome.error = str(e)
            return outcome
        if not claims and extended is None:
            outcome.passed = list(node_names)
            return outcome
        if extended is not None and extended.stale is not None:
            meta = extended.stale.get("metadata") or {}
            key = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
            outcome.unresolvable = dict.fromkeys(node_names, stale_reason(extended))
            outcome.stale_claims.append((key, str(meta.get("uid") or "")))
            return outcome
        try:
            allocated, pending_claims, pending = self._split(claims)
        except AllocatorError as e:
            outcome.error = str(e)
            return outcome
        unschedulable = prefilter_reason(pending, self.state.gates)
        if unschedulable:
            outcome.unresolvable = dict.fromkeys(node_names, unschedulable)
            return outcome
        try:
            unusable = unusable_claim(allocated, self.state.gates, self.binding_timeout_seconds)
        except AllocatorError as e:
            outcome.error = str(e)
            return outcome
        if unusable is not None:
            # Upstream's Filter: the claim is unavailable on every node (Unschedulable, for PostFilter).
            outcome.failed = dict.fromkeys(
                node_names, f"claim {unusable[0].key} cannot be bound: {unusable[1]}"
            )
            outcome.unusable = unusable[0].claim
            outcome.unusable_reason = unusable[1]
            return outcome
        # Shared decisions need the same inputs for every pod: the state's node, no per-pod extras.
        shared = nodes is None and extended is None and not allocated
        view = PodView(
            pod_uid(pod),
            claims_shape(pending_claims),
            tuple(pc.key for pc in pending_claims),
            spec_key(pod),
            shared,
        )
        return CycleState(pod, view, pending, allocated, extended, nodes, self._refusals(pending))

    def effective_claims(
        self, pod: Obj, node_name: str, nodes: Mapping[str, Obj] | None = None
    ) -> EffectiveClaims:
        """The claims ``pod`` needs on ``node_name``, the extended-resource claim included (explain, the
        node-allocatable fit, preemption).

        Raises ClaimNotReady (a claim is missing, being deleted, not the pod's, or an extended-resource
        claim is left from an earlier attempt) or AllocatorError (a claim or the pod is invalid).
        """
        pod = self.with_state_status(pod)
        allocated, _, pending = self._split(state_pod_claims(self.state, pod))
        extended = self.extended(pod)
        if extended is not None and extended.stale is not None:
            raise ClaimNotReady(stale_reason(extended))
        ext = extended.claim_for_node(node_object(self.state, node_name, nodes)) if extended else None
        return EffectiveClaims(allocated, [*pending, ext.claim] if ext else pending, ext)

    def extended(self, pod: Obj) -> PodExtendedResources | None:
        """The pod's DRA-backed extended resources. Raises InvalidInputError for a malformed quantity."""
        return pod_extended_resources(
            pod,
            self.state.objects["DeviceClass"].values(),
            self.state.objects["ResourceClaim"],
            self.state.gates,
        )

    def state_pod(self, pod: Obj) -> Obj | None:
        """The state's copy of the request's pod (same namespace, name and UID), or None."""
        known = self.state.get("Pod", pod_key(pod))
        if known is None or (known.get("metadata") or {}).get("uid") != (pod.get("metadata") or {}).get(
            "uid"
        ):
            return None
        return known

    def with_state_status(self, pod: Obj) -> Obj:
        """The request's pod, with ``resourceClaimStatuses`` from the state when the request lacks them."""
        if (pod.get("status") or {}).get("resourceClaimStatuses"):
            return pod
        known = self.state_pod(pod)
        if known is None:
            return pod
        statuses = (known.get("status") or {}).get("resourceClaimStatuses")
        if not statuses:
            return pod
        merged = dict(pod)
        merged["status"] = {**(pod.get("status") or {}), "resourceClaimStatuses": statuses}
        return merged

    def _bound_node(self, pod: Obj) -> str:
        """The node the state has this pod (same UID) bound to, or ''."""
        known = self.state_pod(pod)
        return str(((known or {}).get("spec") or {}).get("nodeName") or "")

    def _split(self, claims: list[PodClaim]) -> tuple[list[PodClaim], list[PodClaim], list[Claim]]:
        """Allocated claims, pending ones, and the pending ones parsed. Raises InvalidInputError for a claim
        that does not parse."""
        allocated = [pc for pc in claims if is_allocated(pc)]
        pending_claims = [pc for pc in claims if not is_allocated(pc)]
        pending = [self.state.parsed_claim(pc.key) for pc in pending_claims]
        return allocated, pending_claims, pending

    def _refusals(self, pending: list[Claim]) -> list[str]:
        """Why the API server would refuse writing the allocations of ``pending`` (an adminAccess claim in a
        namespace without the label): kube-scheduler does not check it, so the nodes are decided as for
        any claim and the reasons of a "no" say it too."""
        return [
            refusal
            for claim in pending
            if any(alt.admin_access for r in claim.requests for alt in r.alternatives)
            and (refusal := admin_access_refusal(self.state, claim.key))
        ]


def with_refusals(outcome: FilterOutcome, refusals: list[str]) -> FilterOutcome:
    """``outcome`` with the API server's refusals (``CycleState.refusals``) added to the reasons of the
    nodes that do not fit, as new dicts (the kept answers stay as they are)."""
    if not refusals:
        return outcome
    note = "; ".join(refusals)
    outcome.failed = {name: f"{reason}; {note}" for name, reason in outcome.failed.items()}
    outcome.unresolvable = {name: f"{reason}; {note}" for name, reason in outcome.unresolvable.items()}
    return outcome


def stale_reason(extended: PodExtendedResources) -> str:
    """Why a pod with an extended-resource claim left from an earlier attempt is not scheduled."""
    meta = (extended.stale or {}).get("metadata") or {}
    return (
        f"ResourceClaim {meta.get('namespace') or 'default'}/{meta.get('name')}: extended-resource "
        "claim from an earlier scheduling attempt; it must be deleted before the pod is scheduled again"
    )


def pod_uid(pod: Obj) -> str:
    """The pod's UID, or its key when it has none (a pod sent without one)."""
    return str((pod.get("metadata") or {}).get("uid") or pod_key(pod))
