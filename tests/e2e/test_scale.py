"""Scenarios 6-9 at scale: a fill-up of 50 nodes x 8 devices with 400 pods created at once, churn
(deleted pods free devices for waiting ones), a fill-up of more nodes than kube-scheduler's sample,
restarts of the extender and of kube-apiserver in the middle of a fill-up, and the same workload through
kube-scheduler's in-tree DynamicResources plugin. Pods waiting for an event: ``test_requeue.py``."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

from bench.bench_k8s import SchedulerProfile
from e2e.kube import poll
from e2e.workload import (
    IN_TREE_SCHEDULER,
    Scenario,
    allocated_devices,
    assert_bound_pods_hold_their_claims,
    devices_in_two_claims,
    in_tree_scheduler,
)

pytestmark = pytest.mark.e2e

NODES, DEVICES = 50, 8


def _fill(sc: Scenario, pods: int, *, scheduler: str | None = None, prefix: str = "pod") -> None:
    for i in range(pods):
        kwargs = {"scheduler": scheduler} if scheduler else {}
        sc.add_pod(f"{prefix}-{i}", template="one-gpu", **kwargs)


def _unschedulable_reasons(sc: Scenario) -> dict[str, str]:
    reasons = {}
    for pod in sc.kube.list("Pod", sc.namespace):
        for condition in pod.get("status", {}).get("conditions", []):
            if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
                reasons[pod["metadata"]["name"]] = condition.get("message", "")
    return reasons


def test_fill_up_and_churn(scenario: Scenario) -> None:
    scenario.add_nodes(NODES, DEVICES)
    scenario.add_template("one-gpu")
    # 400 devices, 410 pods: exactly 400 are bound and 10 wait with a reason.
    _fill(scenario, NODES * DEVICES + 10)
    states = scenario.wait_settled(timeout=900, expect_bound=NODES * DEVICES)
    assert Counter(states.values()) == {"bound": NODES * DEVICES, "unschedulable": 10}
    reasons = _unschedulable_reasons(scenario)
    assert len(reasons) == 10 and all(reasons.values()), reasons
    assert devices_in_two_claims(scenario.kube) == {}
    assert_bound_pods_hold_their_claims(scenario)

    # Churn: delete 10 bound pods; the garbage collector deletes their claims, the resourceclaim controller
    # deallocates them, and the 10 waiting pods are scheduled on the freed devices.
    bound = sorted(n for n, s in states.items() if s == "bound")[:10]
    freed_at = time.monotonic()
    for name in bound:
        scenario.kube.delete("Pod", name, scenario.namespace)
        scenario.pods.remove(name)
    states = scenario.wait_settled(timeout=600, expect_bound=NODES * DEVICES)
    waited = time.monotonic() - freed_at
    assert Counter(states.values()) == {"bound": NODES * DEVICES}
    assert devices_in_two_claims(scenario.kube) == {}
    assert_bound_pods_hold_their_claims(scenario)
    scenario.notes.append(f"churn: 10 waiting pods bound {waited:.1f} s after their devices were freed")


def test_fill_up_beyond_the_sample(scenario: Scenario) -> None:
    """150 nodes of one device: more than the 100 nodes kube-scheduler would score, so while most fit the
    extender passes on a sample of them (``app.scheduling.sampling``). Every device still gets a pod: once
    fewer fit than the sample's size, every one that fits is passed on."""
    scenario.add_nodes(150, 1)
    scenario.add_template("one-gpu")
    _fill(scenario, 150)
    states = scenario.wait_settled(timeout=600, expect_bound=150)
    assert Counter(states.values()) == {"bound": 150}
    assert devices_in_two_claims(scenario.kube) == {}
    assert_bound_pods_hold_their_claims(scenario)


def test_restarts_mid_fill_up(scenario: Scenario) -> None:
    scenario.add_nodes(20, 4)
    scenario.add_template("one-gpu")
    _fill(scenario, 90)  # 80 devices
    poll(lambda: Counter(scenario.outcomes().values())["bound"] >= 20, timeout=300, what="a quarter bound")
    scenario.plane.components["dra-extender"].restart(signal.SIGKILL)  # a crash, in the middle of binds
    poll(lambda: Counter(scenario.outcomes().values())["bound"] >= 40, timeout=300, what="half bound")
    scenario.plane.components["kube-apiserver"].restart()
    states = scenario.wait_settled(timeout=600, expect_bound=80)
    assert Counter(states.values()) == {"bound": 80, "unschedulable": 10}
    assert devices_in_two_claims(scenario.kube) == {}
    assert_bound_pods_hold_their_claims(scenario)
    # No orphan: every allocated claim of the scenario is reserved for a bound pod.
    bound_uids = {scenario.pod(n)["metadata"]["uid"] for n, s in states.items() if s == "bound"}
    for claim in scenario.claims():
        if allocated_devices(claim):
            assert {r["uid"] for r in claim["status"]["reservedFor"]} <= bound_uids, claim["metadata"]["name"]


def test_in_tree_plugin_agrees(scenario: Scenario) -> None:
    """The same nodes and pods, once through the extender and once through the in-tree plugin (another
    driver and namespace, so the two runs never share devices): the same number bound and unschedulable,
    and each pod's outcome the same."""
    plane = scenario.plane
    in_tree_scheduler(plane)
    twin = Scenario.create(plane, f"{scenario.name}-in-tree")
    for sc in (scenario, twin):
        sc.add_nodes(10, 4)
        sc.add_template("one-gpu")
        sc.add_template("three-gpus", count=3)
    # 40 devices: 10 pods of 3 fit one per node (30 devices), then 10 singles fill the last device of
    # each node; 5 more singles and 2 more triples cannot fit.
    for sc, scheduler in ((scenario, None), (twin, IN_TREE_SCHEDULER)):
        kwargs = {"scheduler": scheduler} if scheduler else {}
        for i in range(12):
            sc.add_pod(f"triple-{i}", template="three-gpus", **kwargs)
        sc.wait_settled(timeout=300, expect_bound=10)
        for i in range(15):
            sc.add_pod(f"single-{i}", template="one-gpu", **kwargs)
    ours = scenario.wait_settled(timeout=300, expect_bound=20)
    theirs = twin.wait_settled(timeout=300, expect_bound=20)
    # Which two triples lose depends on queue order; how many of each shape are bound does not.
    by_shape = lambda states: Counter((n.split("-")[0], s) for n, s in states.items())  # noqa: E731
    assert (
        by_shape(ours)
        == by_shape(theirs)
        == {
            ("triple", "bound"): 10,
            ("triple", "unschedulable"): 2,
            ("single", "bound"): 10,
            ("single", "unschedulable"): 5,
        }
    )
    assert devices_in_two_claims(scenario.kube) == {}
    assert_bound_pods_hold_their_claims(scenario)
    assert_bound_pods_hold_their_claims(twin)


def test_bench_k8s_profiles_a_kube_scheduler(scenario: Scenario, tmp_path) -> None:
    """bench-k8s --profile: kube-scheduler serves a CPU profile without credentials, written as pprof's
    gzipped protobuf."""
    profile = SchedulerProfile(in_tree_scheduler(scenario.plane), 1, tmp_path / "in-tree.pprof")
    summary = profile.summary(lines=5)
    assert profile.path.read_bytes()[:2] == b"\x1f\x8b"
    assert "Type: cpu" in summary, summary
