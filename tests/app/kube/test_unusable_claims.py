"""Allocated claims that can no longer be bound (upstream Filter + PostFilter of the DynamicResources plugin).

Filter marks an allocated claim unavailable when one of its devices has a binding failure condition True
(``isClaimReadyForBinding``), or when it is not ready and ``allocationTimestamp`` + the binding timeout has
passed (``isClaimTimeout``); both only with DRADeviceBindingConditions and DRAResourceClaimDeviceStatus on.
Every node then fails (Unschedulable), and PostFilter deallocates such a claim when it is reserved for nobody
or only for this pod, so the pod is tried again. The extender does both in filter, writing the release
through the cluster binder with the claim's resourceVersion as precondition.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.app.kube.conftest import DRIVER, NS, eventually
from tests.app.kube.fakeapi import FakeKubeAPI
from tests.app.kube.test_binder import claim_in_api
from tests.app.kube.test_binding_conditions import ATTACHED, FAILED, add_pod, seed, set_conditions
from tests.app.kube.test_two_replicas import LEASE_NAME, LEASE_NAMESPACE, hold

OLD = "2020-01-01T00:00:00Z"
"""An allocationTimestamp far beyond any binding timeout."""


def allocate(api: FakeKubeAPI, *, stamp: str, reserved: list[dict[str, Any]] | None = None) -> None:
    """p-gpu allocated gpu-0 (binding condition attached, failure condition attach-failed) at ``stamp``."""
    current = claim_in_api(api, "p-gpu")
    result = {
        "request": "gpu",
        "driver": DRIVER,
        "pool": "n1",
        "device": "gpu-0",
        "bindingConditions": [ATTACHED],
        "bindingFailureConditions": [FAILED],
    }
    current["status"] = {"allocation": {"devices": {"results": [result]}, "allocationTimestamp": stamp}}
    if reserved:
        current["status"]["reservedFor"] = reserved
    api.put("ResourceClaim", current)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def filter_p(runtime: Any) -> Any:
    pod = runtime.state.get("Pod", f"{NS}/p")
    return await asyncio.to_thread(runtime.service.filter, pod, ["n1"])


async def synced(runtime: Any, check: Any) -> None:
    """Until the index's copy of p-gpu has a ``status`` that ``check`` accepts."""

    def seen() -> bool:
        claim = runtime.state.get("ResourceClaim", f"{NS}/p-gpu")
        return claim is not None and bool(check(claim.get("status") or {}))

    await eventually(seen)


FAILURE_REASON = (
    f"claim {NS}/p-gpu cannot be bound: device {DRIVER}/n1/gpu-0: binding failure condition {FAILED} is True "
    "(reason: FabricError; message: no path to the node)"
)
TIMEOUT_REASON = (
    f"claim {NS}/p-gpu cannot be bound: binding conditions not met 600s after allocationTimestamp {OLD}"
)


@pytest.mark.parametrize("reserved_for_the_pod", [False, True])
async def test_failed_binding_deallocates_the_claim(api, start_runtime, reserved_for_the_pod):
    seed(api)
    add_pod(api)
    reserved = [{"resource": "pods", "name": "p", "uid": f"uid-pod-{NS}-p"}] if reserved_for_the_pod else None
    allocate(api, stamp=now(), reserved=reserved)
    set_conditions(api, attached="False", failed="True")
    runtime = await start_runtime()
    await synced(runtime, lambda s: s.get("devices"))
    outcome = await filter_p(runtime)
    assert outcome.passed == []
    assert outcome.failed == {"n1": f"{FAILURE_REASON}; deallocated it, so the pod can be scheduled again"}
    status = claim_in_api(api, "p-gpu")["status"]
    assert not status.get("allocation") and not status.get("reservedFor") and not status.get("devices")


async def test_binding_timeout_deallocates_the_claim(api, start_runtime):
    seed(api)
    add_pod(api)
    allocate(api, stamp=OLD)
    runtime = await start_runtime()
    await synced(runtime, lambda s: s.get("allocation"))
    outcome = await filter_p(runtime)
    assert outcome.failed == {"n1": f"{TIMEOUT_REASON}; deallocated it, so the pod can be scheduled again"}
    assert not claim_in_api(api, "p-gpu")["status"].get("allocation")


async def test_waiting_within_the_timeout_or_ready_keeps_the_claim(api, start_runtime):
    seed(api)
    add_pod(api)
    allocate(api, stamp=now())
    runtime = await start_runtime()
    await synced(runtime, lambda s: s.get("allocation"))
    assert (await filter_p(runtime)).passed == ["n1"]
    # Ready (condition True) long after the timeout: usable, upstream checks the timeout only when not ready.
    allocate(api, stamp=OLD)
    set_conditions(api, attached="True")
    await synced(runtime, lambda s: s.get("devices") and s["allocation"].get("allocationTimestamp") == OLD)
    assert (await filter_p(runtime)).passed == ["n1"]
    assert claim_in_api(api, "p-gpu")["status"]["allocation"]


async def test_claim_reserved_for_another_pod_stays_allocated(api, start_runtime):
    seed(api)
    add_pod(api)
    other = {"resource": "pods", "name": "other", "uid": "uid-other"}
    allocate(api, stamp=OLD, reserved=[other])
    runtime = await start_runtime()
    await synced(runtime, lambda s: s.get("allocation"))
    outcome = await filter_p(runtime)
    assert outcome.failed == {"n1": f"{TIMEOUT_REASON}; it stays allocated: reserved for other pods"}
    status = claim_in_api(api, "p-gpu")["status"]
    assert status["allocation"] and status["reservedFor"] == [other]


async def test_a_standby_answers_but_leaves_the_claim_to_the_leader(api, start_runtime, clock):
    # Issue 33: filter keeps answering on a replica whose kube-scheduler does not hold the Lease, but writes
    # nothing there.
    hold(api, "pod-b_1", clock.wall())
    seed(api)
    add_pod(api)
    allocate(api, stamp=OLD)
    runtime = await start_runtime(identity="pod-a", scheduler_lease=f"{LEASE_NAMESPACE}/{LEASE_NAME}")
    await synced(runtime, lambda s: s.get("allocation"))
    await runtime.lease.refresh()
    outcome = await filter_p(runtime)
    assert outcome.failed == {"n1": TIMEOUT_REASON}
    assert claim_in_api(api, "p-gpu")["status"]["allocation"]
