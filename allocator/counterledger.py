"""The counters a search takes from each pool while it places devices, and gives back when it backtracks;
the funnel asks the same ledger, taking nothing, whether a device's counters are left.

Per pool: what its counter sets have left (``counters_left``: the pool's values minus what allocated
devices consume) and, with DRADeviceCompatibilityGroups, the intersection of the compatibility groups of
the devices drawing on each counter set (``groups_in_use``); both computed when the search first places a
device of the pool. Whether a device may take its counters is the rule of ``allocator.devicerules``.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from allocator.compatibility import GroupIntersection, groups_in_use
from allocator.devicerules import DeviceRules, Refusal
from allocator.inventory import counters_left
from allocator.model import Device
from allocator.pools import PoolView

__all__ = ["CounterLedger"]


def _nothing_to_undo() -> None:
    pass


class CounterLedger:
    """Counters and compatibility groups of the pools, as one search takes them (one ledger per search) or
    as the funnel reads them (nothing taken)."""

    def __init__(self, rules: DeviceRules) -> None:
        self._rules = rules
        self._counters: dict[tuple[str, str], dict[str, dict[str, Fraction]]] = {}
        self._groups: dict[tuple[str, str], dict[str, GroupIntersection | None]] = {}

    def refusal(self, pool: PoolView, device: Device, shares: int = 0) -> Refusal | None:
        """Why the device may not take its counters from ``pool`` now (None: ``take`` would take them).
        ``shares``: the device's shares the search has placed (a multi-allocatable device consumes its
        counters once)."""
        rules = self._rules
        found = rules.partitionable(device)
        if found is not None or not rules.counters_charged(device, shares):
            return found
        if rules.gates.DRADeviceCompatibilityGroups:
            found = rules.compatibility(device, self._joined(pool))
            if found is not None:
                return found
        return rules.counters(pool, device, self._left(pool))

    def take(self, pool: PoolView, device: Device, shares: int) -> Callable[[], None] | None:
        """Take the device's counters from ``pool`` if it may (§11); returns the undo, or None."""
        if self.refusal(pool, device, shares) is not None:
            return None
        # A share beside an allocation without shareID (adminAccess) consumes them again: that is no share.
        if not self._rules.counters_charged(device, shares):
            return _nothing_to_undo
        groups_undo = (
            self._join_groups(pool, device)
            if self._rules.gates.DRADeviceCompatibilityGroups
            else _nothing_to_undo
        )
        available = self._left(pool)
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

    def _left(self, pool: PoolView) -> dict[str, dict[str, Fraction]]:
        left = self._counters.get(pool.id)
        if left is None:
            left = self._counters[pool.id] = counters_left(self._rules.inventory, pool)
        return left

    def _joined(self, pool: PoolView) -> dict[str, GroupIntersection | None]:
        joined = self._groups.get(pool.id)
        if joined is None:
            joined = self._groups[pool.id] = groups_in_use(self._rules.inventory, pool)
        return joined

    def _join_groups(self, pool: PoolView, device: Device) -> Callable[[], None]:
        """Fold the device's compatibility groups into each counter set it draws on (every set admits
        them: ``refusal`` said so); returns the undo."""
        joined = self._joined(pool)
        before = {c.counter_set: joined.get(c.counter_set) for c in device.consumes_counters}
        for consumption in device.consumes_counters:
            current = joined.get(consumption.counter_set)
            joined[consumption.counter_set] = GroupIntersection.of(current, consumption.compatibility_groups)

        def undo() -> None:
            joined.update(before)

        return undo
