"""Scenario: a PodGroup's ResourceClaim, generated once by the real resourceclaim controller from a
template, shared by the group's pods through one ``reservedFor`` entry for the group."""

from __future__ import annotations

import pytest

from e2e.kube import poll
from e2e.workload import Scenario, allocated_devices, allocation_node, devices_in_two_claims

pytestmark = pytest.mark.e2e


def test_pod_group_claims(scenario: Scenario) -> None:
    scenario.add_nodes(2, 1)
    scenario.add_template("one-gpu")
    group = scenario.kube.create(
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": scenario.namespace},
            "spec": {
                "schedulingPolicy": {"basic": {}},
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            },
        }
    )
    # The controller records the group's claim in the PodGroup's status before the pods come.
    poll(
        lambda: (
            scenario.kube.get("PodGroup", "train", scenario.namespace)
            .get("status", {})
            .get("resourceClaimStatuses")
        ),
        timeout=60,
        what="PodGroup claim generated",
    )
    for i in range(3):
        scenario.add_pod(f"worker-{i}", template="one-gpu", pod_group="train")

    states = scenario.wait_settled(timeout=120, expect_bound=3)

    assert set(states.values()) == {"bound"}
    (claim,) = scenario.claims()  # one claim for the whole group, none per pod
    owner = claim["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("PodGroup", "train", group["metadata"]["uid"])
    uid = group["metadata"]["uid"]
    assert claim["status"]["reservedFor"] == [
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train", "uid": uid}
    ]
    # Each node has one GPU: the three pods share it, so they all run where it was allocated.
    (device,) = allocated_devices(claim)
    assert {scenario.pod(n)["spec"]["nodeName"] for n in states} == {allocation_node(claim)} == {device[1]}
    assert devices_in_two_claims(scenario.kube) == {}
