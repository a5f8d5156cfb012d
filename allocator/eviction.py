"""An inventory seen as if some claims had released their devices: what evicting pods would free.

Preemption asks whether a pod fits once the claims of its victims are deallocated. The view answers the
in-use questions the search asks (``is_allocated``, ``is_shared``, ``is_exclusively_allocated``,
``consumed_capacity``) without those claims' uses and passes everything else to the real inventory, which
is never changed (concurrent filters keep their cached decisions). Bind reservations are never released. The
counters of an allocated device its driver no longer publishes stay consumed (a conservative answer: such
a device cannot be handed out again anyway).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from allocator.deviceuse import AllocatedDevice, Hold
from allocator.inventory import Inventory
from allocator.model import DeviceID

__all__ = ["ReleasedView"]


class ReleasedView:
    """``inventory`` without the uses of the claims in ``released`` (claim key -> its allocated devices)."""

    def __init__(self, inventory: Inventory, released: Mapping[str, Iterable[AllocatedDevice]]) -> None:
        self._inventory = inventory
        self._released = frozenset(released)
        self._touched = frozenset(d.id for devices in released.values() for d in devices)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inventory, name)

    def _rest(self, device_id: DeviceID) -> list[Hold] | None:
        """The device's uses left, or None when no released claim used it (the inventory answers)."""
        if device_id not in self._touched:
            return None
        return [h for h in self._inventory.holds(device_id) if h.claim not in self._released]

    def is_allocated(self, device_id: DeviceID) -> bool:
        rest = self._rest(device_id)
        return self._inventory.is_allocated(device_id) if rest is None else bool(rest)

    def is_shared(self, device_id: DeviceID) -> bool:
        rest = self._rest(device_id)
        return (
            self._inventory.is_shared(device_id)
            if rest is None
            else any(h.consumed is not None for h in rest)
        )

    def is_exclusively_allocated(self, device_id: DeviceID) -> bool:
        rest = self._rest(device_id)
        if rest is None:
            return self._inventory.is_exclusively_allocated(device_id)
        return any(h.consumed is None for h in rest)

    def consumed_capacity(self, device_id: DeviceID) -> dict[str, Fraction]:
        rest = self._rest(device_id)
        if rest is None:
            return self._inventory.consumed_capacity(device_id)
        total: dict[str, Fraction] = {}
        for hold in rest:
            for name, amount in (hold.consumed or {}).items():
                total[name] = total.get(name, Fraction(0)) + amount
        return total
