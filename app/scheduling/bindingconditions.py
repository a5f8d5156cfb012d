"""Binding conditions of allocated devices (DRADeviceBindingConditions + DRAResourceClaimDeviceStatus): what
a claim's ``status.devices[]`` says about the ``bindingConditions`` / ``bindingFailureConditions`` its
allocation result entries carry.

The cluster binder waits on them (``app.kube.binder``); filter uses ``unusable_reason`` to find allocated
claims that can never be bound, as upstream's Filter does (``isClaimReadyForBinding``, ``isClaimTimeout``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from allocator.errors import InvalidInputError
from allocator.features import FeatureGates

__all__ = [
    "conditioned_results",
    "device_label",
    "device_status",
    "failed_condition",
    "not_true",
    "unusable_reason",
]


def conditioned_results(allocation: Mapping[str, Any] | None) -> tuple[Mapping[str, Any], ...]:
    """The result entries of ``allocation`` that have binding conditions."""
    results = ((allocation or {}).get("devices") or {}).get("results") or ()
    return tuple(r for r in results if isinstance(r, Mapping) and r.get("bindingConditions"))


def device_label(result: Mapping[str, Any]) -> str:
    label = f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}"
    return f"{label} (share {result['shareID']})" if result.get("shareID") else label


def device_status(status: Mapping[str, Any], result: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``status.devices[]`` entry of a result entry (key: driver, pool, device, shareID), or {}."""
    for entry in status.get("devices") or ():
        if (
            isinstance(entry, Mapping)
            and entry.get("driver") == result.get("driver")
            and entry.get("pool") == result.get("pool")
            and entry.get("device") == result.get("device")
            and (entry.get("shareID") or None) == (result.get("shareID") or None)
        ):
            return entry
    return {}


def _conditions(status: Mapping[str, Any], result: Mapping[str, Any]) -> dict[Any, Mapping[str, Any]]:
    entries = device_status(status, result).get("conditions") or ()
    return {c.get("type"): c for c in entries if isinstance(c, Mapping)}


def failed_condition(status: Mapping[str, Any], result: Mapping[str, Any]) -> str:
    """``binding failure condition X is True (reason: ...; message: ...)`` for the device's first True
    failure condition, or ""."""
    conditions = _conditions(status, result)
    for failure in result.get("bindingFailureConditions") or ():
        found = conditions.get(failure)
        if found is not None and found.get("status") == "True":
            detail = "; ".join(f"{k}: {found[k]}" for k in ("reason", "message") if found.get(k))
            return f"binding failure condition {failure} is True" + (f" ({detail})" if detail else "")
    return ""


def not_true(status: Mapping[str, Any], result: Mapping[str, Any]) -> list[str]:
    """The device's binding condition types that are not True yet."""
    conditions = _conditions(status, result)
    return [
        t for t in result.get("bindingConditions") or () if (conditions.get(t) or {}).get("status") != "True"
    ]


def unusable_reason(
    claim: Mapping[str, Any], gates: FeatureGates, timeout_seconds: float, now: datetime, where: str
) -> str:
    """Why the allocated ``claim`` can never be bound, or "" (``where`` names it in errors). Raises
    InvalidInputError for an ``allocationTimestamp`` that is not an RFC 3339 time."""
    if not (gates.DRADeviceBindingConditions and gates.DRAResourceClaimDeviceStatus):
        return ""
    status = claim.get("status") or {}
    allocation = status.get("allocation") or {}
    for result in conditioned_results(allocation):
        # Upstream stops at the first device that is not ready: a failure of a later device counts once
        # the earlier ones are ready.
        if not device_status(status, result):
            break
        failed = failed_condition(status, result)
        if failed:
            return f"device {device_label(result)}: {failed}"
        if not_true(status, result):
            break
    else:
        return ""  # ready: every binding condition True (or none)
    stamp = allocation.get("allocationTimestamp")
    if stamp is None:
        return ""
    if (
        _time(stamp, f"{where}: status.allocation.allocationTimestamp") + timedelta(seconds=timeout_seconds)
        < now
    ):
        return f"binding conditions not met {timeout_seconds:g}s after allocationTimestamp {stamp}"
    return ""


def _time(value: Any, where: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise InvalidInputError(f"{where}: not an RFC 3339 time: {value!r}")
    return parsed
