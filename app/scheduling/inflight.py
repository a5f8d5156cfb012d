"""Binds writing right now, and claim writes the ResourceClaim watch has not shown yet.

One bind per pod at a time: while it writes, a second bind of the pod is refused and a filter of it fails
every node (kube-scheduler retries both once its ``httpTimeout`` passes), so neither can release the
first attempt's reservation or delete the extended-resource claim it has just created. A claim another
pod's bind is allocating can be used only on that bind's node, and a bind sharing it waits for the write
(at most ``wait_seconds``); a claim written but not yet shown by the watch counts as being written (at
most ``MAX_UNSEEN`` such claims, the oldest forgotten first).

Callers hold the service's lock (``done`` waits on it).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Mapping
from typing import Any

from app.scheduling.binder import BindError
from app.scheduling.claimrules import has_allocation, is_allocated
from app.state.cluster import ClusterState
from app.state.podclaims import ClaimNotReady, PodClaim, pod_key, state_pod_claims

__all__ = ["BIND_WAIT", "MAX_UNSEEN", "BindsInFlight", "elsewhere"]

MAX_UNSEEN = 10_000
"""Claim writes of finished binds kept until the ResourceClaim watch shows them."""

BIND_WAIT = 20.0
"""Seconds a bind waits for another pod's bind writing a claim they share (about what a bind's claim writes
take, docs/operations.md); then it fails and kube-scheduler retries it."""


class BindsInFlight:
    """Which pods are being bound where, and which claims their binds are writing (module docstring)."""

    def __init__(self, lock: threading.RLock) -> None:
        self.done = threading.Condition(lock)
        """Notified when a bind ends or the watch shows a claim written: waiting binds look again."""
        self.wait_seconds = BIND_WAIT
        self._claims: dict[str, str] = {}
        """Claim key -> pod key of the bind writing a new allocation for that claim."""
        self._nodes: dict[str, str] = {}
        """Pod key -> node of the bind writing that pod."""
        self._unseen: dict[str, tuple[str, str]] = {}
        """Claim key -> (pod key, node) of a finished bind whose claim write the state does not show yet:
        pods sharing the claim wait for it as for a bind in flight, else they would allocate it again
        from the stale copy."""
        self._attempts = itertools.count(1)

    def node_of(self, pod: str) -> str | None:
        """The node pod ``namespace/name`` is being bound to right now, or None."""
        return self._nodes.get(pod)

    def start(self, pod: str, node: str, allocating: list[str]) -> str:
        """Mark a bind of ``pod`` to ``node`` writing the claims ``allocating``; returns the token of this
        attempt (for its device reservation)."""
        self._claims.update(dict.fromkeys(allocating, pod))
        self._nodes[pod] = node
        return f"bind:{next(self._attempts)}:{pod}"

    def finish(
        self, state: ClusterState, pod: str, node: str, allocating: list[str], *, written: bool
    ) -> None:
        """The bind ``start`` marked is over; a claim it wrote that the state does not show yet stays
        unseen until ``observe`` sees it. Wakes the binds waiting."""
        self._nodes.pop(pod, None)
        for claim in allocating:
            self._claims.pop(claim, None)
            if written and not has_allocation(state.get("ResourceClaim", claim)):
                self._unseen[claim] = (pod, node)
        while len(self._unseen) > MAX_UNSEEN:
            del self._unseen[next(iter(self._unseen))]
        self.done.notify_all()

    def claims_of(self, pod: Mapping[str, Any], claims: list[PodClaim]) -> dict[str, tuple[str, str]]:
        """The pod's ``claims`` another pod's bind is writing right now: claim key -> (that pod, its node)."""
        me = pod_key(pod)
        found = {}
        for pc in claims:
            holder = self._claims.get(pc.key)
            if holder is not None:
                found[pc.key] = (holder, self._nodes[holder])
            elif pc.key in self._unseen and not is_allocated(pc):
                found[pc.key] = self._unseen[pc.key]
        return {claim: (holder, node) for claim, (holder, node) in found.items() if holder != me}

    def claims_of_pod(self, state: ClusterState, pod: Mapping[str, Any] | None) -> dict[str, tuple[str, str]]:
        """``claims_of`` for all of the pod's claims; {} for a missing pod or claim (filter and the bind
        plan report those)."""
        if pod is None:
            return {}
        try:
            return self.claims_of(pod, state_pod_claims(state, pod))
        except ClaimNotReady:
            return {}

    def await_claim_writes(self, state: ClusterState, pod: str) -> None:
        """Wait, at most ``wait_seconds``, while other pods' binds write claims pod ``namespace/name``
        shares: once written, its bind only adds the pod to them. Raises BindError when the wait runs out
        (kube-scheduler retries the bind)."""
        deadline = time.monotonic() + self.wait_seconds
        while in_flight := self.claims_of_pod(state, state.get("Pod", pod)):
            left = deadline - time.monotonic()
            if left <= 0:
                claim, (holder, node) = next(iter(in_flight.items()))
                raise BindError(
                    f"claim {claim} is being allocated for pod {holder} on node {node}; "
                    "retry once that bind is done"
                )
            self.done.wait(left)

    def observe(self, kind: str, key: str, obj: Mapping[str, Any] | None) -> None:
        """Informer observer (lock held): the watch shows a claim a finished bind wrote, or its deletion."""
        if kind == "ResourceClaim" and key in self._unseen and (obj is None or has_allocation(obj)):
            del self._unseen[key]
            self.done.notify_all()


def elsewhere(in_flight: Mapping[str, tuple[str, str]], node_name: str) -> str:
    """Why ``node_name`` cannot use a claim another pod's bind is writing for its own node, or ''."""
    for claim, (holder, node) in in_flight.items():
        if node != node_name:
            return (
                f"claim {claim} is being allocated for pod {holder} on node {node}; only that node can use it"
            )
    return ""
