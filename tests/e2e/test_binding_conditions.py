"""Scenario 5: binding conditions. The test plays the driver: it sets the device's conditions in the
claim's ``status.devices`` once the extender has written the allocation, and kube-scheduler's bind
completes (ready) or is rolled back and retried (failed)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from e2e.kube import poll
from e2e.workload import Scenario, allocated_devices

pytestmark = pytest.mark.e2e

READY = "example.com/ready"
FAILED = "example.com/failed"


def _claim_with_allocation(sc: Scenario, name: str) -> dict[str, Any] | None:
    claim = sc.kube.get("ResourceClaim", name, sc.namespace)
    return claim if allocated_devices(claim) else None


def _report(sc: Scenario, claim: dict[str, Any], condition: str) -> None:
    """What a driver does once it has prepared (or failed to attach) the device."""
    (driver, pool, device) = allocated_devices(claim)[0]
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": claim["metadata"],
        "status": dict(
            claim["status"],
            devices=[
                {
                    "driver": driver,
                    "pool": pool,
                    "device": device,
                    "conditions": [
                        {
                            "type": condition,
                            "status": "True",
                            "reason": "Driver",
                            "message": "set by the e2e test",
                            "lastTransitionTime": now,
                            "observedGeneration": claim["metadata"].get("generation", 1),
                        }
                    ],
                }
            ],
        ),
    }
    sc.kube.replace_status(status)


def _one_attachable_device(sc: Scenario, claim: str, pod: str) -> None:
    """A node with one device that a fabric attaches (binding conditions), a claim for it and its pod."""
    conditions = {"bindsToNode": True, "bindingConditions": [READY], "bindingFailureConditions": [FAILED]}
    sc.add_nodes(1, 1, device_extra=conditions)
    sc.add_claim(claim)
    sc.add_pod(pod, claim=claim)


def test_binding_conditions(scenario: Scenario) -> None:
    _one_attachable_device(scenario, "attached", "waits")

    claim = poll(lambda: _claim_with_allocation(scenario, "attached"), timeout=60, what="allocation written")
    assert claim["status"]["allocation"]["devices"]["results"][0]["bindingConditions"] == [READY]
    assert scenario.pod("waits")["spec"].get("nodeName") is None  # bind waits for the driver
    _report(scenario, claim, READY)
    scenario.wait_settled(timeout=60, expect_bound=1)


def test_binding_failure_rolls_back(scenario: Scenario) -> None:
    _one_attachable_device(scenario, "flaky", "retried")

    first = poll(lambda: _claim_with_allocation(scenario, "flaky"), timeout=60, what="first allocation")
    _report(scenario, first, FAILED)

    # The failed bind is rolled back: the claim loses that allocation and kube-scheduler retries the pod,
    # which gets a fresh allocation (a new resourceVersion, no failure condition) that the driver accepts.
    def retried() -> dict[str, Any] | None:
        claim = _claim_with_allocation(scenario, "flaky")
        fresh = claim and not claim["status"].get("devices")
        return (
            claim
            if fresh and claim["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]
            else None
        )

    second = poll(retried, timeout=120, what="re-allocation after the failure")
    assert scenario.pod("retried")["spec"].get("nodeName") is None
    _report(scenario, second, READY)
    scenario.wait_settled(timeout=60, expect_bound=1)
