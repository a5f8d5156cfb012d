"""Holds of nominated pods (``app.scheduling.preemptionholds``) and the preemption requests filter records
(``app.scheduling.preemptionrequests``): devices kept for a preemptor are in use for every other pod and
free for it, until it is bound, deleted, or the deadline passes."""

from __future__ import annotations

import copy
import sys
import tracemalloc

import orjson

from allocator.decide import Policy
from app.scheduling.decisions import FilterOutcome
from app.scheduling.preemptionholds import PreemptionHolds
from app.scheduling.preemptionrequests import PreemptionRequests
from app.scheduling.victims import plan
from tests.app.test_victims import NS, Cluster
from tests.builders import claim, pod, request


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _held_cluster():
    """n1's only GPU (gpu-0) is held by low (priority 10); the preemptor ``new`` (priority 100, one GPU)
    gets the plan's devices held, then low and its claim are gone (evicted, deallocated); ``other``
    (priority 1) wants one GPU too."""
    svc = Cluster({"n1": 1}).holder("low", 10, "n1", ["gpu-0"]).service()
    other = pod(NS, "other", ["other"])
    other["spec"]["priority"] = 1
    svc.state.apply("ResourceClaim", claim(NS, "other", [request("gpu", "gpu", 1)]))
    svc.state.apply("Pod", other)
    clock = Clock()
    svc.preemption_holds = PreemptionHolds(svc.state, svc.lock, clock)
    new = svc.state.get("Pod", f"{NS}/new")
    candidate, eviction = plan(svc, new, ["n1"])
    devices = eviction.allocation(candidate.uids, Policy())
    svc.preemption_holds.hold(f"{NS}/new", new["metadata"]["uid"], "n1", devices, 60)
    svc.state.remove("Pod", f"{NS}/low")
    svc.state.remove("ResourceClaim", f"{NS}/low")
    return svc, clock, devices


def _passes(svc, name: str) -> list[str]:
    return svc.filter(svc.state.get("Pod", f"{NS}/{name}"), ["n1"]).passed


def test_the_held_device_is_taken_by_nobody_else_but_free_for_the_preemptor():
    # gpu-0, freed by low's eviction, is held for new: other (which would fit on it without the hold)
    # fails, and new passes.
    svc, _, devices = _held_cluster()
    assert [d.id[2] for d in devices] == ["gpu-0"]
    assert _passes(svc, "other") == []
    assert _passes(svc, "new") == ["n1"]
    assert _passes(svc, "other") == []  # the hold is back after the preemptor's filter
    quick = svc.filter_quick(svc.state.get("Pod", f"{NS}/other"), ["n1"])
    assert quick is None or quick.passed == []
    quick = svc.filter_quick(svc.state.get("Pod", f"{NS}/new"), ["n1"])
    assert quick is None or quick.passed == ["n1"]
    # bind: new's bind takes the held device; other's does not get it.
    assert svc.bind(NS, "new", "uid-pod-ml-new", "n1") == ["ml/new: gpu.example.com/n1/gpu-0"]


def test_the_hold_ends_when_the_preemptor_is_bound_or_deleted():
    svc, _, _ = _held_cluster()
    bound = copy.deepcopy(svc.state.get("Pod", f"{NS}/new"))
    bound["spec"]["nodeName"] = "n1"
    with svc.lock:
        svc.preemption_holds.observe("Pod", f"{NS}/new", bound)
    assert f"{NS}/new" not in svc.preemption_holds
    assert _passes(svc, "other") == ["n1"]

    svc, _, _ = _held_cluster()
    with svc.lock:
        svc.preemption_holds.observe("Pod", f"{NS}/new", None)
    assert _passes(svc, "other") == ["n1"]


def test_a_pod_recreated_under_the_name_does_not_get_the_hold():
    svc, _, _ = _held_cluster()
    recreated = copy.deepcopy(svc.state.get("Pod", f"{NS}/new"))
    recreated["metadata"]["uid"] = "another"
    with svc.lock:
        svc.preemption_holds.observe("Pod", f"{NS}/new", recreated)
    assert f"{NS}/new" not in svc.preemption_holds


def test_the_hold_expires_at_its_deadline():
    svc, clock, _ = _held_cluster()
    clock.now += 59
    assert svc.preemption_holds.expire() == []
    assert _passes(svc, "other") == []
    clock.now += 1
    assert svc.preemption_holds.expire() == [f"{NS}/new"]
    assert _passes(svc, "other") == ["n1"]


def test_a_restart_holds_nothing():
    # Holds live in memory: a new service over the same state keeps no device for anyone.
    svc, _, _ = _held_cluster()
    assert svc.state.inventory.reservations()
    fresh = Cluster({"n1": 1}).service()
    assert not fresh.state.inventory.reservations()
    assert len(fresh.preemption_holds) == 0


def _rejected(*, passed=(), failed=("n1",), **spec) -> tuple[dict, FilterOutcome]:
    p = pod(NS, "new", ["new"])
    p["spec"].update({"schedulerName": "dra-scheduler", **spec})
    return p, FilterOutcome(passed=list(passed), failed=dict.fromkeys(failed, "no GPU free"))


def test_requests_are_the_pods_rejected_for_devices_once_settled():
    clock = Clock()
    requests = PreemptionRequests(["dra-scheduler"], settle_seconds=1.0, clock=clock)
    requests.filtered(*_rejected(failed=("n1", "n2")))
    assert requests.take() == []  # kube-scheduler's own PostFilter goes first
    clock.now += 1
    (taken,) = requests.take()
    assert (taken.key, taken.nodes) == (f"{NS}/new", ("n1", "n2"))
    assert requests.take() == []


def test_no_request_for_policy_never_other_schedulers_passing_pods_or_unresolvable_nodes():
    clock = Clock()
    requests = PreemptionRequests(["dra-scheduler"], settle_seconds=0.0, clock=clock)
    requests.filtered(*_rejected(preemptionPolicy="Never"))
    requests.filtered(*_rejected(schedulerName="default-scheduler"))
    requests.filtered(*_rejected(failed=()))  # every node unresolvable: eviction cannot help
    assert requests.take() == []
    requests.filtered(*_rejected())
    requests.filtered(*_rejected(passed=("n2",)))  # a later filter passed it: the request is dropped
    assert requests.take() == []


def test_a_pod_kube_scheduler_preempts_for_is_left_to_it():
    clock = Clock()
    requests = PreemptionRequests(["dra-scheduler"], settle_seconds=0.0, quiet_seconds=60, clock=clock)
    p, outcome = _rejected()
    requests.filtered(p, outcome)
    requests.scheduler_preempting(p)
    requests.filtered(p, outcome)
    assert requests.take() == []
    clock.now += 60
    requests.filtered(p, outcome)
    assert [r.key for r in requests.take()] == [f"{NS}/new"]


def test_requests_of_many_pods_rejected_on_the_same_nodes_hold_each_node_name_once():
    # Each filter decodes its own copy of the node names: 1,000 pending pods rejected on 5,000 nodes held
    # 467 MB of names. What stays per request is its tuple of references (8 bytes a node).
    pods, nodes = 100, 2000
    names = [f"ip-10-{i // 250}-{i % 250}-17.eu-west-1.compute.internal" for i in range(nodes)]
    body = orjson.dumps(names)
    requests = PreemptionRequests(["dra-scheduler"])
    tracemalloc.start()
    try:
        for i in range(pods):
            p, _ = _rejected()
            p["metadata"]["name"] = f"new-{i}"
            requests.filtered(p, FilterOutcome(failed=dict.fromkeys(orjson.loads(body), "no GPU free")))
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(requests) == pods
    names_once = sum(sys.getsizeof(n) for n in names)
    references = pods * (nodes * 8 + 100)  # a tuple: 8 bytes a reference and its header
    assert held < 2 * (names_once + references)
