"""Scenario: devices that are node CPUs (DRANodeAllocatableResources): their CPUs count in the node fit
and reach the pod's status, which the kubelet sizes cgroups from."""

from __future__ import annotations

import pytest

from e2e.kube import poll
from e2e.workload import Scenario

pytestmark = pytest.mark.e2e

FOUR_CPUS = {"nodeAllocatableResources": {"cpu": {"mapping": {"deviceMultiplier": "4"}}}}


def test_node_allocatable_cpus(scenario: Scenario) -> None:
    # One node of 8 CPUs with two devices of 4 CPUs each. Each pod asks for 2 CPUs and one device:
    # 2 + 4 = 6 of 8 for the first; the second would bring it to 12. kube-scheduler's NodeResourcesFit
    # sees 2 + 2 = 4 and lets both through: the extender refuses the second.
    # kube-apiserver admits such a slice only for a node declaring the feature (as its kubelet would).
    (node,) = scenario.add_nodes(
        1, 2, device_extra=FOUR_CPUS, capacity={"cpu": "8"}, declared_features=["DRANodeAllocatableResources"]
    )
    scenario.add_template("one-device")
    scenario.add_pod("first", template="one-device", limits={"cpu": "2"})
    scenario.wait_settled(timeout=120, expect_bound=1)
    scenario.add_pod("second", template="one-device", limits={"cpu": "2"})

    states = scenario.wait_settled(timeout=120, expect_bound=1)

    assert states == {"first": "bound", "second": "unschedulable"}
    first = scenario.pod("first")
    assert first["spec"]["nodeName"] == node
    claim = scenario.pod_claim(first)
    assert first["status"]["nodeAllocatableResourceClaimStatuses"] == [
        {
            "resourceClaimName": claim["metadata"]["name"],
            "containers": ["main"],
            "mapping": [{"name": "cpu", "quantity": "4"}],
        }
    ]
    # The first attempt may still find the second pod's claim not created yet; the retry gives the reason.
    expected = "Insufficient cpu (with the node-allocatable resources of the pod's devices)"

    def refused_for_cpu() -> bool:
        conditions = scenario.pod("second")["status"].get("conditions") or []
        return any(c["type"] == "PodScheduled" and expected in c.get("message", "") for c in conditions)

    poll(refused_for_cpu, timeout=90, interval=0.5, what="the second pod refused for cpu")
