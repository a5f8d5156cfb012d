"""What filter decides and keeps for prioritize and bind: per claims shape and node, per pod.

kube-scheduler asks filter, then prioritize, then bind about one pod; the extender answers the later
calls from what filter decided while each node's inventory version is unchanged (``KeptDecision``).
Decisions are shared by pods whose pending claims have equal specs (one template: one claims shape,
``claims_shape``), with the claim names in reasons as placeholders (``with_placeholders`` / ``with_names``);
a shape's answer for a whole node list (``ShapeOutcome``) is patched only for the nodes changed since.
``PodView`` holds one pod's view and the decisions that cannot be shared. The types only: they are
kept, and bounded, by ``app.scheduling.decisioncache``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from allocator.inventory import NodeVersions
from allocator.model import Claim
from allocator.scoring import FineScore
from app.scheduling.extended import ExtendedClaim
from app.state.podclaims import PodClaim

__all__ = [
    "DecisionStats",
    "FilterOutcome",
    "KeptDecision",
    "PodView",
    "ShapeOutcome",
    "set_key",
]


@dataclass(slots=True)
class FilterOutcome:
    """Nodes that fit, nodes that failed (reason), nodes that can never fit, or a fatal error."""

    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    error: str = ""
    stale_claims: list[tuple[str, str]] = field(default_factory=list)
    """(key, uid) of extended-resource claims left from an earlier attempt (deleted by ``filter``)."""
    unusable: Mapping[str, Any] | None = None
    """An allocated claim of the pod that can never be bound, as seen (deallocated by ``filter``)."""
    unusable_reason: str = ""
    """Why ``unusable`` can never be bound."""
    in_request_order: bool = False
    """``passed`` is the asked names that pass, in the order asked, each once: built by walking the asked
    list, so the answer needs no check (``app.http.wire``)."""
    sampled: bool = False
    """``passed`` is already the sample passed on to kube-scheduler's scoring
    (``app.scheduling.sampling``)."""


@dataclass(frozen=True, slots=True)
class KeptDecision:
    """What one node decided for a claims shape, valid while the node's version is unchanged."""

    version: tuple[int, int]
    results: tuple[dict[str, Any], ...] | None
    """One allocation result per claim; None: the claims do not fit."""
    fine_score: FineScore | None
    """``allocator.scoring.ScoreBreakdown.fine_score``; None: the claims fit by free-device counts
    (``allocator.counting``) and no devices were chosen yet (``results`` is empty): prioritize and bind
    choose them (``Want.SCORE`` and up)."""
    reason: str
    unresolvable: bool


@dataclass(slots=True)
class ShapeOutcome:
    """A claims shape's answer for one set of nodes as of inventory change ``seq``; reasons keep the
    claim-name placeholders of the shared decisions. ``undecided`` nodes (time budget, unknown node) are
    decided again on every call.

    The set is what is kept: kube-scheduler filters nodes in parallel and sends the feasible ones in the
    order they finished, so one set comes in many orders. ``order_key`` identifies the last order (the
    one ``passed`` is in, once ``ordered``); another order of the same set costs one reordering."""

    order_key: int
    set_key: tuple[int, int]
    """Hash and size of the node set."""
    global_version: int
    seq: int
    passed: dict[str, FineScore | None] = field(default_factory=dict)
    """Passing node -> its fine score (None: fits by counts, not scored yet)."""
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    undecided: set[str] = field(default_factory=set)
    ordered: bool = False
    """``passed`` is in the order of the node list: the answer is that list without the others, which the
    wire layer then checks at C speed instead of filtering every name (``order``)."""
    holes: dict[str, int] | None = None
    """Where the nodes that do not pass stand in the node list of ``order_key`` (``passing``); None
    until that order is asked for a second time."""
    moved: set[str] = field(default_factory=set)
    """Nodes that joined or left ``passed`` since ``holes`` was made."""
    new_order: bool = True
    """The order of ``order_key`` has been asked for once only."""

    def answers(self, names: Sequence[str], order_key: int) -> bool:
        """Whether this is the answer for the nodes ``names`` (whose ``list_key`` is ``order_key``), in any
        order; in another order, ``passed`` is to be ordered again."""
        if self.size() != len(names):
            return False  # it holds other nodes too (``NodeDecider`` extended it), or a name came twice
        if order_key != self.order_key:
            if set_key(names) != self.set_key:
                return False
            self.order_key, self.ordered = order_key, False
            self.holes, self.new_order = None, True
            self.moved.clear()
        return True

    def adopt(self, names: Sequence[str], order_key: int) -> None:
        """Become the answer for the node list ``names`` (``list_key`` ``order_key``), which holds every node
        this answer has."""
        self.order_key, self.set_key = order_key, set_key(names)
        self.ordered, self.holes, self.new_order = False, None, True
        self.moved.clear()

    def drop(self, names: Iterable[str]) -> None:
        """Forget these nodes (not in the node list of ``order_key`` once they are gone: no place in it)."""
        for name in names:
            self.passed.pop(name, None)
            self.failed.pop(name, None)
            self.unresolvable.pop(name, None)
            self.undecided.discard(name)
            self.moved.discard(name)
            if self.holes is not None:
                self.holes.pop(name, None)

    def size(self) -> int:
        """Nodes this answer holds."""
        return len(self.passed) + len(self.failed) + len(self.unresolvable) + len(self.undecided)

    def covers(self, name: str) -> bool:
        return (
            name in self.passed or name in self.failed or name in self.unresolvable or name in self.undecided
        )

    def record(
        self, names: Iterable[str], decisions: Mapping[str, KeptDecision], versions: NodeVersions
    ) -> None:
        """Take each node's shared decision into the answer; a node without a current one (not decided in
        time, unknown, not shareable) is undecided and decided again on the next call."""
        passed, moved = self.passed, self.moved
        for name in names:
            self.failed.pop(name, None)
            self.unresolvable.pop(name, None)
            self.undecided.discard(name)
            decision = decisions.get(name)
            if decision is not None and decision.version != (versions.global_version, versions.get(name)):
                decision = None
            if decision is not None and decision.results is not None:
                # A node that still passes keeps its place; one that joins goes last.
                if name not in passed:
                    self.ordered = False
                    moved.add(name)
                passed[name] = decision.fine_score
                continue
            if passed.pop(name, _ABSENT) is not _ABSENT:
                moved.add(name)
            if decision is None:
                self.undecided.add(name)
            else:
                (self.unresolvable if decision.unresolvable else self.failed)[name] = decision.reason

    def order(self, names: Sequence[str]) -> None:
        """Put ``passed`` in the order of ``names``, the node list."""
        if not self.ordered:
            self.passed = {name: self.passed[name] for name in names if name in self.passed}
            self.ordered = True

    def passing(self, names: Sequence[str]) -> list[str] | None:
        """The passing nodes of ``names`` (the node list of ``order_key``) in its order, cut out of
        ``names`` around the places of the others: the names just decoded rather than a copy of
        ``passed``, thousands of strings long out of the CPU's caches. None where that copy is the way:
        the first time an order is asked (its places are found on the second), when many nodes do not
        pass, or when a name is in the list twice (then the places cannot stand for the names)."""
        holes = self.holes
        if holes is None:
            if self.new_order or self.size() != len(names):
                self.new_order = False
                return None
            passed = self.passed
            holes = self.holes = {name: place for place, name in enumerate(names) if name not in passed}
            self.moved.clear()
        for name in self.moved:
            if name in self.passed:
                holes.pop(name, None)
            elif name not in holes:
                holes[name] = names.index(name)
        self.moved.clear()
        if len(holes) * _CUT_RATIO > len(self.passed):
            return None
        answer: list[str] = []
        start = 0
        for place in sorted(holes.values()):
            answer += names[start:place]
            start = place + 1
        answer += names[start:]
        return answer


_ABSENT = object()

_CUT_RATIO = 8
"""Cutting the node list around a place costs about as much as copying eight passing names."""


def list_key(names: Sequence[str], joined: str | None = None) -> int:
    """``ShapeOutcome.order_key`` of a node list: the hash of its names joined by newlines, one string
    hashed at C speed where the tuple's hash would hash thousands of just-decoded names one by one.
    ``joined``: that text, when the caller made it and no name holds a newline (no node name can). A
    list with a newline in a name is keyed by its tuple instead: two lists never share a text."""
    if joined is not None:
        return hash(joined) if names else hash(())  # [] and [""] join alike
    joined = "\n".join(names)
    if joined.count("\n") != len(names) - 1:
        return hash(tuple(names))
    return hash(joined)


def set_key(names: Sequence[str]) -> tuple[int, int]:
    """``ShapeOutcome.set_key`` of a node list."""
    return hash(frozenset(names)), len(names)


@dataclass(slots=True)
class PodView:
    """What filter decided for one pod, for prioritize and bind.

    Decisions shared by every pod with the same claim specs live in the ``DecisionCache``
    under ``(shape, node)``; ``private`` holds the ones that cannot be shared (shares of multi-allocatable
    devices, nodes as kube-scheduler sent them, extended-resource claims, already-allocated claims).
    """

    uid: str
    shape: bytes
    claims: tuple[str, ...]
    """Keys of the pending claims the decisions are for: a bind reuses them only for the same claims."""
    pod_spec: bytes = b""
    """The pod spec they were made for (containers' extended resources): a bind reuses them only for it."""
    shared: bool = False
    """Whether the decisions are the shape's shared ones (else only ``private`` holds this pod's)."""
    private: dict[str, tuple[KeptDecision, ExtendedClaim | None]] = field(default_factory=dict)


@dataclass(slots=True)
class DecisionStats:
    """Counters of how filter decided nodes, for ``/metrics`` (plain integers: the hot path only adds)."""

    hits: int = 0
    """Nodes answered from a kept decision whose node version is unchanged."""
    misses: int = 0
    """Nodes decided anew (counts, or a search)."""
    budget_cuts: int = 0
    """Filter calls whose time budget ran out before every node was decided."""
    budget_undecided_nodes: int = 0
    """Nodes those calls failed with the budget reason."""


def has_share(results: tuple[dict[str, Any], ...] | None) -> bool:
    """Whether an allocation holds shares of multi-allocatable devices: each share needs its own
    ``shareID``, so such a decision is never handed to a second pod."""
    return any(r.get("shareID") for a in results or () for r in a["devices"]["results"])


def with_placeholders(reason: str, claims: list[Claim]) -> str:
    """A reason with the claims' names as placeholders, to be shared by pods with the same claim specs."""
    for index, claim in enumerate(claims):
        reason = reason.replace(f"claim {claim.key},", f"claim \x00{index}\x00,")
    return reason


def with_names(reason: str, claims: list[Claim]) -> str:
    """A cached reason with the asking pod's claim names in it."""
    for index, claim in enumerate(claims):
        reason = reason.replace(f"claim \x00{index}\x00,", f"claim {claim.key},")
    return reason


def all_with_names(reasons: dict[str, str], claims: list[Claim]) -> dict[str, str]:
    """Node -> cached reason, with the asking pod's claim names in each (a node list is built at C speed:
    thousands of full nodes share a handful of distinct reasons)."""
    if not reasons:
        return {}  # the usual answer on a cluster with room
    named = {reason: with_names(reason, claims) for reason in set(reasons.values())}
    return dict(zip(reasons, map(named.__getitem__, reasons.values()), strict=True))


def unscored(scores: Sequence[int | None]) -> list[int]:
    """Where ``scores`` holds None: C-speed scans, as there are thousands of nodes and usually one such."""
    places: list[int] = []
    try:
        while True:
            places.append(scores.index(None, places[-1] + 1 if places else 0))
    except ValueError:
        return places


def _digest(data: bytes) -> bytes:
    """16 bytes standing for ``data`` (kept per pod and shape instead of specs of up to megabytes)."""
    return hashlib.blake2b(data, digest_size=16).digest()


def claims_shape(claims: Sequence[PodClaim]) -> bytes:
    """The claims' specs, canonical: pods whose pending claims have equal specs get equal decisions."""
    return _digest(
        b"\n".join(orjson.dumps(pc.claim.get("spec"), option=orjson.OPT_SORT_KEYS) for pc in claims)
    )


def spec_key(pod: Mapping[str, Any]) -> bytes:
    return _digest(orjson.dumps(pod.get("spec"), option=orjson.OPT_SORT_KEYS))
