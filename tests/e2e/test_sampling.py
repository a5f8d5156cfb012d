"""kube-scheduler sampling before the extender (the chart's ``kubeScheduler.percentageOfNodesToScore`` below
100, given to the extender as ``--scheduler-percentage-of-nodes-to-score``), on a control plane of its own:
kube-scheduler sizes its sample from every node of the cluster, and the session's plane holds the other
scenarios' nodes.

Why the first sample misses, from kube-scheduler v1.37.2's ``findNodesThatFitPod``: with 200 nodes its
adaptive share is 48 %, 96 nodes, raised to 100. It walks its node list (one zone: the order the nodes were
added) from ``nextStartNodeIndex``, and after each cycle moves that index on by the nodes it processed:
each pinned holder's cycle processes all 200 (one feasible, 199 failing NodeAffinity), which leaves it
where it started, at 0. So the preemptor's first sample is the first 100 nodes, whose devices low-priority
holders keep; the one free device is on the last node. Its second sample starts at node 100."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from e2e.controlplane import ControlPlane
from e2e.kube import poll
from e2e.workload import Scenario, allocated_devices, assert_bound_pods_hold_their_claims
from tests.e2e.conftest import RUN_DIR, started_plane

pytestmark = pytest.mark.e2e

NODES = 200


@pytest.fixture(scope="module")
def sampling_plane() -> Iterator[ControlPlane]:
    directory = RUN_DIR.with_name(RUN_DIR.name + "-sampling")
    with started_plane(directory, ["--scheduler-percentage-of-nodes-to-score=0"], nodes_to_score=0) as plane:
        yield plane


def _failed_scheduling(sc: Scenario, pod: str) -> list[str]:
    return [
        event.get("message", "")
        for event in sc.kube.list("Event", sc.namespace)
        if event.get("reason") == "FailedScheduling" and event["involvedObject"]["name"] == pod
    ]


def test_a_pod_whose_sample_missed_its_device_is_retried_there_without_preemption(
    sampling_plane: ControlPlane,
) -> None:
    sc = Scenario.create(sampling_plane, "sample-miss")
    low = sc.add_priority_class("low", 10)
    high = sc.add_priority_class("high", 1000)
    nodes = sc.add_nodes(NODES, 1)
    sc.add_template("one-gpu")
    for i, node in enumerate(nodes[:-1]):
        sc.add_pod(f"holder-{i}", template="one-gpu", priority_class=low, node=node)
    sc.wait_settled(timeout=600, expect_bound=NODES - 1)

    # A claim of its own, seen by the extender before the pod exists: an attempt on a claim the
    # extender has not seen yet is no sample miss.
    sc.add_claim("preemptor-gpu")
    claim_url = f"{sampling_plane.extender_url}/api/v1/namespaces/{sc.namespace}/resourceclaims/preemptor-gpu"
    poll(lambda: httpx.get(claim_url, timeout=5.0).status_code == 200, timeout=30, what="claim seen")
    created = time.monotonic()
    sc.add_pod("preemptor", claim="preemptor-gpu", priority_class=high)
    poll(lambda: sc.outcomes().get("preemptor") == "bound", timeout=60, interval=0.2, what="preemptor bound")
    waited = time.monotonic() - created

    # The first attempt was answered as a miss: the sample's nodes unresolvable (so DefaultPreemption had
    # no candidate), naming the node outside it that has the device.
    misses = [m for m in _failed_scheduling(sc, "preemptor") if "outside kube-scheduler's sample" in m]
    assert misses, _failed_scheduling(sc, "preemptor")
    assert nodes[-1] in misses[0]
    assert sc.pod("preemptor")["spec"]["nodeName"] == nodes[-1]
    claim = sc.kube.get("ResourceClaim", "preemptor-gpu", sc.namespace)
    assert allocated_devices(claim) == [(sc.driver, nodes[-1], "gpu-0")]
    assert not any(sc.pod_gone(f"holder-{i}") for i in range(NODES - 1))
    assert_bound_pods_hold_their_claims(sc)
    # Retried at once (kube-scheduler's 1 s backoff), not after kube-scheduler's 5-minute flush.
    assert waited < 30, waited
    sc.notes.append(f"sample miss: the preemptor bound {waited:.1f} s after its creation, nothing evicted")
    sc.finish()  # its row in the session's summary (the scenario fixture finishes the session plane's)
