"""Scenarios 1-4: claims from templates, shared and pre-allocated claims, DRA-backed extended resources
and DeviceTaintRules, each scheduled by the real kube-scheduler through the extender and read back from
the API server."""

from __future__ import annotations

import httpx
import pytest

from e2e.kube import poll
from e2e.workload import (
    FINALIZER,
    Scenario,
    allocated_devices,
    allocation_node,
    assert_bound_pods_hold_their_claims,
    devices_in_two_claims,
)

pytestmark = pytest.mark.e2e


def test_template_claims(scenario: Scenario) -> None:
    # 2 nodes x 4 devices; 3 pods of 2 devices each: all fit (6 of 8 devices).
    scenario.add_nodes(2, 4)
    scenario.add_template("two-gpus", count=2)
    for i in range(3):
        scenario.add_pod(f"pod-{i}", template="two-gpus")

    states = scenario.wait_settled(timeout=120, expect_bound=3)

    assert set(states.values()) == {"bound"}
    assert_bound_pods_hold_their_claims(scenario)
    claims = scenario.claims()
    assert len(claims) == 3  # created by the real resourceclaim controller, one per pod
    for claim in claims:
        assert len(allocated_devices(claim)) == 2
        owner = claim["metadata"]["ownerReferences"][0]
        assert owner["kind"] == "Pod"
    assert devices_in_two_claims(scenario.kube) == {}


def test_shared_and_preallocated_claims(scenario: Scenario) -> None:
    (first, second) = scenario.add_nodes(2, 2)
    scenario.add_claim("shared")
    scenario.add_pod("user-a", claim="shared")
    scenario.add_pod("user-b", claim="shared")
    scenario.wait_settled(timeout=120, expect_bound=2)
    a, b = scenario.pod("user-a"), scenario.pod("user-b")
    shared = scenario.kube.get("ResourceClaim", "shared", scenario.namespace)
    node = allocation_node(shared)
    assert a["spec"]["nodeName"] == b["spec"]["nodeName"] == node
    assert {r["uid"] for r in shared["status"]["reservedFor"]} == {a["metadata"]["uid"], b["metadata"]["uid"]}

    # A claim already allocated (by the first pod) is honoured for a later pod: its nodeSelector decides
    # the node even though the other node has free devices.
    other = second if node == first else first
    scenario.add_claim("pinned")
    scenario.add_pod("pin-a", claim="pinned")
    scenario.wait_settled(timeout=120, expect_bound=3)
    pinned_node = scenario.pod("pin-a")["spec"]["nodeName"]
    scenario.add_pod("pin-b", claim="pinned")
    scenario.wait_settled(timeout=120, expect_bound=4)
    assert scenario.pod("pin-b")["spec"]["nodeName"] == pinned_node
    assert other in scenario.nodes
    assert_bound_pods_hold_their_claims(scenario)
    assert devices_in_two_claims(scenario.kube) == {}


def test_extended_resources(scenario: Scenario) -> None:
    # A DeviceClass that publishes example.com/gpu (listed in the shipped NodeResourcesFit
    # ignoredResources); a pod asking for two of them through its container limits.
    scenario.add_device_class("example-gpu", extended_resource="example.com/gpu")
    scenario.add_nodes(1, 4)
    scenario.add_pod("extended", limits={"example.com/gpu": "2"})

    scenario.wait_settled(timeout=120, expect_bound=1)

    pod = scenario.pod("extended")
    status = pod["status"]["extendedResourceClaimStatus"]
    claim = scenario.kube.get("ResourceClaim", status["resourceClaimName"], scenario.namespace)
    assert len(allocated_devices(claim)) == 2
    assert allocation_node(claim) == pod["spec"]["nodeName"]
    assert [m["containerName"] for m in status["requestMappings"]] == ["main"]
    assert FINALIZER in claim["metadata"]["finalizers"]
    assert pod["metadata"]["uid"] in {r["uid"] for r in claim["status"]["reservedFor"]}


def _tainted_in_extender(sc: Scenario, node: str) -> list[str]:
    answer = httpx.get(f"{sc.plane.extender_url}/api/v1/nodes/{node}/devices", timeout=5.0)
    return [d["device"] for d in answer.json()["devices"] if d["taints"]] if answer.status_code == 200 else []


def test_device_taint_rule(scenario: Scenario) -> None:
    (node,) = scenario.add_nodes(1, 2)
    scenario.kube.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceTaintRule",
            "metadata": {"name": f"{scenario.name}-gpu-0"},
            "spec": {
                "deviceSelector": {"driver": scenario.driver, "pool": node, "device": "gpu-0"},
                "taint": {"key": "example.com/unhealthy", "value": "ecc", "effect": "NoSchedule"},
            },
        }
    )
    # The extender must have indexed the rule before the pods are filtered: ask it, not the API server.
    poll(lambda: _tainted_in_extender(scenario, node), timeout=30, what="taint rule in the extender's index")
    scenario.add_template("one-gpu")
    scenario.add_pod("plain-a", template="one-gpu")
    scenario.add_pod("plain-b", template="one-gpu")
    states = scenario.wait_settled(timeout=120, expect_bound=1)
    # Only gpu-1 is free of the taint: one plain pod is bound to it, the other cannot be placed.
    assert sorted(states.values()) == ["bound", "unschedulable"]
    holders = {d for c in scenario.claims() for d in allocated_devices(c)}
    assert holders == {(scenario.driver, node, "gpu-1")}

    toleration = {"key": "example.com/unhealthy", "operator": "Equal", "value": "ecc", "effect": "NoSchedule"}
    scenario.add_claim("tolerating", tolerations=[toleration])
    scenario.add_pod("tolerant", claim="tolerating")
    scenario.wait_settled(timeout=120, expect_bound=2)
    claim = scenario.kube.get("ResourceClaim", "tolerating", scenario.namespace)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["device"] == "gpu-0"
    assert result["tolerations"] == [toleration]


def test_many_pods_share_one_claim(scenario: Scenario) -> None:
    # 60 pods created at once around one claim: their binds all write that claim. Racing on its
    # resourceVersion they used to run out of conflict attempts (about 1 pod/s on 270 pods).
    scenario.add_nodes(2, 1)
    scenario.add_claim("crowded")
    for i in range(60):
        scenario.add_pod(f"member-{i}", claim="crowded")
    states = scenario.wait_settled(timeout=300, expect_bound=60)
    assert set(states.values()) == {"bound"}
    shared = scenario.kube.get("ResourceClaim", "crowded", scenario.namespace)
    assert len(shared["status"]["reservedFor"]) == 60
    assert len({scenario.pod(n)["spec"]["nodeName"] for n in states}) == 1
    assert [line for line in scenario.extender_log() if "still conflicting" in line] == []
    assert_bound_pods_hold_their_claims(scenario)
