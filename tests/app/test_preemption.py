"""Preemption (``app.scheduling.preemption``): which candidate nodes evicting lower-priority pods frees
devices on, and the victims to evict there. Each case's answer is worked out from the devices and holders it
sets up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from allocator.cel.expr_engine import ExprEngine
from allocator.selectors import SelectorCache
from app.http import wire
from app.scheduling.podevents import PodEvent
from app.scheduling.preemption import Victims, preempt
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState
from tests.builders import claim, device, device_class, node, pod, request, resource_slice

DRIVER = "gpu.example.com"
NS = "ml"
CREATED = "2026-01-01T00:00:00Z"


def _allocated(name: str, devices: list[str], holders: list[str], node_name: str = "n1") -> dict[str, Any]:
    """A claim for len(devices) GPUs allocated ``devices`` of ``node_name``, reserved for pods ``holders``."""
    obj = claim(NS, name, [request("gpu", "gpu", len(devices))])
    results = [{"request": "gpu", "driver": DRIVER, "pool": node_name, "device": d} for d in devices]
    obj["status"] = {
        "allocation": {"devices": {"results": results}},
        "reservedFor": [{"resource": "pods", "name": h, "uid": _uid(h)} for h in holders],
    }
    return obj


def _uid(name: str) -> str:
    return f"uid-pod-{NS}-{name}"


def _bound(name: str, priority: int, claims: list[str] = (), *, created: str = CREATED, **spec: Any):
    """A running pod on n1 with ``spec.priority`` and the given spec fields."""
    obj = pod(NS, name, claims, created=created)
    obj["spec"].update(nodeName="n1", priority=priority, **spec)
    obj["status"]["phase"] = "Running"
    return obj


def _deleting(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:05Z"
    return obj


def _service(gpus: int, *objects: tuple[str, dict[str, Any]]) -> SchedulingService:
    devices = [device(f"gpu-{i}") for i in range(gpus)]
    base = [
        ("Node", node("n1")),
        ("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"')),
        ("ResourceSlice", resource_slice("n1-gpus", DRIVER, "n1", devices)),
    ]
    return SchedulingService(ClusterState.from_objects([*base, *objects]), SelectorCache(ExprEngine()))


def _preemptor(gpus: int = 1, priority: int = 100) -> list[tuple[str, dict[str, Any]]]:
    obj = pod(NS, "new", ["new"])
    obj["spec"]["priority"] = priority
    return [("ResourceClaim", claim(NS, "new", [request("gpu", "gpu", gpus)])), ("Pod", obj)]


def _two_holders_and_a_cpu_hog() -> SchedulingService:
    """Two GPUs held by a (priority 1) and b (priority 2), a CPU-only pod (priority 10) and the preemptor."""
    return _service(
        2,
        ("ResourceClaim", _allocated("a", ["gpu-0"], ["a"])),
        ("ResourceClaim", _allocated("b", ["gpu-1"], ["b"])),
        ("Pod", _bound("a", 1, ["a"])),
        ("Pod", _bound("b", 2, ["b"])),
        ("Pod", _bound("cpu-hog", 10)),
        *_preemptor(),
    )


def _ask(svc: SchedulingService, *victims: str) -> dict[str, Victims]:
    return preempt(svc, svc.state.get("Pod", f"{NS}/new"), {"n1": Victims(tuple(map(_uid, victims)), 1)})


def test_the_victim_holding_the_only_gpu_is_enough():
    svc = _service(
        1,
        ("ResourceClaim", _allocated("low", ["gpu-0"], ["low"])),
        ("Pod", _bound("low", 10, ["low"])),
        *_preemptor(),
    )
    assert _ask(svc, "low") == {"n1": Victims((_uid("low"),), 1)}


def test_a_node_where_eviction_frees_no_device_is_dropped():
    # gpu-0 is held by a pod of higher priority than the preemptor; the victim holds no device.
    svc = _service(
        1,
        ("ResourceClaim", _allocated("high", ["gpu-0"], ["high"])),
        ("Pod", _bound("high", 1000, ["high"])),
        ("Pod", _bound("cpu-hog", 10)),
        *_preemptor(),
    )
    assert _ask(svc, "cpu-hog") == {}


def test_the_lowest_priority_device_holder_is_added_to_the_victims():
    # kube-scheduler's victim (needed for CPU) holds nothing; a and b (priority 1 and 2) hold one GPU
    # each. Evicting a, the least important, frees a GPU: b stays.
    svc = _two_holders_and_a_cpu_hog()
    assert _ask(svc, "cpu-hog") == {"n1": Victims((_uid("cpu-hog"), _uid("a")), 1)}


def test_of_equal_priority_the_most_recently_started_is_evicted():
    svc = _service(
        2,
        ("ResourceClaim", _allocated("old", ["gpu-0"], ["old"])),
        ("ResourceClaim", _allocated("young", ["gpu-1"], ["young"])),
        ("Pod", _bound("old", 1, ["old"], created="2026-01-01T00:00:00Z")),
        ("Pod", _bound("young", 1, ["young"], created="2026-01-01T01:00:00Z")),
        ("Pod", _bound("cpu-hog", 10)),
        *_preemptor(),
    )
    assert _ask(svc, "cpu-hog") == {"n1": Victims((_uid("cpu-hog"), _uid("young")), 1)}


def test_an_added_victim_that_is_not_needed_is_given_back():
    # The preemptor needs 2 of 3 GPUs, all in use: a (priority 1) holds one, b (priority 2) holds two.
    # Adding least important first takes a (1 free: short), then b (3 free). Giving back the most
    # important first: without b only 1 is free (b stays); without a, b's 2 suffice (a is given back).
    svc = _service(
        3,
        ("ResourceClaim", _allocated("a", ["gpu-0"], ["a"])),
        ("ResourceClaim", _allocated("b", ["gpu-1", "gpu-2"], ["b"])),
        ("Pod", _bound("a", 1, ["a"])),
        ("Pod", _bound("b", 2, ["b"])),
        ("Pod", _bound("cpu-hog", 10)),
        *_preemptor(gpus=2),
    )
    assert _ask(svc, "cpu-hog") == {"n1": Victims((_uid("cpu-hog"), _uid("b")), 1)}


def test_a_claim_shared_with_a_surviving_pod_is_not_released():
    # The victim shares its claim with a pod of higher priority than the preemptor: gpu-0 stays held.
    svc = _service(
        1,
        ("ResourceClaim", _allocated("shared", ["gpu-0"], ["victim", "keeper"])),
        ("Pod", _bound("victim", 10, ["shared"])),
        ("Pod", _bound("keeper", 1000, ["shared"])),
        *_preemptor(),
    )
    assert _ask(svc, "victim") == {}


def test_a_lower_priority_pod_sharing_the_claim_is_evicted_too():
    svc = _service(
        1,
        ("ResourceClaim", _allocated("shared", ["gpu-0"], ["victim", "sharer"])),
        ("Pod", _bound("victim", 10, ["shared"])),
        ("Pod", _bound("sharer", 20, ["shared"])),
        *_preemptor(),
    )
    assert _ask(svc, "victim") == {"n1": Victims((_uid("victim"), _uid("sharer")), 1)}


@pytest.mark.parametrize(
    "holder",
    [
        _bound("holder", 100, ["held"]),  # equal priority: not preemptible
        _bound("holder", 1, ["held"], schedulingGroup={"podGroupName": "g"}),  # evicted as a group only
        _deleting(_bound("holder", 1, ["held"])),
    ],
    ids=["equal-priority", "pod-group-member", "being-deleted"],
)
def test_pods_that_may_not_be_added_leave_the_node_dropped(holder):
    svc = _service(
        1,
        ("ResourceClaim", _allocated("held", ["gpu-0"], ["holder"])),
        ("Pod", holder),
        ("Pod", _bound("cpu-hog", 10)),
        *_preemptor(),
    )
    assert _ask(svc, "cpu-hog") == {}


def test_a_pod_without_devices_keeps_every_candidate():
    free = pod(NS, "new")
    svc = _service(1, ("Pod", free))
    candidates = {"n1": Victims(("u1",), 0), "n2": Victims(("u2",), 3)}
    assert preempt(svc, free, candidates) == candidates


def test_the_preemptors_claim_allocated_for_another_node_drops_the_node():
    mine = _allocated("new", ["gpu-0"], [], node_name="n1")
    mine["status"]["allocation"]["nodeSelector"] = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]
    }
    mine["status"].pop("reservedFor")
    preemptor = pod(NS, "new", ["new"])
    preemptor["spec"]["priority"] = 100
    svc = _service(1, ("ResourceClaim", mine), ("Pod", preemptor), ("Pod", _bound("low", 1)))
    assert _ask(svc, "low") == {}


# --- wire format -----------------------------------------------------------------------------------------


def test_meta_victims_are_decoded_and_the_answer_is_always_meta_victims():
    body = orjson.dumps(
        {
            "Pod": {"metadata": {"name": "new", "namespace": NS, "uid": "u-new"}},
            "NodeNameToVictims": None,
            "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "u1"}, {"uid": "u2"}], "NumPDBViolations": 2}},
        }
    )
    args = wire.decode_preemption_args(body)
    assert args.victims == {"n1": Victims(("u1", "u2"), 2)}
    assert args.sent_pods == {}
    assert orjson.loads(wire.encode_preemption_result(args.victims)) == {
        "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "u1"}, {"UID": "u2"}], "NumPDBViolations": 2}}
    }


def test_whole_victim_pods_are_decoded_by_uid():
    victim = {"metadata": {"name": "low", "namespace": NS, "uid": "u1"}, "spec": {"nodeName": "n1"}}
    body = orjson.dumps(
        {
            "Pod": {"metadata": {"name": "new", "namespace": NS}},
            "NodeNameToVictims": {"n1": {"Pods": [victim], "NumPDBViolations": 0}},
            "NodeNameToMetaVictims": None,
        }
    )
    args = wire.decode_preemption_args(body)
    assert args.victims == {"n1": Victims(("u1",), 0)}
    assert args.sent_pods == {"u1": victim}


@pytest.mark.parametrize(
    ("victims", "message"),
    [
        ({"n1": {"Pods": [{"UID": 7}]}}, "NodeNameToMetaVictims.n1.Pods[0].UID: must be a string, got"),
        ({"n1": {"Pods": {}}}, "NodeNameToMetaVictims.n1.Pods: must be an array, got object"),
        ({"n1": {"NumPDBViolations": "1"}}, "NodeNameToMetaVictims.n1.NumPDBViolations: must be an integer"),
        (
            {"n1": {"NumPDBViolations": -3}},
            "NodeNameToMetaVictims.n1.NumPDBViolations: must not be negative, got -3",
        ),
        ({"n1": None}, "NodeNameToMetaVictims.n1: must be an object, got null"),
    ],
)
def test_bad_victims_name_the_field(victims, message):
    body = orjson.dumps({"Pod": {"metadata": {"name": "new"}}, "NodeNameToMetaVictims": victims})
    with pytest.raises(wire.WireError, match=message.replace("[", r"\[").replace("]", r"\]")):
        wire.decode_preemption_args(body)


async def test_the_preempt_route_answers_meta_victims():
    import httpx

    from app.config.settings import Settings
    from app.http.api import create_app

    svc = _service(
        1,
        ("ResourceClaim", _allocated("high", ["gpu-0"], ["high"])),
        ("Pod", _bound("high", 1000, ["high"])),
        ("ResourceClaim", _allocated("low", ["gpu-0"], ["low"])),
        ("Pod", _bound("low", 10, ["low"])),
        *_preemptor(),
    )
    body = orjson.dumps(
        {
            "Pod": svc.state.get("Pod", f"{NS}/new"),
            "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": _uid("low")}], "NumPDBViolations": 0}},
        }
    )
    transport = httpx.ASGITransport(app=create_app(svc, Settings(Path("unused"))))
    async with httpx.AsyncClient(transport=transport, base_url="http://extender") as client:
        response = await client.post("/scheduler/preempt", content=body)
        bad = await client.post("/scheduler/preempt", content=b'{"Pod": {"metadata": {"name": 1}}}')
        negative = body.replace(b'"NumPDBViolations":0', b'"NumPDBViolations":-1')
        echoed = await client.post("/scheduler/preempt", content=negative)
    # gpu-0 stays held by the high-priority pod's claim: evicting low frees nothing.
    assert response.status_code == 200
    assert response.json() == {"NodeNameToMetaVictims": {}}
    assert bad.status_code == 400
    assert bad.json() == {"Error": "Pod.metadata.name: must be a string, got number"}
    # kube-scheduler counts PodDisruptionBudget violations: a negative count is no count, not echoed back.
    assert echoed.status_code == 400
    assert echoed.json() == {
        "Error": "NodeNameToMetaVictims.n1.NumPDBViolations: must not be negative, got -1"
    }


def test_a_node_short_of_free_devices_is_offered_to_preemption_and_kept_by_it():
    # Filter: n1's only GPU is in use, so n1 is FailedNodes (preemption may help there); n2 has no GPU
    # at all, FailedAndUnresolvable (kube-scheduler never asks about it). Preempt then keeps n1.
    svc = _service(
        1,
        ("Node", node("n2")),
        ("ResourceClaim", _allocated("low", ["gpu-0"], ["low"])),
        ("Pod", _bound("low", 10, ["low"])),
        *_preemptor(),
    )
    outcome = svc.filter(svc.state.get("Pod", f"{NS}/new"), ["n1", "n2"])
    assert (outcome.passed, list(outcome.failed), list(outcome.unresolvable)) == ([], ["n1"], ["n2"])
    assert _ask(svc, "low") == {"n1": Victims((_uid("low"),), 1)}


class _Recorded:
    """``PodEvents`` keeping what it is given."""

    def __init__(self) -> None:
        self.events: list[PodEvent] = []

    def record(self, event: PodEvent) -> None:
        self.events.append(event)


def test_added_victims_are_an_event_on_the_preemptor():
    # As in test_the_lowest_priority_device_holder_is_added_to_the_victims: a (gpu-0) is added.
    svc = _two_holders_and_a_cpu_hog()
    svc.events = recorded = _Recorded()
    _ask(svc, "cpu-hog")
    assert recorded.events == [
        PodEvent(
            NS,
            "new",
            _uid("new"),
            "Normal",
            "AddedPreemptionVictims",
            "Preempting",
            "evicting more pods than kube-scheduler chose frees the devices: node n1: ml/a "
            f"(releases ResourceClaim ml/a ({DRIVER}/n1/gpu-0))",
        )
    ]


def test_no_event_when_kube_schedulers_victims_suffice():
    svc = _service(
        1,
        ("ResourceClaim", _allocated("low", ["gpu-0"], ["low"])),
        ("Pod", _bound("low", 10, ["low"])),
        *_preemptor(),
    )
    svc.events = recorded = _Recorded()
    _ask(svc, "low")
    assert recorded.events == []
