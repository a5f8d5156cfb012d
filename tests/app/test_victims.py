"""The preemption planner (``app.scheduling.victims``): which node and which victims the extender's own
preemption chooses for a pod short only of devices, as kube-scheduler's DefaultPreemption would for CPUs.
Every expected answer is worked out by hand in the test's comment from the devices, holders, priorities
and budgets it sets up."""

from __future__ import annotations

from typing import Any

import pytest

from allocator.cel.expr_engine import ExprEngine
from allocator.decide import Policy
from allocator.selectors import SelectorCache
from app.scheduling.preemption import Victims, preempt
from app.scheduling.service import SchedulingService
from app.scheduling.victims import DisruptionBudgets, plan
from app.state.cluster import ClusterState
from tests.builders import claim, device, device_class, node, pod, request, resource_slice

DRIVER = "gpu.example.com"
NS = "ml"
EARLY = "2026-01-01T00:00:00Z"
LATE = "2026-01-01T01:00:00Z"


def _uid(name: str) -> str:
    return f"uid-pod-{NS}-{name}"


class Cluster:
    """Nodes of GPUs; pods holding some of them; the preemptor ``new``."""

    def __init__(self, gpus: dict[str, int]) -> None:
        self.objects: list[tuple[str, dict[str, Any]]] = [
            ("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"'))
        ]
        for name, count in gpus.items():
            self.objects.append(("Node", node(name)))
            devices = [device(f"gpu-{i}") for i in range(count)]
            self.objects.append(("ResourceSlice", resource_slice(f"{name}-gpus", DRIVER, name, devices)))

    def holder(
        self,
        name: str,
        priority: int,
        node_name: str,
        devices: list[str],
        *,
        started: str = EARLY,
        labels: dict[str, str] | None = None,
        shared_with: tuple[str, ...] = (),
    ) -> Cluster:
        """Pod ``name`` bound to ``node_name`` holding ``devices`` there through claim ``name`` (reserved
        for it and ``shared_with``, pods added separately with ``sharer``)."""
        obj = claim(NS, name, [request("gpu", "gpu", len(devices))])
        results = [{"request": "gpu", "driver": DRIVER, "pool": node_name, "device": d} for d in devices]
        obj["status"] = {
            "allocation": {"devices": {"results": results}},
            "reservedFor": [{"resource": "pods", "name": h, "uid": _uid(h)} for h in (name, *shared_with)],
        }
        self.objects.append(("ResourceClaim", obj))
        return self.sharer(name, priority, node_name, name, started=started, labels=labels)

    def sharer(
        self,
        name: str,
        priority: int,
        node_name: str,
        claim_name: str,
        *,
        started: str = EARLY,
        labels: dict[str, str] | None = None,
    ) -> Cluster:
        obj = pod(NS, name, [claim_name] if claim_name else [])
        obj["spec"].update(nodeName=node_name, priority=priority)
        obj["status"].update(phase="Running", startTime=started)
        if labels:
            obj["metadata"]["labels"] = labels
        self.objects.append(("Pod", obj))
        return self

    def service(self, gpus: int = 1, priority: int = 100) -> SchedulingService:
        new = pod(NS, "new", ["new"])
        new["spec"]["priority"] = priority
        objects = [
            *self.objects,
            ("ResourceClaim", claim(NS, "new", [request("gpu", "gpu", gpus)])),
            ("Pod", new),
        ]
        return SchedulingService(ClusterState.from_objects(objects), SelectorCache(ExprEngine()))


def _plan(
    svc: SchedulingService, nodes: list[str], budgets: DisruptionBudgets | None = None
) -> tuple[str, list[str], int] | None:
    """(node, victim names most important first, PDB violations) of the plan, or None."""
    found = plan(svc, svc.state.get("Pod", f"{NS}/new"), nodes, budgets or DisruptionBudgets())
    if found is None:
        return None
    candidate, _ = found
    return candidate.node, [p["metadata"]["name"] for p in candidate.victims], candidate.pdb_violations


def _budget(selector: dict[str, Any], allowed: int, *, disrupted: tuple[str, ...] = (), ns: str = NS) -> dict:
    return {
        "metadata": {"name": "budget", "namespace": ns},
        "spec": {"selector": selector},
        "status": {"disruptionsAllowed": allowed, "disruptedPods": dict.fromkeys(disrupted, EARLY)},
    }


def test_the_node_whose_victim_has_the_lowest_priority_is_chosen():
    # n1's only GPU is held by a priority-50 pod, n2's by a priority-10 pod: both nodes can be helped
    # with one victim; the lower highest-victim priority wins (n2), whatever the order asked.
    svc = (
        Cluster({"n1": 1, "n2": 1})
        .holder("mid", 50, "n1", ["gpu-0"])
        .holder("low", 10, "n2", ["gpu-0"])
        .service()
    )
    assert _plan(svc, ["n1", "n2"]) == ("n2", ["low"], 0)
    assert _plan(svc, ["n2", "n1"]) == ("n2", ["low"], 0)


def test_a_four_gpu_pod_empties_one_node_rather_than_one_pod_on_each_of_four():
    # n0: four 1-GPU pods of priority 10. n1..n3: 3 GPUs held by a priority-2000 pod (above the
    # preemptor's 100) and one by a priority-1 pod. Evicting the priority-1 pods frees one GPU on each
    # of n1..n3: never 4 on one node. Only n0 can be helped, by evicting all four of its pods; most
    # important first: equal priority, the earlier started first (w0 started EARLY, the others LATE).
    cluster = Cluster({"n0": 4, "n1": 4, "n2": 4, "n3": 4})
    for i in range(4):
        cluster.holder(f"w{i}", 10, "n0", [f"gpu-{i}"], started=EARLY if i == 0 else LATE)
    for n in ("n1", "n2", "n3"):
        cluster.holder(f"big-{n}", 2000, n, ["gpu-0", "gpu-1", "gpu-2"]).holder(f"tiny-{n}", 1, n, ["gpu-3"])
    svc = cluster.service(gpus=4)
    node_name, victims, violations = _plan(svc, ["n1", "n2", "n3", "n0"])
    assert (node_name, victims[0], sorted(victims), violations) == ("n0", "w0", ["w0", "w1", "w2", "w3"], 0)


def test_nothing_when_only_equal_or_higher_priority_pods_hold_the_devices():
    svc = (
        Cluster({"n1": 1, "n2": 1}).holder("peer", 100, "n1", ["gpu-0"]).holder("boss", 1000, "n2", ["gpu-0"])
    )
    assert _plan(svc.service(), ["n1", "n2"]) is None


def test_a_claim_shared_with_a_surviving_pod_frees_nothing():
    # The low-priority holder shares its claim with a pod above the preemptor: the claim stays.
    cluster = Cluster({"n1": 1}).holder("low", 10, "n1", ["gpu-0"], shared_with=("keeper",))
    svc = cluster.sharer("keeper", 1000, "n1", "low").service()
    assert _plan(svc, ["n1"]) is None


def test_every_lower_priority_consumer_of_a_shared_claim_is_evicted():
    cluster = Cluster({"n1": 1}).holder("a", 10, "n1", ["gpu-0"], shared_with=("b",))
    svc = cluster.sharer("b", 20, "n1", "a").service()
    assert _plan(svc, ["n1"]) == ("n1", ["b", "a"], 0)


def test_victims_not_needed_are_given_back_most_important_first():
    # 3 GPUs, the preemptor needs 2: a (priority 1) holds gpu-0, b (priority 2) gpu-1 and gpu-2, c
    # (priority 3) holds nothing. All evicted: 3 free. Give back c (holds nothing: still 3), then b (only
    # gpu-0 free: short, b stays), then a (b's 2 suffice: a given back). Victims: b.
    cluster = Cluster({"n1": 3}).holder("a", 1, "n1", ["gpu-0"]).holder("b", 2, "n1", ["gpu-1", "gpu-2"])
    svc = cluster.sharer("c", 3, "n1", "").service(gpus=2)
    assert _plan(svc, ["n1"]) == ("n1", ["b"], 0)


def test_a_budget_makes_its_pod_the_last_choice_on_the_node():
    # 2 GPUs, the preemptor needs 1: a (priority 1, selected by a budget allowing no disruption) and b
    # (priority 2). Without the budget: give back b first (a's GPU suffices), then a (nothing free):
    # victim a. With it: a is given back first (b's GPU suffices), then b cannot be: victim b, no
    # violation.
    cluster = (
        Cluster({"n1": 2})
        .holder("a", 1, "n1", ["gpu-0"], labels={"app": "a"})
        .holder("b", 2, "n1", ["gpu-1"])
    )
    svc = cluster.service()
    assert _plan(svc, ["n1"]) == ("n1", ["a"], 0)
    budgets = DisruptionBudgets([_budget({"matchLabels": {"app": "a"}}, 0)])
    assert _plan(svc, ["n1"], budgets) == ("n1", ["b"], 0)


def test_fewest_budget_violations_come_before_the_lowest_priority():
    # n1: a (priority 1, budget allows none); n2: b (priority 50). n1 violates one budget, n2 none: n2,
    # though its victim's priority is higher. Once the budget allows one disruption, n1 (priority 1).
    cluster = Cluster({"n1": 1, "n2": 1}).holder("a", 1, "n1", ["gpu-0"], labels={"app": "a"})
    svc = cluster.holder("b", 50, "n2", ["gpu-0"]).service()
    assert _plan(svc, ["n1", "n2"], DisruptionBudgets([_budget({"matchLabels": {"app": "a"}}, 0)])) == (
        "n2",
        ["b"],
        0,
    )
    assert _plan(svc, ["n1", "n2"], DisruptionBudgets([_budget({"matchLabels": {"app": "a"}}, 1)])) == (
        "n1",
        ["a"],
        0,
    )


def test_a_forced_violation_is_counted():
    # One node, its only GPU held by a pod a budget protects: the only plan violates it.
    svc = Cluster({"n1": 1}).holder("a", 1, "n1", ["gpu-0"], labels={"app": "a"}).service()
    budgets = DisruptionBudgets([_budget({"matchLabels": {"app": "a"}}, 0)])
    assert _plan(svc, ["n1"], budgets) == ("n1", ["a"], 1)


def test_ties_go_to_the_smaller_sum_then_fewer_victims_then_the_later_start():
    # Preemptor needs 2 GPUs. n1: x (10) and y (10), one GPU each: highest 10, sum 20 (+offsets), 2
    # victims. n2: z (10) holds 2 GPUs: highest 10, one victim: a smaller sum (one offset) -> n2.
    cluster = Cluster({"n1": 2, "n2": 2}).holder("x", 10, "n1", ["gpu-0"]).holder("y", 10, "n1", ["gpu-1"])
    svc = cluster.holder("z", 10, "n2", ["gpu-0", "gpu-1"]).service(gpus=2)
    assert _plan(svc, ["n1", "n2"])[0] == "n2"
    # Equal in all but start: the node whose most important victim started later (n2) wins.
    cluster = Cluster({"n1": 1, "n2": 1}).holder("old", 10, "n1", ["gpu-0"], started=EARLY)
    svc = cluster.holder("young", 10, "n2", ["gpu-0"], started=LATE).service()
    assert _plan(svc, ["n1", "n2"])[0] == "n2"
    # Equal in everything: the first node asked.
    cluster = Cluster({"n1": 1, "n2": 1}).holder("p", 10, "n1", ["gpu-0"]).holder("q", 10, "n2", ["gpu-0"])
    svc = cluster.service()
    assert _plan(svc, ["n2", "n1"])[0] == "n2"


def test_the_held_devices_are_the_preemptors_allocation_once_the_victims_are_gone():
    # 2 GPUs: gpu-0 free, gpu-1 held by low. The preemptor needs 2: evicting low gives it both.
    svc = Cluster({"n1": 2}).holder("low", 10, "n1", ["gpu-1"]).service(gpus=2)
    candidate, eviction = plan(svc, svc.state.get("Pod", f"{NS}/new"), ["n1"])
    held = eviction.allocation(candidate.uids, Policy())
    assert sorted(d.id for d in held) == [(DRIVER, "n1", "gpu-0"), (DRIVER, "n1", "gpu-1")]


def test_kube_schedulers_path_gives_the_same_victims_for_the_same_state():
    # Two holders on n1 (priority 1 and 2) with one GPU each; the preemptor needs one. kube-scheduler's
    # dry run chose no victim there (not possible in practice, but the same state): the preemptVerb answer
    # adds exactly the planner's victims.
    svc = Cluster({"n1": 2}).holder("a", 1, "n1", ["gpu-0"]).holder("b", 2, "n1", ["gpu-1"]).service()
    node_name, victims, _ = _plan(svc, ["n1"])
    answer = preempt(svc, svc.state.get("Pod", f"{NS}/new"), {"n1": Victims(())})
    assert answer == {node_name: Victims(tuple(_uid(v) for v in victims))} == {"n1": Victims((_uid("a"),))}


@pytest.mark.parametrize(
    ("selector", "labels", "selected"),
    [
        ({"matchLabels": {"app": "a"}}, {"app": "a"}, True),
        ({"matchLabels": {"app": "a"}}, {"app": "b"}, False),
        ({}, {"app": "a"}, False),  # an empty selector selects nothing
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]}]}, {"app": "b"}, True),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["a"]}]}, {"app": "b"}, True),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["a"]}]}, {"app": "a"}, False),
        ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, {"app": "x"}, True),
        ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, {"app": "x"}, False),
        ({"matchExpressions": [{"key": "app", "operator": "Bogus"}]}, {"app": "x"}, False),
    ],
)
def test_budget_selectors(selector, labels, selected):
    victim = {"metadata": {"name": "v", "namespace": NS, "labels": labels}}
    budgets = DisruptionBudgets([_budget(selector, 0)])
    assert budgets.covers(victim) is selected
    assert budgets.split([victim]) == (([victim], []) if selected else ([], [victim]))


def test_budgets_count_per_namespace_and_skip_pods_already_disrupted():
    # Allowed 1: the first selected pod uses it, the second violates. A pod already in disruptedPods
    # is not counted; a budget of another namespace selects nothing here.
    pods = [{"metadata": {"name": n, "namespace": NS, "labels": {"app": "a"}}} for n in ("p", "q", "r")]
    budgets = DisruptionBudgets(
        [
            _budget({"matchLabels": {"app": "a"}}, 1, disrupted=("p",)),
            _budget({"matchLabels": {"app": "a"}}, 0, ns="other"),
        ]
    )
    assert budgets.split(pods) == ([pods[2]], pods[:2])
