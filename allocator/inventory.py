"""The device index: ResourceSlices, DeviceClasses, DeviceTaintRules, nodes and what is in use.

Updated incrementally by events (``upsert_*`` / ``delete_*`` / ``set_allocation``); nothing is rebuilt
per request. Per node the gathered pools are cached and dropped only when a slice of a pool the node
sees, the node's labels or the gates change. In-use state mirrors upstream's ``AllocatedState``:
exclusively allocated devices, shares of multi-allocatable devices with their consumed capacity, and
devices reserved by binds in flight. Admin-access results do not make a device in use.

Not thread-safe by itself: the caller serialises writers with readers (the app holds one lock).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any
from weakref import WeakKeyDictionary

from allocator.errors import InvalidInputError
from allocator.features import FeatureGates
from allocator.model import (
    Device,
    DeviceClass,
    DeviceID,
    DeviceTaintRule,
    ResourceSlice,
    Taint,
)
from allocator.nodeselector import Node
from allocator.pools import PoolID, PoolView, gather_pools
from allocator.quantity import QuantityError, parse_quantity

__all__ = ["AllocatedDevice", "Inventory", "allocated_devices"]


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One ``status.allocation.devices.results[]`` entry, as in-use accounting needs it."""

    id: DeviceID
    admin_access: bool
    share_id: str
    consumed_capacity: Mapping[str, Fraction]


def allocated_devices(allocation: Mapping[str, Any] | None, where: str) -> tuple[AllocatedDevice, ...]:
    """Read ``status.allocation`` of a claim. Raises InvalidInputError naming ``where`` and the field."""
    if not allocation:
        return ()
    devices = allocation.get("devices") if isinstance(allocation, Mapping) else None
    results = devices.get("results") if isinstance(devices, Mapping) else None
    if not isinstance(results, list):
        raise InvalidInputError(f"{where}: status.allocation.devices.results: must be a list")
    parsed = []
    for i, entry in enumerate(results):
        at = f"{where}: status.allocation.devices.results[{i}]"
        if not isinstance(entry, Mapping) or not all(
            isinstance(entry.get(k), str) and entry.get(k) for k in ("driver", "pool", "device")
        ):
            raise InvalidInputError(f"{at}: driver, pool and device are required strings")
        consumed = {}
        for name, value in (entry.get("consumedCapacity") or {}).items():
            try:
                consumed[name] = parse_quantity(value).value
            except QuantityError as e:
                raise InvalidInputError(f"{at}.consumedCapacity.{name}: {e}") from e
        parsed.append(
            AllocatedDevice(
                id=(entry["driver"], entry["pool"], entry["device"]),
                admin_access=entry.get("adminAccess") is True,
                share_id=str(entry.get("shareID") or ""),
                consumed_capacity=consumed,
            )
        )
    return tuple(parsed)


@dataclass(slots=True)
class _Holders:
    """Who uses one device: exclusive holders and shares (share id -> consumed capacity)."""

    exclusive: set[str] = field(default_factory=set)
    shares: dict[tuple[str, str], Mapping[str, Fraction]] = field(default_factory=dict)


class Inventory:
    """The cluster's devices and their use. See the module docstring for the update model."""

    def __init__(self, gates: FeatureGates | None = None) -> None:
        self.gates = gates or FeatureGates()
        self._slices: dict[str, ResourceSlice] = {}
        self._pool_slices: dict[PoolID, dict[str, ResourceSlice]] = defaultdict(dict)
        self._node_slices: dict[str, dict[str, ResourceSlice]] = defaultdict(dict)
        self._global_slices: dict[str, ResourceSlice] = {}
        self._classes: dict[str, DeviceClass] = {}
        self._rules: dict[str, DeviceTaintRule] = {}
        self._nodes: dict[str, Node] = {}
        self._claims: dict[str, tuple[AllocatedDevice, ...]] = {}
        self._reservations: dict[str, tuple[AllocatedDevice, ...]] = {}
        self._holders: dict[DeviceID, _Holders] = defaultdict(_Holders)
        self._pools_by_node: dict[str, list[PoolView]] = {}
        self._taints: WeakKeyDictionary[Device, tuple[Taint, ...]] = WeakKeyDictionary()
        self.revision = 0
        """Increments on every change; kept per-node results are valid only for the revision they saw."""

    # --- objects ----------------------------------------------------------------------------------

    def upsert_slice(self, slice_: ResourceSlice) -> None:
        self.delete_slice(slice_.name)
        self._slices[slice_.name] = slice_
        self._pool_slices[slice_.pool_id][slice_.name] = slice_
        if slice_.node_name:
            self._node_slices[slice_.node_name][slice_.name] = slice_
        else:
            self._global_slices[slice_.name] = slice_
        self._pools_changed(slice_)

    def delete_slice(self, name: str) -> None:
        old = self._slices.pop(name, None)
        if old is None:
            return
        self._pool_slices[old.pool_id].pop(name, None)
        if not self._pool_slices[old.pool_id]:
            del self._pool_slices[old.pool_id]
        self._node_slices.get(old.node_name, {}).pop(name, None)
        self._global_slices.pop(name, None)
        self._pools_changed(old)

    def _pools_changed(self, slice_: ResourceSlice) -> None:
        self.revision += 1
        if not slice_.node_name or self._global_slices:
            self._pools_by_node.clear()
            return
        # A pool's completeness depends on all its slices: drop every node that sees one of them.
        nodes = {s.node_name for s in self._pool_slices.get(slice_.pool_id, {}).values()} | {slice_.node_name}
        for node in nodes:
            self._pools_by_node.pop(node, None)

    def upsert_class(self, device_class: DeviceClass) -> None:
        self._classes[device_class.name] = device_class
        self.revision += 1

    def delete_class(self, name: str) -> None:
        if self._classes.pop(name, None) is not None:
            self.revision += 1

    def device_class(self, name: str) -> DeviceClass | None:
        return self._classes.get(name)

    def device_classes(self) -> Iterable[DeviceClass]:
        return self._classes.values()

    def upsert_taint_rule(self, rule: DeviceTaintRule) -> None:
        self._rules[rule.name] = rule
        self._taints = WeakKeyDictionary()
        self.revision += 1

    def delete_taint_rule(self, name: str) -> None:
        if self._rules.pop(name, None) is not None:
            self._taints = WeakKeyDictionary()
            self.revision += 1

    def upsert_node(self, node: Node) -> None:
        if self._nodes.get(node.name) != node:
            self._nodes[node.name] = node
            self._pools_by_node.pop(node.name, None)
            self.revision += 1

    def delete_node(self, name: str) -> None:
        if self._nodes.pop(name, None) is not None:
            self._pools_by_node.pop(name, None)
            self.revision += 1

    def node(self, name: str) -> Node | None:
        return self._nodes.get(name)

    def node_names(self) -> list[str]:
        return list(self._nodes)

    def slice(self, name: str) -> ResourceSlice | None:
        return self._slices.get(name)

    def slices(self) -> Iterable[ResourceSlice]:
        return self._slices.values()

    # --- pools and taints -------------------------------------------------------------------------

    def pools_for(self, node: Node) -> list[PoolView]:
        """Pools visible from ``node`` in search order (cached until a relevant change)."""
        cached = self._pools_by_node.get(node.name)
        if cached is not None and self._nodes.get(node.name, node) == node:
            return cached
        candidates = [*self._node_slices.get(node.name, {}).values(), *self._global_slices.values()]
        pools = gather_pools(node, candidates, self._pool_slices, self.gates)
        if node.name in self._nodes:
            self._pools_by_node[node.name] = pools
        return pools

    def taints(self, device: Device) -> tuple[Taint, ...]:
        """The device's own taints plus those of matching DeviceTaintRules (gate DRADeviceTaintRules)."""
        if not self._rules or not self.gates.DRADeviceTaintRules:
            return device.taints
        cached = self._taints.get(device)
        if cached is None:
            cached = device.taints + tuple(r.taint for r in self._rules.values() if r.matches(device.id))
            self._taints[device] = cached
        return cached

    # --- use --------------------------------------------------------------------------------------

    def set_allocation(self, claim_key: str, devices: tuple[AllocatedDevice, ...]) -> None:
        """Record the allocated devices of a claim (empty = deallocated or deleted)."""
        self._replace(self._claims, claim_key, devices)

    def reserve(self, token: str, devices: tuple[AllocatedDevice, ...]) -> None:
        """Hold devices for a bind in flight (released by ``release``)."""
        self._replace(self._reservations, token, devices)

    def release(self, token: str) -> None:
        self._replace(self._reservations, token, ())

    def _replace(
        self, table: dict[str, tuple[AllocatedDevice, ...]], key: str, devices: tuple[AllocatedDevice, ...]
    ) -> None:
        holder = f"{id(table)}:{key}"
        for old in table.pop(key, ()):
            entry = self._holders.get(old.id)
            if entry is not None:
                entry.exclusive.discard(holder)
                entry.shares.pop((holder, old.share_id), None)
                if not entry.exclusive and not entry.shares:
                    del self._holders[old.id]
        for new in devices:
            if new.admin_access:
                continue
            entry = self._holders[new.id]
            if new.share_id:
                entry.shares[(holder, new.share_id)] = new.consumed_capacity
            else:
                entry.exclusive.add(holder)
        if devices:
            table[key] = devices
        self.revision += 1

    def is_exclusively_allocated(self, device_id: DeviceID) -> bool:
        entry = self._holders.get(device_id)
        return entry is not None and bool(entry.exclusive)

    def is_allocated(self, device_id: DeviceID) -> bool:
        """Upstream ``IsDeviceAllocated``: exclusively allocated, or any share or capacity in use."""
        return device_id in self._holders

    def consumed_capacity(self, device_id: DeviceID) -> dict[str, Fraction]:
        """Sum of ``consumedCapacity`` over the device's existing shares (upstream AggregatedCapacity)."""
        entry = self._holders.get(device_id)
        total: dict[str, Fraction] = defaultdict(Fraction)
        if entry is not None:
            for consumed in entry.shares.values():
                for name, amount in consumed.items():
                    total[name] += amount
        return total

    def holders(self, device_id: DeviceID) -> list[str]:
        """Claim keys holding the device (exclusive or shared), for explanations."""
        entry = self._holders.get(device_id)
        if entry is None:
            return []
        keys = {h for h in entry.exclusive} | {h for h, _ in entry.shares}
        return sorted(k.partition(":")[2] for k in keys)
