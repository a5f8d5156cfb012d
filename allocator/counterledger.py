"""The counters a search takes from each pool while it places devices, and gives back when it backtracks.

Per pool: what its counter sets have left (``counters_left``: the pool's values minus what allocated
devices consume) and, with DRADeviceCompatibilityGroups, the intersection of the compatibility groups of
the devices drawing on each counter set (``groups_in_use``); both computed when the search first places a
device of the pool. Whether a device may take its counters is the rule of ``allocator.devicerules``.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from allocator.compatibility import GroupIntersection, groups_in_use
from allocator.devicerules import DeviceRules
from allocator.inventory import counters_left
from allocator.model import Device
from allocator.pools import PoolView

__all__ = ["CounterLedger"]


def _nothing_to_undo() -> None:
    pass


class CounterLedger:
    """Counters and compatibility groups taken by one search (one ledger per search)."""

    def __init__(self, rules: DeviceRules) -> None:
        self._rules = rules
        self._counters: dict[tuple[str, str], dict[str, dict[str, Fraction]]] = {}
        self._groups: dict[tuple[str, str], dict[str, GroupIntersection | None]] = {}

    def take(self, pool: PoolView, device: Device, shares: int) -> Callable[[], None] | None:
        """Take the device's counters from ``pool`` if they suffice (§11); returns the undo, or None when
        the device may not be placed. ``shares``: the device's shares the search has placed (a
        multi-allocatable device consumes its counters once)."""
        rules = self._rules
        # A share beside an allocation without shareID (adminAccess) consumes them again: that is no share.
        if not rules.counters_charged(device, shares):
            return _nothing_to_undo
        groups_undo = (
            self._join_groups(pool, device) if rules.gates.DRADeviceCompatibilityGroups else _nothing_to_undo
        )
        if groups_undo is None:
            return None
        available = self._counters.get(pool.id)
        if available is None:
            available = self._counters[pool.id] = counters_left(rules.inventory, pool)
        if rules.counters(pool, device, available) is not None:
            groups_undo()
            return None
        for consumption in device.consumes_counters:
            counters = available[consumption.counter_set]
            for name, amount in consumption.counters.items():
                counters[name] -= amount.value

        def undo() -> None:
            for consumption in device.consumes_counters:
                for name, amount in consumption.counters.items():
                    available[consumption.counter_set][name] += amount.value
            groups_undo()

        return undo

    def _join_groups(self, pool: PoolView, device: Device) -> Callable[[], None] | None:
        """Fold the device's compatibility groups into each counter set it draws on, if every set admits it
        (``CompatibilityGroups``); returns the undo, or None when some set's devices are incompatible."""
        joined = self._groups.get(pool.id)
        if joined is None:
            joined = self._groups[pool.id] = groups_in_use(self._rules.inventory, pool)
        if self._rules.compatibility(device, joined) is not None:
            return None
        before = {c.counter_set: joined.get(c.counter_set) for c in device.consumes_counters}
        for consumption in device.consumes_counters:
            current = joined.get(consumption.counter_set)
            joined[consumption.counter_set] = GroupIntersection.of(current, consumption.compatibility_groups)

        def undo() -> None:
            joined.update(before)

        return undo
