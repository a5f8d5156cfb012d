"""What is in use: the devices allocated claims hold and those reserved by binds in flight, as upstream's
``AllocatedState`` has them: exclusively allocated devices, and shares of multi-allocatable devices with
the capacity they consume. Admin-access results do not make a device in use.

``allocated_devices`` reads a claim's ``status.allocation``; ``DeviceUse`` keeps who holds each device,
updated per claim and per bind (``allocator.inventory`` owns one and answers from it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from allocator.errors import InvalidInputError
from allocator.model import Device, DeviceID
from allocator.pools import PoolID
from allocator.quantity import QuantityError, parse_quantity

__all__ = ["AllocatedDevice", "DeviceUse", "Hold", "allocated_devices", "written_token"]


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One ``status.allocation.devices.results[]`` entry, as in-use accounting needs it."""

    id: DeviceID
    admin_access: bool
    share_id: str
    consumed_capacity: Mapping[str, Fraction]


_NOTHING_CONSUMED: Mapping[str, Fraction] = MappingProxyType({})


def written_token(claim_key: str) -> str:
    """The reservation token of the devices a bind wrote to claim ``claim_key``, held until the claim is
    seen back with them (``DeviceUse.adds_only_written``)."""
    return f"written:{claim_key}"


def allocated_devices(allocation: Mapping[str, Any] | None, where: str) -> tuple[AllocatedDevice, ...]:
    """Read ``status.allocation`` of a claim. Raises InvalidInputError naming ``where`` and the field."""
    if not allocation:
        return ()
    devices = allocation.get("devices") if isinstance(allocation, Mapping) else None
    results = devices.get("results") if isinstance(devices, Mapping) else None
    if not isinstance(results, list):
        raise InvalidInputError(f"{where}: status.allocation.devices.results: must be a list")
    parsed = []
    for i, entry in enumerate(results):
        at = f"{where}: status.allocation.devices.results[{i}]"
        if not isinstance(entry, Mapping) or not all(
            isinstance(entry.get(k), str) and entry.get(k) for k in ("driver", "pool", "device")
        ):
            raise InvalidInputError(f"{at}: driver, pool and device are required strings")
        consumed: dict[str, Fraction] = {}
        for name, value in (entry.get("consumedCapacity") or {}).items():
            try:
                consumed[name] = parse_quantity(value).value
            except QuantityError as e:
                raise InvalidInputError(f"{at}.consumedCapacity.{name}: {e}") from e
        parsed.append(
            AllocatedDevice(
                id=(entry["driver"], entry["pool"], entry["device"]),
                admin_access=entry.get("adminAccess") is True,
                share_id=str(entry.get("shareID") or ""),
                consumed_capacity=consumed or _NOTHING_CONSUMED,  # one empty map for every exclusive device
            )
        )
    return tuple(parsed)


def _summed(a: Mapping[str, Fraction], b: Mapping[str, Fraction]) -> dict[str, Fraction]:
    return {name: a.get(name, Fraction(0)) + b.get(name, Fraction(0)) for name in {*a, *b}}


@dataclass(frozen=True, slots=True)
class Hold:
    """One use of a device (``DeviceUse.holds``): by a claim (its key) or by a bind in flight (``claim``
    ""), exclusive (``consumed`` None) or a share consuming ``consumed``."""

    claim: str
    consumed: Mapping[str, Fraction] | None


_NO_SHARES: Mapping[tuple[str, str], Mapping[str, Fraction]] = MappingProxyType({})


class _Holders:
    """Who uses one device: exclusive holders and shares ((holder, share id) -> consumed capacity). One per
    allocated device: usually a single holder, so a tuple, and the shares map only once there is one."""

    __slots__ = ("exclusive", "shares")

    def __init__(self) -> None:
        self.exclusive: tuple[str, ...] = ()
        self.shares: Mapping[tuple[str, str], Mapping[str, Fraction]] = _NO_SHARES

    def add(self, holder: str, share_id: str, consumed: Mapping[str, Fraction]) -> None:
        if share_id:
            shares = self.shares if isinstance(self.shares, dict) else {}
            # A result repeated in one allocation (API validation allows it) consumes once per result, as
            # kube-scheduler's aggregated capacity adds up every result.
            earlier = shares.get((holder, share_id))
            shares[holder, share_id] = consumed if earlier is None else _summed(earlier, consumed)
            self.shares = shares
        elif holder not in self.exclusive:
            self.exclusive += (holder,)

    def remove(self, holder: str, share_id: str) -> None:
        self.exclusive = tuple(h for h in self.exclusive if h != holder)
        if isinstance(self.shares, dict):
            self.shares.pop((holder, share_id), None)
            if not self.shares:
                self.shares = _NO_SHARES


class DeviceUse:
    """Who holds each device: per claim its allocated devices, per bind in flight its reserved ones. Not
    thread-safe by itself (the inventory's caller serialises writers with readers)."""

    def __init__(self) -> None:
        self._claims: dict[str, tuple[AllocatedDevice, ...]] = {}
        self._reservations: dict[str, tuple[AllocatedDevice, ...]] = {}
        self._holders: dict[DeviceID, _Holders] = defaultdict(_Holders)

    def set_allocation(self, claim_key: str, devices: tuple[AllocatedDevice, ...]) -> set[PoolID]:
        """Record the allocated devices of a claim (empty = deallocated or deleted). Returns the pools
        of the devices it held before or holds now."""
        return self._replace(self._claims, claim_key, devices)

    def adds_only_written(self, claim_key: str, devices: tuple[AllocatedDevice, ...]) -> bool:
        """Whether ``devices``, as the claim's new allocation, hold nothing beyond what the claim holds now
        and what is reserved as written to it (``written_token``): its bind's write seen back, or a
        deallocation."""
        # Counted per result, not per device: a share listed twice consumes its capacity twice.
        have = [*self._claims.get(claim_key, ()), *self._reservations.get(written_token(claim_key), ())]
        for device in devices:
            if device.admin_access:
                continue
            try:
                have.remove(device)
            except ValueError:
                return False
        return True

    def reserve(self, token: str, devices: tuple[AllocatedDevice, ...]) -> set[PoolID]:
        """Hold devices for a bind in flight (released by ``release``). Returns their pools."""
        return self._replace(self._reservations, token, devices)

    def release(self, token: str) -> set[PoolID]:
        """Let go of what ``reserve`` held for ``token``. Returns the pools of those devices."""
        return self._replace(self._reservations, token, ())

    def _replace(
        self, table: dict[str, tuple[AllocatedDevice, ...]], key: str, devices: tuple[AllocatedDevice, ...]
    ) -> set[PoolID]:
        holder = f"{id(table)}:{key}"
        previous = table.pop(key, ())
        for old in previous:
            entry = self._holders.get(old.id)
            if entry is not None:
                entry.remove(holder, old.share_id)
                if not entry.exclusive and not entry.shares:
                    del self._holders[old.id]
        for new in devices:
            if new.admin_access:
                continue
            self._holders[new.id].add(holder, new.share_id, new.consumed_capacity)
        if devices:
            table[key] = devices
        return {(d.id[0], d.id[1]) for d in (*previous, *devices)}

    def allocations(self) -> Mapping[str, tuple[AllocatedDevice, ...]]:
        """Claim key -> the devices its allocation holds (read-only; for usage reports)."""
        return MappingProxyType(self._claims)

    def reservations(self) -> Mapping[str, tuple[AllocatedDevice, ...]]:
        """Reservation token -> the devices it holds for a bind in flight (read-only)."""
        return MappingProxyType(self._reservations)

    def is_exclusively_allocated(self, device_id: DeviceID) -> bool:
        entry = self._holders.get(device_id)
        return entry is not None and bool(entry.exclusive)

    def is_shared(self, device_id: DeviceID) -> bool:
        """Whether some allocation holds a share of the device (a result with shareID)."""
        entry = self._holders.get(device_id)
        return entry is not None and bool(entry.shares)

    def is_allocated(self, device_id: DeviceID) -> bool:
        """Upstream ``IsDeviceAllocated``: exclusively allocated, or any share or capacity in use."""
        return device_id in self._holders

    def consumed_capacity(self, device_id: DeviceID) -> dict[str, Fraction]:
        """Sum of ``consumedCapacity`` over the device's existing shares (upstream AggregatedCapacity)."""
        entry = self._holders.get(device_id)
        total: dict[str, Fraction] = defaultdict(Fraction)
        if entry is not None:
            for consumed in entry.shares.values():
                for name, amount in consumed.items():
                    total[name] += amount
        return total

    def holds(self, device_id: DeviceID) -> list[Hold]:
        """Every use of the device, for what-if views that take some claims' uses away
        (``allocator.eviction``)."""
        entry = self._holders.get(device_id)
        if entry is None:
            return []
        claims = f"{id(self._claims)}:"
        uses: list[tuple[str, Mapping[str, Fraction] | None]] = [(h, None) for h in entry.exclusive]
        uses.extend((h, consumed) for (h, _), consumed in entry.shares.items())
        return [Hold(h.removeprefix(claims) if h.startswith(claims) else "", c) for h, c in uses]

    def use_of(self, device_id: DeviceID) -> tuple[bool, int, tuple[tuple[str, Fraction], ...]] | None:
        """How the device is used, without who uses it: None when free, else (exclusively allocated,
        number of shares, capacity the shares consume). Equal for devices every check treats alike."""
        entry = self._holders.get(device_id)
        if entry is None:
            return None
        consumed = tuple(sorted(self.consumed_capacity(device_id).items()))
        return (bool(entry.exclusive), len(entry.shares), consumed)

    def uses(
        self, devices: Iterable[Device]
    ) -> tuple[tuple[bool, int, tuple[tuple[str, Fraction], ...]] | None, ...]:
        """``use_of`` for each device, in order (fast for free devices)."""
        holders = self._holders
        return tuple(self.use_of(d.id) if d.id in holders else None for d in devices)

    def holders(self, device_id: DeviceID) -> list[str]:
        """Claim keys holding the device (exclusive or shared), for explanations."""
        entry = self._holders.get(device_id)
        if entry is None:
            return []
        keys = {*entry.exclusive, *(h for h, _ in entry.shares)}
        return sorted(k.partition(":")[2] for k in keys)

    def double_allocations(self) -> list[tuple[DeviceID, tuple[str, ...]]]:
        """Devices in the allocation of two or more claims, one of which has it whole (no ``shareID``):
        what no allocator writes, so a sign of a second writer. Per device the claim keys, sorted; binds in
        flight are not claims. One pass over the allocated devices."""
        claims = f"{id(self._claims)}:"
        found = []
        for device_id, entry in self._holders.items():
            if not entry.exclusive or (len(entry.exclusive) == 1 and not entry.shares):
                continue
            exclusive = [h for h in entry.exclusive if h.startswith(claims)]
            holders = {*exclusive, *(h for h, _ in entry.shares if h.startswith(claims))}
            if exclusive and len(holders) > 1:
                found.append((device_id, tuple(sorted(h.removeprefix(claims) for h in holders))))
        return found
