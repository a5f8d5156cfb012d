"""Bind's half of ``SchedulingService``: one bind per pod at a time, claims shared between binds.

Part of ``SchedulingService`` (``app.scheduling.service``, whose ``__init__`` sets the attributes used
here). A bind decides on the chosen node (the kept decision while it is current, else filter again
choosing the devices), reserves those devices in the inventory so concurrent filters treat them as used,
and lets the ``Binder`` write the claims and the pod outside the lock (``app.scheduling.binder``); the
reservation is released once the write is done or failed. While another pod's bind writes a claim this
pod shares, only that bind's node can pass filter and this pod's bind waits for the write; a claim
written but not yet shown by the ResourceClaim watch counts as being written.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from allocator.deviceuse import AllocatedDevice, allocated_devices
from allocator.errors import AllocatorError
from app.scheduling.binder import BindError, BindPlan, ExtendedBind
from app.scheduling.claimrules import has_allocation, is_allocated
from app.scheduling.decisions import Asked, claims_shape, spec_key
from app.scheduling.podevents import failed_binding
from app.state.podclaims import ClaimNotReady, PodClaim, claim_names, pod_key, state_pod_claims

__all__ = ["BIND_WAIT", "INDEX_LAG_SECONDS", "BindCoordination", "Bound", "elsewhere"]

INDEX_LAG_SECONDS = 2.0
"""How long a bind waits for the index to show a claim its pod names. kube-scheduler's informers and ours
see the resourceclaim controller's writes (the generated claim, the pod's ``status.resourceClaimStatuses``)
at slightly different times, so on a real control plane a bind can arrive first. Past this the bind fails
with the reason and kube-scheduler retries the pod."""

INDEX_POLL_SECONDS = 0.02
"""How often a waiting bind looks at the index again."""

MAX_UNSEEN = 10_000
"""Claim writes of finished binds kept until the ResourceClaim watch shows them (``SchedulingService``)."""

BIND_WAIT = 20.0
"""Seconds a bind waits for another pod's bind writing a claim they share (about what a bind's claim writes
take, docs/operations.md); then it fails and kube-scheduler retries it."""


@dataclass(frozen=True, slots=True)
class Bound:
    """What a bind that succeeded did."""

    devices: list[str]
    """Devices this bind allocated, ``<claim key>: <driver>/<pool>/<device>``."""
    kept: tuple[str, ...] = ()
    """Claims of the pod that were allocated already (shared with another pod, or written by an earlier
    attempt of this bind), left as they were but for the pod's reservation."""
    already_bound: bool = False
    """The pod was on the node already (kube-scheduler retried a bind that had succeeded): nothing written."""

    def summary(self) -> str:
        """One line for the log: the devices, the claims kept, or why there are none."""
        if self.already_bound:
            return "the pod is on the node already (a retried bind); nothing written"
        parts = [", ".join(self.devices)] if self.devices else []
        if self.kept:
            parts.append(f"claims allocated already: {', '.join(self.kept)}")
        return "; ".join(parts) or "the pod has no ResourceClaims; only the binding written"


class BindCoordination:
    """Bind's half of ``SchedulingService``: the plan, the reservation, the write, binds in flight."""

    def bind(self, namespace: str, name: str, uid: str, node_name: str) -> list[str]:
        """``bind_outcome``'s devices: those this bind allocated."""
        return self.bind_outcome(namespace, name, uid, node_name).devices

    def bind_outcome(self, namespace: str, name: str, uid: str, node_name: str) -> Bound:
        """Allocate on ``node_name`` and write it through the binder; returns what it did. Raises
        BindError; then nothing is written and the devices are free again. Either way the outcome goes to
        ``bind_log``; a failure is also an Event on the pod naming the claims and their devices
        (``app.scheduling.podevents``)."""
        key = f"{namespace}/{name}"
        plan: BindPlan | None = None
        try:
            started = self._start_bind_once_indexed(key, uid, node_name)
            if started is None:
                bound = Bound([], already_bound=True)
            else:
                plan = started[0]
                bound = self._write(key, node_name, *started)
        except Exception as e:
            with self.lock:
                self.bind_log.record(key, uid, node_name, str(e))
                claims = _bind_claims(plan) if plan is not None else self._pod_claim_allocations(key)
            self.events.record(failed_binding(key, uid, node_name, claims, str(e)))
            raise
        with self.lock:
            self.bind_log.record(key, uid, node_name, "")
        return bound

    def _pod_claim_allocations(self, key: str) -> list[tuple[str, Mapping[str, Any] | None]]:
        """(key, allocation) of the claims of pod ``key`` as the state has them, for a bind that failed
        before its plan."""
        pod = self.state.get("Pod", key)
        if pod is None:
            return []
        namespace = key.partition("/")[0]
        found = []
        for claim_key in (f"{namespace}/{name}" for name in claim_names(pod)):
            claim = self.state.get("ResourceClaim", claim_key)
            found.append((claim_key, ((claim or {}).get("status") or {}).get("allocation")))
        return found

    def _write(
        self, key: str, node_name: str, plan: BindPlan, token: str, allocating: list[str], shape: Asked | None
    ) -> Bound:
        """Write ``plan`` through the binder, then release its reservation (``_start_bind``'s)."""
        written = False
        try:
            self.binder.bind(plan)
            written = True
        finally:
            with self.lock:
                self.state.inventory.release(token)
                self._binding.pop(key, None)
                for claim in allocating:
                    self._inflight.pop(claim, None)
                    if written and not has_allocation(self.state.get("ResourceClaim", claim)):
                        self._unseen[claim] = (key, node_name)
                while len(self._unseen) > MAX_UNSEEN:
                    del self._unseen[next(iter(self._unseen))]
                self._bind_done.notify_all()
                if written and shape is not None:
                    self._patch_after_bind(shape)
        devices = [f"{key}: {'/'.join(device.id)}" for key, device in _planned_devices(plan)]
        return Bound(devices, tuple(pc.key for pc, allocation in plan.claims if allocation is None))

    def _start_bind_once_indexed(
        self, key: str, uid: str, node_name: str
    ) -> tuple[BindPlan, str, list[str], Asked | None] | None:
        """``_start_bind``, waiting up to ``index_lag_seconds`` (without the lock, so the watches can
        apply events) while the index does not show a claim the pod names yet."""
        deadline = time.monotonic() + self.index_lag_seconds
        while True:
            try:
                with self.lock, self.preemption_holds.lifted_for(key, uid):
                    return self._start_bind(key, uid, node_name)
            except ClaimNotReady as e:
                if time.monotonic() >= deadline:
                    # Usually the resourceclaim controller has not created the claim yet: a bind error
                    # makes kube-scheduler put the pod back in its queue, so nothing is lost.
                    raise BindError(
                        f"pod {key} is not ready to bind: {e}; kube-scheduler will retry the pod"
                    ) from None
            time.sleep(INDEX_POLL_SECONDS)

    def _start_bind(
        self, key: str, uid: str, node_name: str
    ) -> tuple[BindPlan, str, list[str], Asked | None] | None:
        """Under the lock: the bind's plan (after other binds writing claims it shares are done), with its
        devices reserved under a token of this attempt and its claims marked in flight, and what filter
        asked for the pod's claims shape (``_bind_plan``); None when the pod is already on that node.
        Raises ClaimNotReady while the index lacks a claim the pod names."""
        if key in self._binding:
            raise BindError(f"pod {key}: another bind of this pod is in progress (to {self._binding[key]})")
        self._await_claim_writes(key)
        planned = self._bind_plan(key, uid, node_name)
        if planned is None:
            return None
        plan, shape = planned
        token = f"bind:{next(self._attempts)}:{key}"
        allocating = [pc.key for pc, allocation in plan.claims if allocation is not None]
        self._inflight.update(dict.fromkeys(allocating, key))
        self._binding[key] = node_name
        self.state.inventory.reserve(token, self._plan_devices(plan))
        return plan, token, allocating, shape

    def _bind_plan(self, key: str, uid: str, node_name: str) -> tuple[BindPlan, Asked | None] | None:
        """The decision for a bind and, where the pod's decisions are its claims shape's, what filter
        asked for that shape (to patch the shape's answer once the bind is written); None when the pod
        is already on that node (a retried bind)."""
        pod = self.state.get("Pod", key)
        if pod is None:
            raise BindError(f"pod {key} not found")
        if self.state.node(node_name) is None:
            raise BindError(f"node {node_name} is not known to dra-extender")
        pod_uid = str((pod.get("metadata") or {}).get("uid") or key)
        if uid and pod_uid != uid:
            raise BindError(f"pod {key}: UID {uid} does not match the current pod")
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            if bound == node_name:
                return None
            raise BindError(f"pod {key} is already assigned to node {bound!r}")
        claims = state_pod_claims(self.state, pod)
        pending_claims = [pc for pc in claims if not is_allocated(pc)]
        pending_keys = tuple(pc.key for pc in pending_claims)
        view = self._pods.get(pod_uid)
        kept = self._kept(pod_uid, node_name)
        if (
            kept is None
            or view is None
            or view.claims != pending_keys
            or view.shape != claims_shape(pending_claims)
            or view.pod_spec != spec_key(pod)
            or not kept[0].results
            or kept[0].score is None
        ):
            # Something changed since filter (or filter never ran here), or filter decided by counts or
            # from an equivalent node: decide again, choosing the devices.
            outcome = self._filter(pod, [node_name], None, select=True, choose=True)
            if outcome.error:
                raise BindError(outcome.error)
            if node_name not in outcome.passed:
                reason = outcome.failed.get(node_name) or outcome.unresolvable.get(node_name)
                raise BindError(f"pod {key} does not fit on node {node_name}: {reason}")
            kept = self._kept(pod_uid, node_name)  # None for a pod without claims
        view = self._pods.get(pod_uid)
        shape = None
        if view is not None and view.shared and pending_claims:
            with contextlib.suppress(AllocatorError):  # parsed by filter: only a changed claim fails here
                shape = Asked(pod, view, [self.state.parsed_claim(pc.key) for pc in pending_claims])
        self._forget(pod_uid)
        decision, ext = kept if kept is not None else (None, None)
        pending = iter(decision.results or () if decision is not None else ())
        planned = tuple((pc, None if is_allocated(pc) else next(pending)) for pc in claims)
        extended = None
        if ext is not None:
            # The extended-resource claim is allocated last (upstream's claim store keeps it last).
            extended = ExtendedBind(ext.obj, next(pending), ext.pod_status())
        return BindPlan(pod, node_name, planned, extended), shape

    @staticmethod
    def _plan_devices(plan: BindPlan) -> tuple[AllocatedDevice, ...]:
        return tuple(device for _, device in _planned_devices(plan))

    def _await_claim_writes(self, key: str) -> None:
        """Wait, at most ``bind_wait`` seconds, while other pods' binds write claims this pod shares: once
        written, this bind only adds the pod to them. Raises BindError when the wait runs out (kube-scheduler
        retries the bind)."""
        deadline = time.monotonic() + self.bind_wait
        while in_flight := self._pod_in_flight(self.state.get("Pod", key)):
            left = deadline - time.monotonic()
            if left <= 0:
                claim, (holder, node) = next(iter(in_flight.items()))
                raise BindError(
                    f"claim {claim} is being allocated for pod {holder} on node {node}; "
                    "retry once that bind is done"
                )
            self._bind_done.wait(left)

    def _pod_in_flight(self, pod: Mapping[str, Any] | None) -> dict[str, tuple[str, str]]:
        """``_in_flight`` for all of the pod's claims; {} for a missing pod or claim (filter and the bind
        plan report those)."""
        if pod is None:
            return {}
        try:
            return self._in_flight(pod, state_pod_claims(self.state, pod))
        except ClaimNotReady:
            return {}

    def _in_flight(self, pod: Mapping[str, Any], claims: list[PodClaim]) -> dict[str, tuple[str, str]]:
        """The pod's claims another pod's bind is allocating right now: claim key -> (that pod, its node)."""
        me = pod_key(pod)
        found = {}
        for pc in claims:
            holder = self._inflight.get(pc.key)
            if holder is not None:
                found[pc.key] = (holder, self._binding[holder])
            elif pc.key in self._unseen and not is_allocated(pc):
                found[pc.key] = self._unseen[pc.key]
        return {claim: (holder, node) for claim, (holder, node) in found.items() if holder != me}

    def observe(self, kind: str, key: str, obj: Mapping[str, Any] | None) -> None:
        """Informer observer (lock held): the watch shows a claim a finished bind wrote, or its deletion."""
        if kind == "ResourceClaim" and key in self._unseen and (obj is None or has_allocation(obj)):
            del self._unseen[key]
            self._bind_done.notify_all()

    def claims_written_for_others(self, pod: Mapping[str, Any], node_name: str) -> tuple[str, frozenset[str]]:
        """For explain, as filter decides (``_filter_beside``): why ``node_name`` fails while other binds
        write claims the pod shares ('' when it does not), and those claims (left out on their node)."""
        in_flight = self._pod_in_flight(pod)
        return elsewhere(in_flight, node_name), frozenset(in_flight)

    def _bound_node(self, pod: Mapping[str, Any]) -> str:
        """The node the state has this pod (same UID) bound to, or ''."""
        known = self._state_pod(pod)
        return str(((known or {}).get("spec") or {}).get("nodeName") or "")


def _bind_claims(plan: BindPlan) -> list[tuple[str, Mapping[str, Any] | None]]:
    """(key, allocation) of each claim of the plan: the one it writes, or the one the claim has."""
    claims: list[tuple[str, Mapping[str, Any] | None]] = [
        (pc.key, allocation if allocation is not None else (pc.claim.get("status") or {}).get("allocation"))
        for pc, allocation in plan.claims
    ]
    if plan.extended is not None:
        claims.append((plan.extended.key, plan.extended.allocation))
    return claims


def _planned_devices(plan: BindPlan) -> list[tuple[str, AllocatedDevice]]:
    """(claim key, device) of every allocation the plan writes, the extended-resource claim last."""
    allocations = [(pc.key, allocation) for pc, allocation in plan.claims if allocation is not None]
    if plan.extended is not None:
        allocations.append((plan.extended.key, plan.extended.allocation))
    return [
        (key, device)
        for key, allocation in allocations
        for device in allocated_devices(allocation, f"ResourceClaim {key}")
    ]


def elsewhere(in_flight: Mapping[str, tuple[str, str]], node_name: str) -> str:
    """Why ``node_name`` cannot use a claim another pod's bind is writing for its own node, or ''."""
    for claim, (holder, node) in in_flight.items():
        if node != node_name:
            return (
                f"claim {claim} is being allocated for pod {holder} on node {node}; only that node can use it"
            )
    return ""
