"""Informers against the fake API server: initial sync, incremental events, bookmarks, 410 relists, dropped
and dead watches, backoff, version discovery and conversion."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading

import pytest

from app.kube.client import CORE_NODES, KubeClient, TransportError, WatchIdle
from app.kube.informers import Backoff, Informer, discover_dra
from app.kube.runtime import ClusterRuntime
from app.state.cluster import ClusterState
from tests.app.kube.conftest import (
    DRIVER,
    NS,
    TEST_SETTINGS,
    FakeClock,
    eventually,
    seed_cluster,
    silence_watches,
)
from tests.app.kube.fakeapi import FakeKubeAPI
from tests.builders import claim, device, pod, request, resource_slice

ALLOCATED_N1_GPU0 = {
    "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]},
    "nodeSelector": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    },
}


def two_gpu_pod(api: FakeKubeAPI, name: str = "p") -> dict:
    api.add("ResourceClaim", claim(NS, f"{name}-gpus", [request("gpu", "gpu", 2)]))
    return api.add("Pod", pod(NS, name, [f"{name}-gpus"]))


async def test_initial_sync_then_filter_decides_on_the_listed_state(api, start_runtime):
    seed_cluster(api)
    p = two_gpu_pod(api)
    runtime = await start_runtime()
    assert runtime.ready()
    outcome = runtime.service.filter(p, ["n1", "n2"])
    assert outcome.passed == ["n1"]
    assert "n2" in {**outcome.failed, **outcome.unresolvable}
    # Each kind was listed once, in pages, and is watched from the list's resourceVersion.
    await eventually(lambda: api.count("GET", r"^/apis/resource.k8s.io/v1/resourceslices$", query="watch"))
    assert runtime.informers.informers["ResourceSlice"].stats.lists == 1


async def test_readiness_waits_for_every_informer(api, clock, tmp_path):
    seed_cluster(api)
    gate = api.gate("GET", r"^/apis/resource.k8s.io/v1/resourceclaims$")  # the claims list hangs
    runtime = ClusterRuntime(
        dataclasses.replace(TEST_SETTINGS, kubeconfig=api.kubeconfig(tmp_path)), clock=clock
    )
    await runtime.start()
    try:
        await eventually(
            lambda: runtime.informers.discovered.is_set() and runtime.not_ready() == ["ResourceClaim"]
        )
        assert not runtime.ready()
        gate.set()
        await eventually(runtime.ready)
        assert runtime.not_ready() == []
    finally:
        await runtime.stop()


async def test_watch_events_update_the_index_incrementally(api, start_runtime):
    seed_cluster(api)
    p = two_gpu_pod(api)
    runtime = await start_runtime()
    informer = runtime.informers.informers["ResourceSlice"]
    # A new node with two GPUs appears: the pod now fits there too, without a relist.
    api.add("Node", {"metadata": {"name": "n3", "labels": {"kubernetes.io/hostname": "n3"}}})
    api.add("ResourceSlice", resource_slice("n3-gpus", DRIVER, "n3", [device("gpu-0"), device("gpu-1")]))
    await eventually(lambda: runtime.state.get("ResourceSlice", "n3-gpus") is not None)
    await eventually(lambda: runtime.state.node("n3") is not None)
    assert runtime.service.filter(p, ["n1", "n2", "n3"]).passed == ["n1", "n3"]
    # Another claim takes gpu-0 on n1: n1 no longer fits two GPUs.
    other = claim(NS, "other", [request("gpu", "gpu")])
    other["status"] = {"allocation": ALLOCATED_N1_GPU0}
    api.add("ResourceClaim", other)
    await eventually(lambda: runtime.state.inventory.is_allocated((DRIVER, "n1", "gpu-0")))
    assert runtime.service.filter(p, ["n1", "n2", "n3"]).passed == ["n3"]
    # The claim goes away (DELETED): the device is free again.
    api.remove("ResourceClaim", NS, "other")
    await eventually(lambda: not runtime.state.inventory.is_allocated((DRIVER, "n1", "gpu-0")))
    assert runtime.service.filter(p, ["n1", "n3"]).passed == ["n1", "n3"]
    # A slice shrinks (MODIFIED).
    changed = api.get("ResourceSlice", "", "n3-gpus")
    changed["spec"]["devices"] = [device("gpu-0")]
    api.put("ResourceSlice", changed)
    await eventually(lambda: len(runtime.state.inventory.slice("n3-gpus").devices) == 1)
    assert runtime.service.filter(p, ["n1", "n3"]).passed == ["n1"]
    assert informer.stats.lists == 1 and informer.stats.gone == 0


async def test_bookmark_advances_the_resource_version_only(api, start_runtime):
    seed_cluster(api)
    runtime = await start_runtime()
    informer = runtime.informers.informers["Node"]
    await eventually(lambda: api.open_watches("Node") == 1)
    api.add("Pod", pod(NS, "unrelated"))  # moves the global resourceVersion
    api.bookmark("Node")
    await eventually(lambda: informer.stats.bookmarks == 1)
    assert informer.resource_version == str(api.rv)
    assert informer.stats.events == 0
    assert sorted(runtime.state.objects["Node"]) == ["n1", "n2"]


async def test_410_gone_relists_and_drops_objects_deleted_meanwhile(api, start_runtime):
    seed_cluster(api)
    runtime = await start_runtime()
    informer = runtime.informers.informers["ResourceSlice"]
    await eventually(lambda: api.open_watches("ResourceSlice") == 1)
    # While the watch is broken the slice of n2 is deleted and a new one added; the history is compacted.
    await silence_watches(api, "ResourceSlice")
    api.remove("ResourceSlice", "", "n2-gpus")
    api.add("ResourceSlice", resource_slice("n3-gpus", DRIVER, "n3", [device("gpu-0")]))
    api.silent_watches = False
    api.compact("ResourceSlice")
    await eventually(lambda: informer.stats.gone >= 1 and informer.stats.lists >= 2)
    await eventually(lambda: sorted(runtime.state.objects["ResourceSlice"]) == ["n1-gpus", "n3-gpus"])
    assert runtime.ready()


async def test_dropped_watch_rewatches_from_the_last_version_without_relisting(api, start_runtime):
    seed_cluster(api)
    runtime = await start_runtime()
    informer = runtime.informers.informers["Node"]
    await eventually(lambda: api.open_watches("Node") == 1)
    watches = informer.stats.watches
    api.drop_watches()
    api.add("Node", {"metadata": {"name": "n9"}})
    await eventually(lambda: runtime.state.node("n9") is not None)
    assert informer.stats.watches > watches
    assert informer.stats.lists == 1
    last = [r for r in api.requests if r.path == "/api/v1/nodes" and r.query.get("watch")][-1]
    assert int(last.query["resourceVersion"]) > 0


async def test_dead_watch_is_replaced_after_the_no_event_deadline(api, start_runtime):
    """The deadline is the client's socket read timeout, in real seconds (the fake clock does not scale it);
    a silent watch is replaced at once from the same resourceVersion: no backoff, not an error."""
    seed_cluster(api)
    api.silent_watches = True  # the connection stays open and delivers nothing
    runtime = await start_runtime(watch_idle_seconds=0.3)
    informer = runtime.informers.informers["Node"]
    await eventually(lambda: api.open_watches("Node") == 1)  # a silent watch is open
    watched_from = informer.resource_version
    api.add("Node", {"metadata": {"name": "n9"}})
    api.silent_watches = False
    await eventually(lambda: runtime.state.node("n9") is not None)
    assert informer.stats.idle_timeouts >= 1
    assert informer.stats.lists == 1
    assert (informer.stats.errors, informer.stats.waits) == (0, [])
    rewatch = [r for r in api.requests if r.path == "/api/v1/nodes" and r.query.get("watch")][1]
    assert rewatch.query["resourceVersion"] == watched_from


async def test_a_silent_watch_is_replaced_at_once_other_transport_errors_back_off():
    """``WatchIdle`` (the client's read timeout) is not an error; another ``TransportError`` is."""
    node = {"metadata": {"name": "n1", "resourceVersion": "7"}}
    source = ScriptedWatches(
        [{"type": "ADDED", "object": node}, WatchIdle("watch nodes: nothing received for 90s")],
        [TransportError("watch nodes: ClientPayloadError: reset", sent=True)],
    )
    informer = Informer(
        source, CORE_NODES, ClusterState(), threading.RLock(), TEST_SETTINGS, clock=FakeClock()
    )
    informer.resource_version = "5"
    task = asyncio.create_task(informer.run())
    try:
        await eventually(lambda: len(source.watched_from) >= 3)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert source.watched_from[:3] == ["5", "7", "7"]
    assert informer.stats.idle_timeouts == 1
    assert informer.stats.errors == 1 and len(informer.stats.waits) == 1
    assert informer.stats.lists == 0


class ScriptedWatches:
    """A ``ListWatcher`` whose n-th watch yields the n-th script's events, raising the exceptions in it;
    watches past the scripts stay open and silent."""

    def __init__(self, *scripts: list[dict | Exception]) -> None:
        self.scripts = list(scripts)
        self.watched_from: list[str] = []

    async def list(self, resource, *, limit=500, continue_=None):
        raise AssertionError("no relist expected")

    async def watch(self, resource, *, resource_version, timeout_seconds):
        self.watched_from.append(resource_version)
        for item in self.scripts.pop(0) if self.scripts else ():
            if isinstance(item, Exception):
                raise item
            yield item
        await asyncio.Event().wait()


async def test_errors_back_off_with_jitter_and_honour_retry_after(api, client):
    seed_cluster(api)
    state = ClusterState()
    clock = FakeClock()
    informer = Informer(client, CORE_NODES, state, threading.RLock(), TEST_SETTINGS, clock=clock)
    api.fail("GET", r"^/api/v1/nodes$", 500, times=3)
    api.fail("GET", r"^/api/v1/nodes$", 429, times=1)
    task = asyncio.create_task(informer.run())
    try:
        await eventually(lambda: informer.synced)
    finally:
        task.cancel()
    assert informer.stats.errors == 4
    first, second, third = informer.stats.waits[:3]
    assert 0.4 <= first <= 0.6 and 0.8 <= second <= 1.2 and 1.6 <= third <= 2.4
    assert sorted(state.objects["Node"]) == ["n1", "n2"]


def test_backoff_is_capped():
    backoff = Backoff(0.5, 30.0, 0.0)
    assert [backoff.next() for _ in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    backoff.reset()
    assert backoff.next() == 0.5


async def test_discovery_prefers_v1_and_finds_device_taint_rules_in_v1beta2(api, client):
    found = await discover_dra(client)
    assert {k: r.version for k, r in found.items()} == {
        "ResourceSlice": "v1",
        "DeviceClass": "v1",
        "ResourceClaim": "v1",
        "ResourceClaimTemplate": "v1",
        "DeviceTaintRule": "v1beta2",
    }


@pytest.mark.parametrize("version", ["v1beta2", "v1alpha3"])
async def test_older_served_versions_are_converted_to_v1(tmp_path, clock, version):
    api = await FakeKubeAPI(
        {
            version: [
                "resourceslices",
                "deviceclasses",
                "resourceclaims",
                "resourceclaimtemplates",
                "devicetaintrules",
            ]
        }
    ).start()
    try:
        seed_cluster(api)
        c = claim(NS, "one", [request("gpu", "gpu")])
        if version == "v1alpha3":  # flat request fields, no `exactly`
            c["spec"]["devices"]["requests"] = [
                {"name": "gpu", "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}
            ]
        api.add("ResourceClaim", c)
        p = api.add("Pod", pod(NS, "p", ["one"]))
        api.add(
            "DeviceTaintRule",
            {
                "metadata": {"name": "n2-broken"},
                "spec": {
                    "deviceSelector": {"driver": DRIVER, "pool": "n2"},
                    "taint": {"key": "broken", "effect": "NoSchedule"},
                },
            },
        )
        runtime = ClusterRuntime(
            dataclasses.replace(TEST_SETTINGS, kubeconfig=api.kubeconfig(tmp_path)), clock=clock
        )
        await runtime.start()
        try:
            await eventually(runtime.ready)
            assert runtime.informers.resources["ResourceClaim"].version == version
            assert runtime.state.get("ResourceClaim", f"{NS}/one")["apiVersion"] == "resource.k8s.io/v1"
            assert runtime.service.filter(p, ["n1", "n2"]).passed == ["n1"]  # n2's only GPU is tainted
        finally:
            await runtime.stop()
    finally:
        await api.stop()


async def test_unparseable_object_is_skipped_and_the_rest_applies(api, start_runtime):
    seed_cluster(api)
    api.add("ResourceSlice", {"metadata": {"name": "bad"}, "spec": {"driver": DRIVER}})
    runtime = await start_runtime()
    assert runtime.state.get("ResourceSlice", "bad") is None
    assert runtime.informers.informers["ResourceSlice"].stats.skipped == 1
    assert sorted(runtime.state.objects["ResourceSlice"]) == ["n1-gpus", "n2-gpus"]


async def test_paged_list(api, client):
    seed_cluster(api)
    for i in range(7):
        api.add("Node", {"metadata": {"name": f"extra-{i}"}})
    state = ClusterState()
    settings = dataclasses.replace(TEST_SETTINGS, list_page_size=3)
    informer = Informer(client, CORE_NODES, state, threading.RLock(), settings, clock=FakeClock())
    await informer.relist()
    assert len(state.objects["Node"]) == 9
    assert api.count("GET", r"^/api/v1/nodes$") == 3
    assert isinstance(client, KubeClient)


async def test_watch_events_wait_while_filter_or_prioritize_is_answered(api, start_runtime):
    """The informers step aside while the HTTP layer answers (``app.scheduling.answerfirst``): an event
    that arrives meanwhile is applied once the answer is given."""
    seed_cluster(api)
    runtime = await start_runtime()
    first = runtime.service.answer_first
    first.longest_wait = 30.0
    holding, released = threading.Event(), threading.Event()
    seen_released: list[bool] = []

    def observe(kind: str, key: str, obj: object) -> None:
        if kind == "ResourceSlice" and key == "n3-gpus":
            seen_released.append(released.is_set())

    runtime.informers.informers["ResourceSlice"].observers.append(observe)

    def answer() -> None:
        with first.answering():
            holding.set()
            threading.Event().wait(0.5)
            released.set()

    answerer = threading.Thread(target=answer)
    answerer.start()
    assert holding.wait(5)
    api.add("ResourceSlice", resource_slice("n3-gpus", DRIVER, "n3", [device("gpu-0")]))
    await eventually(lambda: runtime.state.get("ResourceSlice", "n3-gpus") is not None)
    answerer.join(5)
    assert seen_released == [True]
