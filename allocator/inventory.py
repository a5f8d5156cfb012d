"""The device index: ResourceSlices, DeviceClasses, DeviceTaintRules, nodes and what is in use.

Updated incrementally by events (``upsert_*`` / ``delete_*`` / ``set_allocation``); nothing is rebuilt
per request. Per node the gathered pools are cached and dropped only when a slice of a pool the node
sees, the node's labels or the gates change. What is in use (allocated claims, binds in flight) is kept by
``allocator.deviceuse.DeviceUse``, which the index owns and whose queries it answers with. Counter sets
are consumed by the allocated devices the pool publishes now, as upstream's ``checkAvailableCounters``
counts them: an allocated device a slice update drops consumes nothing, so an index kept up by events
and one rebuilt from the same objects (a restart) give the same answer.

Not thread-safe by itself: the caller serialises writers with readers (the app holds one lock).

With a ``SelectorCache`` attached (``Inventory(gates, selectors)`` or ``attach_selectors``), DeviceClass
selectors are evaluated when slices or classes arrive (``allocator.classmatch``), not in filter. With
cluster-wide derived attributes (``set_cluster_attributes``, ``allocator.derived``) the stored slices hold
devices whose attributes include them, computed once per slice revision from the slice as published
(kept as the base for re-derivation when the config or a scoping DeviceClass changes).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from fractions import Fraction
from weakref import WeakKeyDictionary

from allocator.classmatch import ClassMatchIndex
from allocator.derived import ClusterDerivation, DerivationError, by_attribute, summarize
from allocator.deviceuse import AllocatedDevice, DeviceUse
from allocator.features import FeatureGates
from allocator.model import (
    Device,
    DeviceClass,
    DeviceTaintRule,
    ResourceSlice,
    Taint,
)
from allocator.nodeselector import Node
from allocator.pools import PoolID, PoolView, counters_seen_everywhere, gather_pools, ignored_slices
from allocator.selectors import SelectorCache

__all__ = ["Inventory", "NodeVersions", "counters_left", "taints_with_rules"]


def taints_with_rules(device: Device, rules: Iterable[DeviceTaintRule]) -> tuple[Taint, ...]:
    """The device's own taints plus those of the rules that select it."""
    return device.taints + tuple(r.taint for r in rules if r.matches(device.id))


MAX_LOGGED_CHANGES = 100_000
"""Node-version changes remembered for ``nodes_changed_since``; a reader further behind starts over."""


class NodeVersions:
    """``node_version`` for many nodes at once: ``(global_version, get(name))`` equals it."""

    __slots__ = ("_versions", "global_version")

    def __init__(self, global_version: int, versions: Mapping[str, int]) -> None:
        self.global_version = global_version
        self._versions = versions

    def get(self, name: str) -> int:
        return self._versions.get(name, 0)


class Inventory:
    """The cluster's devices and their use. See the module docstring for the update model."""

    def __init__(self, gates: FeatureGates | None = None, selectors: SelectorCache | None = None) -> None:
        self.gates = gates or FeatureGates()
        self._slices: dict[str, ResourceSlice] = {}
        self._base_slices: dict[str, ResourceSlice] = {}
        self._invalid_slices: dict[str, tuple[str, str]] = {}
        """Slice name -> (its node, "" for every node; why its latest revision was rejected)."""
        """Slices as published (before cluster-wide derived attributes), the base of re-derivation."""
        self._derivation: ClusterDerivation | None = None
        self._derivation_errors: dict[Device, tuple[DerivationError, ...]] = {}
        self._rederiving = False
        self.class_index: ClassMatchIndex | None = None
        """DeviceClass selector results per device (None until a SelectorCache is attached)."""
        self._pool_slices: dict[PoolID, dict[str, ResourceSlice]] = defaultdict(dict)
        self._node_slices: dict[str, dict[str, ResourceSlice]] = defaultdict(dict)
        self._global_slices: dict[str, ResourceSlice] = {}
        self._classes: dict[str, DeviceClass] = {}
        self._rules: dict[str, DeviceTaintRule] = {}
        self._nodes: dict[str, Node] = {}
        self.use = DeviceUse()
        """What is in use; its queries are this index's (bound once: the search asks per device)."""
        self.allocations = self.use.allocations
        self.reservations = self.use.reservations
        self.is_exclusively_allocated = self.use.is_exclusively_allocated
        self.is_shared = self.use.is_shared
        self.is_allocated = self.use.is_allocated
        self.consumed_capacity = self.use.consumed_capacity
        self.holds = self.use.holds
        self.use_of = self.use.use_of
        self.uses = self.use.uses
        self.holders = self.use.holders
        self.double_allocations = self.use.double_allocations
        self._pools_by_node: dict[str, list[PoolView]] = {}
        self._taints: WeakKeyDictionary[Device, tuple[Taint, ...]] = WeakKeyDictionary()
        self.revision = 0
        """Increments on every change."""
        self._global_version = 0
        self._node_versions: dict[str, int] = defaultdict(int)
        self._global_narrowed = 0
        self._node_narrowed: dict[str, int] = defaultdict(int)
        """``availability_version``: as the versions above, but for changes that can take something away."""
        self.change_seq = 0
        """Counts node-version changes; ``nodes_changed_since`` answers from the recent ones."""
        self._changes: deque[tuple[int, str]] = deque(maxlen=MAX_LOGGED_CHANGES)
        if selectors is not None:
            self.attach_selectors(selectors)

    # --- objects ----------------------------------------------------------------------------------

    def upsert_slice(self, slice_: ResourceSlice) -> None:
        self._forget_invalid(slice_.name)
        old_base = self._base_slices.get(slice_.name)
        old = self._remove_slice(slice_.name)
        self._base_slices[slice_.name] = slice_
        # A published device object kept by the new revision (parse reuse) keeps its derived form too,
        # unless every device is being derived again.
        known = (
            {id(b): (b, d) for b, d in zip(old_base.devices, old.devices, strict=True)}
            if old is not None and old_base is not None and not self._rederiving
            else {}
        )
        slice_ = self._derived_slice(slice_, known)
        self._slices[slice_.name] = slice_
        self._pool_slices[slice_.pool_id][slice_.name] = slice_
        if self._one_node_only(slice_):
            self._node_slices[slice_.node_name][slice_.name] = slice_
        else:
            self._global_slices[slice_.name] = slice_
        self._reindex(old.devices if old is not None else (), slice_.devices)
        self._pools_changed(slice_)

    def delete_slice(self, name: str) -> None:
        self._forget_invalid(name)
        old = self._remove_slice(name)
        if old is not None:
            self._reindex(old.devices, ())

    def reject_slice(self, name: str, node_name: str, reason: str) -> None:
        """The latest revision of slice ``name`` failed validation: its previous devices go too (the driver
        no longer publishes them as they were), and ``reason`` is given for ``node_name`` ("" for a slice
        not local to one node: every node) until a valid revision or the deletion arrives."""
        self.delete_slice(name)
        self._invalid_slices[name] = (node_name, reason)
        self._touch_node(node_name)

    def invalid_slices(self, node_name: str) -> list[str]:
        """Why slices that could serve ``node_name`` were rejected (``reject_slice``), sorted."""
        return sorted(reason for node, reason in self._invalid_slices.values() if node in ("", node_name))

    def rejected_slices(self) -> list[str]:
        """Names of the slices rejected by ``reject_slice`` (until a valid revision or the deletion)."""
        return list(self._invalid_slices)

    def _forget_invalid(self, name: str) -> None:
        rejected = self._invalid_slices.pop(name, None)
        if rejected is not None:
            self._touch_node(rejected[0])

    def _touch_node(self, node_name: str) -> None:
        """A change for one node ("": for every node)."""
        if node_name:
            self._touch_pools((), also=(node_name,))
        else:
            self._touch_all()

    def _remove_slice(self, name: str) -> ResourceSlice | None:
        old = self._slices.pop(name, None)
        if old is None:
            return None
        self._base_slices.pop(name, None)
        self._pool_slices[old.pool_id].pop(name, None)
        if not self._pool_slices[old.pool_id]:
            del self._pool_slices[old.pool_id]
        self._node_slices.get(old.node_name, {}).pop(name, None)
        self._global_slices.pop(name, None)
        self._pools_changed(old)
        return old

    def _reindex(self, old: tuple[Device, ...], new: tuple[Device, ...]) -> None:
        """Keep the class-match index and the derivation errors in step with a slice's devices (a device
        object kept across a re-derivation keeps its results)."""
        kept = {id(d) for d in old} & {id(d) for d in new}
        removed = [d for d in old if id(d) not in kept]
        for device in removed:
            self._derivation_errors.pop(device, None)
        if self.class_index is not None:
            self.class_index.remove_devices(removed)
            self.class_index.add_devices(d for d in new if id(d) not in kept)

    def _derived_slice(
        self, base: ResourceSlice, known: Mapping[int, tuple[Device, Device]] | None = None
    ) -> ResourceSlice:
        """``base`` with the cluster-wide derived attributes added to its devices (``base`` itself when
        none applies); runtime errors are recorded per device. ``known``: published device id -> (that
        device, its derived form) from the previous revision, reused as is."""
        if self._derivation is None:
            return base
        devices, changed = [], False
        for device in base.devices:
            previous = known.get(id(device)) if known else None
            if previous is not None and previous[0] is device:
                changed = changed or previous[1] is not device
                devices.append(previous[1])
                continue
            derived, errors = self._derivation.derive(device, self._classes)
            if errors:
                self._derivation_errors[derived] = errors
            else:
                self._derivation_errors.pop(derived, None)
            changed = changed or derived is not device
            devices.append(derived)
        return dataclasses.replace(base, devices=tuple(devices)) if changed else base

    def _rederive(self) -> None:
        # Errors belong to the derivation that produced them: a new (or no) config starts clean.
        self._derivation_errors.clear()
        self._rederiving = True
        try:
            for base in list(self._base_slices.values()):
                self.upsert_slice(base)
        finally:
            self._rederiving = False
        self._touch_all()

    def _all_devices(self) -> Iterable[Device]:
        return (d for s in self._slices.values() for d in s.devices)

    # --- CEL: class matches and cluster-wide derived attributes ------------------------------------

    def attach_selectors(self, selectors: SelectorCache) -> None:
        """Evaluate DeviceClass selectors through ``selectors`` from now on, when slices and classes
        arrive (builds the class-match index for the current contents)."""
        self.class_index = ClassMatchIndex(selectors)
        devices = list(self._all_devices())
        for device_class in self._classes.values():
            self.class_index.set_class(device_class, devices)

    def set_cluster_attributes(self, derivation: ClusterDerivation | None) -> None:
        """Replace the cluster-wide derived attributes (None: none) and re-derive every device."""
        self._derivation = derivation
        self._rederive()

    def class_matches(self, device_class: DeviceClass, device: Device, selectors: SelectorCache) -> bool:
        """Whether every selector of the class admits the device: from the class-match index, or through
        ``selectors`` when no index is attached. Raises CELCompileError / CELEvalError (upstream wording:
        ``class <name>: selector #<i> ...``), fatal for the pod."""
        index = self.class_index
        if index is not None and index.indexes(device_class):
            return index.matches(device_class, device)
        owner = f"class {device_class.name}"
        return all(selectors.matches(e, device, owner, i) for i, e in enumerate(device_class.selectors))

    def derivation_errors_of(self, device: Device) -> list[str]:
        """The recorded cluster-wide derived attribute errors of the device."""
        return [str(error) for error in self._derivation_errors.get(device, ())]

    def derivation_errors(self) -> list[str]:
        """Every recorded cluster-wide derived attribute error, sorted (one per device and attribute)."""
        return sorted(str(error) for errors in self._derivation_errors.values() for error in errors)

    def derivation_summary(self) -> list[str]:
        """The recorded errors, one line per attribute with the number of devices (``derived.summarize``)."""
        return summarize(self._all_derivation_errors())

    def derivation_counts(self) -> dict[str, int]:
        """Per failing cluster-wide derived attribute (label), the number of devices it failed on."""
        return {label: len(errors) for label, errors in by_attribute(self._all_derivation_errors()).items()}

    def _all_derivation_errors(self) -> Iterable[DerivationError]:
        return (error for errors in self._derivation_errors.values() for error in errors)

    def report(self) -> dict[str, int]:
        """Sizes for benchmarks and metrics: slices, devices, the class-match index, derivation errors."""
        report = {
            "slices": len(self._slices),
            "devices": sum(len(s.devices) for s in self._slices.values()),
            "derivation_errors": sum(len(e) for e in self._derivation_errors.values()),
        }
        if self.class_index is not None:
            report.update({f"class_index_{k}": v for k, v in self.class_index.report().items()})
        return report

    # --- versions: what a per-node decision depends on ------------------------------------------

    def node_version(self, name: str) -> tuple[int, int]:
        """Changes whenever anything an allocation on node ``name`` depends on changes: its pools'
        slices and device use (a pool's counters count its devices on every node), its labels, classes,
        taint rules and derived attributes. Equal versions mean an equal decision for equal claims."""
        return (self._global_version, self._node_versions.get(name, 0))

    def availability_version(self, name: str) -> tuple[int, int]:
        """Changes with ``node_version`` except when devices only move among this index's own holders:
        a reservation made or released, a claim deallocated, or a claim's allocation seen back with only
        the devices reserved as written to it (``written_token``); with DRADeviceCompatibilityGroups it
        changes with every change of use (``_use_narrows``). An allocation planned on the node stays
        valid while this is unchanged: every reservation is made from a decision on the index as it stands,
        so it takes nothing an earlier one relies on, and what is freed takes nothing either. A slice,
        taint, class, label or another writer's allocation changes it."""
        return (self._global_narrowed, self._node_narrowed.get(name, 0))

    def nodes_changed_since(self, seq: int, global_version: int) -> set[str] | None:
        """Nodes whose version changed after change ``seq``; None when that cannot be told (a global
        change happened since ``global_version``, or the log no longer reaches back to ``seq``)."""
        if global_version != self._global_version:
            return None
        if seq == self.change_seq:
            return set()
        if not self._changes or self._changes[0][0] > seq + 1:
            return None
        changed = set()
        for number, node in reversed(self._changes):
            if number <= seq:
                break
            changed.add(node)
        return changed

    def node_versions(self) -> NodeVersions:
        """A read-only view of every node's version, for loops over thousands of nodes."""
        return NodeVersions(self._global_version, self._node_versions)

    def _touch_all(self) -> None:
        self.revision += 1
        self._global_version += 1
        self._global_narrowed += 1

    def _touch_pools(
        self, pool_ids: Iterable[PoolID], also: Iterable[str] = (), *, narrowing: bool = True
    ) -> None:
        """``narrowing``: the change may take something away (``availability_version``)."""
        self.revision += 1
        nodes = set(also)
        for pool_id in pool_ids:
            slices = self._pool_slices.get(pool_id, {}).values()
            if not all(self._one_node_only(s) for s in slices):
                self._global_version += 1
                self._global_narrowed += narrowing
                return
            nodes.update(s.node_name for s in slices)
        for node in nodes:
            self._node_versions[node] += 1
            self._node_narrowed[node] += narrowing
            self.change_seq += 1
            self._changes.append((self.change_seq, node))

    def _one_node_only(self, slice_: ResourceSlice) -> bool:
        """Whether only the node the slice names can see it."""
        return bool(slice_.node_name) and not counters_seen_everywhere(slice_, self.gates)

    def _pools_changed(self, slice_: ResourceSlice) -> None:
        if self._one_node_only(slice_):
            self._touch_pools([slice_.pool_id], also=[slice_.node_name])
        else:
            self._touch_all()
        if not self._one_node_only(slice_) or self._global_slices:
            self._pools_by_node.clear()
            return
        # A pool's completeness depends on all its slices: drop every node that sees one of them.
        nodes = {s.node_name for s in self._pool_slices.get(slice_.pool_id, {}).values()} | {slice_.node_name}
        for node in nodes:
            self._pools_by_node.pop(node, None)

    def upsert_class(self, device_class: DeviceClass) -> None:
        old = self._classes.get(device_class.name)
        self._classes[device_class.name] = device_class
        self._touch_all()
        if self.class_index is not None:
            self.class_index.set_class(device_class, list(self._all_devices()))
        if (
            self._derivation is not None
            and device_class.name in self._derivation.class_names
            and (old is None or old.selectors != device_class.selectors)
        ):
            self._rederive()

    def delete_class(self, name: str) -> None:
        if self._classes.pop(name, None) is not None:
            self._touch_all()
            if self.class_index is not None:
                self.class_index.remove_class(name)
            if self._derivation is not None and name in self._derivation.class_names:
                self._rederive()

    def device_class(self, name: str) -> DeviceClass | None:
        return self._classes.get(name)

    def device_classes(self) -> Iterable[DeviceClass]:
        return self._classes.values()

    def upsert_taint_rule(self, rule: DeviceTaintRule) -> None:
        self._rules[rule.name] = rule
        self._taints = WeakKeyDictionary()
        self._touch_all()

    def delete_taint_rule(self, name: str) -> None:
        if self._rules.pop(name, None) is not None:
            self._taints = WeakKeyDictionary()
            self._touch_all()

    def upsert_node(self, node: Node) -> None:
        if self._nodes.get(node.name) != node:
            self._nodes[node.name] = node
            self._pools_by_node.pop(node.name, None)
            self._touch_pools((), also=[node.name])

    def delete_node(self, name: str) -> None:
        if self._nodes.pop(name, None) is not None:
            self._pools_by_node.pop(name, None)
            self._touch_pools((), also=[name])

    def node(self, name: str) -> Node | None:
        return self._nodes.get(name)

    def node_names(self) -> list[str]:
        return list(self._nodes)

    def knows_node(self, name: str) -> bool:
        return name in self._nodes

    def slice(self, name: str) -> ResourceSlice | None:
        """The slice as published (before cluster-wide derived attributes; ``slices()`` has them)."""
        return self._base_slices.get(name)

    def slices(self) -> Iterable[ResourceSlice]:
        return self._slices.values()

    # --- pools and taints -------------------------------------------------------------------------

    def pools_for(self, node: Node) -> list[PoolView]:
        """Pools visible from ``node`` in search order (cached until a relevant change)."""
        cached = self._pools_by_node.get(node.name)
        if cached is not None and self._nodes.get(node.name, node) == node:
            return cached
        pools = gather_pools(node, self._candidate_slices(node), self._pool_slices, self.gates)
        if node.name in self._nodes:
            self._pools_by_node[node.name] = pools
        return pools

    def ignored_slices(self, node: Node) -> list[str]:
        """Why slices that would target ``node`` are left out while a gate is off (for reasons)."""
        return ignored_slices(node, self._candidate_slices(node), self.gates)

    def _candidate_slices(self, node: Node) -> list[ResourceSlice]:
        return [*self._node_slices.get(node.name, {}).values(), *self._global_slices.values()]

    def taints(self, device: Device) -> tuple[Taint, ...]:
        """The device's own taints plus those of matching DeviceTaintRules (gate DRADeviceTaintRules)."""
        if not self._rules or not self.gates.DRADeviceTaintRules:
            return device.taints
        cached = self._taints.get(device)
        if cached is None:
            cached = self._taints[device] = taints_with_rules(device, self._rules.values())
        return cached

    def taint_rules(self) -> tuple[DeviceTaintRule, ...]:
        """The DeviceTaintRules in force (none while the gate DRADeviceTaintRules is off)."""
        return tuple(self._rules.values()) if self.gates.DRADeviceTaintRules else ()

    # --- use --------------------------------------------------------------------------------------

    def set_allocation(self, claim_key: str, devices: tuple[AllocatedDevice, ...]) -> None:
        """Record the allocated devices of a claim (empty = deallocated or deleted)."""
        narrowing = self._use_narrows() or not self.use.adds_only_written(claim_key, devices)
        self._touch_pools(self.use.set_allocation(claim_key, devices), narrowing=narrowing)

    def reserve(self, token: str, devices: tuple[AllocatedDevice, ...]) -> None:
        """Hold devices for a bind in flight (released by ``release``). The caller decided them on this
        index as it stands (``availability_version``)."""
        self._touch_pools(self.use.reserve(token, devices), narrowing=self._use_narrows())

    def release(self, token: str) -> None:
        self._touch_pools(self.use.release(token), narrowing=self._use_narrows())

    def _use_narrows(self) -> bool:
        """Whether any change of use may take something away: with DRADeviceCompatibilityGroups, which
        groups a counter set still admits depends on the order its devices in use are met, so freeing one
        can narrow them (``allocator.compatibility``)."""
        return self.gates.DRADeviceCompatibilityGroups


def counters_left(inventory: Inventory, pool: PoolView) -> dict[str, dict[str, Fraction]]:
    """Per counter set and counter: the pool's value minus what allocated devices consume (§11), for the
    search's counter accounting and the funnel's counter stage.

    A multi-allocatable device consumes its counters once, however many shares it has. Only devices the
    pool publishes count (upstream ``checkAvailableCounters`` walks the pool's slices): an allocated device
    dropped from its slice consumes nothing, whether this index saw it published before or not."""
    left = {name: {c: q.value for c, q in counters.items()} for name, counters in pool.counter_sets.items()}
    consumptions = [
        device.consumes_counters
        for device in pool.devices_by_name.values()
        if device.consumes_counters and inventory.is_allocated(device.id)
    ]
    for consumed in consumptions:
        for consumption in consumed:
            target = left.setdefault(consumption.counter_set, {})
            for name, amount in consumption.counters.items():
                target[name] = target.get(name, Fraction(0)) - amount.value
    return left
