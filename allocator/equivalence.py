"""Node equivalence: nodes that look alike to a claims shape get one decision.

Most nodes of a cluster are alike: the same device models, the same usage pattern, attributes that differ
only in identity (uuid, serial). For one claims shape, a node's *signature* holds everything the decision
(fits or not, the reason, the score) can depend on, minus identities:

* per pool the node sees, in search order: the driver, the rank of its name among the node's pools (the
  search orders pools by name), completeness, the invalid reason, binding conditions, and the counters left
  (counters count devices on every node of the pool) and, with DRADeviceCompatibilityGroups, the groups of
  the devices allocated on each counter set; per slice its node selection (``nodeName`` set,
  ``allNodes``, the selector, ``perDeviceNodeSelection``) and ``skipNodeOperations``;
* per visible device, in order: its name (the same on alike nodes: ``gpu-0`` ... ``gpu-7``), capacity,
  counter consumption (compatibility groups included), node selection, binding conditions,
  multi-allocation, the effective taints (DeviceTaintRules included: they select by pool name), its use
  (exclusive, number of shares and the capacity they consume), and the *attributes the shape reads*: the
  keys of every CEL expression it runs (class and request selectors, derived attributes;
  ``allocator.cel.reads``), the ``matchAttribute`` / ``distinctAttribute`` names and the topology
  attributes scoring and aligned selection use. When an expression's reads cannot be told, every
  attribute counts.
* of the node: its declared features and the slices rejected or ignored for it (their reasons are part
  of its answer).

Pool, slice and node names are left out: two nodes with equal signatures present the allocator with the
same inputs up to those names, so they get the same decision up to those names: the same verdict and
score, and device choices that correspond position by position. Device choices themselves are never
shared (they name the pool and pin the node); the caller chooses devices on the node it binds. A reason
is shared only when it names none of the node's identities (node, pools, slices, the claims holding its
devices); otherwise the decision stays the node's own. Global inputs (DeviceClasses, DeviceTaintRules,
gates, cluster-wide derived attributes, non-local slices) are the caller's ``context``: a table is
emptied when it changes.

The shape-independent part (pools, slices, and each device's ``description``: the digest of its API dict
without attributes, made when the slice is parsed) is computed once per node and pool list and interned
to a number, so a new shape costs a few C-speed lookups per device. Bounds: at most
``MAX_SIGNATURES`` decisions over all shapes (the oldest shape's go first), ``MAX_SHAPES`` tables,
``MAX_LAYOUTS`` node layouts and ``MAX_LAYOUT_NUMBERS`` interned layouts (then the interning starts over:
numbers are never reused, so equal numbers always mean equal layouts).
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from allocator.alignment import Topology
from allocator.cel import AttributeValue
from allocator.cel.reads import Reads, attribute_key
from allocator.compatibility import groups_in_use
from allocator.inventory import Inventory, counters_left
from allocator.model import Claim, Device
from allocator.nodeselector import Node
from allocator.pools import PoolView, device_on_node
from allocator.scoring import FineScore
from allocator.selectors import SelectorCache

__all__ = ["MAX_LAYOUTS", "MAX_SHAPES", "MAX_SIGNATURES", "EquivalenceCache", "ShapeTable", "Verdict"]

MAX_SHAPES = 256
"""Claims shapes with a table (the oldest dropped first)."""

MAX_SIGNATURES = 50_000
"""Shared decisions kept over all shapes (a signature of an 8-device node is about 1-2 KB)."""

MAX_LAYOUTS = 200_000
"""Nodes whose shape-independent layout is kept (one per node of the cluster)."""

MAX_LAYOUT_NUMBERS = 200_000
"""Interned node layouts (about one per distinct node hardware; a layout key is a few hundred bytes: the
device descriptions in it are 16-byte digests held once)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """A decision shared by equivalent nodes: whether the claims fit, the score (None: not scored yet,
    the claims fit by counts), and the reason (claim names as the caller's placeholders)."""

    fits: bool
    fine_score: FineScore | None
    """``allocator.scoring.ScoreBreakdown.fine_score``."""
    reason: str
    unresolvable: bool


@dataclass(frozen=True, slots=True)
class _AttributeView:
    """The attributes a claims shape can see: ``names`` as (domain, id) (CEL lookups
    ``device.attributes[domain][id]``, constraint and topology names split at their last ``/``) and
    ``domains`` read as whole maps; ``every`` when some expression's reads are unknown. Capacity is
    always part of a device's description."""

    names: tuple[tuple[str, str], ...]
    domains: tuple[str, ...]
    every: bool


def _attribute_view(
    claims: Sequence[Claim], inventory: Inventory, selectors: SelectorCache, topology: Topology
) -> _AttributeView:
    names = {*topology.numa_attributes, *topology.pcie_attributes}
    domains: set[str] = set()
    every = False

    def read(found: Reads | None) -> None:
        nonlocal every
        if found is None:
            every = True
            return
        for kind, domain, ident in found.keys:
            if kind == "attributes":
                if ident is None:
                    domains.add(domain)
                else:
                    names.add(f"{domain}/{ident}")

    for claim in claims:
        for constraint in claim.constraints:
            names.update(n for n in (constraint.match_attribute, constraint.distinct_attribute) if n)
        for request in claim.requests:
            for alt in request.alternatives:
                device_class = inventory.device_class(alt.class_name)
                for expression in (*(device_class.selectors if device_class else ()), *alt.selectors):
                    read(selectors.reads(expression))
                for derived in alt.derived_attributes:
                    read(selectors.value_reads(derived.expression))
    # A name without a domain is no device's attribute (``Device.attribute``): it tells no nodes apart.
    split = (name.rpartition("/") for name in sorted(names) if "/" in name)
    return _AttributeView(tuple((domain, ident) for domain, _, ident in split), tuple(sorted(domains)), every)


@dataclass(frozen=True, slots=True)
class _NodeLayout:
    """The shape-independent part of a node's signature, valid while ``pools`` (the inventory's cached
    pool list of the node, replaced whenever a slice of those pools or the node changes) is the same:
    ``number`` stands for the pools' and slices' structure and each visible device's description."""

    pools: object
    number: int
    devices: tuple[Device, ...]
    counted: tuple[PoolView, ...]
    """Pools whose counters are in play (counter sets, or devices consuming counters)."""


class EquivalenceCache:
    """Shared decisions per (claims shape, node signature); see the module docstring."""

    def __init__(
        self, inventory: Inventory, selectors: SelectorCache, max_signatures: int = MAX_SIGNATURES
    ) -> None:
        self.inventory = inventory
        self.selectors = selectors
        self.max_signatures = max_signatures
        self._tables: dict[bytes, ShapeTable] = {}
        self._count = 0
        self._layouts: dict[str, _NodeLayout] = {}
        self._layout_numbers: dict[Hashable, int] = {}
        self._numbers = itertools.count(1)
        self.stats = {"hits": 0, "misses": 0, "kept": 0, "not_shareable": 0}
        """Lookups that found a shared decision or not, decisions shared, and decisions whose reason
        names an identity of their node (kept by that node only)."""

    def table(self, shape: bytes, context: object, claims: Sequence[Claim], topology: Topology) -> ShapeTable:
        """The table of ``shape`` (the claims' digest) valid for ``context`` (the global inputs and the
        caller's policies: emptied when they differ from the last call's); ``topology``: the attributes
        scoring and aligned selection read."""
        table = self._tables.get(shape)
        if table is None or table.context != context:
            if table is not None:
                self._count -= len(table.verdicts)
            else:
                while len(self._tables) >= MAX_SHAPES:
                    self._count -= len(self._tables.pop(next(iter(self._tables))).verdicts)
            view = _attribute_view(claims, self.inventory, self.selectors, topology)
            table = self._tables[shape] = ShapeTable(self, context, view)
        return table

    def size(self) -> int:
        """Shared decisions kept (for metrics)."""
        return self._count

    def _make_room(self, table: ShapeTable) -> None:
        """Room for one more decision in ``table``: the oldest shapes' decisions go first (the table
        being filled only when it is the last one)."""
        while self._count >= self.max_signatures:
            oldest = next((t for t in self._tables.values() if t is not table), table)
            self._count -= len(oldest.verdicts)
            oldest.verdicts.clear()
            if oldest is table:
                return
            del self._tables[next(k for k, t in self._tables.items() if t is oldest)]

    def layout(self, node: Node) -> _NodeLayout:
        """The node's shape-independent layout (cached per node while its pool list is the same)."""
        inventory = self.inventory
        pools = inventory.pools_for(node)
        found = self._layouts.get(node.name)
        if found is not None and found.pools is pools:
            return found
        ids = sorted({p.id for p in pools})
        structure: list[Hashable] = []
        devices: list[Device] = []
        for pool in pools:
            structure.append(
                (pool.driver, ids.index(pool.id), pool.incomplete, pool.invalid, pool.has_binding_conditions)
            )
            for slice_ in pool.slices:
                structure.append(
                    (
                        bool(slice_.node_name),
                        slice_.node_selector,
                        slice_.all_nodes,
                        slice_.per_device_node_selection,
                        slice_.skip_node_operations,
                    )
                )
                shown = slice_.devices
                if slice_.per_device_node_selection:
                    shown = tuple(d for d in shown if device_on_node(d, node))
                devices.extend(shown)
                structure.extend([d.description for d in shown])
        counted = tuple(
            p for p in pools if p.counter_sets or any(d.consumes_counters for d in p.devices_by_name.values())
        )
        layout = _NodeLayout(pools, self._number(tuple(structure)), tuple(devices), counted)
        if inventory.knows_node(node.name):
            if len(self._layouts) >= MAX_LAYOUTS:
                self._layouts.clear()
            self._layouts[node.name] = layout
        return layout

    def _number(self, structure: Hashable) -> int:
        """Equal numbers stand for equal node layouts. Numbers are never reused: after the interning
        starts over (bounded), a structure seen before gets a new number, which only costs sharing."""
        if len(self._layout_numbers) >= MAX_LAYOUT_NUMBERS:
            self._layout_numbers = {}
        found = self._layout_numbers.get(structure)
        if found is None:
            found = self._layout_numbers[structure] = next(self._numbers)
        return found


@dataclass(slots=True)
class ShapeTable:
    """One claims shape's shared decisions, for one ``context``."""

    cache: EquivalenceCache
    context: object
    view: _AttributeView
    verdicts: dict[Hashable, Verdict] = field(default_factory=dict)

    def signature(self, node: Node) -> Hashable:
        """The node's signature for this shape (module docstring)."""
        inventory, view = self.cache.inventory, self.view
        gates = inventory.gates
        grouped = gates.DRADeviceCompatibilityGroups  # else slices with groups are ignored (and named)
        layout = self.cache.layout(node)
        devices = layout.devices
        return (
            layout.number,
            node.declared_features,
            tuple(inventory.invalid_slices(node.name)),
            tuple(inventory.ignored_slices(node)) if not (gates.DRAPartitionableDevices and grouped) else (),
            _attributes(devices, view),
            tuple(map(inventory.taints, devices)),
            inventory.uses(devices),
            tuple(_counters(counters_left(inventory, pool)) for pool in layout.counted),
            tuple(_groups(inventory, pool) for pool in layout.counted) if grouped else (),
        )

    def get(self, signature: Hashable, *, scored: bool) -> Verdict | None:
        """The shared decision for ``signature``; with ``scored``, only one that has a score."""
        found = self.verdicts.get(signature)
        if found is None or (scored and found.fits and found.fine_score is None):
            self.cache.stats["misses"] += 1
            return None
        self.cache.stats["hits"] += 1
        return found

    def put(self, signature: Hashable, verdict: Verdict, node: Node, reason: str) -> None:
        """Share ``verdict``, decided on ``node`` (``reason``: its text as given there), unless the reason
        names one of the node's identities."""
        if reason and any(name in reason for name in _identities(self.cache.inventory, node)):
            self.cache.stats["not_shareable"] += 1
            return
        if signature not in self.verdicts:
            self.cache._make_room(self)
            self.cache._count += 1
        self.verdicts[signature] = verdict
        self.cache.stats["kept"] += 1


_NO_VALUES: Mapping[str, AttributeValue] = MappingProxyType({})


def _attributes(devices: tuple[Device, ...], view: _AttributeView) -> Hashable:
    """The values the shape reads of each device, with their types (``1`` is not ``true`` in CEL)."""
    if view.every:
        return tuple(tuple(sorted((n, attribute_key(v)) for n, v in d.attributes.items())) for d in devices)
    names = view.names
    # A list comprehension: a generator would resume once per value (this runs for every device of every
    # node on a new shape's first filter).
    read = [d.cel.attributes.get(dom, _NO_VALUES).get(ident) for d in devices for dom, ident in names]
    types = tuple(map(type, read))
    # List values: their elements' types count too.
    values = tuple(map(attribute_key, read)) if tuple in types else tuple(read)
    domains = tuple(
        tuple(sorted((i, attribute_key(v)) for i, v in d.cel.attributes.get(domain, {}).items()))
        for d in devices
        for domain in view.domains
    )
    return values, types, domains


def _counters(left: Mapping[str, Mapping[str, object]]) -> Hashable:
    return tuple(sorted((name, tuple(sorted(counters.items()))) for name, counters in left.items()))


def _groups(inventory: Inventory, pool: PoolView) -> Hashable:
    return tuple(sorted(groups_in_use(inventory, pool).items()))


def _identities(inventory: Inventory, node: Node) -> Iterable[str]:
    """Names that differ between alike nodes: the node, its pools and slices, the claims holding its
    devices."""
    yield node.name
    for pool in inventory.pools_for(node):
        yield pool.pool
        for slice_ in pool.slices:
            yield slice_.name
            for device in slice_.devices:
                yield from inventory.holders(device.id)
