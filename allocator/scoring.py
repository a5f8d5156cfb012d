"""Node scores for prioritize: 0..10 from the allocation the pod would get on the node.

The score is a weighted mean of five components, each in [0, 1] (``ScoreBreakdown`` keeps them so the
explanation can show the arithmetic)::

    numa     all of the pod's devices on one NUMA node: 1; on n NUMA nodes: 1/n
             (pods with fewer than two devices: does not apply)
    pcie     devices of different requests that share a PCIe root with each other, as a share of
             the pod's devices (e.g. GPU and NIC on one root: 1; pods with one request: does not apply)
    packing  binpack: the share of the node's devices of the pod's classes in use once the pod is placed
             (prefer the node the pod fills most); spread: the share left free
    intact   whole free aligned groups (NUMA nodes, PCIe roots with two or more devices of the pod's
             classes) that the placement leaves whole, or uses completely
    prioritized  the in-tree plugin's Score (DRAPrioritizedList): 8 - i for each request that gets its
             ``firstAvailable`` subrequest i, divided by 8 per such request (the best possible)
             (pods without ``firstAvailable`` requests: does not apply)

    score = floor(10 * sum(weight * value) / sum(weight) + 1/2)   over the components that apply

Decisions keep the score before that rounding, in thousandths of a point with the half point added
(``fine_score``: 3.333 is 3833, and ``points`` gives the 0..10 score, 3, from it): prioritize sends the
0..10 score, as kube-scheduler's extender protocol asks, but filter ranking the nodes itself
(``device_scoring: filter``) orders nodes the rounding would tie, e.g. binpack's node with one device in
use of 8 and an empty one.

Upstream divides each node's ``prioritized`` sum by the best node's sum; dividing by the best possible
keeps the score a function of one node's allocation (the order of nodes is the same, and the value equals
upstream's whenever some node gets every first choice). Upstream also sums claims allocated before, which
add the same on every node; only the claims allocated now are scored here.

A missing ``numaNode`` / ``pcieRoot`` is *unknown*, never NUMA node 0: such devices count as neutral
(0.5) in ``numa`` and ``pcie``, and a node without any topology scores 0.5 for ``intact``. Scores are
pure functions of the inventory snapshot, the claims and the allocation, so equal inputs give equal
scores; the service computes them once per (pod, node) in filter and reuses them in prioritize.

kube-scheduler adds ``score * weight * 10`` per extender to a node's total (extender-protocol.md §3.3);
see docs/features.md for the recommended ``weight``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NewType
from weakref import WeakKeyDictionary

from allocator.alignment import Topology
from allocator.funnel import class_matches, node_devices
from allocator.inventory import Inventory
from allocator.model import Claim, Device, DeviceID, DeviceRequest
from allocator.nodeselector import Node
from allocator.selectors import SelectorCache

__all__ = [
    "COMPONENTS",
    "LOWEST_FINE_SCORE",
    "MAX_WEIGHT",
    "NEUTRAL",
    "SCORING_POLICIES",
    "FineScore",
    "ScoreBreakdown",
    "ScoreComponent",
    "ScoringConfig",
    "parse_weights",
    "points",
    "points_of",
    "score_allocation",
]

SCORING_POLICIES = ("binpack", "spread")
"""``binpack``: prefer nodes the pod fills (keeps other nodes whole); ``spread``: prefer emptier nodes."""

COMPONENTS = ("numa", "pcie", "packing", "intact", "prioritized")

NEUTRAL = 0.5
"""The value of an alignment component whose topology is unknown: neither aligned nor misaligned."""

MAX_SCORE = 10
"""``MaxExtenderPriority``."""

STEPS_PER_POINT = 1000
"""A fine score's steps per point of the 0..10 score."""

FineScore = NewType("FineScore", int)
"""A score in thousandths of a point, half a point added (``ScoreBreakdown.fine_score``): the type keeps it
apart from the 0..10 score ``points`` makes of it."""

LOWEST_FINE_SCORE = FineScore(0)
"""A pod's that gets no new device (nothing to prefer), and a node's that does not fit."""

_ROUNDING_SLACK = 1e-6
"""Of a step: far above a sum of a few weighted shares' floating-point error, far below a step."""

_TOP_FINE_SCORE = (MAX_SCORE + 1) * STEPS_PER_POINT - 1
"""The most a fine score can be whose points are at most ``MAX_SCORE`` (the mean is at most 1, but it is
a floating-point sum)."""

MAX_WEIGHT = 1000
"""The largest weight of a component, 125 times the largest default: weights are relative."""

SUBREQUEST_RANKS = 8
"""``FirstAvailableDeviceRequestMaxSize``: subrequest i of a request is worth 8 - i."""


@dataclass(frozen=True, slots=True)
class ScoringConfig:
    """Scoring policy and the weight of each component (relative; only ratios matter)."""

    policy: str = "binpack"
    """``binpack`` (default: fewer, fuller nodes keep whole nodes for large pods) or ``spread``."""
    weights: Mapping[str, float] = field(
        default_factory=lambda: {"numa": 3.0, "pcie": 2.0, "packing": 2.0, "intact": 1.0, "prioritized": 8.0}
    )
    """Per component. Defaults: NUMA alignment matters most for performance (3), a GPU next to its NIC
    next (2), packing as much (2) so a half-used node beats an empty one, keeping groups whole (1). The
    pod's own ``firstAvailable`` order weighs as much as all of those (8): one rank lower on one request
    then costs about one score step, as the in-tree plugin's weight 2 costs 26 of its 200 points."""
    topology: Topology = field(default_factory=Topology)
    """Which attributes name NUMA nodes and PCIe roots."""

    def __post_init__(self) -> None:
        if self.policy not in SCORING_POLICIES:
            raise ValueError(
                f"scoring policy: must be one of {', '.join(SCORING_POLICIES)}, got {self.policy!r}"
            )
        unknown = set(self.weights) - set(COMPONENTS)
        if unknown:
            raise ValueError(
                f"score weights: unknown component(s) {', '.join(sorted(unknown))} "
                f"(known: {', '.join(COMPONENTS)})"
            )
        if any(not math.isfinite(w) or w < 0 for w in self.weights.values()):
            raise ValueError("score weights: must be finite and >= 0")
        # Two weights of 1e308 sum to inf, and the mean to inf / inf = nan: a bound keeps the sums finite.
        heavy = [f"{name}={w:g}" for name, w in self.weights.items() if w > MAX_WEIGHT]
        if heavy:
            raise ValueError(
                f"score weights: at most {MAX_WEIGHT} each (only their ratios matter), got {', '.join(heavy)}"
            )
        if not any(self.weights.get(c, 0) > 0 for c in COMPONENTS):
            raise ValueError("score weights: at least one must be positive")

    def weight(self, component: str) -> float:
        return float(self.weights.get(component, 0.0))


def parse_weights(text: str) -> dict[str, float]:
    """``numa=3,pcie=2,packing=2,intact=1,prioritized=8`` (a subset is fine: the others keep their defaults).

    Raises ValueError naming the bad entry."""
    weights = dict(ScoringConfig().weights)
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = entry.partition("=")
        name = name.strip()
        if not sep or name not in COMPONENTS:
            raise ValueError(f"score weight {entry!r}: expected one of {', '.join(COMPONENTS)}=<number>")
        try:
            weights[name] = float(value)
        except ValueError:
            raise ValueError(f"score weight {name}: not a number: {value.strip()!r}") from None
    return weights


@dataclass(frozen=True, slots=True)
class ScoreComponent:
    """One component: ``value`` in [0, 1], or None when it does not apply to this pod."""

    name: str
    value: float | None
    weight: float
    detail: str


@dataclass(frozen=True, slots=True)
class ScoreBreakdown:
    """The score and how it was computed."""

    fine_score: FineScore
    """The score in thousandths of a point, half a point added: its 0..10 score is ``points`` of it."""
    policy: str
    components: tuple[ScoreComponent, ...]

    @property
    def score(self) -> int:
        """0..10."""
        return points(self.fine_score)

    @property
    def unrounded(self) -> float:
        """The score before its rounding to 0..10 (``10 * mean``), cut to the thousandth; 0 where nothing was
        scored (its fine score is the lowest, without the half point)."""
        return max(0.0, (self.fine_score - STEPS_PER_POINT // 2) / STEPS_PER_POINT)


def points(fine_score: int) -> int:
    """The 0..10 score of ``fine_score`` (``ScoreBreakdown.fine_score``): its whole points, rounded half up
    since the half point is in it."""
    return fine_score // STEPS_PER_POINT


_POINTS = tuple(map(points, range(_TOP_FINE_SCORE + 1)))


def points_of(fine_scores: Iterable[FineScore]) -> list[int]:
    """``points`` of each, at C speed (prioritize answers for thousands of nodes)."""
    return list(map(_POINTS.__getitem__, fine_scores))


@dataclass(frozen=True, slots=True)
class _Picked:
    device: Device
    request: str
    """``claim/request`` (the parent request: subrequests of one request are one request)."""
    alt: DeviceRequest | None


def _picked(
    index: Mapping[DeviceID, Device], claims: Sequence[Claim], results: Sequence[Mapping[str, Any]]
) -> list[_Picked]:
    picked = []
    for claim, allocation in zip(claims, results, strict=False):
        alternatives = {alt.name: alt for r in claim.requests for alt in r.alternatives}
        for entry in allocation.get("devices", {}).get("results", ()):
            device = index.get((entry["driver"], entry["pool"], entry["device"]))
            if device is None:
                continue
            name = entry["request"]
            picked.append(_Picked(device, f"{claim.key}/{name.partition('/')[0]}", alternatives.get(name)))
    return picked


def _numa(picked: list[_Picked], topology: Topology, weight: float) -> ScoreComponent:
    devices = list({id(p.device): p.device for p in picked}.values())
    if len(devices) < 2:
        return ScoreComponent("numa", None, weight, "fewer than two devices")
    known = [n for n in (topology.numa(d) for d in devices) if n is not None]
    if not known:
        return ScoreComponent("numa", NEUTRAL, weight, "NUMA node unknown (not published)")
    nodes = sorted({str(n) for n in known})
    share = len(known) / len(devices)
    value = share / len(nodes) + (1 - share) * NEUTRAL
    where = f"NUMA node {nodes[0]}" if len(nodes) == 1 else f"NUMA nodes {', '.join(nodes)}"
    unknown = len(devices) - len(known)
    detail = f"{len(known)} device(s) on {where}" + (f", {unknown} unknown" if unknown else "")
    return ScoreComponent("numa", value, weight, detail)


def _pcie(picked: list[_Picked], topology: Topology, weight: float) -> ScoreComponent:
    requests = {p.request for p in picked}
    if len(requests) < 2:
        return ScoreComponent("pcie", None, weight, "one request")
    roots = [(p, topology.roots(p.device)) for p in picked]
    known = [(p, r) for p, r in roots if r]
    if not known:
        return ScoreComponent("pcie", NEUTRAL, weight, "PCIe root unknown (not published)")
    aligned = sum(1 for p, r in known if any(q.request != p.request and r & s for q, s in known))
    share = len(known) / len(picked)
    value = share * aligned / len(known) + (1 - share) * NEUTRAL
    return ScoreComponent(
        "pcie",
        value,
        weight,
        f"{aligned} of {len(known)} device(s) share a PCIe root with another request's device",
    )


@dataclass(slots=True)
class _NodeView:
    """What scoring needs of one node for one set of DeviceClasses; valid while the node's pool list and
    the class objects are the same (they are replaced when slices or classes change, never mutated)."""

    pools: object
    classes: tuple[object, ...]
    index: dict[DeviceID, Device]
    members: list[Device]
    groups: list[list[Device]]
    """NUMA nodes and PCIe roots of ``members`` with two or more devices."""
    topology_known: bool


_ViewKey = tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]
_VIEWS: WeakKeyDictionary[Inventory, dict[_ViewKey, _NodeView]] = WeakKeyDictionary()
_MAX_VIEWS = 100_000
"""Node views kept per inventory (each a few hundred bytes); all are dropped when it is exceeded."""


def _node_view(
    inventory: Inventory, selectors: SelectorCache, node: Node, classes: tuple[str, ...], topology: Topology
) -> _NodeView:
    pools = inventory.pools_for(node)
    class_objects = tuple(inventory.device_class(c) for c in classes)
    views = _VIEWS.setdefault(inventory, {})
    key = (node.name, classes, topology.numa_attributes, topology.pcie_attributes)
    view = views.get(key)
    if view is not None and view.pools is pools and view.classes == class_objects:
        return view
    devices = [nd.device for nd in node_devices(inventory, node) if nd.pool.usable]
    members = [d for d in devices if any(class_matches(selectors, inventory, c, d) for c in classes)]
    grouped: dict[tuple[str, object], list[Device]] = {}
    for device in members:
        numa = topology.numa(device)
        if numa is not None:
            grouped.setdefault(("numaNode", numa), []).append(device)
        for root in topology.roots(device):
            grouped.setdefault(("pcieRoot", root), []).append(device)
    view = _NodeView(
        pools,
        class_objects,
        {d.id: d for d in devices},
        members,
        [g for g in grouped.values() if len(g) >= 2],
        bool(grouped),
    )
    if len(views) >= _MAX_VIEWS:
        views.clear()
    views[key] = view
    return view


def score_allocation(
    inventory: Inventory,
    selectors: SelectorCache,
    node: Node,
    claims: Sequence[Claim],
    results: Sequence[Mapping[str, Any]],
    config: ScoringConfig | None = None,
) -> ScoreBreakdown:
    """Score the allocation ``results`` (one per claim, from ``allocator.alignment.select``) on ``node``.

    A pod that gets no new device scores 0 everywhere (nothing to prefer). What does not depend on the
    allocation (the node's devices of the pod's classes and their groups) is cached per node, weakly keyed
    by the inventory."""
    config = config or ScoringConfig()
    topology = config.topology
    classes = tuple(
        sorted(
            {alt.class_name for claim in claims for request in claim.requests for alt in request.alternatives}
        )
    )
    view = _node_view(inventory, selectors, node, classes, topology)
    picked = _picked(view.index, claims, results)
    if not picked:
        return ScoreBreakdown(LOWEST_FINE_SCORE, config.policy, ())
    picked_ids = {p.device.id for p in picked}
    components = [
        _numa(picked, topology, config.weight("numa")),
        _pcie(picked, topology, config.weight("pcie")),
        _packing(inventory, view.members, picked_ids, config),
        _intact(inventory, view, picked_ids, config.weight("intact")),
        _prioritized(claims, results, config.weight("prioritized")),
    ]
    total = sum(c.weight for c in components if c.value is not None)
    if total <= 0:
        return ScoreBreakdown(LOWEST_FINE_SCORE, config.policy, tuple(components))
    mean = sum(c.weight * c.value for c in components if c.value is not None) / total
    # A mean on a step (23/25 in use: 8300) can land just below it in floating point, and a step apart
    # decides which nodes filter passes on: equal means must stay equal, the half point must round up.
    steps = STEPS_PER_POINT * (MAX_SCORE * mean + 0.5) + _ROUNDING_SLACK
    fine_score = FineScore(min(_TOP_FINE_SCORE, max(0, math.floor(steps))))
    return ScoreBreakdown(fine_score, config.policy, tuple(components))


def _packing(
    inventory: Inventory, members: list[Device], picked: set[DeviceID], config: ScoringConfig
) -> ScoreComponent:
    weight = config.weight("packing")
    if not members:
        return ScoreComponent("packing", None, weight, "no device of the pod's classes")
    in_use = sum(1 for d in members if inventory.is_allocated(d.id) or d.id in picked)
    used = in_use / len(members)
    if config.policy == "binpack":
        return ScoreComponent(
            "packing", used, weight, f"{in_use} of {len(members)} device(s) in use after placement"
        )
    return ScoreComponent(
        "packing",
        1 - used,
        weight,
        f"{len(members) - in_use} of {len(members)} device(s) free after placement",
    )


def _intact(inventory: Inventory, view: _NodeView, picked: set[DeviceID], weight: float) -> ScoreComponent:
    if not view.topology_known:
        return ScoreComponent("intact", NEUTRAL, weight, "no NUMA / PCIe topology published")
    whole = broken = 0
    for group in view.groups:
        if any(inventory.is_allocated(d.id) for d in group):
            continue
        whole += 1
        used = sum(1 for d in group if d.id in picked)
        if 0 < used < len(group):
            broken += 1
    if whole == 0:
        return ScoreComponent("intact", 1.0, weight, "no whole free group to keep")
    return ScoreComponent(
        "intact",
        1 - broken / whole,
        weight,
        f"{whole - broken} of {whole} whole free group(s) kept whole or filled",
    )


def _prioritized(
    claims: Sequence[Claim], results: Sequence[Mapping[str, Any]], weight: float
) -> ScoreComponent:
    total = best = 0
    fallbacks = []
    for claim, allocation in zip(claims, results, strict=False):
        got = {entry["request"] for entry in allocation.get("devices", {}).get("results", ())}
        for request in claim.requests:
            if not request.first_available:
                continue
            best += SUBREQUEST_RANKS
            for i, alt in enumerate(request.alternatives):
                if alt.name in got:
                    total += SUBREQUEST_RANKS - i
                    if i:
                        of = len(request.alternatives)
                        fallbacks.append(f"{claim.key}/{request.name} got subrequest {i + 1} of {of}")
    if best == 0:
        return ScoreComponent("prioritized", None, weight, "no firstAvailable request")
    detail = f"firstAvailable rank {total} of best {best}" + (
        f" ({'; '.join(fallbacks)})" if fallbacks else ""
    )
    return ScoreComponent("prioritized", total / best, weight, detail)
