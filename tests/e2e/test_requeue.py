"""Requeue of rejected pods: pods waiting for devices are bound soon after the event that frees or brings
them, through the extender (its requeue signal, ``app.kube.requeue``) and through kube-scheduler's in-tree
DynamicResources plugin (its queueing hints), each in a namespace and with a driver of its own: a driver
publishing its ResourceSlice, a DeviceTaintRule deleted, the pods holding the devices deleted.

Each scenario prints the seconds from the event to each waiting pod bound (p50 and p99 per mode) under the
session's summary table; it asserts only that every waiting pod is bound within ``BOUND_WITHIN`` seconds,
far below kube-scheduler's periodic flush of unschedulable pods (5 minutes)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from bench.bench_k8s import BoundWatch
from e2e.kube import poll
from e2e.workload import (
    EXTENDER_SCHEDULER,
    IN_TREE_SCHEDULER,
    Scenario,
    assert_bound_pods_hold_their_claims,
    devices_in_two_claims,
    in_tree_scheduler,
)

pytestmark = pytest.mark.e2e

BOUND_WITHIN = 15.0
WAITING = 4


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _wait_for_event(
    scenario: Scenario,
    what: str,
    prepare: Callable[[Scenario, str], None],
    event: Callable[[Scenario], None],
    waiting: int = WAITING,
) -> None:
    """For each mode: ``prepare`` the scenario (nodes, objects, pods already bound), add ``waiting`` pods
    that cannot be placed yet, wait until kube-scheduler calls each unschedulable, then cause ``event`` and
    time every waiting pod until bound."""
    in_tree_scheduler(scenario.plane)
    twin = Scenario.create(scenario.plane, f"{scenario.name}-it")
    times: dict[str, list[float]] = {}
    for mode, sc, scheduler in (
        ("extender", scenario, EXTENDER_SCHEDULER),
        ("in-tree", twin, IN_TREE_SCHEDULER),
    ):
        prepare(sc, scheduler)
        before = set(sc.pods)
        sc.add_template("one-gpu-waiting")
        names = [f"waiting-{i}" for i in range(waiting)]
        for name in names:
            sc.add_pod(name, template="one-gpu-waiting", scheduler=scheduler)
        states = sc.wait_settled(timeout=120)
        assert {states[n] for n in names} == {"unschedulable"}, states
        assert all(states[n] == "bound" for n in before), states
        watch = BoundWatch(sc.plane.client, sc.namespace)
        time.sleep(1.0)  # the watch is open
        happened = time.monotonic()
        event(sc)
        try:
            poll(
                lambda: all(n in watch.bound for n in names),  # noqa: B023 - polled at once
                timeout=BOUND_WITHIN,
                interval=0.1,
                what=f"{mode}: {waiting} waiting pods bound within {BOUND_WITHIN:g} s of {what}",
            )
        finally:
            watch.stop()
        times[mode] = [watch.bound[n] - happened for n in names]
        assert devices_in_two_claims(sc.kube) == {}
        assert_bound_pods_hold_their_claims(sc)
    scenario.notes.append(
        f"requeue after {what}: "
        + ", ".join(
            f"{mode} p50 {_percentile(t, 0.5):.2f} s p99 {_percentile(t, 0.99):.2f} s"
            for mode, t in times.items()
        )
    )


def test_devices_published_after_the_pods(scenario: Scenario) -> None:
    """A driver publishes its ResourceSlice after the pods were rejected. kube-scheduler watches no
    ResourceSlice for the extender's pods: the extender's requeue signal moves them."""

    def prepare(sc: Scenario, scheduler: str) -> None:
        sc.add_nodes(1, 0)
        sc.kube.delete("ResourceSlice", f"{sc.nodes[0]}-gpus")

    def publish(sc: Scenario) -> None:
        sc.kube.create(sc.slice_for(sc.nodes[0], WAITING))

    _wait_for_event(scenario, "a ResourceSlice published", prepare, publish)


def test_device_taint_rule_deleted(scenario: Scenario) -> None:
    """Every device is tainted NoSchedule by a DeviceTaintRule; deleting the rule frees them."""

    def prepare(sc: Scenario, scheduler: str) -> None:
        sc.kube.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceTaintRule",
                "metadata": {"name": f"{sc.name}-maintenance"},
                "spec": {
                    "deviceSelector": {"driver": sc.driver},
                    "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"},
                },
            }
        )
        time.sleep(1.0)  # both schedulers' watches have the rule before the devices appear
        sc.add_nodes(1, WAITING)

    def untaint(sc: Scenario) -> None:
        sc.kube.delete("DeviceTaintRule", f"{sc.name}-maintenance")

    _wait_for_event(scenario, "a DeviceTaintRule deleted", prepare, untaint)


def test_holder_pods_deleted(scenario: Scenario) -> None:
    """Every device is held by a bound pod; deleting those pods deallocates their claims (the
    resourceclaim controller, then the garbage collector) and the waiting pods take the devices."""

    def prepare(sc: Scenario, scheduler: str) -> None:
        sc.add_nodes(1, WAITING)
        sc.add_template("one-gpu")
        for i in range(WAITING):
            sc.add_pod(f"holder-{i}", template="one-gpu", scheduler=scheduler)
        sc.wait_settled(timeout=120, expect_bound=WAITING)

    def delete_holders(sc: Scenario) -> None:
        for i in range(WAITING):
            sc.kube.delete("Pod", f"holder-{i}", sc.namespace)
            sc.pods.remove(f"holder-{i}")

    _wait_for_event(scenario, "the holder pods deleted", prepare, delete_holders)
