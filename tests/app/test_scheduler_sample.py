"""kube-scheduler sampling before the extender (``percentageOfNodesToScore`` below 100): a pod rejected on
every node of its sample while a node outside it has the devices is a sample miss, answered with the
sample's nodes unresolvable (kube-scheduler v1.37.2's preemption then has no candidate node: it considers
only nodes that failed with ``Unschedulable``, and nodes it did not check count as unresolvable,
``NewDefaultNodeToStatus``) and retried at once. Sample sizes by hand from kube-scheduler's
``numFeasibleNodesToFind``: adaptive at 300 nodes is 48 %, 144 nodes; at 5000 nodes 10 %, 500."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from allocator.cel.expr_engine import ExprEngine
from allocator.selectors import SelectorCache
from app.config.settings import SchedulingSettings, Settings
from app.http.api import create_app
from app.scheduling.decisions import FilterOutcome
from app.scheduling.preemptionrequests import PreemptionRequests
from app.scheduling.requeue import PodRef, RejectedPods
from app.scheduling.sampling import SchedulerSample
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState
from tests.builders import claim, device, device_class, node, pod, request, resource_slice

DRIVER = "gpu.example.com"
NS = "ml"
NAMES = [f"n{i:03d}" for i in range(300)]
SAMPLE = NAMES[:144]
"""kube-scheduler's adaptive sample of 300 nodes: 144 of them."""


@pytest.mark.parametrize(
    ("percentage", "cluster", "asked", "expected"),
    [
        (0, 5000, 500, True),  # 10 % of 5000: kube-scheduler stopped at its quota
        (0, 5000, 499, False),  # fewer than its quota: it ran out of nodes, every one checked
        (20, 5000, 1000, True),
        (100, 5000, 5000, False),  # no sampling
        (0, 99, 99, False),  # under 100 nodes kube-scheduler checks every one
        (0, 150, 100, True),  # 49 % of 150 is 73, raised to 100
    ],
)
def test_a_sample_that_left_nodes_out_is_told_from_its_size(percentage, cluster, asked, expected):
    rejected = FilterOutcome(failed={"n": "no free device"})
    assert SchedulerSample(percentage, lambda: cluster).may_miss(rejected, asked) is expected
    passed = FilterOutcome(passed=["n"])
    assert not SchedulerSample(percentage, lambda: cluster).may_miss(passed, asked)


def test_the_pods_whose_misses_are_counted_are_bounded():
    sample = SchedulerSample(0, lambda: 300, max_pods=2)
    outcome = FilterOutcome(failed=dict.fromkeys(SAMPLE, "no free device"))
    for uid in ("a", "b", "c"):
        assert sample.miss(uid, outcome, 144, lambda: "n299") is not None
    # "a" was forgotten first: it starts again at no miss, so three more in a row (ceil(300 / 144)) are
    # retried; "c" had one already, so two more.
    assert [sample.miss("a", outcome, 144, lambda: "n299") is not None for _ in range(4)] == [1, 1, 1, 0]
    assert [sample.miss("c", outcome, 144, lambda: "n299") is not None for _ in range(3)] == [1, 1, 0]


def _service(held_nodes: int = 290) -> SchedulingService:
    """300 nodes with one GPU each; ``held`` has the GPUs of the first ``held_nodes`` (n000..n289: only
    n290..n299 are free)."""
    objects: list[tuple[str, dict[str, Any]]] = [("Node", node(n)) for n in NAMES]
    objects += [("ResourceSlice", resource_slice(f"{n}-gpus", DRIVER, n, [device("gpu-0")])) for n in NAMES]
    objects.append(("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"')))
    held = claim(NS, "held", [request("gpus", "gpu", held_nodes)])
    results = [
        {"request": "gpus", "driver": DRIVER, "pool": n, "device": "gpu-0"} for n in NAMES[:held_nodes]
    ]
    held["status"] = {"allocation": {"devices": {"results": results}}}
    objects.append(("ResourceClaim", held))
    objects.append(("ResourceClaim", claim(NS, "one", [request("gpu", "gpu")])))
    objects.append(("ResourceClaim", claim(NS, "two", [request("gpus", "gpu", 2)])))
    objects.append(("Pod", pod(NS, "p-one", ["one"])))
    objects.append(("Pod", pod(NS, "p-two", ["two"])))  # two GPUs: no node has them
    return SchedulingService(ClusterState.from_objects(objects), SelectorCache(ExprEngine()))


class _Extender:
    """The app with its requeue and preemption records, kube-scheduler sampling with ``percentage``."""

    def __init__(self, percentage: int, held_nodes: int = 290) -> None:
        self.service = _service(held_nodes)
        self.rejected = RejectedPods(self.service.state, self.service.selectors, ["default-scheduler"], 100)
        self.preemptions = PreemptionRequests(["default-scheduler"], settle_seconds=0.0)
        settings = Settings(
            Path("unused"), scheduling=SchedulingSettings(scheduler_percentage_of_nodes_to_score=percentage)
        )
        self.app = create_app(self.service, settings, rejected=self.rejected, preemptions=self.preemptions)

    async def filter(self, client: httpx.AsyncClient, name: str, names: list[str]) -> dict[str, Any]:
        sent = dict(self.service.state.get("Pod", f"{NS}/{name}") or {})
        body = orjson.dumps({"Pod": sent, "Nodes": None, "NodeNames": names})
        response = await client.post("/scheduler/filter", content=body)
        assert response.status_code == 200
        return response.json()


@pytest.fixture
async def sampling() -> AsyncIterator[tuple[_Extender, httpx.AsyncClient]]:
    extender = _Extender(0)
    transport = httpx.ASGITransport(app=extender.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://extender") as client:
        yield extender, client


def _p_one() -> PodRef:
    return PodRef(NS, "p-one", f"uid-pod-{NS}-p-one")


async def test_a_miss_is_unresolvable_names_a_node_that_fits_and_is_retried_at_once(sampling):
    extender, client = sampling
    answer = await extender.filter(client, "p-one", SAMPLE)
    assert answer["NodeNames"] == [] and answer["FailedNodes"] == {}
    assert sorted(answer["FailedAndUnresolvableNodes"]) == SAMPLE
    # n144..n299 are outside the sample; n290 is the first of them with a free GPU.
    assert all(
        "node n290, outside kube-scheduler's sample of 144 nodes" in reason
        for reason in answer["FailedAndUnresolvableNodes"].values()
    )
    assert extender.rejected.take_due() == [_p_one()]
    assert extender.preemptions.take() == []  # nothing to evict for a pod that fits elsewhere


async def test_a_pod_is_retried_at_most_as_often_in_a_row_as_samples_cover_the_cluster(sampling):
    extender, client = sampling
    # ceil(300 / 144) = 3 samples cover the cluster: the fourth rejection in a row is an ordinary one.
    answers = [await extender.filter(client, "p-one", SAMPLE) for _ in range(4)]
    assert [bool(a["FailedAndUnresolvableNodes"]) for a in answers] == [True, True, True, False]
    assert sorted(answers[3]["FailedNodes"]) == SAMPLE
    # A pass (a sample that holds n290) starts the count again.
    assert (await extender.filter(client, "p-one", NAMES[156:300]))["NodeNames"] == NAMES[290:300]
    assert (await extender.filter(client, "p-one", SAMPLE))["FailedNodes"] == {}


async def test_a_pod_that_fits_nowhere_is_an_ordinary_rejection(sampling):
    extender, client = sampling
    answer = await extender.filter(client, "p-two", SAMPLE)
    assert answer["NodeNames"] == []
    reasons = {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}
    assert sorted(reasons) == SAMPLE and not any("outside" in r for r in reasons.values())
    assert extender.rejected.take_due() == [] and len(extender.rejected) == 1


async def test_fewer_names_than_the_sample_are_every_node_kube_scheduler_let_through(sampling):
    extender, client = sampling
    answer = await extender.filter(client, "p-one", SAMPLE[:143])
    assert sorted(answer["FailedNodes"]) == SAMPLE[:143] and answer["FailedAndUnresolvableNodes"] == {}
    assert extender.rejected.take_due() == [] and len(extender.rejected) == 1


async def _ordinary_rejection_on_the_sample(extender: _Extender) -> None:
    """p-one filtered on the sample is rejected as without a miss: failed nodes, no retry at once, and a
    request for the extender's own preemption."""
    transport = httpx.ASGITransport(app=extender.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://extender") as client:
        answer = await extender.filter(client, "p-one", SAMPLE)
    assert sorted(answer["FailedNodes"]) == SAMPLE and answer["FailedAndUnresolvableNodes"] == {}
    assert extender.rejected.take_due() == []
    assert [r.key for r in extender.preemptions.take()] == [f"{NS}/p-one"]


async def test_without_kube_scheduler_sampling_nothing_changes():
    await _ordinary_rejection_on_the_sample(_Extender(100))


async def test_free_devices_on_cordoned_nodes_are_no_miss():
    """n290..n299, the nodes with free GPUs, are cordoned: kube-scheduler would never put the pod there,
    so a rejection on the sample is an ordinary one, and the extender's preemption may act on it."""
    extender = _Extender(0)
    for name in NAMES[290:]:
        cordoned = dict(extender.service.state.get("Node", name) or {})
        cordoned["spec"] = {"unschedulable": True}
        extender.service.state.apply("Node", cordoned)
    await _ordinary_rejection_on_the_sample(extender)


@pytest.mark.parametrize(("percentage", "passed_on"), [(50, 150), (100, 144)])
async def test_every_node_of_kube_schedulers_sample_that_fits_is_passed_on(percentage, passed_on):
    """kube-scheduler at 50 % of 300 nodes sends 150, all with a free GPU: each goes back to its scoring
    (the extender's own adaptive share, 48 %: 144, cuts only a list kube-scheduler did not sample)."""
    extender = _Extender(percentage, held_nodes=0)
    transport = httpx.ASGITransport(app=extender.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://extender") as client:
        answer = await extender.filter(client, "p-one", NAMES[:150])
    assert answer["NodeNames"] == NAMES[:passed_on]
