"""Claim constraints (``spec.devices.constraints``), checked incrementally while the search adds devices.

* ``matchAttribute``: every device of the covered requests carries the attribute with an equal value;
  the first device fixes it; a device without it fails. Values compare type-aware (a version compares as
  its text). With DRAListTypeAttributes lists must share at least one element (a scalar is a one-element
  list); without it a list-typed value matches no other device (upstream's scalar comparison).
* ``distinctAttribute``: the attribute must exist and differ from the value of the latest device of every
  covered request, as upstream records one value per request; without DRAListTypeAttributes a list-typed
  value is accepted only on the first device. Understood whatever DRAConsumableCapacity says: upstream's
  incubating and experimental allocators do not check that gate; only the stable one
  (``FeatureGates.stable_allocator``) lacks it.
Both undo on backtrack (``remove``). Source: allocator-semantics §8.

Derived attributes (KEP-6080, ``allocator.derived``): ``add`` receives the request's derived values for
the device; the attribute is looked up there first, then among the device's static attributes. A derived
value compares exactly as a static one: the KEP-5491 set semantics (non-empty intersection for
``matchAttribute``, disjoint for ``distinctAttribute``, a scalar is a one-element list) only with
DRAListTypeAttributes, else upstream's scalar comparison, in which a derived list matches nothing either
(the oracle showed this; an earlier reading had derived values always compare as sets).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from allocator.cel import AttributeValue
from allocator.features import FeatureGates
from allocator.model import Constraint, Device, DeviceRequest

__all__ = ["ConstraintState", "lookup_attribute", "new_constraint_state"]

_NONE: Mapping[str, AttributeValue] = {}


class ConstraintState(Protocol):
    def add(
        self, request: DeviceRequest, device: Device, derived: Mapping[str, AttributeValue] = _NONE
    ) -> bool: ...

    def remove(self, request: DeviceRequest, device: Device) -> None: ...


def lookup_attribute(
    name: str, device: Device, derived: Mapping[str, AttributeValue]
) -> AttributeValue | None:
    """The value a constraint sees for ``name``: the request's derived attribute, else the device's static
    attribute (qualified name; None when absent)."""
    value = derived.get(name)
    return value if value is not None else device.attribute(name)


def _as_set(value: AttributeValue) -> set[tuple[type, object]]:
    items = value if isinstance(value, tuple) else (value,)
    return {(type(v), v) for v in items}


def _equal(a: AttributeValue, b: AttributeValue, lists: bool) -> bool:
    if lists:
        return bool(_as_set(a) & _as_set(b))
    return type(a) is type(b) and a == b


class _MatchAttribute:
    """Keeps, per added device, the first value and the values common to all devices so far (a stack, so
    ``remove`` undoes the latest ``add``)."""

    __slots__ = ("constraint", "lists", "stack")

    def __init__(self, constraint: Constraint, lists: bool) -> None:
        self.constraint = constraint
        self.lists = lists
        self.stack: list[tuple[AttributeValue, frozenset[tuple[type, object]]]] = []

    def add(
        self, request: DeviceRequest, device: Device, derived: Mapping[str, AttributeValue] = _NONE
    ) -> bool:
        if not self.constraint.applies_to(request):
            return True
        value = lookup_attribute(self.constraint.match_attribute, device, derived)
        if value is None:
            return False
        if not self.stack:
            self.stack.append((value, frozenset(_as_set(value))))
            return True
        first, common = self.stack[-1]
        if self.lists:
            common = common & _as_set(value)
            if not common:  # KEP-5491: the intersection over every device must stay non-empty
                return False
        elif isinstance(value, tuple) or not _equal(value, first, False):
            # Upstream compares scalars only while DRAListTypeAttributes is off: a list equals nothing.
            return False
        self.stack.append((first, common))
        return True

    def remove(self, request: DeviceRequest, device: Device) -> None:
        if self.constraint.applies_to(request):
            self.stack.pop()


class _DistinctAttribute:
    __slots__ = ("constraint", "lists", "values")

    def __init__(self, constraint: Constraint, lists: bool) -> None:
        self.constraint = constraint
        self.lists = lists
        self.values: dict[str, list[AttributeValue]] = {}

    def add(
        self, request: DeviceRequest, device: Device, derived: Mapping[str, AttributeValue] = _NONE
    ) -> bool:
        if not self.constraint.applies_to(request):
            return True
        value = lookup_attribute(self.constraint.distinct_attribute, device, derived)
        if value is None:
            return False
        # Every device placed so far under the constraint, in any of its requests, not only the latest one.
        for stack in self.values.values():
            for other in stack:
                if isinstance(value, tuple) and not self.lists:
                    return False  # upstream's scalar comparison (gate off) takes a list as unknown
                if _equal(value, other, self.lists):
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
    if constraint.distinct_attribute and not gates.stable_allocator:
        return _DistinctAttribute(constraint, lists)
    return None
