"""``app.scheduling.bindingconditions.unusable_reason``: upstream Filter's isClaimReadyForBinding /
isClaimTimeout."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from allocator.errors import InvalidInputError
from allocator.features import FeatureGates
from app.scheduling.bindingconditions import unusable_reason

NOW = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)


def result(name: str) -> dict[str, Any]:
    return {
        "request": "r",
        "driver": "d",
        "pool": "p",
        "device": name,
        "bindingConditions": ["ok"],
        "bindingFailureConditions": ["bad"],
    }


def device_status(name: str, **conditions: str) -> dict[str, Any]:
    return {
        "driver": "d",
        "pool": "p",
        "device": name,
        "conditions": [{"type": t, "status": s} for t, s in conditions.items()],
    }


def claim(stamp: str | None, *devices: dict[str, Any], results: tuple[str, ...] = ("a",)) -> dict[str, Any]:
    allocation: dict[str, Any] = {"devices": {"results": [result(n) for n in results]}}
    if stamp is not None:
        allocation["allocationTimestamp"] = stamp
    return {"status": {"allocation": allocation, "devices": list(devices)}}


def reason(obj: dict[str, Any], gates: FeatureGates | None = None) -> str:
    return unusable_reason(obj, gates or FeatureGates(), 600.0, NOW, "ResourceClaim ml/c")


def test_timeout_counts_from_the_allocation_timestamp():
    # 12:00 - 600 s = 11:50: 11:49:59 is past the timeout, 11:50:00 is not (upstream: stamp + timeout < now).
    assert reason(claim("2026-06-01T11:49:59Z")) == (
        "binding conditions not met 600s after allocationTimestamp 2026-06-01T11:49:59Z"
    )
    assert reason(claim("2026-06-01T11:50:00Z")) == ""
    assert reason(claim(None)) == ""  # no timestamp: no timeout


def test_failure_is_seen_up_to_the_first_device_not_ready():
    failed_b = device_status("b", ok="False", bad="True")
    # Device a has no status yet: upstream stops there, so b's failure is not seen (and no timeout yet).
    assert reason(claim("2026-06-01T11:59:00Z", failed_b, results=("a", "b"))) == ""
    ready_a = device_status("a", ok="True")
    assert reason(claim("2026-06-01T11:59:00Z", ready_a, failed_b, results=("a", "b"))) == (
        "device d/p/b: binding failure condition bad is True"
    )


def test_ready_or_without_conditions_is_usable_and_gates_off_ignore_it():
    assert reason(claim("2020-01-01T00:00:00Z", device_status("a", ok="True"))) == ""
    plain = {"status": {"allocation": {"devices": {"results": [{"device": "a"}]}}}}
    assert reason(plain) == ""
    failed = claim("2020-01-01T00:00:00Z", device_status("a", bad="True"))
    for gates in (
        FeatureGates(DRADeviceBindingConditions=False),
        FeatureGates(DRAResourceClaimDeviceStatus=False),
    ):
        assert reason(failed, gates) == ""


def test_bad_timestamp_names_the_field():
    with pytest.raises(
        InvalidInputError, match=r"status\.allocation\.allocationTimestamp: not an RFC 3339 time"
    ):
        reason(claim("yesterday"))
