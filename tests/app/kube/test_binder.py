"""KubeBinder against the fake API server: the writes of a bind (order and bodies, as upstream PreBind +
Bind), conflicts, rollback at every step, reservations while a bind is in flight or unconfirmed,
idempotent retries, an API outage mid-bind, and 50 concurrent binds racing for the same devices."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.config.settings import Settings
from app.http.api import create_app
from app.kube.bindjournal import CONFLICT_ATTEMPTS
from app.scheduling.binder import FINALIZER
from tests.app.kube.conftest import DRIVER, NS, add_pod, bind, eventually, seed_cluster, silence_watches
from tests.app.kube.fakeapi import FakeKubeAPI
from tests.builders import claim, device, device_class, node, pod, request, resource_slice
from tests.signalling import SignallingCondition

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims"
PODS = "/api/v1/namespaces/ml/pods"


def writes(api: FakeKubeAPI) -> list[tuple[str, str]]:
    return [(r.method, r.path.replace(CLAIMS, "claims").replace(PODS, "pods")) for r in api.writes()]


def claim_in_api(api: FakeKubeAPI, name: str) -> dict:
    found = api.get("ResourceClaim", NS, name)
    assert found is not None
    return found


def assert_untouched(api: FakeKubeAPI, claim_name: str, pod_name: str) -> None:
    c = claim_in_api(api, claim_name)
    assert FINALIZER not in (c["metadata"].get("finalizers") or [])
    assert not (c.get("status") or {}).get("allocation")
    assert not (c.get("status") or {}).get("reservedFor")
    assert not api.get("Pod", NS, pod_name)["spec"].get("nodeName")


async def test_happy_path_writes_finalizer_then_status_then_binding(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime()
    assert await bind(runtime, "p", "n1") is None
    assert writes(api) == [
        ("PUT", "claims/p-gpu"),
        ("PUT", "claims/p-gpu/status"),
        ("POST", "pods/p/binding"),
    ]
    finalizer, status, binding = api.writes()
    assert finalizer.body["metadata"]["finalizers"] == [FINALIZER]
    assert finalizer.body["metadata"]["resourceVersion"]  # precondition
    assert status.body["metadata"]["resourceVersion"] != finalizer.body["metadata"]["resourceVersion"]
    allocation = status.body["status"]["allocation"]
    assert allocation["devices"]["results"] == [
        {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}
    ]
    assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n1"]
    assert status.body["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-pod-ml-p"}]
    assert binding.body == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p", "namespace": NS, "uid": "uid-pod-ml-p"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
    }
    assert api.get("Pod", NS, "p")["spec"]["nodeName"] == "n1"
    # The status write was the last request before the binding: the claim is not read again.
    assert api.count("GET", r"resourceclaims/p-gpu$") == 0
    # The watch brings the writes back: the claim holds the device, no reservation is left.
    await eventually(lambda: runtime.state.get("Pod", f"{NS}/p")["spec"].get("nodeName") == "n1")
    await eventually(lambda: not runtime.reservations.keys())
    assert runtime.state.inventory.is_allocated((DRIVER, "n1", "gpu-0"))


async def test_conflict_on_status_rereads_and_retries(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime()
    api.fail("PUT", r"resourceclaims/p-gpu/status$", 409, times=2, reason="Conflict", message="modified")
    assert await bind(runtime, "p", "n1") is None
    # A fresh read before each retry; none before the binding: the last write's answer is as fresh.
    assert api.count("GET", r"resourceclaims/p-gpu$") == 2
    assert writes(api).count(("PUT", "claims/p-gpu/status")) == 3
    assert (claim_in_api(api, "p-gpu")["status"]["reservedFor"])[0]["name"] == "p"


async def test_real_conflict_from_a_concurrent_change_is_retried(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime()
    # The claim changes on the server after the index saw it (label added by someone else).
    api.silent_watches = True
    api.drop_watches()
    changed = claim_in_api(api, "p-gpu")
    changed["metadata"]["labels"] = {"team": "a"}
    api.put("ResourceClaim", changed)
    assert await bind(runtime, "p", "n1") is None
    result = claim_in_api(api, "p-gpu")
    assert result["metadata"]["labels"] == {"team": "a"}
    assert result["metadata"]["finalizers"] == [FINALIZER]


async def test_conflicts_that_never_end_fail_and_roll_back(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime()
    api.fail("PUT", r"resourceclaims/p-gpu/status$", 409, times=5, reason="Conflict", message="modified")
    error = await bind(runtime, "p", "n1")
    assert error is not None and "still conflicting after 5 attempts" in error
    assert_untouched(api, "p-gpu", "p")
    assert not runtime.reservations.keys()


@pytest.mark.parametrize(
    ("method", "path", "status", "expect_rollback"),
    [
        ("PUT", r"resourceclaims/p-gpu$", 500, []),
        ("PUT", r"resourceclaims/p-gpu/status$", 500, [("PUT", "claims/p-gpu")]),
        ("POST", r"pods/p/binding$", 500, [("PUT", "claims/p-gpu/status"), ("PUT", "claims/p-gpu")]),
        ("POST", r"pods/p/binding$", 409, [("PUT", "claims/p-gpu/status"), ("PUT", "claims/p-gpu")]),
    ],
    ids=["finalizer", "status", "binding-500", "binding-409"],
)
async def test_failure_at_each_step_rolls_back_what_was_written(
    api, start_runtime, method, path, status, expect_rollback
):
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime()
    api.fail(method, path, status, message="injected failure")
    error = await bind(runtime, "p", "n1")
    assert error is not None and "injected failure" in error
    done = writes(api)
    failed_at = next(i for i, w in enumerate(api.writes()) if w.method == method and re.search(path, w.path))
    assert done[failed_at + 1 :] == expect_rollback
    assert_untouched(api, "p-gpu", "p")
    assert not runtime.reservations.keys()
    # Nothing is held in the index either: the pod can be bound again.
    await eventually(lambda: not runtime.state.inventory.is_allocated((DRIVER, "n1", "gpu-0")))
    assert await bind(runtime, "p", "n1") is None


async def test_binding_409_already_assigned_to_our_node_is_success(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime()
    api.fail(
        "POST",
        r"pods/p/binding$",
        409,
        message='Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "n1"',
    )
    assert await bind(runtime, "p", "n1") is None
    assert claim_in_api(api, "p-gpu")["status"]["reservedFor"][0]["uid"] == "uid-pod-ml-p"


async def test_binding_409_already_assigned_elsewhere_fails_and_rolls_back(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime()
    api.fail("POST", r"pods/p/binding$", 409, message='pod p is already assigned to node "n2"')
    error = await bind(runtime, "p", "n1")
    assert error is not None and 'already assigned to node "n2"' in error
    assert_untouched(api, "p-gpu", "p")


async def test_binding_carries_the_uid_precondition(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime()
    # The pod was deleted and recreated under the same name after the index saw it.
    api.silent_watches = True
    api.drop_watches()
    recreated = api.get("Pod", NS, "p")
    recreated["metadata"]["uid"] = "uid-new"
    api.put("Pod", recreated)
    error = await bind(runtime, "p", "n1")
    assert error is not None and "Precondition failed: UID" in error
    assert_untouched(api, "p-gpu", "p")


async def test_filter_during_an_in_flight_bind_treats_reserved_devices_as_used(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "a")
    b = add_pod(api, "b")
    runtime = await start_runtime()
    gate = api.gate("POST", r"pods/a/binding$")
    task = asyncio.create_task(bind(runtime, "a", "n2"))
    await eventually(lambda: api.count("POST", r"pods/a/binding$"))
    # a's bind is writing: n2's only GPU is taken for b.
    outcome = runtime.service.filter(b, ["n1", "n2"])
    assert outcome.passed == ["n1"]
    gate.set()
    assert await task is None
    assert runtime.service.filter(b, ["n1", "n2"]).passed == ["n1"]
    await eventually(lambda: not runtime.reservations.keys())
    assert runtime.service.filter(b, ["n1", "n2"]).passed == ["n1"]


async def test_written_devices_stay_reserved_until_the_watch_confirms(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "a")
    b = add_pod(api, "b")
    runtime = await start_runtime()
    await silence_watches(api)  # the claim watch will not deliver the write
    assert await bind(runtime, "a", "n2") is None
    assert runtime.reservations.keys() == [f"{NS}/a-gpu"]
    assert not (runtime.state.get("ResourceClaim", f"{NS}/a-gpu").get("status") or {}).get("allocation")
    assert runtime.service.filter(b, ["n1", "n2"]).passed == ["n1"]
    api.silent_watches = False
    api.drop_watches()  # the watch comes back and replays the write
    await eventually(lambda: not runtime.reservations.keys())
    assert runtime.state.get("ResourceClaim", f"{NS}/a-gpu")["status"]["allocation"]
    assert runtime.service.filter(b, ["n1", "n2"]).passed == ["n1"]


async def test_retry_of_a_completed_bind_is_idempotent(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime()
    assert await bind(runtime, "p", "n1") is None
    count = len(api.writes())
    # Retried before the index saw the result: the claim is re-read, found reserved, the binding 409 is ours.
    assert await bind(runtime, "p", "n1") is None
    # Retried after the watch delivered everything: nothing to write.
    await eventually(lambda: runtime.state.get("Pod", f"{NS}/p")["spec"].get("nodeName"))
    assert await bind(runtime, "p", "n1") is None
    assert ("PUT", "claims/p-gpu") not in writes(api)[count:]
    claimed = claim_in_api(api, "p-gpu")
    assert len(claimed["status"]["reservedFor"]) == 1
    assert await bind(runtime, "p", "n2") is not None  # but not on another node


async def test_stale_index_retry_reuses_the_written_allocation(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime()
    await silence_watches(api)
    assert await bind(runtime, "p", "n1") is None
    version = claim_in_api(api, "p-gpu")["metadata"]["resourceVersion"]
    # The index still shows the claim unallocated: the first write conflicts, the re-read shows it is ours.
    assert await bind(runtime, "p", "n1") is None
    assert claim_in_api(api, "p-gpu")["metadata"]["resourceVersion"] == version
    assert claim_in_api(api, "p-gpu")["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"


async def test_api_server_down_during_bind_leaves_the_claim_for_recovery_then_retry_reuses_it(
    api, start_runtime
):
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime()
    api.disconnect("POST", r"pods/p/binding$")
    api.disconnect("GET", r"pods/p$", times=5)  # aiohttp retries an idempotent GET once
    error = await bind(runtime, "p", "n1")
    assert error is not None and "outcome unknown" in error
    written = claim_in_api(api, "p-gpu")
    assert written["status"]["reservedFor"][0]["uid"] == "uid-pod-ml-p"  # not rolled back
    assert not api.get("Pod", NS, "p")["spec"].get("nodeName")
    await eventually(lambda: runtime.state.get("ResourceClaim", f"{NS}/p-gpu").get("status"))
    # kube-scheduler retries the pod: filter keeps the allocation's node, bind writes only the binding.
    p = runtime.state.get("Pod", f"{NS}/p")
    assert runtime.service.filter(p, ["n1", "n2"]).passed == ["n1"]
    count = len(api.writes())
    assert await bind(runtime, "p", "n1") is None
    assert writes(api)[count:] == [("POST", "pods/p/binding")]


async def test_api_server_unreachable_binding_rolls_back(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime()
    api.disconnect("POST", r"pods/p/binding$")  # answered by a disconnect, but the pod re-read shows unbound
    error = await bind(runtime, "p", "n1")
    assert error is not None
    assert_untouched(api, "p-gpu", "p")


async def test_second_bind_of_the_same_pod_while_one_runs_is_refused(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime()
    gate = api.gate("POST", r"pods/p/binding$")
    first = asyncio.create_task(bind(runtime, "p", "n1"))
    await eventually(lambda: api.count("POST", r"pods/p/binding$"))
    assert "another bind of this pod is in progress" in (await bind(runtime, "p", "n1") or "")
    gate.set()
    assert await first is None


async def test_fifty_concurrent_binds_never_allocate_a_device_twice(api, start_runtime):
    seed_cluster(api)
    nodes = [f"w{i}" for i in range(5)]
    for name in nodes:  # 5 nodes x 2 GPUs + n1 (2) + n2 (1) = 13 GPUs for 50 pods
        api.add("Node", node(name))
        api.add(
            "ResourceSlice", resource_slice(f"{name}-gpus", DRIVER, name, [device("gpu-0"), device("gpu-1")])
        )
    pods = [add_pod(api, f"p{i:02d}") for i in range(50)]
    runtime = await start_runtime()
    rng = random.Random(7)
    api.fail("PUT", r"/status$", 409, times=10, reason="Conflict", message="modified")
    api.fail("POST", r"/binding$", 500, times=3, message="etcd hiccup")
    app = create_app(runtime.service, Settings(Path("unused")))
    candidates = ["n1", "n2", *nodes]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as http:
        for p in pods:
            body = orjson.dumps({"Pod": p, "NodeNames": candidates})
            assert (await http.post("/scheduler/filter", content=body)).status_code == 200

        async def bind_one(p: dict) -> dict:
            target = rng.choice(candidates)
            args = {
                "PodName": p["metadata"]["name"],
                "PodNamespace": NS,
                "PodUID": p["metadata"]["uid"],
                "Node": target,
            }
            answer = await http.post("/scheduler/bind", content=orjson.dumps(args))
            assert answer.status_code == 200
            return answer.json()

        results = await asyncio.gather(*(bind_one(p) for p in pods))
    errors = [r["Error"] for r in results if r["Error"]]
    bound = [p for p in pods if api.get("Pod", NS, p["metadata"]["name"])["spec"].get("nodeName")]
    assert len(bound) + len(errors) == 50
    assert all(errors), "every rejected pod has a reason"
    assert 0 < len(bound) <= 13
    used: dict[tuple[str, str, str], str] = {}
    for p in pods:
        name = p["metadata"]["name"]
        c = claim_in_api(api, f"{name}-gpu")
        status = c.get("status") or {}
        pod_node = api.get("Pod", NS, name)["spec"].get("nodeName")
        if pod_node:
            assert status["reservedFor"] == [{"resource": "pods", "name": name, "uid": p["metadata"]["uid"]}]
            for r in status["allocation"]["devices"]["results"]:
                device_id = (r["driver"], r["pool"], r["device"])
                assert device_id not in used, f"{device_id} allocated to {used.get(device_id)} and {name}"
                used[device_id] = name
                assert r["pool"] == pod_node
        else:  # nothing half-written
            assert not status.get("allocation") and not status.get("reservedFor")
            assert FINALIZER not in (c["metadata"].get("finalizers") or [])


def add_extended_pod(api: FakeKubeAPI, name: str) -> dict:
    """A pod asking for one GPU as the implicit extended resource of DeviceClass ``gpu`` (KEP-5004)."""
    p = pod(NS, name)
    p["spec"]["containers"][0]["resources"] = {"limits": {"deviceclass.resource.kubernetes.io/gpu": "1"}}
    return api.add("Pod", p)


async def test_extended_resource_claim_is_created_allocated_and_linked_before_binding(api, start_runtime):
    seed_cluster(api)
    p = add_extended_pod(api, "x")
    runtime = await start_runtime()
    assert runtime.service.filter(p, ["n1"]).passed == ["n1"]
    assert await bind(runtime, "x", "n1") is None
    steps = writes(api)
    created_name = api.writes()[0].body["metadata"]["name"]
    assert steps == [
        ("POST", "claims"),
        ("PUT", f"claims/{created_name}"),
        ("PUT", f"claims/{created_name}/status"),
        ("PATCH", "pods/x/status"),
        ("POST", "pods/x/binding"),
    ]
    created = claim_in_api(api, created_name)
    assert created["metadata"]["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    assert created["metadata"]["ownerReferences"][0]["uid"] == "uid-pod-ml-x"
    assert created["metadata"]["finalizers"] == [FINALIZER]
    assert created["status"]["reservedFor"] == [{"resource": "pods", "name": "x", "uid": "uid-pod-ml-x"}]
    linked = api.get("Pod", NS, "x")
    assert linked["status"]["extendedResourceClaimStatus"]["resourceClaimName"] == created_name
    assert linked["spec"]["nodeName"] == "n1"


async def test_a_pod_status_patch_stored_then_answered_500_is_cleared(api, start_runtime):
    """The pod must not point at the extended-resource claim the rollback deletes."""
    seed_cluster(api)
    p = add_extended_pod(api, "x")
    runtime = await start_runtime()
    assert runtime.service.filter(p, ["n1"]).passed == ["n1"]
    api.fail("PATCH", r"pods/x/status$", 500, after=True)
    assert await bind(runtime, "x", "n1") is not None
    created_name = api.writes()[0].body["metadata"]["name"]
    assert api.get("ResourceClaim", NS, created_name) is None
    assert not (api.get("Pod", NS, "x").get("status") or {}).get("extendedResourceClaimStatus")


async def bind_past_the_deadline(
    api: FakeKubeAPI, runtime, name: str, method: str, pattern: str, *, after: bool = True
) -> str | None:
    """Bind pod ``name`` to n1 while the requests matching ``method`` and ``pattern`` are held past the
    bind's deadline (``after``: carried out first, only their answers held); the error text, or None."""
    answer = api.gate(method, pattern, after=after)
    try:
        return await bind(runtime, name, "n1")
    finally:
        answer.set()


@pytest.mark.parametrize("write", [r"resourceclaims/p-gpu$", r"resourceclaims/p-gpu/status$"])
async def test_a_claim_write_stored_as_the_bind_times_out_is_rolled_back(api, start_runtime, write):
    """The bind's deadline cancels the finalizer or allocation write in flight, which the server has
    stored: the rollback re-reads the claim and undoes it, as after a 5xx."""
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime(bind_timeout_seconds=50)  # 0.5 s on the test clock
    assert "took longer than 50" in (await bind_past_the_deadline(api, runtime, "p", "PUT", write) or "")
    assert_untouched(api, "p-gpu", "p")


def seed_protected_p_and_q(api: FakeKubeAPI) -> None:
    """Pods p and q on the seeded cluster (n1: gpu-0, gpu-1), p's claim keeping its finalizer from an
    earlier bind: a rollback that finds p's allocation write missing writes nothing to the claim."""
    seed_cluster(api)
    protected = claim(NS, "p-gpu", [request("gpu", "gpu", 1)])
    protected["metadata"]["finalizers"] = [FINALIZER]
    api.add("ResourceClaim", protected)
    api.add("Pod", pod(NS, "p", ["p-gpu"]))
    add_pod(api, "q")


async def cut_short_before_the_server_took_it(
    api: FakeKubeAPI, start_runtime, *, unreadable: bool = False
) -> tuple[Any, asyncio.Event]:
    """``seed_protected_p_and_q``, then p's bind cut short by its deadline before the server carried its
    allocation write out (``unreadable``: and its rollback cannot read the claim): the runtime, and the
    gate that lets the server carry the write out."""
    seed_protected_p_and_q(api)
    runtime = await start_runtime(bind_timeout_seconds=50)  # 0.5 s on the test clock
    late = api.gate("PUT", r"resourceclaims/p-gpu/status$", late=True)
    if unreadable:
        api.fail("GET", r"resourceclaims/p-gpu$", 500, times=10)
    assert "took longer than 50" in (await bind(runtime, "p", "n1") or "")
    assert not (claim_in_api(api, "p-gpu").get("status") or {}).get("allocation")
    return runtime, late


def device_of(api: FakeKubeAPI, claim_name: str) -> str:
    return str(claim_in_api(api, claim_name)["status"]["allocation"]["devices"]["results"][0]["device"])


async def test_an_allocation_write_that_lands_after_the_rollback_gives_no_device_to_a_second_claim(
    api, start_runtime
):
    """The claim's resourceVersion, the write's precondition, still holds when the server carries the
    write out late. Until the claim changes, its devices stay held: the next pod's bind takes the other."""
    runtime, late = await cut_short_before_the_server_took_it(api, start_runtime)
    assert await bind(runtime, "q", "n1") is None  # while p's write may still land
    late.set()
    await eventually(lambda: (claim_in_api(api, "p-gpu").get("status") or {}).get("allocation"))
    assert (device_of(api, "p-gpu"), device_of(api, "q-gpu")) == ("gpu-0", "gpu-1")
    # The index shows the write: the claim's own allocation holds gpu-0 from now on.
    await eventually(lambda: "ml/p-gpu" not in runtime.reservations)


async def test_a_claim_changed_after_the_rollback_ends_the_hold_of_a_write_that_can_no_longer_land(
    api, start_runtime
):
    """Another writer changes p's claim first: the late write would fail its precondition, so its device is
    free again for q, and when the server carries the write out it is refused."""
    runtime, late = await cut_short_before_the_server_took_it(api, start_runtime)
    labelled = claim_in_api(api, "p-gpu")
    labelled["metadata"]["labels"] = {"team": "a"}
    api.put("ResourceClaim", labelled)
    await eventually(lambda: "ml/p-gpu" not in runtime.reservations)
    assert await bind(runtime, "q", "n1") is None
    late.set()
    await eventually(lambda: not api.late_requests)
    assert not (claim_in_api(api, "p-gpu").get("status") or {}).get("allocation")
    assert device_of(api, "q-gpu") == "gpu-0"


async def test_a_second_cut_short_write_to_the_claim_leaves_the_first_ones_devices_held(api, start_runtime):
    """p's bind is cut short twice, each write sent with the claim's same version: either may still land
    (the other then fails its precondition), so both devices stay held and q finds none free on n1."""
    runtime, first = await cut_short_before_the_server_took_it(api, start_runtime)
    second = api.gate("PUT", r"resourceclaims/p-gpu/status$", late=True)
    assert "took longer than 50" in (await bind(runtime, "p", "n1") or "")
    assert "n1" in (await bind(runtime, "q", "n1") or "")  # gpu-0 and gpu-1 both held
    first.set()
    second.set()
    await eventually(lambda: not api.late_requests)
    assert device_of(api, "p-gpu") == "gpu-0"  # the first landed; the second was refused


async def test_a_refused_write_of_the_next_bind_leaves_the_earlier_writes_devices_held(api, start_runtime):
    """p's next bind is refused (422): nothing of it can land, but its rollback must not end the hold of
    the earlier write, which still can."""
    runtime, late = await cut_short_before_the_server_took_it(api, start_runtime)
    api.fail("PUT", r"resourceclaims/p-gpu/status$", 422)
    assert "422" in (await bind(runtime, "p", "n1") or "")
    assert await bind(runtime, "q", "n1") is None
    late.set()
    await eventually(lambda: (claim_in_api(api, "p-gpu").get("status") or {}).get("allocation"))
    assert (device_of(api, "p-gpu"), device_of(api, "q-gpu")) == ("gpu-0", "gpu-1")


async def test_a_rollback_that_cannot_read_the_claim_leaves_the_devices_of_a_cut_short_write_held(
    api, start_runtime
):
    runtime, late = await cut_short_before_the_server_took_it(api, start_runtime, unreadable=True)
    assert await bind(runtime, "q", "n1") is None
    late.set()
    await eventually(lambda: (claim_in_api(api, "p-gpu").get("status") or {}).get("allocation"))
    assert (device_of(api, "p-gpu"), device_of(api, "q-gpu")) == ("gpu-0", "gpu-1")


async def test_a_rollback_that_moves_the_claim_on_ends_its_writes_hold_at_once(api, start_runtime):
    """The status write gets a 500; removing the finalizer this bind added moves the claim past the version
    the write was sent with, which can then never succeed: its devices are free at once, whether or not
    the watch has shown the rollback yet."""
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime()
    await silence_watches(api)
    api.fail("PUT", r"resourceclaims/p-gpu/status$", 500)
    assert "500" in (await bind(runtime, "p", "n1") or "")
    assert FINALIZER not in (claim_in_api(api, "p-gpu")["metadata"].get("finalizers") or [])
    assert not runtime.reservations.keys()
    assert not runtime.state.inventory.is_allocated((DRIVER, "n1", "gpu-0"))


def allocation_in_api(api: FakeKubeAPI, claim_name: str) -> Any:
    return (claim_in_api(api, claim_name).get("status") or {}).get("allocation")


def second_try_answered(api: FakeKubeAPI, pattern: str, status: int, *, carried_out: bool) -> None:
    """aiohttp sends a PUT again on a new connection when the one it went out on closes before the answer:
    the first try is dropped (``carried_out``: after the server stored it), the second answered ``status``."""
    api.disconnect("PUT", pattern, after=carried_out)
    api.fail("PUT", pattern, status, reason="Injected")


async def test_a_429_answering_the_second_try_of_the_allocation_write_leaves_its_devices_held(
    api, start_runtime
):
    """The first try may still be carried out, later: its devices stay held."""
    seed_protected_p_and_q(api)
    runtime = await start_runtime()
    second_try_answered(api, r"resourceclaims/p-gpu/status$", 429, carried_out=False)
    assert "429" in (await bind(runtime, "p", "n1") or "")
    assert await bind(runtime, "q", "n1") is None
    assert device_of(api, "q-gpu") == "gpu-1"


async def test_a_429_answering_the_only_try_of_the_allocation_write_frees_its_devices(api, start_runtime):
    """Priority and fairness turns a request away before it is carried out: nothing to hold."""
    seed_protected_p_and_q(api)
    runtime = await start_runtime()
    api.fail("PUT", r"resourceclaims/p-gpu/status$", 429, reason="TooManyRequests")
    assert "429" in (await bind(runtime, "p", "n1") or "")
    assert not runtime.reservations.keys()
    assert await bind(runtime, "q", "n1") is None
    assert device_of(api, "q-gpu") == "gpu-0"


@pytest.mark.parametrize("answer", ["429 to the second try", "500"])
async def test_an_allocation_write_carried_out_though_answered_with_an_error_is_rolled_back(
    api, start_runtime, answer
):
    """The server carried the write out and the answer is an error (a proxy's 5xx, or any answer to
    aiohttp's second try): the rollback finds the allocation and removes it, so the next pod may take the
    device."""
    seed_protected_p_and_q(api)
    runtime = await start_runtime()
    await silence_watches(api)
    status = int(answer[:3])
    if answer == "500":
        api.fail("PUT", r"resourceclaims/p-gpu/status$", status, reason="Injected", after=True)
    else:
        second_try_answered(api, r"resourceclaims/p-gpu/status$", status, carried_out=True)
    assert str(status) in (await bind(runtime, "p", "n1") or "")
    assert not allocation_in_api(api, "p-gpu")
    assert await bind(runtime, "q", "n1") is None


async def test_an_allocation_write_carried_out_though_answered_409_is_this_binds_and_held(api, start_runtime):
    """aiohttp's second try of a write the server carried out meets its own first: 409. The claim, re-read,
    is reserved for the pod with this bind's allocation: the bind goes on, and the devices stay held until
    the index shows the claim, so the next pod takes the other device."""
    seed_protected_p_and_q(api)
    runtime = await start_runtime()
    await silence_watches(api)
    api.disconnect("PUT", r"resourceclaims/p-gpu/status$", after=True)
    assert await bind(runtime, "p", "n1") is None
    assert await bind(runtime, "q", "n1") is None
    assert (device_of(api, "p-gpu"), device_of(api, "q-gpu")) == ("gpu-0", "gpu-1")


@pytest.mark.parametrize("then", ["the conflict attempts run out", "the re-read fails"])
async def test_a_409_to_the_second_try_is_undone_when_the_conflict_retry_cannot_look(
    api, start_runtime, then
):
    """aiohttp's second try meets the first, carried out: 409. When no re-read follows (it was the last
    conflict attempt) or it fails, the bind fails and its rollback still finds and undoes the allocation,
    so the next pod may take the device without it being in two claims."""
    seed_protected_p_and_q(api)
    runtime = await start_runtime()
    await silence_watches(api)
    if then == "the conflict attempts run out":
        api.fail("PUT", r"resourceclaims/p-gpu/status$", 409, times=CONFLICT_ATTEMPTS - 1, reason="Conflict")
    else:
        api.fail("GET", r"resourceclaims/p-gpu$", 500)
    api.disconnect("PUT", r"resourceclaims/p-gpu/status$", after=True)
    assert await bind(runtime, "p", "n1") is not None
    assert not allocation_in_api(api, "p-gpu")
    assert await bind(runtime, "q", "n1") is None


async def test_a_carried_out_write_found_by_the_conflict_retry_is_rolled_back_with_the_bind(
    api, start_runtime
):
    seed_protected_p_and_q(api)
    runtime = await start_runtime()
    api.disconnect("PUT", r"resourceclaims/p-gpu/status$", after=True)
    api.fail("POST", r"pods/p/binding$", 403)
    assert "403" in (await bind(runtime, "p", "n1") or "")
    assert not allocation_in_api(api, "p-gpu")


async def test_a_created_claim_whose_write_was_carried_out_though_answered_429_is_deleted(api, start_runtime):
    seed_cluster(api)
    x = add_extended_pod(api, "x")
    runtime = await start_runtime()
    assert runtime.service.filter(x, ["n1"]).passed == ["n1"]
    second_try_answered(api, r"resourceclaims/[^/]+/status$", 429, carried_out=True)
    assert "429" in (await bind(runtime, "x", "n1") or "")
    created_name = api.writes()[0].body["metadata"]["name"]
    assert api.get("ResourceClaim", NS, created_name) is None


async def test_a_binding_stored_as_the_bind_times_out_is_a_bind(api, start_runtime):
    """The bind's deadline cuts the binding short after the server bound the pod: the pod is read, and its
    claims stay allocated (released, a bound pod could never start)."""
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime(bind_timeout_seconds=50)  # 0.5 s on the test clock
    assert await bind_past_the_deadline(api, runtime, "p", "POST", r"pods/p/binding$") is None
    assert api.get("Pod", NS, "p")["spec"]["nodeName"] == "n1"
    c = claim_in_api(api, "p-gpu")
    assert c["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-pod-ml-p"}]
    assert c["status"]["allocation"]["devices"]["results"][0]["pool"] == "n1"
    assert writes(api)[-1] == ("POST", "pods/p/binding")


async def test_a_pod_deleted_while_its_binding_was_cut_short_has_its_claims_released(api, start_runtime):
    """The pod read after the deadline answers 404: it is gone, so the rollback runs rather than leave its
    claims to recovery (which leaves the claims of pods that no longer exist alone)."""
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime(bind_timeout_seconds=50)  # 0.5 s on the test clock
    answer = api.gate("POST", r"pods/p/binding$", after=True)
    binding = asyncio.create_task(bind(runtime, "p", "n1"))
    try:
        await eventually(lambda: api.get("Pod", NS, "p")["spec"].get("nodeName"))
        api.remove("Pod", NS, "p")
        assert "took longer than 50" in (await binding or "")
    finally:
        answer.set()
    c = claim_in_api(api, "p-gpu")
    assert FINALIZER not in (c["metadata"].get("finalizers") or [])
    assert not (c.get("status") or {}).get("allocation")
    assert not (c.get("status") or {}).get("reservedFor")


async def test_a_binding_cut_short_before_the_server_took_it_is_rolled_back(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime(bind_timeout_seconds=50)  # 0.5 s on the test clock
    # Held, then dropped with the client's connection: never carried out.
    error = await bind_past_the_deadline(api, runtime, "p", "POST", r"pods/p/binding$", after=False)
    assert "took longer than 50" in (error or "")
    assert_untouched(api, "p-gpu", "p")


async def test_a_pod_status_patch_stored_as_the_bind_times_out_is_cleared(api, start_runtime):
    """The bind's deadline cancels the patch in flight, which the server has stored: the rollback clears
    it, as it would after a 5xx, rather than leave the pod pointing at the claim it deletes."""
    seed_cluster(api)
    p = add_extended_pod(api, "x")
    runtime = await start_runtime(bind_timeout_seconds=50)  # 0.5 s on the test clock
    assert runtime.service.filter(p, ["n1"]).passed == ["n1"]
    error = await bind_past_the_deadline(api, runtime, "x", "PATCH", r"pods/x/status$")
    assert "took longer than 50" in (error or "")
    created_name = api.writes()[0].body["metadata"]["name"]
    assert api.get("ResourceClaim", NS, created_name) is None
    assert not (api.get("Pod", NS, "x").get("status") or {}).get("extendedResourceClaimStatus")
    assert not api.get("Pod", NS, "x")["spec"].get("nodeName")


async def test_extended_resource_bind_failure_removes_the_created_claim(api, start_runtime):
    seed_cluster(api)
    p = add_extended_pod(api, "x")
    runtime = await start_runtime()
    assert runtime.service.filter(p, ["n1"]).passed == ["n1"]
    api.fail("POST", r"pods/x/binding$", 500, message="injected failure")
    assert "injected failure" in (await bind(runtime, "x", "n1") or "")
    created_name = api.writes()[0].body["metadata"]["name"]
    assert writes(api)[-4:] == [
        ("PATCH", "pods/x/status"),
        ("PUT", f"claims/{created_name}/status"),
        ("PUT", f"claims/{created_name}"),
        ("DELETE", f"claims/{created_name}"),
    ]
    assert api.get("ResourceClaim", NS, created_name) is None
    assert "extendedResourceClaimStatus" not in (api.get("Pod", NS, "x").get("status") or {})
    assert not api.get("Pod", NS, "x")["spec"].get("nodeName")
    assert not runtime.reservations.keys()


def _sharing_pods(api: FakeKubeAPI) -> None:
    """The seeded cluster plus pods a and b sharing the unallocated claim sh."""
    seed_cluster(api)
    api.add("ResourceClaim", claim(NS, "sh", [request("gpu", "gpu")]))
    for name in ("a", "b"):
        api.add("Pod", pod(NS, name, ["sh"]))


async def test_a_shared_claim_reallocated_for_another_node_behind_a_stale_index_is_not_joined(
    api, start_runtime
):
    # The index saw claim sh allocated on n1 for pod a; meanwhile the server re-allocated it on n2 for x.
    # The bind of b to n1 re-reads the claim after the 409 and must not add b to a claim pinned to n2.
    _sharing_pods(api)
    runtime = await start_runtime()
    assert await bind(runtime, "a", "n1") is None
    await eventually(lambda: runtime.state.get("Pod", f"{NS}/a")["spec"].get("nodeName"))
    await eventually(lambda: not runtime.reservations.keys())
    await silence_watches(api)
    elsewhere = api.get("ResourceClaim", NS, "sh")
    pinned = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
    elsewhere["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n2", "device": "gpu-0"}]},
            "nodeSelector": {"nodeSelectorTerms": [pinned]},
        },
        "reservedFor": [{"resource": "pods", "name": "x", "uid": "uid-x"}],
    }
    api.put("ResourceClaim", elsewhere)
    assert (
        await bind(runtime, "b", "n1") == "pod ml/b: ResourceClaim ml/sh is allocated for other nodes than n1"
    )
    after = api.get("ResourceClaim", NS, "sh")
    assert [r["name"] for r in after["status"]["reservedFor"]] == ["x"]
    assert not api.get("Pod", NS, "b")["spec"].get("nodeName")


async def test_a_shared_claim_written_behind_a_silent_watch_is_joined_once_the_watch_shows_it(
    api, start_runtime
):
    _sharing_pods(api)
    runtime = await start_runtime()
    await silence_watches(api)
    assert await bind(runtime, "a", "n1") is None
    # The index still shows sh unallocated: b fits on n1 only, and its bind waits for the watch.
    outcome = runtime.service.filter(runtime.state.get("Pod", f"{NS}/b"), ["n1", "n2"])
    assert (outcome.passed, list(outcome.failed)) == (["n1"], ["n2"])
    runtime.service.binds.done = condition = SignallingCondition(runtime.service.lock)
    second = asyncio.create_task(bind(runtime, "b", "n1"))
    await eventually(condition.waiting.is_set)
    api.silent_watches = False
    api.drop_watches()  # the informer watches again and receives a's write
    assert await second is None
    assert [r["name"] for r in api.get("ResourceClaim", NS, "sh")["status"]["reservedFor"]] == ["a", "b"]


async def test_concurrent_binds_joining_one_shared_claim_all_succeed(api, start_runtime):
    # Found on the e2e control plane: 270 pods sharing one claim bound at about 1 pod/s with hundreds of
    # "still conflicting after 5 attempts" failures, every bind racing the others on the claim's
    # resourceVersion. Writes to one claim now go one at a time, so each bind needs at most one re-read.
    seed_cluster(api)
    api.add("ResourceClaim", claim(NS, "shared", [request("gpu", "gpu")]))
    pods = [api.add("Pod", pod(NS, f"s{i:02d}", ["shared"])) for i in range(12)]
    runtime = await start_runtime()
    assert await bind(runtime, "s00", "n1") is None  # allocates the claim
    await eventually(lambda: runtime.state.get("ResourceClaim", f"{NS}/shared")["status"].get("reservedFor"))
    # Each bind blocks a thread of the loop's default executor, which the client also needs: room for all.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(32))
    errors = await asyncio.gather(*(bind(runtime, p["metadata"]["name"], "n1") for p in pods[1:]))
    assert errors == [None] * 11
    reserved = api.get("ResourceClaim", NS, "shared")["status"]["reservedFor"]
    assert sorted(r["name"] for r in reserved) == [f"s{i:02d}" for i in range(12)]


async def test_node_allocatable_statuses_are_patched_before_binding_and_cleared_on_rollback(
    api, start_runtime
):
    # DRANodeAllocatableResources: gpu-0 of n1 costs 2Gi of node memory per pod (overhead); the bind
    # writes the pod's status before the binding, and a failed binding clears it again (an empty list).
    api.add("Namespace", {"metadata": {"name": NS}})
    api.add("Node", node("n1"))
    api.add("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"'))
    costly = device("gpu-0")
    costly["nodeAllocatableResources"] = {"memory": {"overhead": {"perPod": "2Gi"}}}
    api.add("ResourceSlice", resource_slice("n1-gpus", DRIVER, "n1", [costly]))
    add_pod(api, "p")
    add_pod(api, "q")
    runtime = await start_runtime()
    runtime.state.gates = dataclasses.replace(runtime.state.gates, DRANodeAllocatableResources=True)
    api.fail("POST", r"pods/q/binding$", 500, message="injected failure")
    assert "injected failure" in (await bind(runtime, "q", "n1") or "")
    patches = [r.body for r in api.writes() if r.method == "PATCH" and r.path.endswith("pods/q/status")]
    status = {
        "resourceClaimName": "q-gpu",
        "containers": ["main"],
        "mapping": [],
        "overhead": [{"name": "memory", "perPod": "2Gi"}],
    }
    assert patches == [
        {"status": {"nodeAllocatableResourceClaimStatuses": [status]}},
        {"status": {"nodeAllocatableResourceClaimStatuses": []}},
    ]
    await eventually(lambda: not runtime.reservations.keys())
    assert await bind(runtime, "p", "n1") is None
    assert writes(api)[-2:] == [("PATCH", "pods/p/status"), ("POST", "pods/p/binding")]
    assert api.get("Pod", NS, "p")["status"]["nodeAllocatableResourceClaimStatuses"] == [
        {**status, "resourceClaimName": "p-gpu"}
    ]


# A 5xx may come after the write was stored (a proxy's gateway timeout): the binder reads before it rolls
# back, as it does for a request that got no answer.


@pytest.mark.parametrize(
    ("method", "pattern"), [("PUT", r"resourceclaims/p-gpu/status$"), ("PUT", r"resourceclaims/p-gpu$")]
)
async def test_a_claim_write_stored_then_answered_500_is_rolled_back(api, start_runtime, method, pattern):
    """The stored allocation is found and released, and the stored finalizer dropped."""
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime()
    api.fail(method, pattern, 500, after=True)
    assert await bind(runtime, "p", "n1") is not None
    assert_untouched(api, "p-gpu", "p")


async def test_a_binding_stored_then_answered_500_is_a_bound_pod(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime()
    api.fail("POST", r"pods/p/binding$", 500, after=True)
    assert await bind(runtime, "p", "n1") is None  # the pod, re-read, is on n1
    assert api.get("Pod", NS, "p")["spec"]["nodeName"] == "n1"
    claimed = claim_in_api(api, "p-gpu")
    assert claimed["status"]["reservedFor"][0]["uid"] == "uid-pod-ml-p"  # not rolled back under a bound pod
    assert claimed["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"


async def test_a_binding_refused_with_500_before_it_was_stored_rolls_back(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime()
    api.fail("POST", r"pods/p/binding$", 500)
    assert await bind(runtime, "p", "n1") is not None
    assert_untouched(api, "p-gpu", "p")
