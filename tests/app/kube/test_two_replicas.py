"""Two replicas on one API server, one kube-scheduler Lease (issue 33): only the replica next to the leader
binds, so racing clients never give a device to two claims; after the Lease moves, the other one binds.

Each replica is a ``ClusterRuntime`` with its own identity (the pod's hostname in a cluster) and its own
HTTP app; four clients per replica run kube-scheduler's filter → prioritize → bind for the pending pods of
the chaos workload (``loadtests.chaos``: half as many devices as pods), all at once, round after round.
Without the Lease check the two indexes each see the other's writes late and double allocations follow
(the issue measured 198 in 50 rounds)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.config.settings import Settings
from app.http.api import create_app
from app.http.metrics import Metrics
from app.kube.runtime import ClusterRuntime
from loadtests.chaos import DRIVER, NS, audit, seed
from tests.app.kube.conftest import FakeClock, Start, eventually
from tests.app.kube.fakeapi import FakeKubeAPI
from tests.builders import device, node, resource_slice

LEASE_NAMESPACE, LEASE_NAME = "dra-extender", "dra-scheduler"
CLIENTS = 4
"""Concurrent kube-scheduler clients per replica."""
PODS, ROUNDS = 40, 8


def micro_time(seconds: float) -> str:
    """A Lease's ``renewTime`` (metav1.MicroTime) for ``seconds`` since the epoch."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def hold(api: FakeKubeAPI, holder: str, renewed: float, duration: int = 15) -> None:
    """kube-scheduler ``holder`` holds (acquires or renews) the Lease at ``renewed`` (epoch seconds)."""
    spec = {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": micro_time(renewed)}
    lease = api.get("Lease", LEASE_NAMESPACE, LEASE_NAME)
    if lease is None:
        api.add("Lease", {"metadata": {"name": LEASE_NAME, "namespace": LEASE_NAMESPACE}, "spec": spec})
    else:
        api.put("Lease", {**lease, "spec": spec})


class Replica:
    """One extender replica and the kube-scheduler clients calling it."""

    def __init__(self, runtime: ClusterRuntime) -> None:
        self.runtime = runtime
        app = create_app(runtime.service, Settings(Path("unused")), ready=runtime.ready)
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://extender")
        self.binds: Counter[str] = Counter()
        self.refusals: list[str] = []

    async def post(self, verb: str, body: dict[str, Any]) -> Any:
        answer = await self.http.post(f"/scheduler/{verb}", content=orjson.dumps(body))
        return answer.json()

    async def cycle(self, pod: dict[str, Any], nodes: list[str], rng: random.Random) -> None:
        """One scheduling cycle of ``pod``: filter → prioritize → bind on the best node."""
        passed = (await self.post("filter", {"Pod": pod, "NodeNames": nodes})).get("NodeNames") or []
        if not passed:
            return
        scores = await self.post("prioritize", {"Pod": pod, "NodeNames": passed})
        best = max(scores, key=lambda s: (s["Score"], rng.random()))["Host"]
        meta = pod["metadata"]
        bound = await self.post(
            "bind",
            {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": best},
        )
        if not bound.get("Error"):
            self.binds["bound"] += 1
        elif "Lease" in bound["Error"]:
            self.binds["refused"] += 1
            self.refusals.append(bound["Error"])
        else:  # the plan no longer fits: the other replica's binds took the devices
            self.binds["failed"] += 1


async def rounds(api: FakeKubeAPI, replicas: list[Replica], names: list[str], rng: random.Random) -> None:
    """``ROUNDS`` rounds: every pending pod goes to one of the replicas' clients, all at once."""
    nodes = sorted(n["metadata"]["name"] for n in api.store[("", "nodes")].values())
    clients = [replica for replica in replicas for _ in range(CLIENTS)]
    for _ in range(ROUNDS):
        pending = [p for p in (api.get("Pod", NS, n) for n in names) if p and not p["spec"].get("nodeName")]
        rng.shuffle(pending)
        await asyncio.gather(*(rng.choice(clients).cycle(pod, nodes, rng) for pod in pending))


def double_allocations(api: FakeKubeAPI) -> dict[str, list[str]]:
    report = audit(
        api.store.get(("resource.k8s.io", "resourceclaims"), {}).values(),
        api.store.get(("", "pods"), {}).values(),
        NS,
    )
    return report["double_allocations"]


@pytest.fixture
def names(api: FakeKubeAPI) -> list[str]:
    """The chaos workload's pods, in the API before the replicas start."""
    return seed(api, PODS, random.Random(33))


@pytest.fixture
async def replicas(
    api: FakeKubeAPI, names: list[str], start_runtime: Start, clock: FakeClock
) -> AsyncIterator[list[Replica]]:
    hold(api, "pod-a_1111", clock.wall())
    started = [
        Replica(await start_runtime(identity=name, scheduler_lease=f"{LEASE_NAMESPACE}/{LEASE_NAME}"))
        for name in ("pod-a", "pod-b")
    ]
    yield started
    for replica in started:
        await replica.http.aclose()


async def test_racing_replicas_never_put_a_device_in_two_claims(
    api: FakeKubeAPI, names: list[str], replicas: list[Replica], clock: FakeClock
) -> None:
    rng = random.Random(33)
    a, b = replicas
    await rounds(api, replicas, names, rng)
    assert double_allocations(api) == {}
    assert a.binds["bound"] > 0
    assert b.binds["bound"] == 0 and b.binds["refused"] > 0
    assert all("dra-extender/dra-scheduler" in r and "pod-a_1111" in r for r in b.refusals), b.refusals[:3]

    # The Lease moves to b's kube-scheduler: b re-reads it at its first bind and binds; a stops once its
    # refresh (every retryPeriod) shows the new holder. New nodes give the pods still pending devices.
    hold(api, "pod-b_2222", clock.wall())
    await a.runtime.lease.refresh()
    for i in range(5):
        api.add("Node", node(f"new-{i}"))
        api.add(
            "ResourceSlice",
            resource_slice(f"new-{i}", DRIVER, f"new-{i}", [device("gpu-0"), device("gpu-1")]),
        )
    for replica in replicas:
        await eventually(lambda r=replica: r.runtime.state.get("ResourceSlice", "new-4"))
    a.binds.clear()
    a.refusals.clear()
    await rounds(api, replicas, names, rng)
    assert double_allocations(api) == {}
    assert b.binds["bound"] > 0
    assert a.binds["bound"] == 0 and a.binds["refused"] > 0
    assert all("pod-b_2222" in r for r in a.refusals), a.refusals[:3]


async def test_a_device_another_writer_put_in_a_second_claim_is_reported(
    api: FakeKubeAPI, names: list[str], replicas: list[Replica], caplog: pytest.LogCaptureFixture
) -> None:
    """Both replicas see it (a standby too): an ERROR naming the device and both claims, and the counter
    ``dra_extender_device_conflicts_total``, once it has shown at two checks in a row."""
    first, second = sorted(n for n in names if api.get("ResourceClaim", NS, f"{n}-gpu"))[:2]
    for name in (first, second):  # both allocated n00's gpu-0, as two writers racing would
        written = api.get("ResourceClaim", NS, f"{name}-gpu")
        assert written is not None
        written["status"] = {
            "allocation": {
                "devices": {
                    "results": [{"request": "gpu", "driver": DRIVER, "pool": "n00", "device": "gpu-0"}]
                }
            }
        }
        api.put("ResourceClaim", written)
    for replica in replicas:
        conflicts = replica.runtime.conflicts
        await eventually(lambda c=conflicts: c.state.inventory.double_allocations())
        assert conflicts.check() == []  # seen once: maybe a relist in progress
        device = (DRIVER, "n00", "gpu-0")
        assert conflicts.check() == [(device, (f"{NS}/{first}-gpu", f"{NS}/{second}-gpu"))]
        assert conflicts.check() == []  # reported once
        metrics = Metrics(replica.runtime.service, collectors=conflicts.collectors()).render().decode()
        assert "dra_extender_device_conflicts_total 1.0" in metrics
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    expected = (
        f"device {DRIVER}/n00/gpu-0 is allocated to 2 ResourceClaims: {NS}/{first}-gpu, {NS}/{second}-gpu"
    )
    assert len(errors) == 2 and all(e.startswith(expected) for e in errors), errors
