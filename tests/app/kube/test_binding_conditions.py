"""KubeBinder and device binding conditions (DRADeviceBindingConditions + DRAResourceClaimDeviceStatus):
after the claim writes and before the pod binding, the bind waits until a driver sets every binding condition
of the allocated devices True in ``status.devices[]``; a True failure condition or the binding timeout rolls
back everything the bind wrote. Time runs on the scaled fake clock (a 5 s poll is 50 ms)."""

from __future__ import annotations

import asyncio
from typing import Any

from app.scheduling.binder import FINALIZER
from app.scheduling.bindingconditions import device_status
from tests.app.kube.conftest import DRIVER, NS, bind, eventually
from tests.app.kube.fakeapi import FakeKubeAPI
from tests.app.kube.test_binder import assert_untouched, claim_in_api, writes
from tests.builders import claim, device, device_class, node, pod, request, resource_slice

ATTACHED = "dra.example.com/attached"
POWERED = "dra.example.com/powered"
FAILED = "dra.example.com/attach-failed"
CLAIM_GET = r"resourceclaims/p-gpu$"


def seed(api: FakeKubeAPI, conditions: list[str] | None = None, *, plain: bool = False) -> None:
    """Node n1 with gpu-0, whose binding conditions are ``conditions`` (default: attached) and failure
    condition attach-failed; ``plain``: gpu-0 has none."""
    api.add("Namespace", {"metadata": {"name": NS}})
    api.add("Node", node("n1"))
    api.add("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"'))
    gpu = device("gpu-0")
    if not plain:
        gpu["bindingConditions"] = conditions or [ATTACHED]
        gpu["bindingFailureConditions"] = [FAILED]
    api.add("ResourceSlice", resource_slice("n1-gpus", DRIVER, "n1", [gpu]))


def add_pod(api: FakeKubeAPI, name: str = "p", claim_name: str = "p-gpu", *, finalizer: bool = False) -> dict:
    if api.get("ResourceClaim", NS, claim_name) is None:
        obj = claim(NS, claim_name, [request("gpu", "gpu")])
        if finalizer:
            obj["metadata"]["finalizers"] = [FINALIZER]
        api.add("ResourceClaim", obj)
    return api.add("Pod", pod(NS, name, [claim_name]))


def set_conditions(api: FakeKubeAPI, claim_name: str = "p-gpu", **statuses: str) -> None:
    """What the driver does: ``status.devices[]`` for gpu-0 with the given condition statuses (keyword =
    condition type with ``_`` for ``/``, e.g. ``attached="True"``)."""
    names = {"attached": ATTACHED, "powered": POWERED, "failed": FAILED}
    current = claim_in_api(api, claim_name)
    current["status"]["devices"] = [
        {
            "driver": DRIVER,
            "pool": "n1",
            "device": "gpu-0",
            "conditions": [
                {
                    "type": names[kind],
                    "status": value,
                    "reason": "FabricError" if kind == "failed" else "Attach",
                    "message": "no path to the node" if kind == "failed" else "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "observedGeneration": 1,
                }
                for kind, value in statuses.items()
            ],
        }
    ]
    api.put("ResourceClaim", current)


def polls(clock: Any, interval: float = 5.0) -> int:
    return sum(1 for s in clock.sleeps if s == interval)


async def assert_rolled_back(api: FakeKubeAPI, runtime: Any, *, finalizer: bool = False) -> None:
    if finalizer:  # the claim had it before the bind: it stays
        c = claim_in_api(api, "p-gpu")
        assert c["metadata"]["finalizers"] == [FINALIZER]
        assert not (c.get("status") or {}).get("allocation")
        assert not (c.get("status") or {}).get("reservedFor")
    else:
        assert_untouched(api, "p-gpu", "p")
    assert not (claim_in_api(api, "p-gpu").get("status") or {}).get("devices")
    assert api.count("POST", r"pods/p/binding$") == 0
    assert not runtime.reservations.keys()
    await eventually(lambda: not runtime.state.inventory.is_allocated((DRIVER, "n1", "gpu-0")))


async def test_bind_waits_until_the_conditions_are_true_then_binds(api, start_runtime, clock):
    seed(api, [ATTACHED, POWERED])
    add_pod(api)
    runtime = await start_runtime()
    task = asyncio.create_task(bind(runtime, "p", "n1"))
    # Allocated, reserved and polled a few times, not bound.
    await eventually(lambda: api.count("GET", CLAIM_GET) >= 3)
    status = claim_in_api(api, "p-gpu")["status"]
    assert status["allocation"]["devices"]["results"][0]["bindingConditions"] == [ATTACHED, POWERED]
    assert status["allocation"]["allocationTimestamp"]
    assert status["reservedFor"][0]["uid"] == "uid-pod-ml-p"
    assert api.count("POST", r"pods/p/binding$") == 0
    # One condition True, the other not yet: still waiting.
    set_conditions(api, attached="True", powered="False")
    seen = api.count("GET", CLAIM_GET)
    await eventually(lambda: api.count("GET", CLAIM_GET) >= seen + 2)
    assert not task.done() and api.count("POST", r"pods/p/binding$") == 0
    set_conditions(api, attached="True", powered="True")
    assert await task is None
    assert writes(api) == [
        ("PUT", "claims/p-gpu"),
        ("PUT", "claims/p-gpu/status"),
        ("POST", "pods/p/binding"),
    ]
    # In order: the status write, the polls, then the binding.
    order = [
        (r.method, r.path.rsplit("/", 2)[-1])
        for r in api.requests
        if "p-gpu" in r.path or "binding" in r.path
    ]
    status_at = order.index(("PUT", "status"))
    binding_at = order.index(("POST", "binding"))
    polled = [i for i, r in enumerate(order) if r == ("GET", "p-gpu")]
    assert status_at < polled[0] and polled[-1] < binding_at and len(polled) >= 5
    assert polls(clock) == len(polled) - 1  # one sleep between two reads, none after the last
    assert api.get("Pod", NS, "p")["spec"]["nodeName"] == "n1"
    done = claim_in_api(api, "p-gpu")
    assert done["status"]["allocation"] and done["status"]["devices"][0]["device"] == "gpu-0"
    await eventually(lambda: not runtime.reservations.keys())
    assert runtime.state.inventory.is_allocated((DRIVER, "n1", "gpu-0"))


async def test_devices_stay_reserved_and_the_service_answers_during_the_wait(api, start_runtime):
    seed(api)
    add_pod(api)
    other = add_pod(api, "q", "q-gpu")
    runtime = await start_runtime()
    task = asyncio.create_task(bind(runtime, "p", "n1"))
    await eventually(lambda: api.count("GET", CLAIM_GET) >= 2)
    # Filter runs (the service lock is free) and sees n1's only GPU as taken.
    outcome = await asyncio.to_thread(runtime.service.filter, other, ["n1"])
    assert outcome.passed == []
    assert await bind(runtime, "q", "n1") is not None
    set_conditions(api, attached="True")
    assert await task is None
    assert (await asyncio.to_thread(runtime.service.filter, other, ["n1"])).passed == []


async def test_a_true_failure_condition_rolls_back(api, start_runtime):
    seed(api)
    add_pod(api)
    runtime = await start_runtime()
    task = asyncio.create_task(bind(runtime, "p", "n1"))
    await eventually(lambda: api.count("GET", CLAIM_GET) >= 2)
    set_conditions(api, attached="False", failed="True")
    error = await task
    assert error is not None
    assert "ResourceClaim ml/p-gpu" in error and f"device {DRIVER}/n1/gpu-0" in error
    assert f"binding failure condition {FAILED} is True" in error and "no path to the node" in error
    assert writes(api) == [
        ("PUT", "claims/p-gpu"),
        ("PUT", "claims/p-gpu/status"),
        ("PUT", "claims/p-gpu/status"),  # rollback: reservation, allocation and device status cleared
        ("PUT", "claims/p-gpu"),  # rollback: the finalizer it added
    ]
    await assert_rolled_back(api, runtime)


async def test_failure_rollback_keeps_a_finalizer_the_claim_had_before(api, start_runtime):
    seed(api)
    add_pod(api, finalizer=True)
    runtime = await start_runtime()
    task = asyncio.create_task(bind(runtime, "p", "n1"))
    await eventually(lambda: api.count("GET", CLAIM_GET) >= 1)
    set_conditions(api, failed="True")
    error = await task
    assert error is not None and FAILED in error
    assert writes(api) == [("PUT", "claims/p-gpu/status"), ("PUT", "claims/p-gpu/status")]
    await assert_rolled_back(api, runtime, finalizer=True)


async def test_timeout_rolls_back_and_names_what_is_missing(api, start_runtime, clock):
    seed(api, [ATTACHED, POWERED])
    add_pod(api)
    runtime = await start_runtime(binding_timeout_seconds=30.0)
    task = asyncio.create_task(bind(runtime, "p", "n1"))
    await eventually(lambda: api.count("GET", CLAIM_GET) >= 1)
    set_conditions(api, attached="True", powered="False")
    error = await task
    assert error is not None
    assert f"ResourceClaim ml/p-gpu: device {DRIVER}/n1/gpu-0: binding condition {POWERED} not True" in error
    assert ATTACHED not in error and "binding timeout of 30s" in error
    assert 1 <= polls(clock) <= 7  # 30 s at one read per 5 s
    await assert_rolled_back(api, runtime)
    # Nothing is left behind: the next attempt allocates again and binds once the driver is ready.
    reads = api.count("GET", CLAIM_GET)
    task = asyncio.create_task(bind(runtime, "p", "n1"))
    await eventually(lambda: api.count("GET", CLAIM_GET) > reads)
    set_conditions(api, attached="True", powered="True")
    assert await task is None


async def test_removed_reservation_fails_the_wait_at_once(api, start_runtime):
    seed(api)
    add_pod(api)
    runtime = await start_runtime()
    task = asyncio.create_task(bind(runtime, "p", "n1"))
    await eventually(lambda: api.count("GET", CLAIM_GET) >= 1)
    current = claim_in_api(api, "p-gpu")
    current["status"]["reservedFor"] = []
    api.put("ResourceClaim", current)
    error = await task
    assert error is not None and "reservation was removed" in error
    assert api.count("POST", r"pods/p/binding$") == 0


async def test_allocations_without_binding_conditions_do_not_wait(api, start_runtime, clock):
    seed(api, plain=True)
    add_pod(api)
    runtime = await start_runtime()
    assert await bind(runtime, "p", "n1") is None
    assert writes(api) == [
        ("PUT", "claims/p-gpu"),
        ("PUT", "claims/p-gpu/status"),
        ("POST", "pods/p/binding"),
    ]
    assert api.count("GET", CLAIM_GET) == 0  # no poll, and no re-read: the status write was the last request
    assert polls(clock) == 0


async def test_a_shared_claim_allocated_before_is_waited_for_too(api, start_runtime, clock):
    seed(api)
    add_pod(api)
    runtime = await start_runtime()
    task = asyncio.create_task(bind(runtime, "p", "n1"))
    await eventually(lambda: api.count("GET", CLAIM_GET) >= 1)
    set_conditions(api, attached="True")
    assert await task is None
    # A second pod of the same claim: nothing to allocate, the conditions are already True.
    add_pod(api, "q", "p-gpu")
    await eventually(lambda: runtime.state.get("Pod", f"{NS}/q"))
    await eventually(lambda: runtime.state.get("ResourceClaim", f"{NS}/p-gpu")["status"].get("devices"))
    reads, slept = api.count("GET", CLAIM_GET), polls(clock)
    assert await bind(runtime, "q", "n1") is None
    assert api.count("GET", CLAIM_GET) == reads + 1 and polls(clock) == slept
    assert [r["name"] for r in claim_in_api(api, "p-gpu")["status"]["reservedFor"]] == ["p", "q"]


def test_device_status_is_matched_by_driver_pool_device_and_share_id():
    result = {"driver": DRIVER, "pool": "n1", "device": "gpu-0", "shareID": "a1"}
    entries = [
        {"driver": DRIVER, "pool": "n1", "device": "gpu-0", "conditions": [{"type": "x"}]},
        {"driver": DRIVER, "pool": "n1", "device": "gpu-0", "shareID": "b2", "conditions": [{"type": "y"}]},
        {"driver": DRIVER, "pool": "n1", "device": "gpu-0", "shareID": "a1", "conditions": [{"type": "z"}]},
    ]
    assert device_status({"devices": entries}, result)["conditions"] == [{"type": "z"}]
    assert device_status({"devices": entries}, {**result, "shareID": None})["conditions"] == [{"type": "x"}]
    assert device_status({"devices": entries[:2]}, result) == {}
