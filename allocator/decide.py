"""One node's decision for a pod's claims: the allocator's entry for filter, prioritize and bind.

Upstream's structured allocator is built from a snapshot and asked ``Allocate(node, claims)``; this is
that call here, with the steps the extender adds around the search kept in one place, in order::

    counts     free devices per request settle the claims' fit without a search (``allocator.counting``)
    search     the upstream search for an allocation (``allocator.search``)
    choice     which devices the policy takes among the fitting ones (``allocator.alignment``)
    scoring    the fine score of the chosen devices (``allocator.scoring``; prioritize rounds it to 0..10)
    diagnosis  the one-line reason of a "no" (``allocator.diagnose``), with the node's rejected slices

Three outcomes, kept apart as upstream keeps them:

* ``Fits``: one allocation result per claim and their score (or, when counts settled it and no devices
  were asked for, no results and no score);
* ``NoFit``: the reason, and whether freeing devices could ever help (``unresolvable``);
* a fatal error for the pod on every node: ``AllocatorError`` is raised (``allocator.errors``).

``fits`` is the yes / no of the search alone, for preemption's what-if inventories. Pure: reads the
inventory, keeps nothing. Caching decisions per claims shape, locking and writing the
result are the caller's (``app.scheduling.service``).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from allocator.alignment import select
from allocator.counting import countable, verdict
from allocator.diagnose import NoFit, diagnose
from allocator.errors import NodeLocalError
from allocator.inventory import Inventory
from allocator.model import Claim
from allocator.nodeselector import Node
from allocator.scoring import LOWEST_FINE_SCORE, FineScore, ScoreBreakdown, ScoringConfig, score_allocation
from allocator.search import Allocator, Deadline
from allocator.selectors import SelectorCache

__all__ = [
    "FILTER_TIMEOUT",
    "Decision",
    "Fits",
    "NoFit",
    "Policy",
    "SearchNeeded",
    "Want",
    "allocate",
    "decide",
    "device_checks",
    "fits",
]

FILTER_TIMEOUT = 10.0
"""Seconds, kube-scheduler's default ``filterTimeout`` for the DynamicResources plugin: the only bound
upstream puts on one node's search (no step limit)."""


class Want(enum.Enum):
    """What a caller asks of one node's decision (``decide``), from the least work to the most."""

    VERDICT = "verdict"
    """Whether the claims fit, and why not: a fit settled by free-device counts comes without devices or
    score (kube-scheduler's Filter; Score and bind choose the devices later)."""
    SCORE = "score"
    """A fit comes with its devices and their score; counts are asked first, as a "no" from them spares
    the search (Score, and Reserve on a node not known to fit)."""
    DEVICES = "devices"
    """The devices of a fit the caller holds already for these claims on this node (Reserve after Filter
    decided the node by counts): the search chooses them, with their score, without counting first."""


@dataclass(frozen=True, slots=True)
class Policy:
    """How devices are chosen among those that fit, and how the choice is scored."""

    device_selection: str = "aligned"
    """``aligned`` or ``first-fit`` (upstream's order; ``allocator.alignment``)."""
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    filter_timeout: float | None = FILTER_TIMEOUT
    """Seconds one node's search may run before the node fails with "timed out" (``SearchTimeoutError``);
    None: no limit. Upstream: kube-scheduler's ``DynamicResourcesArgs.filterTimeout``."""


@dataclass(frozen=True, slots=True)
class Fits:
    """The claims fit on the node."""

    results: tuple[dict[str, Any], ...]
    """One AllocationResult dict per claim, in the claims' order; empty when counts decided the fit and
    no devices were asked for (``Want.VERDICT``), or when there are no claims."""
    fine_score: FineScore | None
    """``ScoreBreakdown.fine_score``; None exactly when no devices were chosen by counts."""
    breakdown: ScoreBreakdown | None = None
    """The score by component, when devices were chosen."""
    placement: str = ""
    """Which device-selection attempt won (``allocator.alignment.Selection.placement``)."""


Decision = Fits | NoFit


class SearchNeeded(Exception):
    """``decide(search=False)``: counts do not settle these claims on this node, only the search could."""


def decide(
    inventory: Inventory,
    selectors: SelectorCache,
    node: Node,
    claims: Sequence[Claim],
    policy: Policy,
    want: Want = Want.SCORE,
    *,
    search: bool = True,
) -> Decision:
    """Whether ``claims`` fit together on ``node``, with what ``want`` asks of a fit, or why not.

    ``search=False`` (the event loop's quick answers): raise SearchNeeded instead of a search that could
    backtrack. ``Want.DEVICES`` of claims counts can decide gets one pass of the search over the node's
    devices first (``_one_pass``), as its full decision searches first; what that pass does not settle,
    counts decide as far as they can. A "no" names the slices rejected for the node (their devices count
    for nothing). Raises AllocatorError (fatal for the pod)."""
    decision: Decision | None = None
    if want is Want.DEVICES and not search and claims and countable(claims):
        decision = _one_pass(inventory, selectors, node, claims, policy)
    if decision is None and (want is not Want.DEVICES or not search):
        decision = _counted(inventory, selectors, node, claims, want, search=search)
    if decision is None:
        decision = allocate(inventory, selectors, node, claims, policy)
    rejected = inventory.invalid_slices(node.name)
    if isinstance(decision, NoFit) and rejected:
        return NoFit(f"{decision.reason}; slices not used: {'; '.join(rejected)}", decision.unresolvable)
    return decision


def allocate(
    inventory: Inventory, selectors: SelectorCache, node: Node, claims: Sequence[Claim], policy: Policy
) -> Decision:
    """Search, choose and score (no counts first, nothing added to the reason): what an explanation
    shows for one node. Raises AllocatorError (fatal for the pod)."""
    if not claims:
        return Fits((), LOWEST_FINE_SCORE, placement="first-fit")
    try:
        found = _chosen(inventory, selectors, node, claims, policy)
    except NodeLocalError as e:
        return NoFit(str(e), True)
    return found if found is not None else diagnose(inventory, selectors, node, claims)


def _chosen(
    inventory: Inventory,
    selectors: SelectorCache,
    node: Node,
    claims: Sequence[Claim],
    policy: Policy,
    first_steps: int | None = None,
) -> Fits | None:
    """The devices the policy chooses and their score, or None when the search finds no allocation.
    ``first_steps``: the devices the first-fit search may try. Raises AllocatorError, NodeLocalError."""
    selection = select(
        inventory,
        selectors,
        node,
        claims,
        policy.device_selection,
        policy.scoring.topology,
        deadline=_deadline(policy.filter_timeout),
        first_steps=first_steps,
    )
    if selection.results is None:
        return None
    breakdown = score_allocation(inventory, selectors, node, claims, selection.results, policy.scoring)
    return Fits(tuple(selection.results), breakdown.fine_score, breakdown, selection.placement)


def _one_pass(
    inventory: Inventory, selectors: SelectorCache, node: Node, claims: Sequence[Claim], policy: Policy
) -> Fits | None:
    """The fit the search finds trying each of the node's devices at most once per request, or None.

    For a quick ``Want.DEVICES`` of claims counts could decide (``countable``): without backtracking the
    search does no more work than counting, and the fit it finds is the one the full decision (which
    searches without counting) returns, so a fit costs one pass instead of two. Everything else (no fit in
    one pass, an invalid pool, the filter timeout) is left to counts, as before. Not for ``Want.SCORE``:
    its full decision counts first, and where counts say no the search can still raise (a selector's
    runtime error on a device of another node, which the search meets and counts skip)."""
    try:
        return _chosen(
            inventory, selectors, node, claims, policy, first_steps=device_checks(inventory, node, claims)
        )
    except NodeLocalError:
        return None


def device_checks(inventory: Inventory, node: Node, claims: Sequence[Claim]) -> int:
    """Request alternatives of ``claims`` times the devices of ``node``'s pools: what one pass over the
    node takes, counting or searching without backtracking."""
    requests = sum(len(request.alternatives) for claim in claims for request in claim.requests)
    return requests * sum(len(s.devices) for pool in inventory.pools_for(node) for s in pool.slices)


def fits(
    inventory: Inventory,
    selectors: SelectorCache,
    node: Node,
    claims: Sequence[Claim],
    timeout: float | None = None,
) -> bool:
    """Whether the search finds any allocation of ``claims`` on ``node`` (nothing chosen or scored):
    preemption's question, asked of an inventory with its victims' claims released
    (``allocator.eviction``). An invalid pool on the node, or a search still running after ``timeout``
    seconds (None: no limit), is a no. Raises AllocatorError (fatal)."""
    try:
        return Allocator(inventory, selectors, _deadline(timeout)).allocate(node, list(claims)) is not None
    except NodeLocalError:
        return False


def _counted(
    inventory: Inventory,
    selectors: SelectorCache,
    node: Node,
    claims: Sequence[Claim],
    want: Want,
    *,
    search: bool,
) -> Decision | None:
    """The decision free-device counts settle, or None when devices must be chosen by the search."""
    counted = verdict(inventory, selectors, node, claims) if claims and countable(claims) else None
    if counted is not None and counted.no_fit is not None:
        return counted.no_fit
    if counted is not None and want is Want.VERDICT:
        return Fits((), None)
    if counted is None and claims and not search:
        raise SearchNeeded
    return None


def _deadline(timeout: float | None) -> Deadline | None:
    return Deadline(timeout) if timeout is not None else None
