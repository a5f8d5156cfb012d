"""Scenario: a high-priority pod preempts the lower-priority pod holding the only GPU it can get, through
kube-scheduler's DefaultPreemption and the extender's preemptVerb."""

from __future__ import annotations

import pytest

from e2e.kube import poll
from e2e.workload import Scenario, allocated_devices, assert_bound_pods_hold_their_claims

pytestmark = pytest.mark.e2e


def test_preemption_frees_a_gpu(scenario: Scenario) -> None:
    # Two nodes of 2 CPUs and 1 GPU. kube-scheduler's dry run sees only CPUs: on node-0 it would evict
    # holder (priority 100, 2 CPUs, the GPU), on node-1 cpu-hog (priority 10, 2 CPUs, no GPU; the GPU
    # there belongs to keeper, priority 2000). Left to itself it picks node-1, whose victim has the lower
    # priority, and frees no GPU; the extender keeps only node-0.
    low = scenario.add_priority_class("low", 10)
    mid = scenario.add_priority_class("mid", 100)
    high = scenario.add_priority_class("high", 1000)
    top = scenario.add_priority_class("top", 2000)
    node0, node1 = scenario.add_nodes(2, 1, capacity={"cpu": "2"})
    scenario.add_template("one-gpu")
    two_cpus = {"cpu": "2"}
    scenario.add_pod("holder", template="one-gpu", limits=two_cpus, priority_class=mid, node=node0)
    scenario.add_pod("keeper", template="one-gpu", priority_class=top, node=node1)
    scenario.add_pod("cpu-hog", limits=two_cpus, priority_class=low, node=node1)
    scenario.wait_settled(timeout=120, expect_bound=3)
    holder_claim = scenario.pod_claim(scenario.pod("holder"))
    assert allocated_devices(holder_claim) == [(scenario.driver, node0, "gpu-0")]

    # A claim of its own, there before the pod: a template's claim created after kube-scheduler's first
    # attempt leaves the preemptor waiting for its next retry (the extender cannot judge a claim it
    # has not seen, so that attempt preempts nowhere).
    scenario.add_claim("preemptor-gpu")
    scenario.add_pod("preemptor", claim="preemptor-gpu", limits={"cpu": "1"}, priority_class=high)

    poll(
        lambda: scenario.outcomes().get("preemptor") == "bound",
        timeout=180,
        interval=0.5,
        what="preemptor bound",
    )
    preemptor = scenario.pod("preemptor")
    assert preemptor["spec"]["nodeName"] == node0
    assert scenario.pod_gone("holder")
    assert not scenario.pod_gone("cpu-hog") and not scenario.pod_gone("keeper")
    claim = scenario.kube.get("ResourceClaim", "preemptor-gpu", scenario.namespace)
    assert allocated_devices(claim) == [(scenario.driver, node0, "gpu-0")]
    scenario.pods.remove("holder")
    assert_bound_pods_hold_their_claims(scenario)
    assert [line for line in scenario.extender_log() if "preempt" in line and "failed" in line] == []
