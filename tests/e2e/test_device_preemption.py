"""Scenarios: the extender's own preemption for pods short only of devices (issue 32 part 1). No pod asks
for CPU, so kube-scheduler's DefaultPreemption finds no victims and never calls ``preemptVerb``; the
extender evicts (Eviction API), nominates the pod and keeps the freed devices for it."""

from __future__ import annotations

import pytest

from e2e.kube import poll
from e2e.workload import Scenario, allocated_devices, assert_bound_pods_hold_their_claims

pytestmark = pytest.mark.e2e


def _bound(sc: Scenario, name: str, timeout: float = 180) -> dict:
    poll(lambda: sc.outcomes().get(name) == "bound", timeout=timeout, interval=0.5, what=f"{name} bound")
    return sc.pod(name)


def _logged(sc: Scenario, text: str) -> bool:
    return any(text in line for line in sc.extender_log())


def test_device_preemption_evicts_the_lowest_priority_gpu_holder(scenario: Scenario) -> None:
    # (a) Two nodes of one GPU each, held by low (priority 10) and mid (100); nothing asks for CPU. The
    # preemptor (1000) needs one GPU: low is evicted, the pod binds to low's node and gets its GPU.
    low = scenario.add_priority_class("low", 10)
    mid = scenario.add_priority_class("mid", 100)
    high = scenario.add_priority_class("high", 1000)
    node0, node1 = scenario.add_nodes(2, 1)
    scenario.add_template("one-gpu")
    scenario.add_pod("low", template="one-gpu", priority_class=low, node=node0)
    scenario.add_pod("mid", template="one-gpu", priority_class=mid, node=node1)
    scenario.wait_settled(timeout=120, expect_bound=2)

    scenario.add_claim("preemptor-gpu")
    scenario.add_pod("preemptor", claim="preemptor-gpu", priority_class=high)
    preemptor = _bound(scenario, "preemptor")

    assert preemptor["spec"]["nodeName"] == node0
    assert scenario.pod_gone("low") and not scenario.pod_gone("mid")
    claim = scenario.kube.get("ResourceClaim", "preemptor-gpu", scenario.namespace)
    assert allocated_devices(claim) == [(scenario.driver, node0, "gpu-0")]
    # Read through core/v1, where events.k8s.io's ``regarding`` is ``involvedObject``.
    events = scenario.kube.list("Event", scenario.namespace)
    reasons = {(e["involvedObject"]["name"], e["reason"]) for e in events}
    assert {("low", "Preempted"), ("preemptor", "PreemptingForDevices")} <= reasons
    scenario.pods.remove("low")
    assert_bound_pods_hold_their_claims(scenario)


def test_device_preemption_empties_one_node_for_a_four_gpu_pod(scenario: Scenario) -> None:
    # (b) Four nodes of 4 GPUs. node-0: four 1-GPU pods of priority 10. node-1..3: a 3-GPU pod of
    # priority 2000 and a 1-GPU pod of priority 1 each. Evicting the three priority-1 pods (plus one on
    # node-0) would free 4 GPUs spread over four nodes, useless to a 4-GPU claim; the pods of node-0 go.
    tiny = scenario.add_priority_class("tiny", 1)
    low = scenario.add_priority_class("low", 10)
    high = scenario.add_priority_class("high", 1000)
    top = scenario.add_priority_class("top", 2000)
    nodes = scenario.add_nodes(4, 4)
    scenario.add_template("one-gpu")
    scenario.add_template("three-gpus", count=3)
    for i in range(4):
        scenario.add_pod(f"w{i}", template="one-gpu", priority_class=low, node=nodes[0])
    for n, node in enumerate(nodes[1:], start=1):
        scenario.add_pod(f"big{n}", template="three-gpus", priority_class=top, node=node)
        scenario.add_pod(f"tiny{n}", template="one-gpu", priority_class=tiny, node=node)
    scenario.wait_settled(timeout=180, expect_bound=10)

    scenario.add_claim("four-gpus", count=4)
    scenario.add_pod("preemptor", claim="four-gpus", priority_class=high)
    preemptor = _bound(scenario, "preemptor")

    assert preemptor["spec"]["nodeName"] == nodes[0]
    assert all(scenario.pod_gone(f"w{i}") for i in range(4))
    assert not any(scenario.pod_gone(f"{p}{n}") for p in ("big", "tiny") for n in (1, 2, 3))
    claim = scenario.kube.get("ResourceClaim", "four-gpus", scenario.namespace)
    assert sorted(d for _, _, d in allocated_devices(claim)) == [f"gpu-{i}" for i in range(4)]
    for i in range(4):
        scenario.pods.remove(f"w{i}")
    assert_bound_pods_hold_their_claims(scenario)


def test_device_preemption_evicts_nobody_when_it_cannot_help(scenario: Scenario) -> None:
    # (c) node-0's GPU is held by boss (priority 2000, above the preemptor's 1000): evicting nothing there
    # helps. node-1's by guarded (priority 10), whose PodDisruptionBudget (minAvailable 1) allows no
    # disruption: the Eviction API refuses (429) and the node is dropped. Nobody is evicted; the
    # preemptor stays unschedulable.
    low = scenario.add_priority_class("low", 10)
    high = scenario.add_priority_class("high", 1000)
    top = scenario.add_priority_class("top", 2000)
    node0, node1 = scenario.add_nodes(2, 1)
    scenario.add_template("one-gpu")
    scenario.add_pod("boss", template="one-gpu", priority_class=top, node=node0)
    scenario.add_pod("guarded", template="one-gpu", priority_class=low, node=node1, labels={"app": "guarded"})
    scenario.kube.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guarded", "namespace": scenario.namespace},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        }
    )
    scenario.wait_settled(timeout=120, expect_bound=2)
    # What a kubelet would report: the Eviction API ignores budgets for a Pending pod, and counts only
    # Ready pods as healthy. Then currentHealthy 1 = minAvailable 1: no disruption allowed.
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    scenario.kube.merge_patch(
        "Pod",
        "guarded",
        {"status": {"phase": "Running", "conditions": [ready], "startTime": "2026-01-01T00:00:00Z"}},
        namespace=scenario.namespace,
        sub="status",
    )

    def budget_counted() -> bool:
        status = scenario.kube.get("PodDisruptionBudget", "guarded", scenario.namespace).get("status", {})
        return status.get("currentHealthy") == 1 and status.get("disruptionsAllowed") == 0

    poll(budget_counted, timeout=60, what="the disruption controller counted the budget")

    scenario.add_claim("preemptor-gpu")
    scenario.add_pod("preemptor", claim="preemptor-gpu", priority_class=high)
    key = f"{scenario.namespace}/preemptor"
    poll(
        lambda: _logged(
            scenario, f"preemption for pod {key}: eviction of {scenario.namespace}/guarded refused"
        ),
        timeout=120,
        interval=0.5,
        what="the eviction refused by the budget",
    )
    poll(
        lambda: _logged(
            scenario, f"preemption for pod {key}: evicting lower-priority pods frees enough devices"
        ),
        timeout=120,
        interval=0.5,
        what="no node left where eviction helps",
    )
    assert not scenario.pod_gone("boss") and not scenario.pod_gone("guarded")
    assert scenario.outcomes()["preemptor"] != "bound"
    assert not scenario.pod("preemptor")["status"].get("nominatedNodeName")


def test_device_preemption_keeps_the_freed_gpu_from_a_lower_priority_pod(scenario: Scenario) -> None:
    # (d) One node, one GPU held by low (priority 10). waiting (priority 50, preemptionPolicy Never: it
    # evicts nobody) asks for a GPU first and is refused. Then the preemptor (1000) evicts low. The freed
    # GPU helps both waiting pods, and waiting, unschedulable for longer, is out of its backoff first: without
    # the hold it would take the GPU. It is held for the preemptor, which binds there; waiting stays pending.
    low = scenario.add_priority_class("low", 10)
    mid = scenario.add_priority_class("mid", 50, preemption_policy="Never")
    high = scenario.add_priority_class("high", 1000)
    (node0,) = scenario.add_nodes(1, 1)
    scenario.add_template("one-gpu")
    scenario.add_pod("low", template="one-gpu", priority_class=low, node=node0)
    scenario.wait_settled(timeout=120, expect_bound=1)
    scenario.add_claim("waiting-gpu")
    scenario.add_claim("preemptor-gpu")
    scenario.add_pod("waiting", claim="waiting-gpu", priority_class=mid)
    poll(
        lambda: scenario.outcomes().get("waiting") == "unschedulable",
        timeout=60,
        interval=0.5,
        what="waiting refused while low holds the GPU",
    )

    scenario.add_pod("preemptor", claim="preemptor-gpu", priority_class=high)
    preemptor = _bound(scenario, "preemptor")

    assert preemptor["spec"]["nodeName"] == node0 and scenario.pod_gone("low")
    claim = scenario.kube.get("ResourceClaim", "preemptor-gpu", scenario.namespace)
    assert allocated_devices(claim) == [(scenario.driver, node0, "gpu-0")]
    # waiting never passed a filter, so kube-scheduler never tried to bind it. (With the hold turned off,
    # waiting passed filter once the GPU was free and its bind was tried and failed: a lost race.)
    waiting = f"pod={scenario.namespace}/waiting"
    assert [
        line for line in scenario.extender_log() if waiting in line and ("bind" in line or "bound" in line)
    ] == []
    poll(
        lambda: scenario.outcomes().get("waiting") == "unschedulable",
        timeout=60,
        interval=0.5,
        what="waiting refused again",
    )
    assert (
        not scenario.kube.get("ResourceClaim", "waiting-gpu", scenario.namespace)
        .get("status", {})
        .get("allocation")
    )
    scenario.pods.remove("low")
    assert_bound_pods_hold_their_claims(scenario)
