"""The preemption planner: which lower-priority pods to evict, and on which node, so that a pod's claims fit.

Shared by both ways preemption reaches the extender, so they give the same answer for the same state:
kube-scheduler's ``preemptVerb`` (``app.scheduling.preemption``, victims fixed by its dry run) and the
extender's own preemption for pods short only of devices (``app.kube.preemptor``, no fixed victims).
Reads the service's state under its lock (``NodeVictims``: the caller holds it; ``plan`` takes it per
node) and writes nothing.

On one node (``NodeVictims.select``), as kube-scheduler v1.37.2's DefaultPreemption ``SelectVictimsOnNode``
chooses victims for CPUs and memory:

1. the possible victims are the node's pods of lower priority than the preemptor, not being deleted, not
   finished, not members of a pod group (kube-scheduler evicts those as a whole), besides the fixed ones;
2. when the claims do not fit even with all of them evicted, eviction cannot help on this node;
3. else the possible victims are given back one at a time, the most important first (higher priority,
   then the earlier start: upstream ``MoreImportantPod``), those whose eviction would violate a
   PodDisruptionBudget before the others; a pod stays a victim only when the claims no longer fit
   without evicting it.

Evicting a pod frees a claim only when every consumer in its ``reservedFor`` is evicted and the preemptor
does not use the claim itself (``allocator.eviction.ReleasedView`` shows what that frees).

Across nodes (``pick``), upstream's ``pickOneNodeForPreemption`` order: the fewest PodDisruptionBudget
violations, then the lowest priority of the most important victim, the smallest sum of priorities, the
fewest victims, the latest start among the most important victims, and last the first node asked.
PodDisruptionBudgets are counted as upstream ``FilterVictimsWithPDBViolation`` counts them
(``DisruptionBudgets``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from allocator.decide import Fits, Policy, allocate, fits
from allocator.deviceuse import AllocatedDevice, allocated_devices
from allocator.eviction import ReleasedView
from allocator.inventory import Inventory
from app.scheduling.claimrules import allocated_claims_reason
from app.scheduling.service import SchedulingService
from app.state.podclaims import claim_names

__all__ = [
    "Candidate",
    "DisruptionBudgets",
    "NodeVictims",
    "Victims",
    "pick",
    "plan",
    "pod_priority",
    "pods_by_node",
]

Obj = Mapping[str, Any]

_PRIORITY_OFFSET = 2**31
"""Added to each priority before summing (upstream: ``MaxInt32 + 1``), so a node with a few pods of negative
priority is not preferred to one with fewer pods of the same priority."""


@dataclass(frozen=True, slots=True)
class Victims:
    """The pods to evict on one node (UIDs, most important first as kube-scheduler orders them) and how
    many PodDisruptionBudgets evicting them violates."""

    uids: tuple[str, ...]
    pdb_violations: int = 0


@dataclass(frozen=True, slots=True)
class Candidate:
    """One node where evicting ``victims`` (the pods, most important first) lets the claims fit."""

    node: str
    victims: tuple[Obj, ...]
    pdb_violations: int
    covered: frozenset[str]
    """UIDs of the victims some PodDisruptionBudget selects: the ones the Eviction API may refuse."""

    @property
    def uids(self) -> tuple[str, ...]:
        return tuple(pod_uid(p) for p in self.victims)


class DisruptionBudgets:
    """PodDisruptionBudgets (``policy/v1`` objects) as preemption counts them: a pod violates one when
    it matches the budget's selector (same namespace; an empty or invalid selector matches nothing), is
    not in its ``status.disruptedPods`` already, and the budget's ``status.disruptionsAllowed`` is used up
    by the pods counted before it."""

    def __init__(self, budgets: Iterable[Obj] = ()) -> None:
        self._budgets: list[tuple[str, Any, int, frozenset[str]]] = []
        """(namespace, selector, disruptions allowed, disrupted pod names) per budget."""
        for budget in budgets:
            meta, status = budget.get("metadata") or {}, budget.get("status") or {}
            allowed = status.get("disruptionsAllowed")
            self._budgets.append(
                (
                    str(meta.get("namespace") or "default"),
                    (budget.get("spec") or {}).get("selector"),
                    allowed if isinstance(allowed, int) and not isinstance(allowed, bool) else 0,
                    frozenset(status.get("disruptedPods") or {}),
                )
            )

    def __len__(self) -> int:
        return len(self._budgets)

    def covers(self, pod: Obj) -> bool:
        """Whether some budget selects ``pod``."""
        return any(self._selects(budget, pod) for budget in range(len(self._budgets)))

    def split(self, pods: Sequence[Obj]) -> tuple[list[Obj], list[Obj]]:
        """``pods`` (most important first) as (violating, not violating), each in the given order."""
        allowed = [budget[2] for budget in self._budgets]
        violating: list[Obj] = []
        other: list[Obj] = []
        for pod in pods:
            violates = False
            for i, (_, _, _, disrupted) in enumerate(self._budgets):
                if not self._selects(i, pod) or _name(pod) in disrupted:
                    continue
                allowed[i] -= 1
                if allowed[i] < 0:
                    violates = True
                    break
            (violating if violates else other).append(pod)
        return violating, other

    def _selects(self, index: int, pod: Obj) -> bool:
        namespace, selector, _, _ = self._budgets[index]
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        return (
            bool(labels) and (meta.get("namespace") or "default") == namespace and _matches(selector, labels)
        )


def _matches(selector: Obj, labels: Mapping[str, str]) -> bool:
    """A ``metav1.LabelSelector`` against ``labels``; empty or malformed selects nothing (as upstream
    counts budgets)."""
    if not isinstance(selector, Mapping):
        return False
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not isinstance(match_labels, Mapping) or not isinstance(expressions, list):
        return False
    if not match_labels and not expressions:
        return False
    if any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    for expression in expressions:
        if not isinstance(expression, Mapping):
            return False
        key = str(expression.get("key") or "")
        operator, values = expression.get("operator"), expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


NO_BUDGETS = DisruptionBudgets()


class NodeVictims:
    """What-if evictions on one node for one preemptor (``pod``). ``pods``: the node's pods by UID;
    ``sent``: victim Pod objects kube-scheduler sent whole, by UID. Raises ClaimNotReady while a claim of
    the pod is not ready, AllocatorError for an invalid claim."""

    def __init__(
        self,
        service: SchedulingService,
        pod: Obj,
        node_name: str,
        pods: Mapping[str, Obj],
        sent: Mapping[str, Obj] | None = None,
    ) -> None:
        self.service = service
        self.pods = pods
        self.sent = sent or {}
        self.node = service.state.node(node_name)
        self.priority = pod_priority(pod)
        namespace = (pod.get("metadata") or {}).get("namespace") or "default"
        self.own_claims = {f"{namespace}/{n}" for n in claim_names(pod)}
        self.needed = service.effective_claims(pod, node_name)
        self.blocked = self.node is None or bool(
            allocated_claims_reason(self.needed.allocated, self.node, pod)
        )

    def select(self, fixed: Sequence[str] = (), budgets: DisruptionBudgets = NO_BUDGETS) -> Candidate | None:
        """The victims here: ``fixed`` (UIDs, kube-scheduler's) first, then the possible victims left after
        giving back all that can be (module docstring); None when eviction cannot let the claims fit."""
        if self.blocked:
            return None
        evicted = set(fixed)
        possible = sorted(
            (p for uid, p in self.pods.items() if uid not in evicted and self.evictable(p)),
            key=_importance,
            reverse=True,
        )
        if not possible and not fixed:
            return None  # filter found no fit as things are, and there is nobody to evict
        if not self._fits(evicted | {pod_uid(p) for p in possible}):
            return None
        violating, other = budgets.split(possible)
        chosen = {pod_uid(p) for p in possible}
        kept_violating = 0
        for group, violates in ((violating, True), (other, False)):
            for victim in group:
                chosen.discard(pod_uid(victim))
                if not self._fits(evicted | chosen):
                    chosen.add(pod_uid(victim))
                    kept_violating += violates
        added = tuple(p for p in possible if pod_uid(p) in chosen)
        victims = (*(self._pod(uid) for uid in fixed), *added)
        covered = frozenset(pod_uid(p) for p in added if budgets.covers(p))
        assert self.node is not None
        return Candidate(self.node.name, victims, kept_violating, covered)

    def evictable(self, pod: Obj) -> bool:
        """A possible victim: lower priority than the preemptor, not being deleted, not finished, not in a
        pod group."""
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        return (
            pod_priority(pod) < self.priority
            and not meta.get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not spec.get("schedulingGroup")
        )

    def allocation(self, evicted: Iterable[str], policy: Policy) -> tuple[AllocatedDevice, ...]:
        """The devices the preemptor's pending claims would get here once ``evicted`` are gone (chosen by
        ``policy``, as its filter would), or () when they would not fit."""
        assert self.node is not None
        view = ReleasedView(self.service.state.inventory, self.released(set(evicted)))
        decision = allocate(
            _as_inventory(view), self.service.selectors, self.node, self.needed.pending, policy
        )
        if not isinstance(decision, Fits):
            return ()
        where = f"preemption on node {self.node.name}"
        return tuple(d for result in decision.results for d in allocated_devices(result, where))

    def released(self, evicted: set[str]) -> dict[str, tuple[AllocatedDevice, ...]]:
        """The claims evicting ``evicted`` (UIDs) deallocates: every consumer evicted, not the preemptor's."""
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

    def _pod(self, uid: str) -> Obj:
        return self.pods.get(uid) or self.sent.get(uid) or {"metadata": {"uid": uid}}

    def _fits(self, evicted: set[str]) -> bool:
        assert self.node is not None
        view = ReleasedView(self.service.state.inventory, self.released(evicted))
        return fits(
            _as_inventory(view),
            self.service.selectors,
            self.node,
            self.needed.pending,
            self.service.filter_timeout,
        )


def _as_inventory(view: ReleasedView) -> Inventory:
    """The view where the allocator takes an ``Inventory``: it answers every question the search asks."""
    return view  # type: ignore[return-value]  # duck-typed: ReleasedView forwards the rest to the inventory


def plan(
    service: SchedulingService,
    pod: Obj,
    node_names: Iterable[str],
    budgets: DisruptionBudgets = NO_BUDGETS,
    time_budget: float | None = None,
) -> tuple[Candidate, NodeVictims] | None:
    """The node (among ``node_names``, in order) and victims the extender's own preemption would choose
    for ``pod`` (no fixed victims; ``pick``), with that node's what-if evictions; None when eviction
    helps on none. Nodes not decided within ``time_budget`` seconds (None: the service's filter time
    budget) are left out. Takes the service lock one node at a time (re-entrant: a caller may hold it), so
    filters and binds wait at most one node's searches. Raises ClaimNotReady or AllocatorError."""
    deadline = time.monotonic() + (service.filter_time_budget if time_budget is None else time_budget)
    names = list(dict.fromkeys(node_names))
    with service.lock:
        on_node = pods_by_node(service.state.objects["Pod"].values(), names)
    found: list[tuple[Candidate, NodeVictims]] = []
    for name in names:
        if time.monotonic() > deadline:
            break
        with service.lock:
            eviction = NodeVictims(service, pod, name, on_node.get(name, {}))
            candidate = eviction.select(budgets=budgets)
        if candidate is not None and candidate.victims:
            found.append((candidate, eviction))
    if not found:
        return None
    best = pick([c for c, _ in found])
    return next(pair for pair in found if pair[0] is best)


def pick(candidates: Sequence[Candidate]) -> Candidate:
    """The candidate kube-scheduler's ``pickOneNodeForPreemption`` would take (module docstring); the
    first of equals. ``candidates`` must not be empty and each must have victims."""
    return min(enumerate(candidates), key=lambda pair: (*_preference(pair[1]), pair[0]))[1]


def _preference(candidate: Candidate) -> tuple[int, int, int, int, float]:
    """Smaller is preferred, criterion by criterion."""
    victims = candidate.victims
    highest = max(pod_priority(p) for p in victims)
    earliest = min(_started(p) for p in victims if pod_priority(p) == highest)
    return (
        candidate.pdb_violations,
        highest,
        sum(pod_priority(p) + _PRIORITY_OFFSET for p in victims),
        len(victims),
        -earliest,
    )


def pods_by_node(pods: Iterable[Obj], nodes: Iterable[str]) -> dict[str, dict[str, Obj]]:
    """The pods bound to ``nodes``, by node and UID."""
    wanted = set(nodes)
    found: dict[str, dict[str, Obj]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node in wanted:
            found.setdefault(node, {})[pod_uid(pod)] = pod
    return found


def pod_uid(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def _name(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


def pod_priority(pod: Obj) -> int:
    """``spec.priority`` (admission sets it from the PriorityClass); unset is 0, as upstream reads it."""
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _started(pod: Obj) -> float:
    """``status.startTime`` in epoch seconds; an unset start counts as the creation, an unreadable one as
    the epoch."""
    status, meta = pod.get("status") or {}, pod.get("metadata") or {}
    started = status.get("startTime") or meta.get("creationTimestamp")
    try:
        return datetime.fromisoformat(str(started)).timestamp()
    except ValueError:
        return 0.0


def _importance(pod: Obj) -> tuple[int, float]:
    """Sorts least important first: lower priority, then started later (upstream ``MoreImportantPod``:
    of equal priority the pod running longer is more important)."""
    return (pod_priority(pod), -_started(pod))
