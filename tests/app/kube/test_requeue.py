"""The requeuer on the fake API server: a pod the filter rejected is signalled (its requeue annotation
patched, UID as precondition) once the index shows an event that can help it; bursts are one signal per
pod; signals are rate-limited; only the replica next to the leading scheduler writes; the API client's own
rate limit."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from allocator.cel.expr_engine import ExprEngine
from allocator.selectors import SelectorCache
from app.kube.client import CORE_NODES, KubeClient
from app.kube.leader import SchedulerLease
from app.kube.ratelimit import TokenBucket
from app.kube.requeue import REQUEUE_ANNOTATION, Requeuer
from app.scheduling.decisions import FilterOutcome
from app.scheduling.requeue import RejectedPods
from app.state.cluster import ClusterState
from tests.app.kube.conftest import DRIVER, NS, TEST_SETTINGS, FakeClock, add_pod, eventually, seed_cluster
from tests.app.kube.fakeapi import FakeKubeAPI
from tests.builders import claim, device, pod, request, resource_slice

PATCHES = r"^/api/v1/namespaces/ml/pods/[^/]+$"
LEASE = {
    "metadata": {"name": "dra-scheduler", "namespace": "dra-extender"},
    "spec": {"holderIdentity": "pod-b_1234"},
}


class SteppingClock(FakeClock):
    """``sleep`` moves virtual time on at once, without waiting: a token bucket sees the time pass."""

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(seconds)


def _rejected(runtime: Any, name: str) -> None:
    """Filter as the HTTP layer does: decide, then record the answer."""
    p = runtime.state.get("Pod", f"{NS}/{name}")
    mark = runtime.rejected.mark()
    outcome = runtime.service.filter(p, ["n1", "n2"])
    assert outcome.passed == []
    runtime.rejected.filtered(p, outcome, mark)


def _annotation(api: FakeKubeAPI, name: str) -> str | None:
    return (api.get("Pod", NS, name)["metadata"].get("annotations") or {}).get(REQUEUE_ANNOTATION)


async def test_a_published_slice_signals_the_pod_it_can_help(api, start_runtime):
    seed_cluster(api)  # two GPUs on n1, one on n2
    add_pod(api, "needs-three", gpus=3)
    add_pod(api, "fits")
    runtime = await start_runtime()
    _rejected(runtime, "needs-three")
    assert api.count("PATCH", PATCHES) == 0
    api.put("ResourceSlice", resource_slice("n1-gpus", DRIVER, "n1", [device(f"gpu-{i}") for i in range(3)]))
    await eventually(lambda: _annotation(api, "needs-three"))
    (patch,) = [r for r in api.requests if r.method == "PATCH"]
    assert patch.body["metadata"]["uid"] == f"uid-pod-{NS}-needs-three"
    assert _annotation(api, "fits") is None
    # Signalled once: the next event finds no rejected pod until a filter rejects it again.
    api.add("ResourceSlice", resource_slice("n2-more", DRIVER, "n2", [device("gpu-9")]))
    await eventually(lambda: runtime.state.get("ResourceSlice", "n2-more"))
    await runtime.requeuer.flush()
    assert api.count("PATCH", PATCHES) == 1
    assert runtime.service.filter(runtime.state.get("Pod", f"{NS}/needs-three"), ["n1", "n2"]).passed


def _add_pod_with_its_own_claim(api: FakeKubeAPI, name: str, gpus: int) -> None:
    """``add_pod``, the claim made for the pod (as from its template): prioritize holds only such claims."""
    made = claim(NS, f"{name}-gpu", [request("gpu", "gpu", gpus)])
    made["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": f"uid-pod-{NS}-{name}", "controller": True}
    ]
    api.add("ResourceClaim", made)
    api.add("Pod", pod(NS, name, [f"{name}-gpu"]))


def _prioritize(runtime: Any, asked: dict, names: list[str]) -> None:
    """Prioritize, then the hold the HTTP layer has planned once the answer is written."""
    scores = runtime.service.prioritize(asked, names)
    runtime.service.hold_best(asked, names, scores, runtime.service.scored_attempt(asked))


async def test_devices_held_at_prioritize_and_freed_unused_signal_the_pod_they_kept_out(api, start_runtime):
    seed_cluster(api)  # two GPUs on n1, one on n2
    _add_pod_with_its_own_claim(api, "first", 2)
    _add_pod_with_its_own_claim(api, "second", 2)
    runtime = await start_runtime()
    first = runtime.state.get("Pod", f"{NS}/first")
    with runtime.service.lock:
        runtime.service.filter(first, ["n1", "n2"])
        _prioritize(runtime, first, ["n1"])  # both of n1's GPUs held for it
    _rejected(runtime, "second")
    assert api.count("PATCH", PATCHES) == 0
    # kube-scheduler tries "first" again (its last attempt ended without a bind): the hold ends.
    runtime.service.filter(first, ["n1", "n2"])
    await eventually(lambda: _annotation(api, "second"))
    assert _annotation(api, "first") is None


async def test_a_hold_whose_bind_never_comes_ends_on_time_with_nothing_else_happening(
    api, start_runtime, clock
):
    """A plugin after Score rejected the pod, and no other pod comes: the runtime's own clock ends it."""
    seed_cluster(api)
    _add_pod_with_its_own_claim(api, "first", 2)
    _add_pod_with_its_own_claim(api, "second", 2)
    runtime = await start_runtime()
    first = runtime.state.get("Pod", f"{NS}/first")
    runtime.service.filter(first, ["n1", "n2"])
    _prioritize(runtime, first, ["n1"])
    _rejected(runtime, "second")
    clock.advance(runtime.service.binding.holds.seconds - 0.1)
    await asyncio.sleep(0.2)  # the runtime's loop has looked a few times: not yet
    assert runtime.state.inventory.reservations()
    clock.advance(0.2)
    await eventually(lambda: _annotation(api, "second"))
    assert not runtime.state.inventory.reservations()


async def test_a_standby_replica_signals_nothing(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "needs-three", gpus=3)
    api.add("Lease", LEASE)
    runtime = await start_runtime(identity="pod-a", scheduler_lease="dra-extender/dra-scheduler")
    _rejected(runtime, "needs-three")
    api.add("ResourceSlice", resource_slice("n2-more", DRIVER, "n2", [device("gpu-9"), device("gpu-8")]))
    await eventually(lambda: runtime.requeuer.stats.not_leader == 1)
    assert api.count("PATCH", PATCHES) == 0


def _due_pods(api: FakeKubeAPI, count: int) -> RejectedPods:
    """``count`` pods made due at once (each rejected by an answer decided before an event)."""
    pods = RejectedPods(ClusterState(), SelectorCache(ExprEngine()), ["default-scheduler"], 100)
    for i in range(count):
        api.add("Pod", pod(NS, f"p{i}"))
        pods.filtered(
            {**pod(NS, f"p{i}"), "spec": {"resourceClaims": [{"name": "c"}]}}, FilterOutcome(), mark=-1
        )
    return pods


async def test_signals_wait_for_the_burst_then_keep_to_the_rate(api, client):
    clock = SteppingClock()
    settings = dataclasses.replace(TEST_SETTINGS, requeue_qps=2.0, requeue_burst=3, requeue_delay_seconds=0.2)
    pods = _due_pods(api, 6)
    requeuer = Requeuer(client, pods, settings, SchedulerLease(client, None), clock=clock)
    await requeuer.flush()
    assert api.count("PATCH", PATCHES) == 6
    # Three at once (the burst), then one every half second (2 a second).
    assert clock.sleeps == pytest.approx([0.5, 0.5, 0.5])
    assert all(_annotation(api, f"p{i}") for i in range(6))


async def test_the_loop_gathers_events_for_the_delay_before_signalling(api, client, clock):
    pods = _due_pods(api, 1)
    settings = dataclasses.replace(TEST_SETTINGS, requeue_delay_seconds=0.2)
    requeuer = Requeuer(client, pods, settings, SchedulerLease(client, None), clock=clock)
    task = asyncio.create_task(requeuer.run())
    try:
        await eventually(lambda: _annotation(api, "p0"))
    finally:
        task.cancel()
    assert clock.sleeps[0] == 0.2


async def test_a_pod_deleted_or_recreated_before_its_signal_is_left_alone(api, client):
    pods = _due_pods(api, 2)
    api.remove("Pod", NS, "p0")
    recreated = pod(NS, "p1", uid="another-uid")
    api.remove("Pod", NS, "p1")
    api.add("Pod", recreated)
    requeuer = Requeuer(client, pods, TEST_SETTINGS, SchedulerLease(client, None), clock=FakeClock())
    await requeuer.flush()
    assert requeuer.stats.gone == 2 and requeuer.stats.signalled == 0
    assert _annotation(api, "p1") is None


async def test_the_api_client_keeps_to_its_rate_limit(api: FakeKubeAPI, tmp_path: Path):
    clock = SteppingClock()
    api.add("Node", {"metadata": {"name": "n1"}})
    kube = await KubeClient.connect(api.kubeconfig(tmp_path), rate_limit=TokenBucket(10.0, 2, clock))
    try:
        for _ in range(5):
            await kube.get(CORE_NODES, None, "n1")
    finally:
        await kube.close()
    # Two at once (burst 2), then one every 0.1 s (10 a second).
    assert clock.sleeps == pytest.approx([0.1, 0.1, 0.1])


async def test_cluster_prioritize_hold_seconds_sets_how_long_holds_last_0_none(api, start_runtime):
    seed_cluster(api)
    _add_pod_with_its_own_claim(api, "first", 2)
    runtime = await start_runtime(prioritize_hold_seconds=0)
    first = runtime.state.get("Pod", f"{NS}/first")
    runtime.service.filter(first, ["n1", "n2"])
    _prioritize(runtime, first, ["n1"])
    assert not runtime.state.inventory.reservations()
    longer = await start_runtime(prioritize_hold_seconds=30)
    assert longer.service.binding.holds.seconds == 30
