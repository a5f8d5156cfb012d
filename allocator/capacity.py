"""Consumable capacity (KEP-5075, DRAConsumableCapacity): how much of each capacity a request takes.

Rules (allocator-semantics §12, upstream ``consumable_capacity.go``): a requested capacity the device
does not define skips the device; an unrequested capacity consumes the policy default or the whole
value, which must satisfy the policy too; a request is rounded up to the policy (validRange: at least
min, then min + n*step; validValues: the smallest listed value >= request); a value equal to the default
is always allowed; otherwise a value off the policy (validRange: above max or off the steps; validValues:
not listed) does not fit.

validRange arithmetic (upstream ``roundUpRange`` / ``useMilli``): in milli-units when
DRAFractionalCapacityRange is on and min, max and step are whole milli-units (so "1.2" with min 0.5 and
step 0.5 rounds to 1.5), else in whole units, each operand rounded up as ``Quantity.Value()`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from allocator.model import Device, DeviceCapacity, RequestPolicy
from allocator.quantity import Quantity

__all__ = ["capacity_consumption"]


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


def _lookup(device: Device, requests: Mapping[str, Quantity]) -> dict[str, Quantity] | None:
    """Requests keyed by the device's capacity names; None if one names a capacity the device lacks."""
    found = {}
    for name, amount in requests.items():
        key = _capacity_key(device, name)
        if key is None:
            return None
        found[key] = amount
    return found


def _capacity_key(device: Device, name: str) -> str | None:
    """The device's spelling of a requested capacity (upstream ``resolveCapacityName``): the same name;
    ``<driver>/x`` for a device's bare ``x``; a bare ``x`` for a device's ``<driver>/x``."""
    if name in device.capacity:
        return name
    domain, qualified, ident = name.partition("/")
    if qualified:
        return ident if domain == device.driver and ident in device.capacity else None
    full = f"{device.driver}/{name}"
    return full if full in device.capacity else None


def _scale(policy: RequestPolicy, fractional: bool) -> int:
    """Units per 1 that validRange arithmetic counts in: 1000 (milli-units) or 1."""
    bounds = [q.value * 1000 for q in (policy.min, policy.max, policy.step) if q is not None]
    milli = all(b.denominator == 1 for b in bounds) and (policy.step is None or policy.step.value * 1000 >= 1)
    return 1000 if fractional and milli else 1


def _rounded(requested: Fraction, policy: RequestPolicy, fractional: bool) -> Fraction:
    if policy.min is not None:
        low = policy.min.value
        if requested < low:
            return low
        if policy.step is not None and policy.step.value > 0:
            scale = _scale(policy, fractional)
            step = _ceil(policy.step.value * scale)
            steps = _ceil(Fraction(_ceil(requested * scale) - _ceil(low * scale), step))
            return Fraction(_ceil(low * scale) + steps * step, scale)
        return requested
    if policy.valid_values:
        for value in policy.valid_values:
            if value.value >= requested:
                return value.value
    return requested


def _allowed(value: Fraction, policy: RequestPolicy, fractional: bool) -> bool:
    """Upstream ``violatesPolicy``, negated: a validRange checks max and step only (rounding has already
    raised a request to min; an unrequested whole value below min is not refused)."""
    if policy.default is not None and value == policy.default.value:
        return True
    if policy.min is not None:
        if policy.max is not None and value > policy.max.value:
            return False
        if policy.step is not None and policy.step.value > 0:
            scale = _scale(policy, fractional)  # the units of the rounding
            offset = _ceil(value * scale) - _ceil(policy.min.value * scale)
            return offset % _ceil(policy.step.value * scale) == 0
        return True
    if policy.valid_values:
        return any(v.value == value for v in policy.valid_values)
    return True


def _consume(capacity: DeviceCapacity, requested: Quantity | None, fractional: bool) -> Fraction | None:
    policy = capacity.policy
    if requested is None:
        # The default, else the whole capacity; checked against the policy like a request (upstream
        # fillEmptyRequest then violatesPolicy), so a whole value above validRange.max does not fit.
        value = (
            policy.default.value
            if policy is not None and policy.default is not None
            else capacity.value.value
        )
    elif policy is None:
        value = requested.value
    else:
        value = _rounded(requested.value, policy, fractional)
    if policy is not None and not _allowed(value, policy, fractional):
        return None
    return value if value <= capacity.value.value else None


def capacity_consumption(
    device: Device, requests: Mapping[str, Quantity], fractional: bool
) -> dict[str, Fraction] | None:
    """Amount of every capacity of ``device`` one allocation for ``requests`` consumes, or None if the
    request does not fit the device's capacities or policies (the device is then skipped, no error).
    ``fractional``: gate DRAFractionalCapacityRange."""
    matched = _lookup(device, requests)
    if matched is None:
        return None
    consumption = {}
    for name, capacity in device.capacity.items():
        amount = _consume(capacity, matched.get(name), fractional)
        if amount is None:
            return None
        consumption[name] = amount
    return consumption
