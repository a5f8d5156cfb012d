"""Gathering the resource pools visible from one node (allocator-semantics §3).

For a node, a slice is relevant when its ``nodeName`` equals the node, ``allNodes`` is set, its
``nodeSelector`` matches, or (``perDeviceNodeSelection``) any of its devices' own node selection matches.
Per pool only the highest generation among relevant slices counts; a pool is complete when
``resourceSliceCount`` slices of that generation exist (a newer generation anywhere makes it obsolete and
it is dropped). Complete pools are validated (duplicate device names, duplicate counter sets, unknown
counter references) and an invalid pool is never allocated from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from allocator.features import FeatureGates
from allocator.model import Device, ResourceSlice
from allocator.nodeselector import Node
from allocator.quantity import Quantity

__all__ = [
    "PoolView",
    "counters_seen_everywhere",
    "device_on_node",
    "gather_pools",
    "ignored_slices",
    "slice_on_node",
]

PoolID = tuple[str, str]


@dataclass(frozen=True, slots=True)
class PoolView:
    """One pool as seen from one node.

    ``slices``: the node-relevant slices holding devices, sorted by name (device order = search order).
    ``counter_sets``: every counter set of the pool at the kept generation, from all its slices.
    ``devices_by_name``: every device of the pool at that generation (also slices not targeting the node),
    for counter accounting of devices allocated elsewhere.
    ``incomplete`` / ``invalid``: such pools are never allocated from; ``invalid`` holds the reason.
    """

    driver: str
    pool: str
    generation: int
    slices: tuple[ResourceSlice, ...]
    counter_sets: Mapping[str, Mapping[str, Quantity]]
    devices_by_name: Mapping[str, Device]
    incomplete: bool
    invalid: str
    has_binding_conditions: bool

    @property
    def id(self) -> PoolID:
        return (self.driver, self.pool)

    @property
    def usable(self) -> bool:
        return not self.incomplete and not self.invalid


def device_on_node(device: Device, node: Node) -> bool:
    """Per-device node selection (``perDeviceNodeSelection`` slices): nodeName, allNodes or nodeSelector."""
    if device.node_name:
        return device.node_name == node.name
    if device.all_nodes:
        return True
    return device.node_selector is not None and device.node_selector.matches(node)


def _partitionable(slice_: ResourceSlice) -> bool:
    """Whether the slice uses DRAPartitionableDevices fields (ignored while the gate is off)."""
    return slice_.per_device_node_selection or bool(slice_.shared_counters)


def _ignored_reason(slice_: ResourceSlice) -> str:
    fields = [name for name, used in _PARTITIONABLE_FIELDS if used(slice_)]
    return (
        f"ResourceSlice {slice_.name} uses {' and '.join(fields)}, which is ignored while the "
        "DRAPartitionableDevices feature is disabled"
    )


_PARTITIONABLE_FIELDS = (
    ("sharedCounters", lambda s: bool(s.shared_counters)),
    ("perDeviceNodeSelection", lambda s: s.per_device_node_selection),
)


def ignored_slices(node: Node, candidates: Sequence[ResourceSlice], gates: FeatureGates) -> list[str]:
    """Why slices that would target ``node`` with the gate of the fields they use on are left out."""
    reasons = []
    partitionable = [s for s in candidates if _partitionable(s)] if not gates.DRAPartitionableDevices else []
    # Named only to the nodes it selects, not to every node a counter slice is relevant for.
    reasons += [
        _ignored_reason(s)
        for s in partitionable
        if selects_node(s, node) and not _ignored_for_compatibility_groups(s, gates)
    ]
    grouped = (
        [s for s in candidates if s.uses_compatibility_groups]
        if not gates.DRADeviceCompatibilityGroups
        else []
    )
    if grouped:
        on = replace(gates, DRADeviceCompatibilityGroups=True)
        reasons += [
            f"ResourceSlice {s.name} uses consumesCounters[].compatibilityGroups, which is ignored while the "
            "DRADeviceCompatibilityGroups feature is disabled (its pool counts as incomplete)"
            for s in grouped
            if slice_on_node(s, node, on)
        ]
    return reasons


def _ignored_for_compatibility_groups(slice_: ResourceSlice, gates: FeatureGates) -> bool:
    """While DRADeviceCompatibilityGroups is off, upstream's allocators cannot check co-allocation, so they
    ignore such slices: unseen and not counted, their pool is incomplete and none of its devices is
    allocated (the stable allocator too: it never has the feature)."""
    return not gates.DRADeviceCompatibilityGroups and slice_.uses_compatibility_groups


def slice_on_node(slice_: ResourceSlice, node: Node, gates: FeatureGates) -> bool:
    """Whether a slice is relevant for ``node`` (§3 step 1)."""
    if not gates.DRAPartitionableDevices and _partitionable(slice_):
        return False
    if _ignored_for_compatibility_groups(slice_, gates):
        return False
    return counters_seen_everywhere(slice_, gates) or selects_node(slice_, node)


def counters_seen_everywhere(slice_: ResourceSlice, gates: FeatureGates) -> bool:
    """Whether the slice is relevant for every node because it holds shared counters, whatever its node
    selection says: so upstream's stable allocator gathers pools (the incubating and experimental ones
    take counter slices only into pools that some slice for the node brings). From a node the slice does
    not select, its pool then shows and counts it towards completeness: a pool whose other slices are not
    all published is incomplete there, which an ``All`` request reports as its pool being updated."""
    return gates.stable_allocator and bool(slice_.shared_counters)


def selects_node(slice_: ResourceSlice, node: Node) -> bool:
    """Whether the slice's node selection (nodeName, allNodes, nodeSelector, perDeviceNodeSelection)
    takes ``node``."""
    if slice_.node_name:
        return slice_.node_name == node.name
    if slice_.all_nodes:
        return True
    if slice_.node_selector is not None:
        return slice_.node_selector.matches(node)
    if slice_.per_device_node_selection:
        return any(device_on_node(d, node) for d in slice_.devices)
    return False


def gather_pools(
    node: Node,
    candidates: Iterable[ResourceSlice],
    pool_slices: Mapping[PoolID, Mapping[str, ResourceSlice]],
    gates: FeatureGates,
) -> list[PoolView]:
    """Pools visible from ``node``, sorted by (driver, pool), pools with binding conditions last.

    ``candidates``: slices that might be relevant for the node (its nodeName slices plus all slices that
    use nodeSelector, allNodes or perDeviceNodeSelection or hold shared counters); ``pool_slices``: every
    slice by pool and name.
    """
    kept: dict[PoolID, list[ResourceSlice]] = {}
    for slice_ in candidates:
        if not slice_on_node(slice_, node, gates):
            continue
        current = kept.get(slice_.pool_id)
        if current is None or slice_.generation > current[0].generation:
            kept[slice_.pool_id] = [slice_]
        elif slice_.generation == current[0].generation:
            current.append(slice_)
    views = []
    for pool_id, slices in kept.items():
        view = _pool_view(pool_id, slices, pool_slices.get(pool_id, {}), gates)
        if view is not None:
            views.append(view)
    # Upstream's stable allocator (no binding conditions) keeps plain name order.
    last = not gates.stable_allocator
    views.sort(key=lambda v: (last and v.has_binding_conditions, v.driver, v.pool))
    return views


def _pool_view(
    pool_id: PoolID,
    relevant: list[ResourceSlice],
    everything: Mapping[str, ResourceSlice],
    gates: FeatureGates,
) -> PoolView | None:
    generation = relevant[0].generation
    expected = relevant[0].slice_count
    # Completeness counts every published slice of the generation, including those the node ignores while
    # DRAPartitionableDevices is off (upstream checkSlicesInPool filters only compatibility groups).
    same_generation = [
        s
        for s in everything.values()
        if s.generation == generation and not _ignored_for_compatibility_groups(s, gates)
    ]
    incomplete = False
    if len(relevant) != expected:
        if any(s.generation > generation for s in everything.values()):
            return None  # obsolete: the driver is replacing the pool and the new generation skips this node
        incomplete = len(same_generation) != expected
    device_slices = tuple(sorted((s for s in relevant if s.devices), key=lambda s: s.name))
    counter_sets: dict[str, Mapping[str, Quantity]] = {}
    devices_by_name: dict[str, Device] = {}
    duplicates: list[str] = []
    for s in sorted(same_generation, key=lambda s: s.name):
        for name, counters in s.shared_counters.items():
            if name in counter_sets:
                duplicates.append(f"duplicate counter set name {name}")
            counter_sets[name] = counters
        for d in s.devices:
            devices_by_name.setdefault(d.id[2], d)
    listed = [d.id[2] for s in device_slices for d in s.devices]
    if len(set(listed)) != len(listed):  # C-speed for the usual case: this runs per pool and node
        seen: set[str] = set()
        for name in listed:
            if name in seen:
                duplicates.append(f"duplicate device name {name}")
            seen.add(name)
    invalid = ""
    # Upstream does not build an incomplete pool, so it never finds one invalid.
    if not incomplete:
        invalid = next(iter(duplicates), "")
        if gates.DRAPartitionableDevices and not invalid:
            invalid = _counter_reference_problem(devices_by_name.values(), counter_sets)
    return PoolView(
        driver=pool_id[0],
        pool=pool_id[1],
        generation=generation,
        slices=device_slices,
        counter_sets=counter_sets,
        devices_by_name=devices_by_name,
        incomplete=incomplete,
        invalid=invalid,
        # An incomplete or invalid pool keeps no devices upstream, so it is never sorted among the
        # binding-condition pools.
        has_binding_conditions=not (incomplete or invalid)
        and any(d.binding_conditions for s in device_slices for d in s.devices),
    )


MAX_COUNTER_SETS_PER_DEVICE = 2
"""``ResourceSliceMaxDeviceCounterConsumptionsPerDevice``: ``consumesCounters`` entries per device."""


def _counter_reference_problem(
    devices: Iterable[Device], counter_sets: Mapping[str, Mapping[str, Quantity]]
) -> str:
    for device in devices:
        if not device.consumes_counters:
            continue  # most devices: nothing to check, and this runs for every pool of every node
        # API validation rejects these slices; one that gets here anyway (a state file) is not used.
        sets = [c.counter_set for c in device.consumes_counters]
        if len(sets) > MAX_COUNTER_SETS_PER_DEVICE:
            return (
                f"device {device.name} consumes from {len(sets)} counter sets, "
                f"at most {MAX_COUNTER_SETS_PER_DEVICE} allowed"
            )
        if len(set(sets)) != len(sets):
            return f"device {device.name} lists a counter set more than once in consumesCounters"
        for consumption in device.consumes_counters:
            counters = counter_sets.get(consumption.counter_set)
            if counters is None:
                return f"counter set {consumption.counter_set} not found"
            for name in consumption.counters:
                if name not in counters:
                    return f"counter {name} not found in counter set {consumption.counter_set}"
    return ""
