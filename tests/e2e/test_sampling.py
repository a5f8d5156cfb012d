"""kube-scheduler sampling before the extender (the chart's ``kubeScheduler.percentageOfNodesToScore`` below
100, given to the extender as ``--scheduler-percentage-of-nodes-to-score``), on a control plane of its own:
kube-scheduler sizes its sample from every node of the cluster, and the session's plane holds the other
scenarios' nodes.

Where kube-scheduler's sample starts, from v1.37.2's ``findNodesThatFitPod``: with 200 nodes its adaptive
share is 48 %, 96 nodes, raised to 100. It walks its node list from ``nextStartNodeIndex`` and after each
cycle moves that index on by the nodes it processed, so where the first sample starts depends on every
cycle before it (the holders' included; a CI run found the free node inside it). The cycle of a pod that
fits every node kube-scheduler checks processes exactly 100 of them, so the next sample is the other 100
nodes: a preemptor whose sample holds the free node binds there at once, and the next one's sample
misses it."""

from __future__ import annotations

import contextlib
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


def _extender_claim_url(plane: ControlPlane, sc: Scenario, claim: str) -> str:
    return f"{plane.extender_url}/api/v1/namespaces/{sc.namespace}/resourceclaims/{claim}"


def _claim_gone(plane: ControlPlane, sc: Scenario, claim: str) -> bool:
    """Gone from the API and from the extender's index, its device free again."""
    return httpx.get(_extender_claim_url(plane, sc, claim), timeout=5.0).status_code == 404


def _place(plane: ControlPlane, sc: Scenario, name: str, priority_class: str) -> tuple[float, list[str]]:
    """Pod ``name`` with a claim of its own, seen by the extender before the pod exists (an attempt on a
    claim the extender has not seen yet is no sample miss): seconds from its creation to bound, and its
    sample misses (kube-scheduler records the event soon after the attempt: waited for a few seconds)."""
    sc.add_claim(f"{name}-gpu")
    url = _extender_claim_url(plane, sc, f"{name}-gpu")
    poll(lambda: httpx.get(url, timeout=5.0).status_code == 200, timeout=30, what="claim seen")
    created = time.monotonic()
    sc.add_pod(name, claim=f"{name}-gpu", priority_class=priority_class)
    poll(lambda: sc.outcomes().get(name) == "bound", timeout=60, interval=0.2, what=f"{name} bound")
    waited = time.monotonic() - created

    def misses() -> list[str]:
        return [m for m in _failed_scheduling(sc, name) if "outside kube-scheduler's sample" in m]

    with contextlib.suppress(TimeoutError):
        poll(misses, timeout=5, interval=0.5, what=f"{name}'s sample miss")
    return waited, misses()


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

    waited, misses = _place(sampling_plane, sc, "preemptor", high)
    name = "preemptor"
    if not misses:
        # kube-scheduler's sample held the free node and the pod bound there (asserted below for the second
        # pod): free it again; that cycle moved the next sample to the other 100 nodes.
        sc.kube.delete("Pod", name, sc.namespace)
        sc.kube.delete("ResourceClaim", f"{name}-gpu", sc.namespace)
        poll(
            lambda: sc.pod_gone(name) and _claim_gone(sampling_plane, sc, f"{name}-gpu"),
            timeout=60,
            what="freed",
        )
        sc.pods.remove(name)
        name = "preemptor-2"
        waited, misses = _place(sampling_plane, sc, name, high)

    # The first attempt was answered as a miss: the sample's nodes unresolvable (so DefaultPreemption had
    # no candidate), naming the node outside it that has the device.
    assert misses, _failed_scheduling(sc, name)
    assert nodes[-1] in misses[0]
    assert sc.pod(name)["spec"]["nodeName"] == nodes[-1]
    claim = sc.kube.get("ResourceClaim", f"{name}-gpu", sc.namespace)
    assert allocated_devices(claim) == [(sc.driver, nodes[-1], "gpu-0")]
    assert not any(sc.pod_gone(f"holder-{i}") for i in range(NODES - 1))
    assert_bound_pods_hold_their_claims(sc)
    # Retried at once (kube-scheduler's 1 s backoff), not after kube-scheduler's 5-minute flush.
    assert waited < 30, waited
    sc.notes.append(f"sample miss: the preemptor bound {waited:.1f} s after its creation, nothing evicted")
    sc.finish()  # its row in the session's summary (the scenario fixture finishes the session plane's)
