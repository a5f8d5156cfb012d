"""How the cluster's devices are used, per DeviceClass, driver and pool: the inventory gauges of
``/metrics`` (``app.http.metrics``), computed when scraped, never on the scheduling path.

Each device of a pool's current generation is in exactly one state:

* ``allocated``: a ResourceClaim's allocation holds it (exclusively or a share of its capacity);
* ``reserved``: only a bind in flight (or a write not yet seen back) holds it;
* ``tainted``: held by nobody, and a NoSchedule or NoExecute taint (its own or a DeviceTaintRule's)
  keeps new claims away (a claim tolerating it could still get it);
* ``free``: none of these.

A device counts once under every DeviceClass whose selectors admit it, and under the class ``""`` when
none does, so summing one class's states gives the devices that class can reach. Devices whose class
selectors fail (CEL runtime error) do not count for that class. Admin-access allocations hold nothing,
as in allocation.

``UsageSnapshot.take`` copies what the counts need (references to immutable slices and devices, the
held device ids, each class's matching devices) while the caller holds the inventory's lock; ``count``
then runs without it, so a scrape blocks filters only for the copy.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from allocator.deviceuse import AllocatedDevice
from allocator.errors import CELError
from allocator.inventory import Inventory, taints_with_rules
from allocator.model import Device, DeviceClass, DeviceID, DeviceTaintRule, ResourceSlice
from allocator.selectors import SelectorCache

__all__ = ["DEVICE_STATES", "UsageKey", "UsageSnapshot"]

DEVICE_STATES = ("allocated", "reserved", "tainted", "free")

UsageKey = tuple[str, str, str, str]
"""(DeviceClass name or "", driver, pool, state)."""


def _held(tables: Iterable[tuple[AllocatedDevice, ...]]) -> set[DeviceID]:
    return {d.id for devices in tables for d in devices if not d.admin_access}


def _current(slices: Iterable[ResourceSlice]) -> list[ResourceSlice]:
    """The slices of each pool's newest generation (older ones are being replaced, as upstream)."""
    slices = list(slices)
    newest: dict[tuple[str, str], int] = {}
    for s in slices:
        newest[s.pool_id] = max(newest.get(s.pool_id, s.generation), s.generation)
    return [s for s in slices if s.generation == newest[s.pool_id]]


def _matching(inventory: Inventory, selectors: SelectorCache, device_class: DeviceClass) -> frozenset[Device]:
    """The devices the class matches: the class-match index's set when it has the class, else by
    evaluating its selectors on every device."""
    index = inventory.class_index
    if index is not None and index.indexes(device_class):
        return index.matching(device_class.name)
    found = []
    for slice_ in inventory.slices():
        for device in slice_.devices:
            try:
                if inventory.class_matches(device_class, device, selectors):
                    found.append(device)
            except CELError:
                continue  # a failing selector admits nothing; filter reports the error
    return frozenset(found)


@dataclass(frozen=True, slots=True)
class UsageSnapshot:
    """What ``count`` reads, copied from an inventory under its lock."""

    slices: tuple[ResourceSlice, ...]
    allocated: frozenset[DeviceID]
    reserved: frozenset[DeviceID]
    classes: tuple[tuple[str, frozenset[Device]], ...]
    rules: tuple[DeviceTaintRule, ...]

    @classmethod
    def take(cls, inventory: Inventory, selectors: SelectorCache) -> UsageSnapshot:
        allocated = _held(inventory.allocations().values())
        return cls(
            slices=tuple(inventory.slices()),
            allocated=frozenset(allocated),
            reserved=frozenset(_held(inventory.reservations().values()) - allocated),
            classes=tuple((c.name, _matching(inventory, selectors, c)) for c in inventory.device_classes()),
            rules=inventory.taint_rules(),
        )

    def _state(self, device: Device) -> str:
        if device.id in self.allocated:
            return "allocated"
        if device.id in self.reserved:
            return "reserved"
        taints = taints_with_rules(device, self.rules) if self.rules else device.taints
        return "tainted" if any(t.blocks_allocation for t in taints) else "free"

    def count(self) -> Counter[UsageKey]:
        """Devices per (DeviceClass, driver, pool, state); see the module docstring."""
        where: dict[Device, tuple[str, str, str]] = {}
        for slice_ in _current(self.slices):
            for device in slice_.devices:
                where[device] = (slice_.driver, slice_.pool, self._state(device))
        counts: Counter[UsageKey] = Counter()
        unmatched = set(where)
        for name, matching in self.classes:
            for device in matching & where.keys():
                counts[(name, *where[device])] += 1
            unmatched -= matching
        for device in unmatched:
            counts[("", *where[device])] += 1
        return counts
