"""Filter's decisions, node by node: the kept decision while the node is unchanged, else the allocator's.

Part of ``SchedulingService`` (``app.scheduling.service``, whose ``__init__`` sets the attributes used
here): ``_filter`` resolves the pod's claims and decides the nodes asked, from the claims shape's answer
for the same node list when there is one (``_filter_shared``), deciding again only nodes changed since;
a node without a current decision is decided by an equivalent node's decision (``allocator.equivalence``)
or by ``allocator.decide``, within filter's time budget. ``quick`` (the event loop's variant) gives up
(``NotQuick``, ``allocator.decide.SearchNeeded``) rather than search or decide more than
``QUICK_NODES`` / ``QUICK_DEVICE_CHECKS`` allow.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from allocator.decide import NoFit, Policy, SearchNeeded, decide
from allocator.equivalence import Verdict
from allocator.errors import AllocatorError
from allocator.inventory import Inventory
from allocator.model import Claim
from allocator.nodeselector import Node
from app.scheduling.binding import elsewhere
from app.scheduling.claimrules import allocated_claims_reason, prefilter_reason
from app.scheduling.decisions import (
    Asked,
    FilterOutcome,
    KeptDecision,
    PodView,
    ShapeOutcome,
    all_with_names,
    claims_shape,
    has_share,
    list_key,
    set_key,
    spec_key,
    with_names,
    with_placeholders,
)
from app.scheduling.extended import ExtendedClaim
from app.scheduling.sampling import NodeSampler
from app.state.podclaims import ClaimNotReady, PodClaim, pod_key, state_pod_claims

__all__ = ["QUICK_DEVICE_CHECKS", "QUICK_NODES", "FilterDecisions", "NotQuick"]

log = logging.getLogger(__name__)

MAX_SHAPES = 256
"""Distinct claim specs whose per-node decisions are kept (oldest dropped first): one per template or
shared-claim spec in use, each holding at most one decision per node."""

MAX_KEPT_DECISIONS = 200_000
"""Per-pod views plus their private per-(pod, node) decisions kept between filter and bind, in total; the
oldest pods' are dropped first. kube-scheduler filters one pod at a time, so this only bounds memory when
many pods are filtered but never bound. A view keeps digests of the pod spec and claims, not copies (a
pod spec can be a megabyte); a private decision holds one allocation result (a few hundred bytes)."""

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


class FilterDecisions:
    """Filter's half of ``SchedulingService``: deciding nodes and keeping the decisions."""

    def _filter(
        self,
        pod: Mapping[str, Any],
        node_names: Sequence[str],
        nodes: Mapping[str, Mapping[str, Any]] | None,
        *,
        quick: bool = False,
        select: bool = False,
        choose: bool = False,
        beside: frozenset[str] = frozenset(),
        sampler: NodeSampler | None = None,
        names_text: str | None = None,
    ) -> FilterOutcome:
        """Filter under the lock. ``quick``: raise NotQuick or SearchNeeded (before changing anything
        of the pod's) rather than search or decide more than ``QUICK_DEVICE_CHECKS`` allow. ``select``:
        score every passing node (for prioritize) where filter alone may decide by counts; ``choose``
        (bind): also choose its devices where the score came from an equivalent node.
        ``beside``: claims other pods' binds are writing on the nodes asked (``_filter_beside``).
        ``sampler``: where the shape's kept answer serves, pass on only its sample
        (``app.scheduling.sampling``), without ordering every passing node first. ``names_text``: the
        names joined by newlines, when the caller has them so (``list_key``)."""
        outcome = FilterOutcome()
        uid = str((pod.get("metadata") or {}).get("uid") or pod_key(pod))
        bound = self._bound_node(pod)
        if bound:
            # kube-scheduler's copy may predate a bind that already happened (e.g. its bind call timed
            # out): only that node fits, and nothing of the pod's (claims included) is touched.
            outcome.passed = [n for n in node_names if n == bound]
            outcome.unresolvable = {
                n: f"pod is already bound to node {bound}" for n in node_names if n != bound
            }
            return outcome
        binding = self._binding.get(pod_key(pod))
        if binding:
            # kube-scheduler gave up waiting for the bind and tries the pod again: the claims the bind is
            # creating are not leftovers, and its devices are not free. The bind decides the outcome.
            reason = f"pod {pod_key(pod)} is being bound to node {binding}; retry once that bind is done"
            outcome.failed = dict.fromkeys(node_names, reason)
            return outcome
        try:
            claims = [pc for pc in state_pod_claims(self.state, pod) if pc.key not in beside]
        except ClaimNotReady as e:
            outcome.unresolvable = {name: str(e) for name in node_names}
            return outcome
        in_flight = self._in_flight(pod, claims)
        if in_flight:
            return self._filter_beside(
                pod, node_names, nodes, in_flight, quick=quick, select=select, choose=choose
            )
        try:
            extended = self._extended(pod)
        except AllocatorError as e:
            outcome.error = str(e)
            return outcome
        if not claims and extended is None:
            outcome.passed = list(node_names)
            return outcome
        if extended is not None and extended.stale is not None:
            meta = extended.stale.get("metadata") or {}
            key = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
            outcome.unresolvable = {name: self._stale_reason(extended) for name in node_names}
            outcome.stale_claims.append((key, str(meta.get("uid") or "")))
            return outcome
        try:
            allocated, pending_claims, pending = self._split_claims(claims)
        except AllocatorError as e:
            outcome.error = str(e)
            return outcome
        unschedulable = prefilter_reason(pending, self.state.gates)
        if unschedulable:
            outcome.unresolvable = dict.fromkeys(node_names, unschedulable)
            return outcome
        # Shared decisions need the same inputs for every pod: the state's node, no per-pod extras.
        shared = nodes is None and extended is None and not allocated
        if quick and not shared:
            raise NotQuick
        try:
            unusable = self._unusable_claim(allocated)
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
        view = self._view(uid, pending_claims, pod, shared, keep=select)
        refusals = self._refusals(pending)
        if shared:
            shared_outcome = self._filter_shared(
                outcome,
                node_names,
                Asked(pod, view, pending),
                quick=quick,
                select=select,
                choose=choose,
                sampler=sampler,
                names_text=names_text,
            )
            return _with_refusals(shared_outcome, refusals)
        asked = Asked(pod, view, pending, allocated, extended, nodes)
        self._decide_nodes(outcome, node_names, asked, select=True, quick=False)
        return _with_refusals(outcome, refusals)

    def _view(
        self, uid: str, pending_claims: list[PodClaim], pod: Mapping[str, Any], shared: bool, *, keep: bool
    ) -> PodView:
        """The pod's view for this filter: a new one or, with ``keep`` (prioritize and bind completing the
        last filter), the last one while it is for the same claims and pod spec, private decisions and all."""
        view = PodView(
            uid, claims_shape(pending_claims), tuple(pc.key for pc in pending_claims), spec_key(pod), shared
        )
        last = self._pods.get(uid)
        wanted = (view.shape, view.claims, view.pod_spec, view.shared)
        if keep and last is not None and (last.shape, last.claims, last.pod_spec, last.shared) == wanted:
            return last
        self._forget(uid)
        self._pods[uid] = view
        self._keep(1)
        return view

    def kept_decisions(self) -> int:
        """Per-pod views plus their private decisions kept (at most MAX_KEPT_DECISIONS), for metrics."""
        return self._kept_count

    def _forget(self, uid: str) -> None:
        view = self._pods.pop(uid, None)
        if view is not None:
            self._kept_count -= 1 + len(view.private)

    def _keep(self, count: int) -> None:
        """``count`` more kept entries (a view, or private decisions of the newest views): drop the oldest
        views while over MAX_KEPT_DECISIONS, never the newest (the one being filled)."""
        self._kept_count += count
        while self._kept_count > MAX_KEPT_DECISIONS and len(self._pods) > 1:
            self._forget(next(iter(self._pods)))

    def _filter_shared(
        self,
        outcome: FilterOutcome,
        node_names: Sequence[str],
        asked: Asked,
        *,
        quick: bool,
        select: bool,
        choose: bool,
        sampler: NodeSampler | None = None,
        names_text: str | None = None,
    ) -> FilterOutcome:
        """Filter from the shape's previous answer for the same node list, deciding again only the
        nodes whose version changed since (usually just the node of the last bind).

        ``select`` (prioritize, bind: a few nodes): choose devices on each passing node and patch the
        shape's answer; the answer keeps the node list filter asked for."""
        inventory = self.state.inventory
        view, pending = asked.view, asked.pending
        seq = inventory.change_seq
        last = self._outcomes.get(view.shape)
        if select:
            if quick and not _quick_enough(inventory, node_names, pending):
                raise NotQuick
            self._decide_nodes(outcome, node_names, asked, select=True, quick=quick, choose=choose)
            if last is not None and not outcome.error:
                covered = [n for n in node_names if last.covers(n)]
                last.record(covered, self._decisions.get(view.shape, {}), inventory.node_versions())
            return outcome
        order_key = list_key(node_names, names_text)
        changed = None
        if last is not None and last.answers(node_names, order_key):
            changed = inventory.nodes_changed_since(last.seq, last.global_version)
        if changed is None:
            if quick:
                raise NotQuick
            self._decide_nodes(outcome, node_names, asked, select=False, quick=False)
            if not outcome.error:
                last = ShapeOutcome(
                    order_key, set_key(node_names), inventory.node_versions().global_version, seq
                )
                last.record(node_names, self._decisions.get(view.shape, {}), inventory.node_versions())
                self._outcomes[view.shape] = last
                if len(self._outcomes) > MAX_SHAPES:
                    del self._outcomes[next(iter(self._outcomes))]
            return outcome
        now = self._patch(last, changed, asked, quick=quick)
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
        outcome.passed.extend(n for n in now.passed if n in last.undecided)
        outcome.failed.update((n, r) for n, r in now.failed.items() if n in last.undecided)
        outcome.unresolvable.update((n, r) for n, r in now.unresolvable.items() if n in last.undecided)
        return outcome

    def _patch(self, last: ShapeOutcome, changed: set[str], asked: Asked, *, quick: bool) -> FilterOutcome:
        """Decide again the nodes of the shape's answer ``last`` that ``changed`` since, and those it left
        undecided, and take their decisions in; returns them. ``quick``: raise NotQuick or SearchNeeded
        (with ``last`` as it was) rather than search or decide more than ``QUICK_DEVICE_CHECKS`` allow."""
        inventory = self.state.inventory
        seq = inventory.change_seq
        redo = [n for n in {*changed, *last.undecided} if last.covers(n)]
        if quick and (last.undecided or not _quick_enough(inventory, redo, asked.pending)):
            raise NotQuick
        now = FilterOutcome()
        self._decide_nodes(now, redo, asked, select=False, quick=quick)
        if not now.error:
            last.record(redo, self._decisions.get(asked.view.shape, {}), inventory.node_versions())
            last.seq = seq
        return now

    def _patch_after_bind(self, asked: Asked) -> None:
        """Bring the answer of the bound pod's claims shape (``asked``: a shared view's) up to date with
        the node the bind allocated on, as filter would for the next pod of that shape. kube-scheduler
        binds in the background while it filters the next pod, so this work leaves filter's path. Only
        where it is quick: else the next filter does it."""
        last = self._outcomes.get(asked.view.shape)
        if last is None:
            return
        changed = self.state.inventory.nodes_changed_since(last.seq, last.global_version)
        if changed is None:
            return
        try:
            self._patch(last, changed, asked, quick=True)
        except (NotQuick, SearchNeeded):
            pass
        except Exception:
            # The bind is written: a failure here must not turn it into a bind error. The next filter
            # decides the nodes (and meets the failure itself).
            log.exception("patching the answer of a claims shape after a bind failed")

    def _decide_nodes(
        self,
        outcome: FilterOutcome,
        node_names: Sequence[str],
        asked: Asked,
        *,
        select: bool,
        quick: bool,
        choose: bool = False,
    ) -> None:
        """Decide ``node_names`` into ``outcome`` (one lookup per node whose decision is current).
        ``select``: a decision by counts is not enough, nodes are scored; ``choose``: devices are chosen
        (not only scored through an equivalent node). ``quick``: raise SearchNeeded rather than search. On a
        fatal error ``outcome.error`` is set and the node lists are empty."""
        view, pending = asked.view, asked.pending
        decisions = self._decisions.get(view.shape) if view.shared else None
        versions = self.state.inventory.node_versions()
        named: dict[str, str] = {}  # a shared reason with this pod's claim names, once per distinct reason
        passed, failed, unresolvable = outcome.passed, outcome.failed, outcome.unresolvable
        budget = self.filter_time_budget
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
            if current and not (select and decision.score is None) and not (choose and not decision.results):
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
            # Bind's node, decided by counts or from an equivalent node: it fits, its devices are chosen.
            fits = choose and current and decision.results is not None
            try:
                decision = self._decide_node(
                    name, asked, select=select, quick=quick, choose=choose, fits_known=fits
                )
            except AllocatorError as e:
                outcome.error = str(e)
                outcome.passed, outcome.failed, outcome.unresolvable = [], {}, {}
                self._count(hits, misses)
                return
            if decisions is None and view.shared:
                decisions = self._decisions.get(view.shape)
            if decision is None:
                unresolvable[name] = f"node {name} is not known to dra-extender"
            elif decision.results is None:
                (unresolvable if decision.unresolvable else failed)[name] = decision.reason
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
        self,
        name: str,
        asked: Asked,
        *,
        select: bool,
        quick: bool,
        choose: bool = False,
        fits_known: bool = False,
    ) -> KeptDecision | None:
        """Decide one node the slow way and record it (shared or private). None: the node is unknown.
        Shared decisions may be taken by counts unless ``select``, and from an equivalent node's decision
        unless ``choose``; ``quick``: raise SearchNeeded rather than search; ``fits_known``: a current
        decision says the claims fit here (``allocator.decide``)."""
        version = self.state.inventory.node_version(name)
        node = self._node(name, asked.nodes)
        if node is None:
            return None
        reason = allocated_claims_reason(asked.allocated, node, asked.pod)
        if reason:
            return KeptDecision(version, None, 0, reason, True)
        extended, view = asked.extended, asked.view
        ext = extended.claim_for_node(self._node_object(name, asked.nodes)) if extended else None
        claims = [*asked.pending, ext.claim] if ext else asked.pending
        if view.shared and not choose:
            decision = self._decide_equivalent(node, claims, version, view.shape, select=select, quick=quick)
        else:
            decision = self._decide_here(
                node, claims, version, select=select or not view.shared, quick=quick, fits_known=fits_known
            )
        if view.shared and not has_share(decision.results):
            self._remember(view.shape, name, decision, claims)
        else:
            if name not in view.private and self._pods.get(view.uid) is view:
                self._keep(1)
            view.private[name] = (decision, ext)
        return decision

    def _decide_equivalent(
        self,
        node: Node,
        claims: list[Claim],
        version: tuple[int, int],
        shape: bytes,
        *,
        select: bool,
        quick: bool,
    ) -> KeptDecision:
        """``_decide_here``, or the decision of an equivalent node (``allocator.equivalence``): the
        verdict, reason and score, no devices chosen (``results`` empty: bind chooses them)."""
        # The scoring config by value: a reload's new one may be made where a freed one was (same id).
        context = (version[0], self.device_selection, self.scoring)
        table = self._equivalence.table(shape, context, claims, self.scoring.topology)
        signature = table.signature(node)
        found = table.get(signature, scored=select)
        if found is not None:
            results = () if found.fits else None
            reason = with_names(found.reason, claims) if found.reason else ""
            return KeptDecision(version, results, found.score, reason, found.unresolvable)
        decision = self._decide_here(node, claims, version, select=select, quick=quick)
        if not has_share(decision.results):
            verdict = Verdict(
                decision.results is not None,
                decision.score,
                with_placeholders(decision.reason, claims),
                decision.unresolvable,
            )
            table.put(signature, verdict, node, decision.reason)
        return decision

    def _decide_here(
        self,
        node: Node,
        claims: list[Claim],
        version: tuple[int, int],
        *,
        select: bool,
        quick: bool,
        fits_known: bool = False,
    ) -> KeptDecision:
        """The allocator's decision on this node (``allocator.decide``), as a kept decision. ``quick``:
        raise SearchNeeded rather than search. Raises AllocatorError (fatal)."""
        policy = Policy(self.device_selection, self.scoring, self.filter_timeout)
        decided = decide(
            self.state.inventory,
            self.selectors,
            node,
            claims,
            policy,
            choose=select,
            search=not quick,
            fits_known=fits_known,
        )
        if isinstance(decided, NoFit):
            return KeptDecision(version, None, 0, decided.reason, decided.unresolvable)
        return KeptDecision(version, decided.results, decided.score, "", False)

    def _remember(self, shape: bytes, node: str, decision: KeptDecision, claims: list[Claim]) -> None:
        """Cache a decision for every pod with the same claim specs: claim names in the reason become
        placeholders (``with_names`` puts the asking pod's claims back)."""
        by_node = self._decisions.get(shape)
        if by_node is None:
            by_node = self._decisions[shape] = {}
            if len(self._decisions) > MAX_SHAPES:
                del self._decisions[next(iter(self._decisions))]
        if decision.reason:
            decision = dataclasses.replace(decision, reason=with_placeholders(decision.reason, claims))
        by_node[node] = decision

    def _filter_beside(
        self,
        pod: Mapping[str, Any],
        node_names: Sequence[str],
        nodes: Mapping[str, Mapping[str, Any]] | None,
        in_flight: dict[str, tuple[str, str]],
        *,
        quick: bool,
        select: bool,
        choose: bool,
    ) -> FilterOutcome:
        """Filter while other binds write claims this pod shares. Each such claim will be allocated on its
        bind's node, so only that node can pass; there the pod's other claims are decided as usual (the
        written claim's devices are reserved for that bind) and this pod's bind waits for the write.
        Upstream's PreFilter rejects every node instead, unless both pods are in one pod group."""
        failed = {name: reason for name in node_names if (reason := elsewhere(in_flight, name))}
        here = [name for name in node_names if name not in failed]
        outcome = FilterOutcome()
        if here:
            outcome = self._filter(
                pod, here, nodes, quick=quick, select=select, choose=choose, beside=frozenset(in_flight)
            )
        outcome.failed.update(failed)
        return outcome

    def _kept(self, uid: str, node: str) -> tuple[KeptDecision, ExtendedClaim | None] | None:
        """The pod's current decision for ``node`` from its last filter, or None if it is outdated."""
        view = self._pods.get(uid)
        if view is None:
            return None
        found = view.private.get(node)
        if found is None and view.shared:
            shared = self._decisions.get(view.shape, {}).get(node)
            found = (shared, None) if shared is not None else None
        if found is None or found[0].version != self.state.inventory.node_version(node):
            return None
        return found


def _quick_enough(inventory: Inventory, node_names: Sequence[str], claims: list[Claim]) -> bool:
    """Whether deciding ``node_names`` stays within ``QUICK_NODES`` and ``QUICK_DEVICE_CHECKS``."""
    if len(node_names) > QUICK_NODES:
        return False
    requests = sum(len(r.alternatives) for claim in claims for r in claim.requests)
    checks = 0
    for name in node_names:
        node = inventory.node(name)
        if node is not None:
            checks += requests * sum(
                len(s.devices) for pool in inventory.pools_for(node) for s in pool.slices
            )
    return checks <= QUICK_DEVICE_CHECKS


def _budget_reason(budget: float) -> str:
    return f"dra-extender: filter time budget ({budget:g} s) used up first"


def _with_refusals(outcome: FilterOutcome, refusals: list[str]) -> FilterOutcome:
    """``outcome`` with the API server's refusals (``SchedulingService._refusals``) added to the reasons
    of the nodes that do not fit, as new dicts (the kept answers stay as they are)."""
    if not refusals:
        return outcome
    note = "; ".join(refusals)
    outcome.failed = {name: f"{reason}; {note}" for name, reason in outcome.failed.items()}
    outcome.unresolvable = {name: f"{reason}; {note}" for name, reason in outcome.unresolvable.items()}
    return outcome
