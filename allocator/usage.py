"""How the cluster's devices are used, per DeviceClass, driver and pool: the inventory gauges of
``/metrics`` (``app.metrics``), computed when scraped, never on the scheduling path.

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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from allocator.errors import CELError
from allocator.inventory import AllocatedDevice, Inventory
from allocator.model import Device, DeviceID, ResourceSlice
from allocator.selectors import SelectorCache

__all__ = ["DEVICE_STATES", "UsageKey", "device_usage"]

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


def _classes_of(inventory: Inventory, selectors: SelectorCache, device: Device) -> list[str]:
    names = []
    for device_class in inventory.device_classes():
        try:
            if inventory.class_matches(device_class, device, selectors):
                names.append(device_class.name)
        except CELError:
            continue  # a failing selector admits nothing; filter reports the error
    return names or [""]


def device_usage(inventory: Inventory, selectors: SelectorCache) -> Counter[UsageKey]:
    """Devices per (DeviceClass, driver, pool, state); see the module docstring."""
    allocated = _held(inventory.allocations().values())
    reserved = _held(inventory.reservations().values()) - allocated
    counts: Counter[UsageKey] = Counter()
    for slice_ in _current(inventory.slices()):
        for device in slice_.devices:
            if device.id in allocated:
                state = "allocated"
            elif device.id in reserved:
                state = "reserved"
            elif any(t.blocks_allocation for t in inventory.taints(device)):
                state = "tainted"
            else:
                state = "free"
            for name in _classes_of(inventory, selectors, device):
                counts[(name, slice_.driver, slice_.pool, state)] += 1
    return counts
