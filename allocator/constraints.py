"""Claim constraints (``spec.devices.constraints``), checked incrementally while the search adds devices.

* ``matchAttribute``: every device of the covered requests carries the attribute with an equal value;
  the first device fixes it; a device without it fails. Values compare type-aware (a version compares as
  its text). With DRAListTypeAttributes lists must share at least one element (a scalar is a one-element
  list).
* ``distinctAttribute`` (DRAConsumableCapacity): the attribute must exist and differ from the value of the
  latest device of every covered request, as upstream records one value per request.
Both undo on backtrack (``remove``). Source: allocator-semantics §8.
"""

from __future__ import annotations

from typing import Protocol

from allocator.cel import AttributeValue
from allocator.features import FeatureGates
from allocator.model import Constraint, Device, DeviceRequest

__all__ = ["ConstraintState", "new_constraint_state"]


class ConstraintState(Protocol):
    def add(self, request: DeviceRequest, device: Device) -> bool: ...

    def remove(self, request: DeviceRequest, device: Device) -> None: ...


def _as_set(value: AttributeValue) -> set[tuple[type, object]]:
    items = value if isinstance(value, tuple) else (value,)
    return {(type(v), v) for v in items}


def _equal(a: AttributeValue, b: AttributeValue, lists: bool) -> bool:
    if lists:
        return bool(_as_set(a) & _as_set(b))
    return type(a) is type(b) and a == b


class _MatchAttribute:
    __slots__ = ("constraint", "count", "lists", "value")

    def __init__(self, constraint: Constraint, lists: bool) -> None:
        self.constraint = constraint
        self.lists = lists
        self.value: AttributeValue | None = None
        self.count = 0

    def add(self, request: DeviceRequest, device: Device) -> bool:
        if not self.constraint.applies_to(request):
            return True
        value = device.attribute(self.constraint.match_attribute)
        if value is None:
            return False
        if self.count and not _equal(value, self.value, self.lists):  # type: ignore[arg-type]
            return False
        if self.count == 0:
            self.value = value
        self.count += 1
        return True

    def remove(self, request: DeviceRequest, device: Device) -> None:
        if self.constraint.applies_to(request):
            self.count -= 1


class _DistinctAttribute:
    __slots__ = ("constraint", "lists", "values")

    def __init__(self, constraint: Constraint, lists: bool) -> None:
        self.constraint = constraint
        self.lists = lists
        self.values: dict[str, list[AttributeValue]] = {}

    def add(self, request: DeviceRequest, device: Device) -> bool:
        if not self.constraint.applies_to(request):
            return True
        value = device.attribute(self.constraint.distinct_attribute)
        if value is None:
            return False
        for stack in self.values.values():
            if stack and _equal(value, stack[-1], self.lists):
                return False
        self.values.setdefault(request.name, []).append(value)
        return True

    def remove(self, request: DeviceRequest, device: Device) -> None:
        if self.constraint.applies_to(request):
            self.values[request.name].pop()


def new_constraint_state(constraint: Constraint, gates: FeatureGates) -> ConstraintState | None:
    """Fresh state for one constraint, or None for an empty (unsupported) constraint."""
    lists = gates.DRAListTypeAttributes
    if constraint.match_attribute:
        return _MatchAttribute(constraint, lists)
    if constraint.distinct_attribute and gates.DRAConsumableCapacity:
        return _DistinctAttribute(constraint, lists)
    return None
