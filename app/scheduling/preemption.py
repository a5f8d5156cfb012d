"""Preemption that frees devices (the extender's ``preemptVerb``; upstream has no DRA preemption yet).

kube-scheduler's dry run picks victims on each candidate node with its in-tree filters only: it removes
every pod of lower priority than the preemptor, then gives pods back from the most important one while
the preemptor still fits. So every victim it sends is needed by some in-tree filter (CPU, memory, pod
count ...), and none of them may be dropped. What the dry run cannot see is devices. On each candidate
node the service keeps kube-scheduler's victims and, when the pod's claims do not fit after evicting
them, adds the node's other possible victims the planner chooses (``app.scheduling.victims``: the same
choice the extender's own preemption makes, ``app.kube.preemptor``); it drops the node when even
evicting every such pod does not free enough devices. The answer keeps kube-scheduler's PDB violation
count (it alone counts the budgets of its victims; the added victims are chosen without budgets here).
Nodes not decided within the filter time budget are dropped: preemption there is not shown to help.

kube-scheduler evicts the victims of the node it picks (and records ``Preempted`` on each); where the
service added victims of its own, an Event on the preemptor names them, per node, with the claims and
devices their eviction releases (``AddedPreemptionVictims``, ``app.scheduling.podevents``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from app.scheduling.podevents import added_preemption_victims, claim_with_devices
from app.scheduling.service import SchedulingService, needs_no_devices
from app.scheduling.victims import NodeVictims, Victims, pods_by_node
from app.state.podclaims import ClaimNotReady, claim_names

__all__ = ["Victims", "preempt"]

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]


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
        on_node = pods_by_node(service.state.objects["Pod"].values(), candidates)
    kept: dict[str, Victims] = {}
    added: list[tuple[str, list[str], list[str]]] = []
    for name, victims in candidates.items():
        if time.monotonic() > deadline:
            log.info("preempt pod=%s: time budget used up; nodes left undecided are dropped", _ref(pod))
            break
        with service.lock:  # one node at a time: filters and binds wait at most one node's searches
            try:
                eviction = NodeVictims(service, pod, name, on_node.get(name, {}), sent_pods)
                found = eviction.select(victims.uids)
            except ClaimNotReady as e:
                log.info("preempt pod=%s: %s; no node can be helped", _ref(pod), e)
                return {}
            if found is not None and len(found.uids) > len(victims.uids):
                added.append(_added(service, eviction, found.uids[len(victims.uids) :], set(found.uids)))
        if found is not None:
            kept[name] = Victims(found.uids, victims.pdb_violations)
    if added:
        service.events.record(added_preemption_victims(_ref(pod), _uid(pod), added))
    return kept


def _added(
    service: SchedulingService, eviction: NodeVictims, uids: Iterable[str], evicted: set[str]
) -> tuple[str, list[str], list[str]]:
    """For the preemptor's Event: the node, the victims ``uids`` the service added, and the claims (with
    devices) evicting ``evicted`` releases among theirs."""
    assert eviction.node is not None
    released = eviction.released(evicted)
    claims = service.state.objects["ResourceClaim"]
    victims, freed = [], []
    for uid in uids:
        victim = eviction.pods[uid]  # added victims are the node's pods
        victims.append(_ref(victim))
        namespace = (victim.get("metadata") or {}).get("namespace") or "default"
        for key in (f"{namespace}/{n}" for n in claim_names(victim)):
            if key in released:
                freed.append(claim_with_devices(key, (claims[key].get("status") or {}).get("allocation")))
    return eviction.node.name, victims, freed


def _uid(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def _ref(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
