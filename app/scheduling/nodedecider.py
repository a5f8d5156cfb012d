"""Filter and Score node by node: the kept decision while the node is unchanged, else the allocator's.

``NodeDecider.filter`` decides the nodes asked for one pod's ``CycleState`` (made by the claims gate)
with what the caller wants of each node (``allocator.decide.Want``):

* ``VERDICT`` (Filter): fit or not; free-device counts may settle a fit, and an equivalent node's
  decision (``allocator.equivalence``) stands for a node;
* ``SCORE`` (Score): every passing node scored, so devices chosen where counts decided, or scored through
  an equivalent node;
* ``DEVICES`` (Reserve, the node-allocatable fit): devices chosen on the node itself.

Where the decisions are the claims shape's (``CycleState.shared``), a node list's answer is kept and
only the nodes changed since are decided again; a node without a current decision is decided by an
equivalent node's or by ``allocator.decide``, within filter's time budget. Every decision goes to the
``DecisionCache``. ``quick`` (the event loop's calls) gives up (``NotQuick``,
``allocator.decide.SearchNeeded``), before changing anything of the pod's, rather than search or decide
more than ``QUICK_NODES`` / ``QUICK_DEVICE_CHECKS`` allow. Callers hold the service's lock.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence

from allocator.decide import NoFit, Policy, SearchNeeded, Want, decide, device_checks
from allocator.equivalence import EquivalenceCache, Verdict
from allocator.errors import AllocatorError
from allocator.inventory import Inventory
from allocator.model import Claim
from allocator.nodeselector import Node
from allocator.scoring import LOWEST_FINE_SCORE, FineScore
from allocator.selectors import SelectorCache
from app.scheduling.claimrules import allocated_claims_reason
from app.scheduling.cycle import CycleState, node_object, scheduling_node
from app.scheduling.decisioncache import DecisionCache
from app.scheduling.decisions import (
    DecisionStats,
    FilterOutcome,
    KeptDecision,
    ShapeOutcome,
    all_with_names,
    has_share,
    list_key,
    set_key,
    unscored,
    with_names,
    with_placeholders,
)
from app.scheduling.extended import ExtendedClaim
from app.scheduling.sampling import MIN_NODES, NodeSampler
from app.state.cluster import ClusterState

__all__ = [
    "FILTER_TIME_BUDGET",
    "QUICK_DEVICE_CHECKS",
    "QUICK_LOCK_WAIT_SECONDS",
    "QUICK_NODES",
    "NodeDecider",
    "NotQuick",
]

log = logging.getLogger(__name__)

FILTER_TIME_BUDGET = 3.0
"""Seconds one filter call may spend searching. kube-scheduler waits 5 s (default ``httpTimeout``) and
the whole scheduling queue waits with it, so a claim whose search explodes (constraints that can never
be met on big nodes) must not hold the service: nodes not decided in time fail with a reason."""

QUICK_LOCK_WAIT_SECONDS = 0.002
"""How long a quick answer, or a bind's early Reserve, waits for the service lock on the event loop. Its
holder is mostly the informers' thread applying one watch event, or a bind reserving, each under a
millisecond, and both step aside for an answer once through (``app.scheduling.answerfirst``); handing
the work to a worker thread instead cost more than that wait on a busy node (about 1 quick answer in 7
found the lock held)."""

QUICK_NODES = 8
QUICK_DEVICE_CHECKS = 512
"""How much ``filter_quick`` / ``prioritize_quick`` may decide on the caller's thread (the event loop):
at most ``QUICK_NODES`` nodes and ``QUICK_DEVICE_CHECKS`` requests x devices on them. A warm answer
re-decides only the nodes changed since, usually one, and the handoff to a worker thread costs more than
that on a busy 2-core node. They never search there (only counts, the reason funnel, and choosing devices
where counts found enough, all linear in the devices), so with the default CEL engine this stays within a
few milliseconds and probes stay responsive."""


class NotQuick(Exception):
    """The quick variant would have to search, or decide more than ``QUICK_DEVICE_CHECKS`` allow."""


class NodeDecider:
    """Decides nodes for one pod's cycle and keeps the decisions (module docstring)."""

    def __init__(
        self,
        state: ClusterState,
        selectors: SelectorCache,
        cache: DecisionCache,
        policy: Policy | None = None,
        time_budget: float = FILTER_TIME_BUDGET,
    ) -> None:
        self.state = state
        self.selectors = selectors
        self.cache = cache
        self.policy = policy or Policy()
        """Device selection, scoring and one node's search timeout (``allocator.decide.Policy``)."""
        self.time_budget = time_budget
        """Seconds one call may spend deciding (``FILTER_TIME_BUDGET``)."""
        self.equivalence = EquivalenceCache(state.inventory, selectors)
        """Per (claims shape, node signature): alike nodes share one decision, so a new shape is decided
        once per distinct node, not once per node."""
        self.stats = DecisionStats()

    def filter(
        self,
        cycle: CycleState,
        node_names: Sequence[str],
        want: Want,
        *,
        quick: bool = False,
        sampler: NodeSampler | None = None,
        names_text: str | None = None,
        seconds: float | None = None,
    ) -> FilterOutcome:
        """Decide ``node_names`` for ``cycle`` (module docstring). ``sampler``: where the shape's kept
        answer serves, pass on only its sample (``app.scheduling.sampling``), without ordering every
        passing node first. ``names_text``: the names joined by newlines, when the caller has them so
        (``list_key``). ``seconds``: how long deciding a score or devices (``Want.SCORE`` and up: rank's share
        of a filter call's budget) may take, instead of ``time_budget``; a verdict always has
        ``time_budget``. Raises NotQuick or SearchNeeded (``quick`` only)."""
        if quick and not cycle.shared:
            raise NotQuick
        cycle.view = self.cache.adopt(cycle.view, keep=want is not Want.VERDICT)
        outcome = FilterOutcome()
        if cycle.shared:
            return self._filter_shared(outcome, node_names, cycle, want, quick, sampler, names_text, seconds)
        # The pod's own decisions are always scored: nothing else can reuse a decision by counts.
        self._decide_nodes(outcome, node_names, cycle, Want.SCORE, quick=False, seconds=seconds)
        return outcome

    def kept(self, uid: str, node: str) -> tuple[KeptDecision, ExtendedClaim | None] | None:
        """The pod's current decision for ``node`` from its last filter, or None if there is none or it
        is outdated."""
        view = self.cache.view(uid)
        found = self.cache.decision(view, node) if view is not None else None
        if found is None or found[0].version != self.state.inventory.node_version(node):
            return None
        return found

    def scores(self, uid: str, node_names: Sequence[str]) -> list[FineScore | None]:
        """Each node's fine score (``allocator.scoring``; in order) from the pod's current decisions; None
        where the node must be decided again, or was passed by counts and not scored yet. From the shape's
        answer when nothing changed since it (one dict read per node, at C speed: kube-scheduler sends
        every passing node)."""
        view = self.cache.view(uid)
        last = self.cache.answer(view.shape) if view is not None and view.shared else None
        inventory = self.state.inventory
        if (
            last is None
            or last.seq != inventory.change_seq
            or last.global_version != inventory.node_versions().global_version
        ):
            return self.kept_scores(uid, node_names)
        scores = list(map(last.passed.get, node_names))
        places = unscored(scores)
        if places:
            for i, score in zip(places, self.kept_scores(uid, [node_names[i] for i in places]), strict=True):
                scores[i] = score
        return scores

    def kept_scores(self, uid: str, node_names: Sequence[str]) -> list[FineScore | None]:
        """``scores`` node by node, from each node's current decision (none: None)."""
        view = self.cache.view(uid)
        if view is None:
            return [None] * len(node_names)
        versions = self.state.inventory.node_versions()
        scores: list[FineScore | None] = []
        for name in node_names:
            found = self.cache.decision(view, name)
            current = found is not None and found[0].version == (versions.global_version, versions.get(name))
            scores.append(found[0].fine_score if found is not None and current else None)
        return scores

    def patch_after_bind(self, cycle: CycleState) -> None:
        """Bring the answer of the bound pod's claims shape (``cycle``: a shared view's) up to date with
        the node the bind allocated on, as filter would for the next pod of that shape. kube-scheduler
        binds in the background while it filters the next pod, so this work leaves filter's path. Only
        where it is quick: else the next filter does it."""
        last = self.cache.answer(cycle.view.shape)
        if last is None:
            return
        changed = self.state.inventory.nodes_changed_since(last.seq, last.global_version)
        if changed is None:
            return
        try:
            self._patch(last, changed, cycle, quick=True)
        except (NotQuick, SearchNeeded):
            pass
        except Exception:
            # The bind is written: a failure here must not turn it into a bind error. The next filter
            # decides the nodes (and meets the failure itself).
            log.exception("patching the answer of a claims shape after a bind failed")

    def _filter_shared(
        self,
        outcome: FilterOutcome,
        node_names: Sequence[str],
        cycle: CycleState,
        want: Want,
        quick: bool,
        sampler: NodeSampler | None,
        names_text: str | None,
        seconds: float | None,
    ) -> FilterOutcome:
        """Filter from the shape's previous answer for the same node list, deciding again only the
        nodes whose version changed since (usually just the node of the last bind). Beyond a verdict
        (Score, Reserve: a few nodes), each node is decided as asked and the shape's answer patched with
        it; the answer keeps the node list filter asked for."""
        inventory = self.state.inventory
        shape, pending = cycle.view.shape, cycle.pending
        seq = inventory.change_seq
        last = self.cache.answer(shape)
        if want is not Want.VERDICT:
            if quick and not _quick_enough(inventory, node_names, pending):
                raise NotQuick
            self._decide_nodes(outcome, node_names, cycle, want, quick=quick, seconds=seconds)
            if last is not None and not outcome.error:
                covered = [n for n in node_names if last.covers(n)]
                last.record(covered, self.cache.shared(shape) or {}, inventory.node_versions())
            return outcome
        order_key = list_key(node_names, names_text)
        changed = None
        exact = last is not None and last.answers(node_names, order_key)
        if last is not None and (exact or self._extends(last, node_names)):
            changed = inventory.nodes_changed_since(last.seq, last.global_version)
        if last is None or changed is None:
            if quick:
                raise NotQuick
            self._decide_nodes(outcome, node_names, cycle, want, quick=False)
            if not outcome.error:
                last = ShapeOutcome(
                    order_key, set_key(node_names), inventory.node_versions().global_version, seq
                )
                last.record(node_names, self.cache.shared(shape) or {}, inventory.node_versions())
                self.cache.keep_answer(shape, last)
            return outcome
        if not exact:
            return self._filter_within(last, changed, node_names, order_key, cycle, quick, sampler)
        now = self._patch(last, changed, cycle, quick=quick)
        redone = len(now.passed) + len(now.failed) + len(now.unresolvable)
        self._count(len(node_names) - redone, 0)  # the others: from the shape's last answer
        if now.error:
            return now
        sample = (
            None if sampler is None or last.undecided else sampler.take(node_names, last.passed.__contains__)
        )
        if sample is not None:
            # The sample walks the asked list: ordering all passing nodes for it would be wasted.
            outcome.passed, outcome.sampled = sample, True
            outcome.in_request_order = True
        elif len(last.passed) == len(node_names):
            # Every node asked passes (a cluster with room; a list with a name twice never gets here): the
            # answer is the asked list, whose names were just decoded, rather than a copy of the kept ones,
            # thousands of objects long out of the CPU's caches.
            outcome.passed = list(node_names)
            outcome.in_request_order = True
        else:
            passing = last.passing(node_names)
            if passing is None:
                last.order(node_names)
                passing = list(last.passed)
            outcome.passed = passing
            outcome.in_request_order = not last.undecided  # both walked the asked list
        outcome.failed = all_with_names(last.failed, pending)
        outcome.unresolvable = all_with_names(last.unresolvable, pending)
        # Nodes without a shared decision (time budget, unknown node, shares): this call's answer.
        _take_decided(outcome, now, last.undecided)
        return outcome

    def _extends(self, last: ShapeOutcome, node_names: Sequence[str]) -> bool:
        """Whether the shape's answer ``last``, kept for other nodes, is to answer ``node_names`` too, taking
        in those it has not decided: while it stays within twice the cluster's nodes (a list of names no
        node has would otherwise grow it, and every call decides its undecided nodes again)."""
        nodes = len(self.state.objects["Node"])
        return last.size() + len(node_names) <= 2 * nodes + MIN_NODES

    def _filter_within(
        self,
        last: ShapeOutcome,
        changed: set[str],
        node_names: Sequence[str],
        order_key: int,
        cycle: CycleState,
        quick: bool,
        sampler: NodeSampler | None,
    ) -> FilterOutcome:
        """Answer a node list other than the one the shape's answer ``last`` was kept for, from that answer:
        kube-scheduler's own sampling (``app.scheduling.sampling.SchedulerSample``) asks about another
        window of the cluster each cycle, and a pod's own filters leave out some nodes. ``last`` is brought
        up to date (``_patch``) and takes in the asked nodes it has not decided, so it grows to the nodes
        asked about so far; once a list holds all of them, it is that list's answer (the exact path)."""
        inventory, pending = self.state.inventory, cycle.pending
        new = [name for name in node_names if not last.covers(name)]
        if quick and not _quick_enough(inventory, new, pending):
            raise NotQuick
        now = self._patch(last, changed, cycle, quick=quick)
        if now.error:
            return now
        added = FilterOutcome()
        if new:
            self._decide_nodes(added, new, cycle, Want.VERDICT, quick=quick)
            if added.error:
                return added
            last.record(new, self.cache.shared(cycle.view.shape) or {}, inventory.node_versions())
        # Asked nodes without a shared decision (time budget, unknown node, shares): this call's answer.
        asked_undecided = last.undecided.intersection(node_names) if last.undecided else set()
        # A node gone from the cluster (deleted, or a name no node has) has no decision to keep: left in,
        # it would be decided again on every call and keep the answer from matching a list again.
        gone = [name for name in last.undecided if not inventory.knows_node(name)]
        last.drop(gone)
        if last.size() == len(node_names) == len(set(node_names)) and not asked_undecided.intersection(gone):
            last.adopt(node_names, order_key)  # the list holds every node the answer has, each once
        outcome = FilterOutcome()
        passed = last.passed
        sample = None
        if sampler is not None and not last.undecided:
            sample = sampler.take(node_names, passed.__contains__)
        if sample is not None:
            outcome.passed, outcome.sampled = sample, True
        else:
            outcome.passed = [name for name in node_names if name in passed]
        failed, unresolvable = last.failed, last.unresolvable
        outcome.failed = all_with_names({n: failed[n] for n in node_names if n in failed}, pending)
        outcome.unresolvable = all_with_names(
            {n: unresolvable[n] for n in node_names if n in unresolvable}, pending
        )
        if asked_undecided:
            # Only the asked ones: ``_patch`` decided the answer's other undecided nodes too.
            _take_decided(outcome, now, asked_undecided)
            _take_decided(outcome, added, asked_undecided)
        redone = sum(len(d.passed) + len(d.failed) + len(d.unresolvable) for d in (now, added))
        self._count(max(len(node_names) - redone, 0), 0)  # the others: from the shape's answer
        return outcome

    def _patch(
        self, last: ShapeOutcome, changed: set[str], cycle: CycleState, *, quick: bool
    ) -> FilterOutcome:
        """Decide again the nodes of the shape's answer ``last`` that ``changed`` since, and those it left
        undecided, and take their decisions in; returns them. ``quick``: raise NotQuick or SearchNeeded
        (with ``last`` as it was) rather than search or decide more than ``QUICK_DEVICE_CHECKS`` allow."""
        inventory = self.state.inventory
        seq = inventory.change_seq
        redo = [n for n in {*changed, *last.undecided} if last.covers(n)]
        if quick and (last.undecided or not _quick_enough(inventory, redo, cycle.pending)):
            raise NotQuick
        now = FilterOutcome()
        self._decide_nodes(now, redo, cycle, Want.VERDICT, quick=quick)
        if not now.error:
            last.record(redo, self.cache.shared(cycle.view.shape) or {}, inventory.node_versions())
            last.seq = seq
        return now

    def _decide_nodes(
        self,
        outcome: FilterOutcome,
        node_names: Sequence[str],
        cycle: CycleState,
        want: Want,
        *,
        quick: bool,
        seconds: float | None = None,
    ) -> None:
        """Decide ``node_names`` into ``outcome`` (one lookup per node whose decision is current and
        serves ``want``) within ``seconds`` (None: ``time_budget``); the nodes left then fail with the
        budget's reason. ``quick``: raise SearchNeeded rather than search. On a fatal error
        ``outcome.error`` is set and the node lists are empty."""
        view, pending = cycle.view, cycle.pending
        decisions = self.cache.shared(view.shape) if view.shared else None
        versions = self.state.inventory.node_versions()
        named: dict[str, str] = {}  # a shared reason with this pod's claim names, once per distinct reason
        passed, failed, unresolvable = outcome.passed, outcome.failed, outcome.unresolvable
        budget = self.time_budget if seconds is None else max(seconds, 0.0)
        deadline = time.monotonic() + budget
        # Counted once the call is through: a quick attempt that gives up is decided again.
        hits = misses = 0
        for index, name in enumerate(node_names):
            if index % 64 == 0 and time.monotonic() > deadline:
                self._cut(failed, node_names[index:], budget)
                break
            # The hot path: one lookup per node while its version is unchanged.
            decision = decisions.get(name) if decisions is not None else None
            current = decision is not None and decision.version == (
                versions.global_version,
                versions.get(name),
            )
            if decision is not None and current and _serves(decision, want):
                hits += 1
                if decision.results is not None:
                    passed.append(name)
                    continue
                reason = named.get(decision.reason)
                if reason is None:
                    reason = named[decision.reason] = with_names(decision.reason, pending)
                (unresolvable if decision.unresolvable else failed)[name] = reason
                continue
            if time.monotonic() > deadline:  # the slow path: checked before every search
                self._cut(failed, node_names[index:], budget)
                break
            misses += 1
            # Reserve's node, decided by counts or from an equivalent node: it fits, its devices are chosen.
            known_fit = (
                want is Want.DEVICES and decision is not None and current and decision.results is not None
            )
            try:
                found = self._decide_node(name, cycle, want, quick=quick, known_fit=known_fit)
            except AllocatorError as e:
                outcome.error = str(e)
                outcome.passed, outcome.failed, outcome.unresolvable = [], {}, {}
                self._count(hits, misses)
                return
            if decisions is None and view.shared:
                decisions = self.cache.shared(view.shape)
            if found is None:
                unresolvable[name] = f"node {name} is not known to dra-extender"
            elif found.results is None:
                (unresolvable if found.unresolvable else failed)[name] = found.reason
            else:
                passed.append(name)
        self._count(hits, misses)

    def _count(self, hits: int, misses: int) -> None:
        self.stats.hits += hits
        self.stats.misses += misses

    def _cut(self, failed: dict[str, str], undecided: Sequence[str], budget: float) -> None:
        """The time budget ran out: the nodes not decided yet fail with a reason saying so."""
        failed.update(dict.fromkeys(undecided, _budget_reason(budget)))
        self.stats.budget_cuts += 1
        self.stats.budget_undecided_nodes += len(undecided)

    def _decide_node(
        self, name: str, cycle: CycleState, want: Want, *, quick: bool, known_fit: bool = False
    ) -> KeptDecision | None:
        """Decide one node the slow way and keep it (shared or private). None: the node is unknown.
        A shared decision may come from an equivalent node unless ``want`` is DEVICES; ``known_fit``: a
        current decision says the claims fit here (``Want.DEVICES`` for ``allocator.decide``)."""
        version = self.state.inventory.node_version(name)
        node = scheduling_node(self.state, name, cycle.nodes)
        if node is None:
            return None
        reason = allocated_claims_reason(cycle.allocated, node, cycle.pod)
        if reason:
            return KeptDecision(version, None, LOWEST_FINE_SCORE, reason, True)
        view, extended = cycle.view, cycle.extended
        ext = extended.claim_for_node(node_object(self.state, name, cycle.nodes)) if extended else None
        claims = [*cycle.pending, ext.claim] if ext else cycle.pending
        if view.shared and want is not Want.DEVICES:
            decision = self._decide_equivalent(node, claims, version, view.shape, want, quick=quick)
        else:
            asked = Want.DEVICES if known_fit else Want.SCORE
            decision = self._decide_here(node, claims, version, asked, quick=quick)
        if view.shared and not has_share(decision.results):
            # Kept for every pod of the shape: the claim names in the reason become placeholders.
            kept = decision
            if decision.reason:
                kept = dataclasses.replace(decision, reason=with_placeholders(decision.reason, claims))
            self.cache.remember(view.shape, name, kept)
        else:
            self.cache.keep_private(view, name, decision, ext)
        return decision

    def _decide_equivalent(
        self,
        node: Node,
        claims: list[Claim],
        version: tuple[int, int],
        shape: bytes,
        want: Want,
        *,
        quick: bool,
    ) -> KeptDecision:
        """``_decide_here``, or the decision of an equivalent node (``allocator.equivalence``): the
        verdict, reason and score, no devices chosen (``results`` empty: Reserve chooses them)."""
        policy = self.policy
        # The scoring config by value: a reload's new one may be made where a freed one was (same id).
        context = (version[0], policy.device_selection, policy.scoring)
        table = self.equivalence.table(shape, context, claims, policy.scoring.topology)
        signature = table.signature(node)
        found = table.get(signature, scored=want is Want.SCORE)
        if found is not None:
            results = () if found.fits else None
            reason = with_names(found.reason, claims) if found.reason else ""
            return KeptDecision(version, results, found.fine_score, reason, found.unresolvable)
        decision = self._decide_here(node, claims, version, want, quick=quick)
        if not has_share(decision.results):
            verdict = Verdict(
                decision.results is not None,
                decision.fine_score,
                with_placeholders(decision.reason, claims),
                decision.unresolvable,
            )
            table.put(signature, verdict, node, decision.reason)
        return decision

    def _decide_here(
        self, node: Node, claims: list[Claim], version: tuple[int, int], want: Want, *, quick: bool
    ) -> KeptDecision:
        """The allocator's decision on this node (``allocator.decide``), as a kept decision. ``quick``:
        raise SearchNeeded rather than search. Raises AllocatorError (fatal)."""
        decided = decide(
            self.state.inventory, self.selectors, node, claims, self.policy, want, search=not quick
        )
        if isinstance(decided, NoFit):
            return KeptDecision(version, None, LOWEST_FINE_SCORE, decided.reason, decided.unresolvable)
        return KeptDecision(version, decided.results, decided.fine_score, "", False)


def _take_decided(outcome: FilterOutcome, decided: FilterOutcome, nodes: set[str]) -> None:
    """Add to ``outcome`` what this call ``decided`` for ``nodes`` (those the shape's answer has no shared
    decision for)."""
    outcome.passed.extend(n for n in decided.passed if n in nodes)
    outcome.failed.update((n, r) for n, r in decided.failed.items() if n in nodes)
    outcome.unresolvable.update((n, r) for n, r in decided.unresolvable.items() if n in nodes)


def _serves(decision: KeptDecision, want: Want) -> bool:
    """Whether a current kept decision answers ``want``: any does a verdict, a scored one a score, and
    Reserve needs devices chosen on the node (an equivalent node's score has none)."""
    if want is Want.VERDICT:
        return True
    if decision.fine_score is None:
        return False
    return want is Want.SCORE or bool(decision.results)


def _quick_enough(inventory: Inventory, node_names: Sequence[str], claims: list[Claim]) -> bool:
    """Whether deciding ``node_names`` stays within ``QUICK_NODES`` and ``QUICK_DEVICE_CHECKS``."""
    if len(node_names) > QUICK_NODES:
        return False
    nodes = (inventory.node(name) for name in node_names)
    checks = sum(device_checks(inventory, node, claims) for node in nodes if node is not None)
    return checks <= QUICK_DEVICE_CHECKS


def _budget_reason(budget: float) -> str:
    return f"dra-extender: filter time budget ({budget:g} s) used up first"
