"""Device scoring in filter (the chart's ``kubeScheduler.deviceScoring: filter``: the extender's
``--device-scoring=filter``, kube-scheduler's extender entry without ``prioritizeVerb``) on the real
kube-scheduler, on a control plane of its own (the session's serves the default).

Three nodes of 8 GPUs, no topology published: binpack scores a node by how full the pod leaves it, 0-10
(docs/features.md "Scoring and device selection": packing, weight 2, and the unknown intact groups, 0.5 at
weight 1; 10 x (2 x share used afterwards + 0.5) / 3, rounded half up): 3 for an empty node, 6 for one
with 4 in use, 7 with 5 in use. kube-scheduler's NodeAffinity scores a preferred node 100 times its
weight 2, more than the device score's whole range at the shipped extender weight (0-200): with
prioritize a preferred empty node could win; in filter it is never passed on."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.controlplane import ControlPlane
from e2e.workload import Scenario, allocated_devices, assert_bound_pods_hold_their_claims
from tests.e2e.conftest import RUN_DIR, started_plane

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def filter_scoring_plane() -> Iterator[ControlPlane]:
    directory = RUN_DIR.with_name(RUN_DIR.name + "-device-scoring")
    with started_plane(directory, device_scoring="filter") as plane:
        yield plane


def _requests(plane: ControlPlane, verb: str) -> float:
    text = httpx.get(f"{plane.extender_url}/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "dra_extender_request_duration_seconds_count" and sample.labels.get("verb") == verb
    )


def test_the_best_device_nodes_win_over_preferences_which_break_their_ties(
    filter_scoring_plane: ControlPlane,
) -> None:
    sc = Scenario.create(filter_scoring_plane, "device-scoring")
    first, second, empty = sc.add_nodes(3, 8)
    sc.add_template("one-gpu")
    for i in range(4):
        sc.add_pod(f"holder-{first}-{i}", template="one-gpu", node=first)
        sc.add_pod(f"holder-{second}-{i}", template="one-gpu", node=second)
    sc.wait_settled(timeout=120, expect_bound=8)

    # first and second tie at 6: kube-scheduler's preference chooses between them.
    sc.add_pod("tie", template="one-gpu", prefers=second)
    sc.wait_settled(timeout=60, expect_bound=9)
    assert sc.pod("tie")["spec"]["nodeName"] == second
    # second (7) is now strictly best, over first (6) and the preferred empty node (3).
    sc.add_pod("packed", template="one-gpu", prefers=empty)
    sc.wait_settled(timeout=60, expect_bound=10)
    assert sc.pod("packed")["spec"]["nodeName"] == second
    devices = [d for claim in sc.claims() for d in allocated_devices(claim) if d[1] == second]
    assert len(devices) == len(set(devices)) == 6

    assert _requests(filter_scoring_plane, "filter") >= 2
    assert _requests(filter_scoring_plane, "prioritize") == 0
    assert_bound_pods_hold_their_claims(sc)
    sc.finish()
