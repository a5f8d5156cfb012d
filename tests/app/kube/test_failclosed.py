"""Issue 14, cluster mode: binds retried while the first attempt still writes, stale watch events, claims
replaced under a bind, slices failing validation (and relists after), derived attribute errors logged
once per attribute. Each test pins the outcome that matters: no device ends up in two claims, nothing
half-written is left, and the operator is told once."""

from __future__ import annotations

import asyncio

from app.scheduling.binder import FINALIZER
from tests.app.kube.conftest import DRIVER, NS, add_pod, bind, eventually, seed_cluster, silence_watches
from tests.app.kube.fakeapi import FakeKubeAPI
from tests.builders import claim, device, pod, request, resource_slice


def add_extended_pod(api: FakeKubeAPI, name: str) -> dict:
    """A pod asking for one GPU as the implicit extended resource of DeviceClass ``gpu`` (KEP-5004)."""
    p = pod(NS, name)
    p["spec"]["containers"][0]["resources"] = {"limits": {"deviceclass.resource.kubernetes.io/gpu": "1"}}
    return api.add("Pod", p)


def devices_in_claims(api: FakeKubeAPI) -> list[tuple[str, str, str]]:
    """Every (driver, pool, device) of every allocated claim on the server, repeats kept."""
    found = []
    for stored in api.store.get(("resource.k8s.io", "resourceclaims"), {}).values():
        allocation = (stored.get("status") or {}).get("allocation") or {}
        for r in (allocation.get("devices") or {}).get("results") or ():
            found.append((r["driver"], r["pool"], r["device"]))
    return found


async def test_a_refused_retry_of_a_writing_bind_keeps_the_first_attempts_reservation(api, start_runtime):
    # n1 has two GPUs. x's first bind holds gpu-0 and is still creating its extended-resource claim when
    # kube-scheduler (its httpTimeout passed) binds x again. The retry must be refused without touching the
    # first attempt's reservation: a filter for y then sees only one free GPU on n1, and y gets the other.
    seed_cluster(api)
    x = add_extended_pod(api, "x")
    runtime = await start_runtime()
    assert runtime.service.filter(x, ["n1"]).passed == ["n1"]
    gate = api.gate("POST", r"resourceclaims$")
    first = asyncio.create_task(bind(runtime, "x", "n1"))
    await eventually(lambda: api.count("POST", r"resourceclaims$"))
    assert "in progress" in (await bind(runtime, "x", "n1") or "")
    add_pod(api, "y")
    await eventually(lambda: runtime.state.get("Pod", f"{NS}/y"))
    assert await bind(runtime, "y", "n1") is None
    gate.set()
    assert await first is None
    used = devices_in_claims(api)
    assert sorted(used) == [(DRIVER, "n1", "gpu-0"), (DRIVER, "n1", "gpu-1")]


async def test_a_filter_during_the_bind_leaves_the_claim_the_bind_just_created(api, start_runtime):
    # x's bind has created its extended-resource claim and is about to add the finalizer when
    # kube-scheduler filters x again. The claim is the bind's own, not a leftover of an earlier attempt.
    seed_cluster(api)
    x = add_extended_pod(api, "x")
    runtime = await start_runtime()
    gate = api.gate("PUT", r"resourceclaims/x-extended-resources-[^/]*$")
    first = asyncio.create_task(bind(runtime, "x", "n1"))
    await eventually(lambda: api.count("PUT", r"resourceclaims/x-extended-resources-[^/]*$"))
    created = api.writes()[0].body["metadata"]["name"]
    await eventually(lambda: runtime.state.get("ResourceClaim", f"{NS}/{created}"))
    outcome = await asyncio.to_thread(runtime.service.filter, x, ["n1", "n2"])
    assert outcome.passed == []
    assert outcome.failed == dict.fromkeys(
        ["n1", "n2"], "pod ml/x is being bound to node n1; retry once that bind is done"
    )
    gate.set()
    assert await first is None
    assert ("DELETE", created) not in [(r.method, r.path.rsplit("/", 1)[-1]) for r in api.writes()]
    assert api.get("Pod", NS, "x")["spec"]["nodeName"] == "n1"


async def test_an_event_older_than_the_indexed_claim_does_not_roll_the_allocation_back(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "a")
    b = add_pod(api, "b")
    runtime = await start_runtime()
    before = api.get("ResourceClaim", NS, "a-gpu")  # unallocated, an older resourceVersion
    assert await bind(runtime, "a", "n2") is None
    await eventually(
        lambda: (runtime.state.get("ResourceClaim", f"{NS}/a-gpu").get("status") or {}).get("allocation")
    )
    await eventually(lambda: not runtime.reservations.keys())
    api.replay("ResourceClaim", "MODIFIED", before)
    # Then a claim on the same stream: once it is in the index, the stale event has been handled.
    api.replay("ResourceClaim", "ADDED", claim(NS, "marker", [request("gpu", "gpu")]))
    await eventually(lambda: runtime.state.get("ResourceClaim", f"{NS}/marker"))
    assert runtime.state.get("ResourceClaim", f"{NS}/a-gpu")["status"]["allocation"]
    assert runtime.service.filter(b, ["n1", "n2"]).passed == ["n1"]


def _replace_written_claim(api: FakeKubeAPI, name: str) -> None:
    """The allocated claim ``name`` deleted and recreated under its name: a new UID, no allocation."""
    assert api.get("ResourceClaim", NS, name)["status"]["allocation"]
    api.remove("ResourceClaim", NS, name)
    replacement = claim(NS, name, [request("gpu", "gpu")])
    replacement["metadata"]["uid"] = f"uid-{name}-new"
    api.add("ResourceClaim", replacement)


async def test_a_claim_replaced_during_the_bind_stops_the_binding(api, start_runtime):
    # c1 is written, then deleted and recreated under its name (new UID, no allocation) while the bind
    # writes c2. Binding the pod now would start it with an unallocated claim: the bind must fail instead.
    seed_cluster(api)
    for name in ("c1", "c2"):
        api.add("ResourceClaim", claim(NS, name, [request("gpu", "gpu")]))
    api.add("Pod", pod(NS, "p", ["c1", "c2"]))
    runtime = await start_runtime()
    gate = api.gate("PUT", r"resourceclaims/c2$")
    task = asyncio.create_task(bind(runtime, "p", "n1"))
    await eventually(lambda: api.count("PUT", r"resourceclaims/c2$"))
    _replace_written_claim(api, "c1")
    gate.set()
    error = await task
    assert error == "pod ml/p: ResourceClaim ml/c1 was replaced by a new claim of the same name"
    assert not api.get("Pod", NS, "p")["spec"].get("nodeName")
    assert not (api.get("ResourceClaim", NS, "c1").get("status") or {}).get("allocation")
    assert not (api.get("ResourceClaim", NS, "c2").get("status") or {}).get("allocation")


async def test_a_claim_replaced_while_the_bind_waits_its_turn_on_a_shared_claim_stops_the_binding(
    api, start_runtime
):
    """p has c1 (to allocate) and c2 (shared, already reserved for p); q's bind is writing c2 when p's bind
    has written c1 and waits its turn on c2. c1 is replaced meanwhile. p's turn on c2 needs no request, but
    c1's write is no longer fresh: c1 is read again and the bind fails."""
    seed_cluster(api)
    api.add("ResourceClaim", claim(NS, "c1", [request("gpu", "gpu")]))
    api.add("ResourceClaim", claim(NS, "c2", [request("gpu", "gpu")]))
    api.add("Pod", pod(NS, "s", ["c2"]))
    runtime = await start_runtime()
    assert await bind(runtime, "s", "n1") is None
    c2 = api.get("ResourceClaim", NS, "c2")
    c2["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": f"uid-pod-{NS}-p"}]
    api.put("ResourceClaim", c2)  # as an earlier attempt of p's bind left it
    api.add("Pod", pod(NS, "p", ["c1", "c2"]))
    api.add("Pod", pod(NS, "q", ["c2"]))
    await eventually(lambda: runtime.state.get("Pod", f"{NS}/q"))
    await eventually(
        lambda: runtime.state.get("ResourceClaim", f"{NS}/c2")["status"]["reservedFor"][0]["name"] == "p"
    )
    await eventually(lambda: not runtime.reservations.keys())
    gate = api.gate("PUT", r"resourceclaims/c2/status$")  # q's write of c2
    q = asyncio.create_task(bind(runtime, "q", "n1"))
    await eventually(lambda: api.count("PUT", r"resourceclaims/c2/status$") == 2)
    p = asyncio.create_task(bind(runtime, "p", "n1"))
    await eventually(lambda: api.count("PUT", r"resourceclaims/c1/status$"))
    _replace_written_claim(api, "c1")
    gate.set()
    assert await q is None
    assert await p == "pod ml/p: ResourceClaim ml/c1 was replaced by a new claim of the same name"
    assert not api.get("Pod", NS, "p")["spec"].get("nodeName")


async def test_a_slice_update_that_fails_validation_drops_the_old_devices_and_says_why(api, start_runtime):
    seed_cluster(api)
    a = add_pod(api, "a")
    runtime = await start_runtime()
    assert runtime.service.filter(a, ["n2"]).passed == ["n2"]
    broken = api.get("ResourceSlice", "", "n2-gpus")
    broken["spec"]["devices"][0]["capacity"] = {"memory": {"value": "lots"}}
    api.put("ResourceSlice", broken)
    await eventually(lambda: runtime.informers.informers["ResourceSlice"].stats.skipped)
    assert runtime.state.inventory.slice("n2-gpus") is None
    outcome = runtime.service.filter(a, ["n1", "n2"])
    assert outcome.passed == ["n1"]
    reason = {**outcome.failed, **outcome.unresolvable}["n2"]
    assert "ResourceSlice n2-gpus: spec.devices[0].capacity[memory].value: invalid quantity 'lots'" in reason
    # Fixed by the driver: the devices are back.
    fixed = api.get("ResourceSlice", "", "n2-gpus")
    fixed["spec"]["devices"][0].pop("capacity")
    api.put("ResourceSlice", fixed)
    await eventually(lambda: runtime.state.inventory.slice("n2-gpus"))
    assert runtime.service.filter(a, ["n2"]).passed == ["n2"]


async def test_a_rejected_slice_deleted_while_the_watch_was_down_loses_its_reason_on_relist(
    api, start_runtime
):
    seed_cluster(api)
    a = add_pod(api, "a")
    runtime = await start_runtime()
    broken = api.get("ResourceSlice", "", "n2-gpus")
    broken["spec"]["devices"][0]["capacity"] = {"memory": {"value": "lots"}}
    api.put("ResourceSlice", broken)
    await eventually(lambda: runtime.state.inventory.invalid_slices("n2"))
    await silence_watches(api, "ResourceSlice")
    api.remove("ResourceSlice", "", "n2-gpus")
    api.silent_watches = False
    api.compact("ResourceSlice")  # the watch comes back to a 410: relist
    await eventually(lambda: runtime.informers.informers["ResourceSlice"].stats.gone)
    await eventually(lambda: not runtime.state.inventory.invalid_slices("n2"))
    reason = {**(o := runtime.service.filter(a, ["n2"])).failed, **o.unresolvable}["n2"]
    assert "slices not used" not in reason


async def test_a_slice_still_invalid_at_a_relist_keeps_its_reason(api, start_runtime):
    seed_cluster(api)
    runtime = await start_runtime()
    broken = api.get("ResourceSlice", "", "n2-gpus")
    broken["spec"]["devices"][0]["capacity"] = {"memory": {"value": "lots"}}
    api.put("ResourceSlice", broken)
    await eventually(lambda: runtime.state.inventory.invalid_slices("n2"))
    api.compact("ResourceSlice")
    await eventually(lambda: runtime.informers.informers["ResourceSlice"].stats.lists >= 2)
    assert runtime.state.inventory.invalid_slices("n2")


async def test_derived_attribute_errors_are_logged_once_per_attribute_as_they_change(
    api, start_runtime, caplog
):
    from allocator.derived import ClusterAttribute, ClusterDerivation

    seed_cluster(api)
    runtime = await start_runtime()
    inventory = runtime.state.inventory
    failing = ClusterAttribute("example.com/numa", f'device.attributes["{DRIVER}"].numa')
    with runtime.service.lock:
        inventory.set_cluster_attributes(ClusterDerivation([failing], runtime.service.selectors))
    caplog.set_level("INFO", logger="app.config.derivationlog")
    runtime.derivation_log.report()
    runtime.derivation_log.report()  # nothing changed: nothing logged
    api.add("ResourceSlice", resource_slice("n3-gpus", DRIVER, "n3", [device("gpu-0")]))
    await eventually(lambda: runtime.state.inventory.slice("n3-gpus"))
    runtime.derivation_log.report()
    with runtime.service.lock:
        inventory.set_cluster_attributes(None)
    runtime.derivation_log.report()
    where = f"device {DRIVER}/n1/gpu-0: CEL runtime error: no such key: numa"
    assert [r.getMessage().split(" (expression")[0] for r in caplog.records] == [
        f"derived attribute example.com/numa: failed on 3 devices, e.g. {where}",
        f"derived attribute example.com/numa: failed on 4 devices, e.g. {where}",
        "derived attribute example.com/numa: no longer fails on any device",
    ]


async def test_an_extended_resource_claim_a_crashed_bind_left_is_released_and_made_anew(
    api, start_runtime, clock
):
    # Found by the chaos run: the extender stopped after writing x's extended-resource claim and before
    # the binding. The next filter deletes the claim, as upstream's PostFilter does, but its finalizer
    # keeps it (allocated) until the grace period passes; then it is released, and x fits again.
    seed_cluster(api)
    add_extended_pod(api, "x")
    name, request_name = "x-extended-resources-abcde", "container-0-request-0"
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": f"uid-pod-{NS}-x", "controller": True}
    meta = {
        "name": name,
        "namespace": NS,
        "finalizers": [FINALIZER],
        "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
        "ownerReferences": [owner],
    }
    api.add("ResourceClaim", claim(NS, name, [request(request_name, "gpu")]) | {"metadata": meta})
    left = api.get("ResourceClaim", NS, name)
    on_n1 = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    left["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": request_name, "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]
            },
            "nodeSelector": {"nodeSelectorTerms": on_n1},
        },
        "reservedFor": [{"resource": "pods", "name": "x", "uid": f"uid-pod-{NS}-x"}],
    }
    api.put("ResourceClaim", left)
    x = api.get("Pod", NS, "x")
    mapping = {"containerName": "main", "resourceName": "deviceclass.resource.kubernetes.io/gpu"}
    x["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": name,
        "requestMappings": [{**mapping, "requestName": request_name}],
    }
    api.put("Pod", x)
    runtime = await start_runtime()
    x = runtime.state.get("Pod", f"{NS}/x")
    assert (await asyncio.to_thread(runtime.service.filter, x, ["n1", "n2"])).passed == []
    assert api.get("ResourceClaim", NS, name)["metadata"].get("deletionTimestamp")
    assert await runtime.releaser.sweep() == []  # first seen now
    clock.advance(301)
    assert await runtime.releaser.sweep() == [f"{NS}/{name}"]
    assert api.get("ResourceClaim", NS, name) is None  # the finalizer was all that kept it
    await eventually(lambda: not runtime.state.inventory.is_allocated((DRIVER, "n1", "gpu-0")))
    await eventually(lambda: runtime.service.filter(x, ["n1", "n2"]).passed == ["n1", "n2"])
