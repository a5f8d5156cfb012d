"""The extender's own preemption (``app.kube.preemptor``) on the fake API server: it evicts the planner's
victims through the Eviction API (a DisruptionTarget condition first, the UID as precondition), nominates
the preemptor, keeps the freed devices for it, skips a node whose eviction a budget refuses, and does
nothing as a standby, beyond its rate limit, or while earlier victims are still terminating."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.kube.preemptor import EvictionWindow
from app.scheduling.preemptionrequests import PreemptionRequest
from tests.app.kube.conftest import DRIVER, NS, FakeClock, eventually
from tests.app.kube.fakeapi import DISRUPTION_BUDGET, FakeKubeAPI
from tests.builders import claim, device, device_class, node, pod, request, resource_slice

EVICTIONS = r"/pods/[^/]+/eviction$"


def _cluster(api: FakeKubeAPI, gpus: dict[str, int]) -> None:
    api.add("Namespace", {"metadata": {"name": NS}})
    api.add("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"'))
    for name, count in gpus.items():
        api.add("Node", node(name))
        devices = [device(f"gpu-{i}") for i in range(count)]
        api.add("ResourceSlice", resource_slice(f"{name}-gpus", DRIVER, name, devices))


def _holder(api: FakeKubeAPI, name: str, priority: int, node_name: str, gpu: str, **meta: Any) -> None:
    """Pod ``name`` running on ``node_name`` with claim ``name`` allocated ``gpu`` there."""
    obj = claim(NS, name, [request("gpu", "gpu", 1)])
    obj["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": node_name, "device": gpu}]}
        },
        "reservedFor": [{"resource": "pods", "name": name, "uid": f"uid-pod-{NS}-{name}"}],
    }
    api.add("ResourceClaim", obj)
    p = pod(NS, name, [name])
    p["metadata"].update(meta)
    p["spec"].update(nodeName=node_name, priority=priority, terminationGracePeriodSeconds=0)
    p["status"]["phase"] = "Running"
    api.add("Pod", p)


def _preemptor(
    api: FakeKubeAPI,
    priority: int = 100,
    *,
    gpus: int = 1,
    nodes: tuple[str, ...] = ("n1", "n2"),
    **status: Any,
) -> PreemptionRequest:
    api.add("ResourceClaim", claim(NS, "new", [request("gpu", "gpu", gpus)]))
    p = pod(NS, "new", ["new"])
    p["spec"]["priority"] = priority
    p["status"].update(status)
    api.add("Pod", p)
    return PreemptionRequest(f"{NS}/new", f"uid-pod-{NS}-new", nodes, 0.0)


def _evicted(api: FakeKubeAPI) -> list[str]:
    return [
        r.path.split("/")[-2] for r in api.requests if r.method == "POST" and r.path.endswith("/eviction")
    ]


async def test_the_lowest_priority_holder_is_evicted_and_the_preemptor_nominated(api, start_runtime):
    # n1: a (priority 5) and b (priority 10) hold its two GPUs; n2's GPU is held by boss (priority 1000).
    # The preemptor (priority 100, one GPU): n2 cannot be helped; on n1 evicting a suffices.
    _cluster(api, {"n1": 2, "n2": 1})
    _holder(api, "a", 5, "n1", "gpu-0")
    _holder(api, "b", 10, "n1", "gpu-1")
    _holder(api, "boss", 1000, "n2", "gpu-0")
    want = _preemptor(api)
    runtime = await start_runtime()

    assert await runtime.preemptor.preempt(want) == "n1"

    assert _evicted(api) == ["a"]
    eviction, status_patch = [
        r for r in api.requests if r.path.startswith(f"/api/v1/namespaces/{NS}/pods/a/")
    ]
    condition = status_patch.body["status"]["conditions"][0]
    assert (condition["type"], condition["reason"]) == ("DisruptionTarget", "PreemptionByScheduler")
    assert eviction.body["deleteOptions"]["preconditions"]["uid"] == f"uid-pod-{NS}-a"
    assert api.get("Pod", NS, "a") is None and api.get("Pod", NS, "b") is not None
    assert api.get("Pod", NS, "new")["status"]["nominatedNodeName"] == "n1"
    hold = runtime.service.preemption_holds.get(f"{NS}/new")
    assert (hold.node, [d.id for d in hold.devices]) == ("n1", [(DRIVER, "n1", "gpu-0")])
    await eventually(lambda: len(api.store.get(("events.k8s.io", "events"), {})) == 2)
    reasons = {(e["regarding"]["name"], e["reason"]) for e in api.store[("events.k8s.io", "events")].values()}
    assert reasons == {("a", "Preempted"), ("new", "PreemptingForDevices")}
    # The pod has a hold now: a second request does not evict again.
    assert await runtime.preemptor.preempt(want) is None
    assert _evicted(api) == ["a"]


def _a_on_n1_before_b_on_n2(api: FakeKubeAPI) -> PreemptionRequest:
    """n1's GPU held by a (priority 1), n2's by b (priority 5): a preemptor's plan takes n1 first."""
    _cluster(api, {"n1": 1, "n2": 1})
    _holder(api, "a", 1, "n1", "gpu-0")
    _holder(api, "b", 5, "n2", "gpu-0")
    return _preemptor(api)


@pytest.mark.parametrize("retry_after", ["", "10", "0"])
async def test_a_refused_eviction_drops_the_node_and_the_next_one_is_used(api, start_runtime, retry_after):
    # n1 first. The Eviction API refuses a (429 with a DisruptionBudget cause, as for a budget allowing no
    # disruption; with Retry-After 10 for a budget whose generation it has not observed yet): nothing is
    # evicted there and n2's b goes instead, at once, whatever Retry-After says.
    want = _a_on_n1_before_b_on_n2(api)
    runtime = await start_runtime()
    api.fail(
        "POST",
        r"/pods/a/eviction$",
        429,
        reason="TooManyRequests",
        retry_after=retry_after,
        causes=(DISRUPTION_BUDGET,),
    )

    assert await asyncio.wait_for(runtime.preemptor.preempt(want), 5) == "n2"
    assert api.get("Pod", NS, "a") is not None and api.get("Pod", NS, "b") is None
    assert runtime.preemptor.stats.refused == 1
    assert runtime.service.preemption_holds.get(f"{NS}/new").node == "n2"


async def test_an_eviction_turned_away_by_priority_and_fairness_stops_the_attempt_but_keeps_the_node(
    api, start_runtime
):
    # A 429 without a DisruptionBudget cause is kube-apiserver turning the request away under load, not
    # the budget's answer: this attempt stops (nobody else is evicted, b on n2 included), and the pod's
    # next attempt evicts a on n1 as planned.
    want = _a_on_n1_before_b_on_n2(api)
    runtime = await start_runtime()
    api.fail("POST", r"/pods/a/eviction$", 429, reason="TooManyRequests", retry_after="0")

    assert await asyncio.wait_for(runtime.preemptor.preempt(want), 5) is None
    assert (runtime.preemptor.stats.refused, runtime.preemptor.stats.failed) == (0, 1)
    assert api.get("Pod", NS, "a") is not None and api.get("Pod", NS, "b") is not None
    assert await asyncio.wait_for(runtime.preemptor.preempt(want), 5) == "n1"
    assert api.get("Pod", NS, "a") is None and api.get("Pod", NS, "b") is not None
    assert _evicted(api) == ["a", "a"]


async def test_a_budget_that_forbids_every_eviction_leaves_everyone_running(api, start_runtime):
    _cluster(api, {"n1": 1})
    _holder(api, "a", 1, "n1", "gpu-0", labels={"app": "a"})
    api.add(
        "PodDisruptionBudget",
        {
            "metadata": {"name": "a", "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": "a"}}},
            "status": {"disruptionsAllowed": 0},
        },
    )
    want = _preemptor(api)
    runtime = await start_runtime()
    assert await runtime.preemptor.preempt(want) is None
    assert api.get("Pod", NS, "a") is not None
    assert api.get("Pod", NS, "new")["status"].get("nominatedNodeName") is None
    assert len(runtime.service.preemption_holds) == 0
    assert not runtime.service.state.inventory.reservations()


async def test_a_standby_replica_evicts_nobody(api, start_runtime):
    _cluster(api, {"n1": 1})
    _holder(api, "a", 1, "n1", "gpu-0")
    want = _preemptor(api)
    api.add("Lease", {"metadata": {"name": "s", "namespace": NS}, "spec": {"holderIdentity": "other_1"}})
    runtime = await start_runtime(identity="me", scheduler_lease=f"{NS}/s")
    assert await runtime.preemptor.preempt(want) is None
    assert _evicted(api) == [] and runtime.preemptor.stats.not_leader == 1


async def test_no_more_evictions_than_the_rate_limit_allows(api, start_runtime):
    # Two victims needed (the preemptor asks for both GPUs of n1), one eviction a minute allowed.
    _cluster(api, {"n1": 2})
    _holder(api, "a", 1, "n1", "gpu-0")
    _holder(api, "b", 1, "n1", "gpu-1")
    want = _preemptor(api, gpus=2, nodes=("n1",))
    runtime = await start_runtime(preemption_evictions_per_minute=1)
    assert await runtime.preemptor.preempt(want) is None
    assert _evicted(api) == []


async def test_a_pod_whose_victims_are_still_terminating_waits(api, start_runtime):
    # The preemptor is nominated to n1, where a lower-priority pod is being deleted: it evicts nobody
    # more (upstream PodEligibleToPreemptOthers).
    _cluster(api, {"n1": 2})
    _holder(api, "going", 1, "n1", "gpu-0", deletionTimestamp="2026-01-01T00:00:05Z", finalizers=["x"])
    _holder(api, "b", 1, "n1", "gpu-1")
    want = _preemptor(api, nominatedNodeName="n1")
    runtime = await start_runtime()
    assert await runtime.preemptor.preempt(want) is None
    assert _evicted(api) == []


def test_the_eviction_window_counts_the_last_sixty_seconds():
    clock = FakeClock()
    window = EvictionWindow(2, clock)
    assert window.wait(3) is None  # more than a minute's allowance: never
    assert window.wait(2) == 0
    window.record()
    clock.advance(10)
    window.record()
    assert window.wait(1) == 50  # the first eviction leaves the window 60 s after it
    clock.advance(50)
    assert window.wait(1) == 0


async def test_a_pod_with_no_lower_priority_pod_on_its_nodes_costs_no_api_call(api, start_runtime):
    # Every holder has the preemptor's priority: no plan, and the budgets are not even listed.
    _cluster(api, {"n1": 1, "n2": 1})
    _holder(api, "a", 100, "n1", "gpu-0")
    _holder(api, "b", 100, "n2", "gpu-0")
    want = _preemptor(api)
    runtime = await start_runtime()
    before = len(api.requests)
    assert await runtime.preemptor.preempt(want) is None
    sent = [r.path for r in api.requests[before:] if "poddisruptionbudgets" in r.path or "/pods/" in r.path]
    assert sent == [] and runtime.preemptor.stats.not_helped == 1


async def test_a_preemptor_deleted_while_its_victims_are_evicted_gets_no_more_evicted(api, start_runtime):
    # Two victims on n1 (the preemptor asks for both GPUs). The pod is deleted while the first eviction is
    # in flight: its hold ends with it, and the second victim keeps running.
    _cluster(api, {"n1": 2})
    _holder(api, "a", 1, "n1", "gpu-0")
    _holder(api, "b", 1, "n1", "gpu-1")
    want = _preemptor(api, gpus=2, nodes=("n1",))
    runtime = await start_runtime()
    first_eviction = api.gate("POST", r"/pods/(a|b)/eviction$")
    preempting = asyncio.create_task(runtime.preemptor.preempt(want))
    await eventually(lambda: _evicted(api))
    api.remove("Pod", NS, "new")
    await eventually(lambda: runtime.service.state.get("Pod", f"{NS}/new") is None)
    first_eviction.set()

    assert await preempting is None
    assert len(_evicted(api)) == 1
    assert api.get("Pod", NS, "new") is None
    assert len(runtime.service.preemption_holds) == 0
    assert not runtime.service.state.inventory.reservations()


async def test_a_victims_grace_period_holds_the_devices_at_most_a_day_more(api, start_runtime):
    # The API server takes any int64 grace period; a hold that long would keep the devices from every other
    # pod for as long as the preemptor stays pending. At most the settings' longest time (one day).
    _cluster(api, {"n1": 1})
    _holder(api, "a", 1, "n1", "gpu-0")
    victim = api.get("Pod", NS, "a")
    victim["spec"]["terminationGracePeriodSeconds"] = 2**62
    api.put("Pod", victim)
    want = _preemptor(api)
    runtime = await start_runtime()

    assert await runtime.preemptor.preempt(want) == "n1"
    holds = runtime.service.preemption_holds
    assert holds.get(f"{NS}/new").until - holds.clock() <= 60 + 86_400


async def test_the_preemptor_is_nominated_before_its_first_victim_is_evicted(api, start_runtime):
    # Should the replica stop between two evictions (a restart, an eviction answered 500), the pod's
    # nomination is what makes its next attempt wait for the victims already going (upstream
    # PodEligibleToPreemptOthers) instead of evicting two more pods on n2 for the same two GPUs.
    _cluster(api, {"n1": 2, "n2": 2})
    _holder(api, "a", 1, "n1", "gpu-0")
    _holder(api, "b", 1, "n1", "gpu-1")
    _holder(api, "c", 2, "n2", "gpu-0")
    _holder(api, "d", 2, "n2", "gpu-1")
    want = _preemptor(api, gpus=2)
    runtime = await start_runtime()
    first_eviction = api.gate("POST", r"/pods/[^/]+/eviction$")
    preempting = asyncio.create_task(runtime.preemptor.preempt(want))
    await eventually(lambda: _evicted(api))
    nominated = api.get("Pod", NS, "new")["status"].get("nominatedNodeName")
    first_eviction.set()
    assert await preempting == "n1"
    assert nominated == "n1"


async def test_a_preemptor_gone_before_its_nomination_gets_nobody_evicted(api, start_runtime):
    _cluster(api, {"n1": 1})
    _holder(api, "a", 1, "n1", "gpu-0")
    want = _preemptor(api)
    runtime = await start_runtime()
    api.fail("PATCH", r"/pods/new/status$", 404, reason="NotFound")

    assert await runtime.preemptor.preempt(want) is None
    assert _evicted(api) == []
    assert len(runtime.service.preemption_holds) == 0
