"""Preemption that frees devices (the extender's ``preemptVerb``; upstream has no DRA preemption yet).

kube-scheduler's dry run picks victims on each candidate node with its in-tree filters only: it removes
every pod of lower priority than the preemptor, then gives pods back from the most important one while
the preemptor still fits. So every victim it sends is needed by some in-tree filter (CPU, memory, pod
count ...), and none of them may be dropped. What the dry run cannot see is devices. On each candidate
node the service therefore

1. evicts kube-scheduler's victims and keeps the node as it is if the pod's claims then fit;
2. else also evicts the node's other pods of lower priority than the preemptor (never a pod being
   deleted, a finished one, or a member of a pod group, which kube-scheduler evicts as a whole), the
   least important first (lowest priority, then the most recently started), until the claims fit;
3. then gives the added pods back from the most important one, each as long as the claims still fit,
   so no added victim can be spared (the order kube-scheduler itself reprieves in);
4. drops the node when even evicting every such pod does not free enough devices.

A victim's claim is released only when every consumer in its ``reservedFor`` is evicted and the preemptor
does not use it; its devices are then free for the what-if allocation (``allocator.eviction``). The answer
keeps kube-scheduler's PDB violation count (only it sees PodDisruptionBudgets). Nodes not decided within
the filter time budget are dropped: preemption there is not shown to help.

kube-scheduler evicts the victims of the node it picks (and records ``Preempted`` on each); where the
service added victims of its own, an Event on the preemptor names them, per node, with the claims and
devices their eviction releases (``AddedPreemptionVictims``, ``app.scheduling.podevents``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from allocator.decide import fits
from allocator.eviction import ReleasedView
from allocator.inventory import AllocatedDevice, allocated_devices
from app.scheduling.claimrules import allocated_claims_reason
from app.scheduling.podevents import added_preemption_victims, claim_with_devices
from app.scheduling.service import SchedulingService, needs_no_devices
from app.state.podclaims import ClaimNotReady, claim_names

__all__ = ["Victims", "preempt"]

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Victims:
    """The pods to evict on one node (UIDs, most important first as kube-scheduler orders them) and how
    many PodDisruptionBudgets evicting them violates."""

    uids: tuple[str, ...]
    pdb_violations: int = 0


def preempt(
    service: SchedulingService,
    pod: Obj,
    candidates: Mapping[str, Victims],
    sent_pods: Mapping[str, Obj] | None = None,
) -> dict[str, Victims]:
    """The candidate nodes where evicting lower-priority pods lets ``pod``'s claims fit, each with the
    victims to evict there (module docstring). ``sent_pods``: victim Pod objects by UID when
    kube-scheduler sent them whole (nodeCacheCapable false); the state's copies are preferred. A claim of
    the pod that is not ready yet helps on no node (empty answer). Raises AllocatorError for an invalid
    claim or pod."""
    if needs_no_devices(pod) or not candidates:
        return dict(candidates)
    deadline = time.monotonic() + service.filter_time_budget
    with service.lock:
        on_node = _pods_by_node(service.state.objects["Pod"].values(), candidates)
    kept: dict[str, Victims] = {}
    added: list[tuple[str, list[str], list[str]]] = []
    for name, victims in candidates.items():
        if time.monotonic() > deadline:
            log.info("preempt pod=%s: time budget used up; nodes left undecided are dropped", _ref(pod))
            break
        with service.lock:  # one node at a time: filters and binds wait at most one node's searches
            try:
                eviction = _NodeEviction(service, pod, name, on_node.get(name, {}), sent_pods or {})
                found = eviction.victims(victims)
            except ClaimNotReady as e:
                log.info("preempt pod=%s: %s; no node can be helped", _ref(pod), e)
                return {}
            if found is not None and len(found.uids) > len(victims.uids):
                added.append(eviction.added(found.uids[len(victims.uids) :], set(found.uids)))
        if found is not None:
            kept[name] = found
    if added:
        service.events.record(added_preemption_victims(_ref(pod), _uid(pod), added))
    return kept


class _NodeEviction:
    """What-if evictions on one node for one preemptor."""

    def __init__(
        self,
        service: SchedulingService,
        pod: Obj,
        node_name: str,
        pods: Mapping[str, Obj],
        sent: Mapping[str, Obj],
    ) -> None:
        self.service = service
        self.pods = pods
        self.sent = sent
        self.node = service.state.node(node_name)
        self.priority = _priority(pod)
        namespace = (pod.get("metadata") or {}).get("namespace") or "default"
        self.own_claims = {f"{namespace}/{n}" for n in claim_names(pod)}
        self.needed = service.effective_claims(pod, node_name)
        self.blocked = self.node is None or bool(
            allocated_claims_reason(self.needed.allocated, self.node, pod)
        )

    def victims(self, given: Victims) -> Victims | None:
        """The victims to evict here (``given`` first, then the added ones), or None when no eviction of
        lower-priority pods lets the claims fit."""
        if self.blocked:
            return None
        evicted = set(given.uids)
        if self._fits(evicted):
            return given
        extras = sorted(
            (p for uid, p in self.pods.items() if uid not in evicted and self._evictable(p)), key=_importance
        )
        if not extras or not self._fits(evicted | {_uid(p) for p in extras}):
            return None
        added: list[Obj] = []
        for extra in extras:  # least important first
            added.append(extra)
            if self._fits(evicted | {_uid(p) for p in added}):
                break
        for spared in sorted(added, key=_importance, reverse=True):  # most important given back first
            rest = [p for p in added if p is not spared]
            if self._fits(evicted | {_uid(p) for p in rest}):
                added = rest
        return Victims((*given.uids, *(_uid(p) for p in added)), given.pdb_violations)

    def added(self, uids: Iterable[str], evicted: set[str]) -> tuple[str, list[str], list[str]]:
        """For the preemptor's Event: this node, the victims ``uids`` the service added, and the claims
        (with devices) evicting ``evicted`` releases among theirs."""
        assert self.node is not None
        released = self._released(evicted)
        claims = self.service.state.objects["ResourceClaim"]
        victims, freed = [], []
        for uid in uids:
            victim = self.pods[uid]  # added victims are the node's pods
            victims.append(_ref(victim))
            namespace = (victim.get("metadata") or {}).get("namespace") or "default"
            for key in (f"{namespace}/{n}" for n in claim_names(victim)):
                if key in released:
                    freed.append(claim_with_devices(key, (claims[key].get("status") or {}).get("allocation")))
        return self.node.name, victims, freed

    def _evictable(self, pod: Obj) -> bool:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        return (
            _priority(pod) < self.priority
            and not meta.get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not spec.get("schedulingGroup")
        )

    def _fits(self, evicted: set[str]) -> bool:
        assert self.node is not None
        view = ReleasedView(self.service.state.inventory, self._released(evicted))
        return fits(
            view,  # type: ignore[arg-type]
            self.service.selectors,
            self.node,
            self.needed.pending,
            self.service.filter_timeout,
        )

    def _released(self, evicted: set[str]) -> dict[str, tuple[AllocatedDevice, ...]]:
        """The claims evicting ``evicted`` deallocates: every consumer evicted, not the preemptor's."""
        claims = self.service.state.objects["ResourceClaim"]
        released: dict[str, tuple[AllocatedDevice, ...]] = {}
        for uid in evicted:
            victim = self.pods.get(uid) or self.sent.get(uid)
            if victim is None:
                continue  # not known here: kube-scheduler evicts it, but its claims are not known to free
            namespace = (victim.get("metadata") or {}).get("namespace") or "default"
            for key in (f"{namespace}/{n}" for n in claim_names(victim)):
                claim = claims.get(key)
                if claim is None or key in self.own_claims or key in released:
                    continue
                status = claim.get("status") or {}
                reserved = status.get("reservedFor") or []
                if reserved and all(r.get("uid") in evicted for r in reserved):
                    released[key] = allocated_devices(status.get("allocation"), f"ResourceClaim {key}")
        return released


def _pods_by_node(pods: Iterable[Obj], nodes: Iterable[str]) -> dict[str, dict[str, Obj]]:
    """The state's pods bound to ``nodes``, by node and UID."""
    wanted = set(nodes)
    found: dict[str, dict[str, Obj]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node in wanted:
            found.setdefault(node, {})[_uid(pod)] = pod
    return found


def _uid(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def _priority(pod: Obj) -> int:
    """``spec.priority`` (admission sets it from the PriorityClass); unset is 0, as upstream reads it."""
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _importance(pod: Obj) -> tuple[int, float]:
    """Sorts least important first: lower priority, then started later (upstream ``MoreImportantPod``:
    of equal priority the pod running longer is more important). An unset start counts as the creation;
    an unreadable one as the epoch."""
    status, meta = pod.get("status") or {}, pod.get("metadata") or {}
    started = status.get("startTime") or meta.get("creationTimestamp")
    try:
        at = datetime.fromisoformat(str(started)).timestamp()
    except ValueError:
        at = 0.0
    return (_priority(pod), -at)


def _ref(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
