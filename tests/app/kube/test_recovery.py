"""Restarts and recovery: the index rebuilt from the API honours existing allocations; an allocation
written for a pod that never got bound is reused when the pod is bound again, or released after the
grace period (only by the replica next to the leading scheduler); unconfirmed reservations expire."""

from __future__ import annotations

from app.scheduling.binder import FINALIZER
from tests.app.kube.conftest import DRIVER, NS, add_pod, bind, eventually, seed_cluster, silence_watches
from tests.app.kube.fakeapi import FakeKubeAPI

GPU0_N1 = {
    "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]},
    "nodeSelector": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    },
}


GPU0_N2 = {
    "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n2", "device": "gpu-0"}]},
    "nodeSelector": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]
    },
}


def crash_after_status_write(api: FakeKubeAPI, name: str) -> None:
    """What a bind leaves when the extender dies between the claim writes and the binding."""
    c = api.get("ResourceClaim", NS, f"{name}-gpu")
    c["metadata"]["finalizers"] = [FINALIZER]
    c["status"] = {
        "allocation": GPU0_N1,
        "reservedFor": [{"resource": "pods", "name": name, "uid": f"uid-pod-{NS}-{name}"}],
    }
    api.put("ResourceClaim", c)


async def test_restart_rebuilds_the_index_and_honours_existing_allocations(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "a")
    b = add_pod(api, "b")
    first = await start_runtime()
    assert await bind(first, "a", "n2") is None
    await first.stop()
    second = await start_runtime()
    assert second.state.inventory.is_allocated((DRIVER, "n2", "gpu-0"))
    assert second.state.get("Pod", f"{NS}/a")["spec"]["nodeName"] == "n2"
    assert second.service.filter(b, ["n1", "n2"]).passed == ["n1"]
    assert not second.reservations.keys()


async def test_restart_between_status_write_and_binding_then_pod_bound_again_reuses_the_allocation(
    api, start_runtime
):
    seed_cluster(api)
    p = add_pod(api, "p")
    crash_after_status_write(api, "p")
    runtime = await start_runtime()
    assert runtime.state.inventory.is_allocated((DRIVER, "n1", "gpu-0"))
    assert runtime.service.filter(p, ["n1", "n2"]).passed == ["n1"]  # pinned by the allocation
    count = len(api.writes())
    assert await bind(runtime, "p", "n1") is None
    assert [(w.method, w.path) for w in api.writes()[count:]] == [
        ("POST", f"/api/v1/namespaces/{NS}/pods/p/binding")
    ]
    assert api.get("Pod", NS, "p")["spec"]["nodeName"] == "n1"
    await eventually(lambda: runtime.state.get("Pod", f"{NS}/p")["spec"].get("nodeName"))
    assert await runtime.releaser.sweep() == []


async def test_orphaned_allocation_is_released_after_the_grace_period(api, start_runtime, clock):
    seed_cluster(api)
    add_pod(api, "p")
    crash_after_status_write(api, "p")
    runtime = await start_runtime()
    assert await runtime.releaser.sweep() == []  # first seen now
    clock.advance(299)
    assert await runtime.releaser.sweep() == []
    assert api.get("ResourceClaim", NS, "p-gpu")["status"]["allocation"]
    clock.advance(2)
    assert await runtime.releaser.sweep() == [f"{NS}/p-gpu"]
    released = api.get("ResourceClaim", NS, "p-gpu")
    assert not (released.get("status") or {}).get("allocation")
    assert not (released.get("status") or {}).get("reservedFor")
    assert FINALIZER not in (released["metadata"].get("finalizers") or [])
    await eventually(lambda: not runtime.state.inventory.is_allocated((DRIVER, "n1", "gpu-0")))
    # The pod can now go anywhere.
    p = runtime.state.get("Pod", f"{NS}/p")
    await eventually(lambda: runtime.service.filter(p, ["n1", "n2"]).passed == ["n1", "n2"])


async def test_bound_pods_and_other_consumers_are_not_orphans(api, start_runtime, clock):
    seed_cluster(api)
    add_pod(api, "p")
    add_pod(api, "q")
    crash_after_status_write(api, "p")
    q = api.get("Pod", NS, "q")
    q["spec"]["nodeName"] = "n2"
    api.put("Pod", q)
    c = api.get("ResourceClaim", NS, "q-gpu")
    c["status"] = {
        "allocation": {
            **GPU0_N1,
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n2", "device": "gpu-0"}]},
        },
        "reservedFor": [{"resource": "pods", "name": "q", "uid": f"uid-pod-{NS}-q"}],
    }
    api.put("ResourceClaim", c)
    runtime = await start_runtime()
    await runtime.releaser.sweep()
    # The pod gets bound (by someone) within the grace period: nothing to release.
    p = api.get("Pod", NS, "p")
    p["spec"]["nodeName"] = "n1"
    api.put("Pod", p)
    await eventually(lambda: runtime.state.get("Pod", f"{NS}/p")["spec"].get("nodeName"))
    clock.advance(400)
    assert await runtime.releaser.sweep() == []
    assert api.get("ResourceClaim", NS, "p-gpu")["status"]["allocation"]


async def test_only_the_replica_next_to_the_leading_scheduler_releases(api, start_runtime, clock):
    seed_cluster(api)
    add_pod(api, "p")
    crash_after_status_write(api, "p")
    api.add(
        "Lease",
        {
            "metadata": {"name": "dra-scheduler", "namespace": "dra-extender"},
            "spec": {"holderIdentity": "pod-b_1234"},
        },
    )
    runtime = await start_runtime(identity="pod-a", scheduler_lease="dra-extender/dra-scheduler")
    await runtime.releaser.sweep()
    clock.advance(400)
    assert await runtime.releaser.sweep() == []  # standby: writes nothing
    lease = api.get("Lease", "dra-extender", "dra-scheduler")
    lease["spec"]["holderIdentity"] = "pod-a_5678"
    api.put("Lease", lease)
    assert await runtime.releaser.sweep() == [f"{NS}/p-gpu"]


async def test_a_written_reservation_stays_past_the_ttl_until_the_watch_shows_the_claim(
    api, start_runtime, clock
):
    seed_cluster(api)
    add_pod(api, "p")
    b = add_pod(api, "b", gpus=2)
    runtime = await start_runtime()
    await silence_watches(api)
    assert await bind(runtime, "p", "n1") is None  # written: the server has gpu-0 in p-gpu
    clock.advance(10_000)
    await runtime.releaser.sweep()
    assert runtime.reservations.keys() == [f"{NS}/p-gpu"]
    assert runtime.service.filter(b, ["n1"]).passed == []  # one of n1's two GPUs is p's
    api.silent_watches = False
    api.drop_watches()
    await eventually(lambda: not runtime.reservations.keys())
    assert runtime.service.filter(b, ["n1"]).passed == []


async def test_a_reservation_of_a_write_with_unknown_outcome_expires(api, start_runtime, clock):
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime()
    await silence_watches(api)
    api.disconnect(
        "PUT", r"resourceclaims/p-gpu/status$", times=2
    )  # sent, never answered (aiohttp retries once)
    api.disconnect("GET", r"resourceclaims/p-gpu$", times=10)  # and the rollback cannot re-read it
    assert "p-gpu" in (await bind(runtime, "p", "n1") or "")
    assert runtime.reservations.keys() == [f"{NS}/p-gpu"]
    clock.advance(599)
    await runtime.releaser.sweep()
    assert runtime.reservations.keys() == [f"{NS}/p-gpu"]
    clock.advance(2)
    await runtime.releaser.sweep()
    assert runtime.reservations.keys() == []


async def test_claims_of_pods_of_other_schedulers_are_never_released(api, start_runtime, clock):
    # Found on the e2e control plane: another allocator (the default scheduler's DRA plugin) between its
    # claim write and its binding looked like our orphan, and its allocation was wiped after 300 s.
    seed_cluster(api)
    other = add_pod(api, "theirs")
    other["spec"]["schedulerName"] = "other-scheduler"
    api.put("Pod", other)
    crash_after_status_write(api, "theirs")
    theirs = api.get("ResourceClaim", NS, "theirs-gpu")
    theirs["status"]["allocation"] = GPU0_N2
    api.put("ResourceClaim", theirs)
    add_pod(api, "ours")
    crash_after_status_write(api, "ours")
    runtime = await start_runtime()
    assert await runtime.releaser.sweep() == []
    clock.advance(301)
    assert await runtime.releaser.sweep() == [f"{NS}/ours-gpu"]
    assert api.get("ResourceClaim", NS, "theirs-gpu")["status"]["allocation"] == GPU0_N2
