"""Device compatibility groups (KEP-5963's ``consumesCounters[].compatibilityGroups``, gate
DRADeviceCompatibilityGroups, alpha in 1.37): devices drawing on one counter set may be allocated together
only if their groups share at least one name; devices without groups go only with others without groups.

Each counter set keeps the running intersection of the devices placed on it: first the devices already
allocated (as upstream, read from the pool's published slices: an allocated device no longer published
contributes nothing), then those the search places. A multi-allocatable device joins once, with its first
share, as it consumes its counters once.
"""

from __future__ import annotations

from typing import NamedTuple

from allocator.inventory import Inventory
from allocator.pools import PoolView

__all__ = ["GroupIntersection", "groups_in_use"]


class GroupIntersection(NamedTuple):
    """The devices on one counter set so far: all without groups (``without_groups``), or the names every
    one of them declares (``names``; empty only when allocations made elsewhere already disagree, and then
    no further device is admitted)."""

    without_groups: bool
    names: frozenset[str]

    def admits(self, groups: frozenset[str]) -> bool:
        if not groups:
            return self.without_groups
        return not self.without_groups and bool(self.names & groups)

    @staticmethod
    def of(current: GroupIntersection | None, groups: frozenset[str]) -> GroupIntersection:
        """The intersection after a device with ``groups`` joins (``current`` None: the first device)."""
        if current is None:
            return GroupIntersection(not groups, groups)
        if current.without_groups or not groups:
            return current  # a device that does not match (allocated elsewhere) leaves it as it was
        return GroupIntersection(False, current.names & groups)


def groups_in_use(inventory: Inventory, pool: PoolView) -> dict[str, GroupIntersection | None]:
    """Per counter set of ``pool``: the intersection of the allocated devices' groups, devices of the
    node's slices first, then the pool's other slices (the order upstream folds them in)."""
    joined: dict[str, GroupIntersection | None] = {}
    node_devices = [d for s in pool.slices for d in s.devices]
    seen = {d.name for d in node_devices}
    others = [d for name, d in pool.devices_by_name.items() if name not in seen]
    for device in (*node_devices, *others):
        if not device.consumes_counters or not inventory.is_allocated(device.id):
            continue
        for consumption in device.consumes_counters:
            joined[consumption.counter_set] = GroupIntersection.of(
                joined.get(consumption.counter_set), consumption.compatibility_groups
            )
    return joined
