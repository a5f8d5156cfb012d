"""Scenario: Events on pods. A bind the driver fails (a binding failure condition, as in the binding
conditions scenario) leaves the extender's own ``FailedBinding`` Event on the pod, naming the claim and its
device, written with the shipped RBAC and read back as ``kubectl describe pod`` reads Events (core/v1); the
same failure again counts in that Event's series."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.kube import poll
from e2e.workload import Scenario, allocated_devices, allocation_node
from tests.e2e.test_binding_conditions import FAILED, _claim_with_allocation, _one_attachable_device, _report

pytestmark = pytest.mark.e2e


def _extender_events(sc: Scenario, pod: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in sc.kube.list("Event", sc.namespace)
        if e.get("reportingComponent") == "dra-extender"
        and e["reason"] == reason
        and e["involvedObject"]["name"] == pod
    ]


def test_a_failed_bind_leaves_an_event_on_the_pod(scenario: Scenario) -> None:
    _one_attachable_device(scenario, "flaky", "refused")
    claim = poll(lambda: _claim_with_allocation(scenario, "flaky"), timeout=60, what="allocation written")
    (driver, pool, device) = allocated_devices(claim)[0]
    node = allocation_node(claim)
    _report(scenario, claim, FAILED)

    events = poll(
        lambda: _extender_events(scenario, "refused", "FailedBinding"), timeout=60, what="FailedBinding Event"
    )
    event = events[0]
    pod = scenario.pod("refused")
    assert event["type"] == "Warning" and event["action"] == "Binding"
    assert (
        event["involvedObject"]["kind"] == "Pod" and event["involvedObject"]["uid"] == pod["metadata"]["uid"]
    )
    assert event["reportingInstance"].startswith("dra-extender-")
    claim_key = f"{scenario.namespace}/flaky"
    assert event["message"].startswith(f"binding to node {node} with ResourceClaim {claim_key} ")
    assert f"({driver}/{pool}/{device})" in event["message"]
    assert f"binding failure condition {FAILED} is True" in event["message"]
    assert pod["spec"].get("nodeName") is None

    # kube-scheduler retries the pod, the only device is allocated again and fails alike: the same Event,
    # its series counted by a strategic-merge PATCH the API server accepts.
    def allocated_again() -> dict[str, Any] | None:
        again = _claim_with_allocation(scenario, "flaky")
        fresh = again and not again["status"].get("devices")
        return (
            again
            if fresh and again["metadata"]["resourceVersion"] != claim["metadata"]["resourceVersion"]
            else None
        )

    _report(scenario, poll(allocated_again, timeout=120, what="re-allocation"), FAILED)

    def counted() -> dict[str, Any] | None:
        found = _extender_events(scenario, "refused", "FailedBinding")
        return found[0] if len(found) == 1 and (found[0].get("series") or {}).get("count", 0) >= 2 else None

    repeated = poll(counted, timeout=60, what="the FailedBinding Event's series")
    assert (
        repeated["metadata"]["name"] == event["metadata"]["name"] and repeated["message"] == event["message"]
    )
    # kube-scheduler keeps retrying the pod: done with it here.
    scenario.kube.delete("Pod", "refused", scenario.namespace)
    scenario.pods.remove("refused")
