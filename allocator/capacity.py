"""Consumable capacity (KEP-5075, DRAConsumableCapacity): how much of each capacity a request takes.

Rules (allocator-semantics §12, upstream ``consumable_capacity.go``): a requested capacity the device
does not define skips the device; an unrequested capacity consumes the policy default or the whole
value, which must satisfy the policy too; a request is rounded up to the policy (validRange: at least
min, then min + n*step; validValues: the smallest listed value >= request); a value equal to the default
is always allowed; otherwise a value off the policy (validRange: above max or off the steps; validValues:
not listed) does not fit.

Fatal for the pod, not "this device does not fit" (upstream ``CmpRequestOverCapacity`` aborts the
allocation with ``errCapacityRequestNotRepresentable`` or ``errNegativeCapacity``): a request the validRange
arithmetic cannot represent (above MaxInt64 in whole units, not a whole number of milli-units or outside
their int64 range in milli-units, or rounded up past that range by the step), and a consumed value below
zero. Every capacity of the device is resolved (and may fail so) before any is checked against its policy
or value, so the outcome does not depend on which capacity comes first.

validRange arithmetic (upstream ``roundUpRange`` / ``useMilli``): in milli-units when
DRAFractionalCapacityRange is on and min, max and step are whole milli-units (so "1.2" with min 0.5 and
step 0.5 rounds to 1.5), else in whole units, each operand rounded up as ``Quantity.Value()`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from allocator.errors import CapacityRequestError
from allocator.model import Device, DeviceCapacity, RequestPolicy
from allocator.quantity import Quantity

__all__ = ["capacity_consumption"]

_MAX_INT64 = 2**63 - 1
_MIN_INT64 = -(2**63)


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


def _milli(value: Fraction) -> int | None:
    """``value`` in milli-units when that is exact and fits an int64 (upstream ``safeMilliValue``)."""
    milli = value * 1000
    return milli.numerator if milli.denominator == 1 and _MIN_INT64 <= milli <= _MAX_INT64 else None


def _scale(policy: RequestPolicy, fractional: bool) -> int:
    """Units per 1 that validRange arithmetic counts in: 1000 (milli-units) or 1 (upstream ``useMilli``)."""
    bounds = [q.value for q in (policy.min, policy.max, policy.step) if q is not None]
    milli = all(_milli(b) is not None for b in bounds) and (
        policy.step is None or policy.step.value * 1000 >= 1
    )
    return 1000 if fractional and milli else 1


def _unrepresentable(name: str, detail: str) -> CapacityRequestError:
    return CapacityRequestError(
        f"capacity {name!r}: capacity request cannot be represented in the device's range arithmetic: "
        f"{detail}"
    )


def _rounded(name: str, requested: Fraction, policy: RequestPolicy, fractional: bool) -> Fraction:
    if policy.min is not None:
        low = policy.min.value
        if requested < low:
            return low
        if policy.step is not None and policy.step.value > 0:
            scale = _scale(policy, fractional)
            if scale == 1000 and _milli(requested) is None:
                raise _unrepresentable(name, f"request {_text(requested)} is not a representable milli value")
            if scale == 1 and requested > _MAX_INT64:
                raise _unrepresentable(name, f"request {_text(requested)} exceeds MaxInt64")
            step, base = _ceil(policy.step.value * scale), _ceil(low * scale)
            steps = _ceil(Fraction(_ceil(requested * scale) - base, step))
            # Whole units guard only a non-negative min (upstream); milli-units always.
            if (scale == 1000 or base >= 0) and base + steps * step > _MAX_INT64:
                limit = "the milli-value range" if scale == 1000 else "MaxInt64"
                raise _unrepresentable(
                    name, f"rounding request {_text(requested)} up to the next step passes {limit}"
                )
            return Fraction(base + steps * step, scale)
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
            if scale == 1000 and _milli(value) is None:
                return False
            offset = _ceil(value * scale) - _ceil(policy.min.value * scale)
            return offset % _ceil(policy.step.value * scale) == 0
        return True
    if policy.valid_values:
        return any(v.value == value for v in policy.valid_values)
    return True


def _text(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else str(float(value))


def _resolve(name: str, capacity: DeviceCapacity, requested: Quantity | None, fractional: bool) -> Fraction:
    """What one allocation consumes of the capacity (upstream ``calculateConsumedCapacity``); raises
    CapacityRequestError."""
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
        value = _rounded(name, requested.value, policy, fractional)
    if value < 0:
        raise CapacityRequestError(f"capacity {name!r}: capacity value is negative")
    return value


def _fits(capacity: DeviceCapacity, value: Fraction, fractional: bool) -> bool:
    policy = capacity.policy
    if policy is not None and not _allowed(value, policy, fractional):
        return False
    return value <= capacity.value.value


def capacity_consumption(
    device: Device, requests: Mapping[str, Quantity], fractional: bool
) -> dict[str, Fraction] | None:
    """Amount of every capacity of ``device`` one allocation for ``requests`` consumes, or None if the
    request does not fit the device's capacities or policies (the device is then skipped, no error).
    ``fractional``: gate DRAFractionalCapacityRange. Raises CapacityRequestError (fatal for the pod,
    naming the capacity) for a request the range arithmetic cannot represent or a negative consumption."""
    matched = _lookup(device, requests)
    if matched is None:
        return None
    consumption = {
        name: _resolve(name, capacity, matched.get(name), fractional)
        for name, capacity in device.capacity.items()
    }
    if not all(_fits(device.capacity[name], value, fractional) for name, value in consumption.items()):
        return None
    return consumption
