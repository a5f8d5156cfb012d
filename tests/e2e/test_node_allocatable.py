"""Scenario: devices that are node CPUs (DRANodeAllocatableResources): their CPUs count in the node fit
and reach the pod's status, which the kubelet sizes cgroups from."""

from __future__ import annotations

import pytest

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
    condition = next(c for c in scenario.pod("second")["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (
        "Insufficient cpu (with the node-allocatable resources of the pod's devices)" in condition["message"]
    )
