"""``RejectedPods``: which pods the filter rejected are due for a requeue signal after which event."""

from __future__ import annotations

from typing import Any

import pytest

from allocator.cel.expr_engine import ExprEngine
from allocator.selectors import SelectorCache
from app.scheduling.decisions import FilterOutcome
from app.scheduling.requeue import PodRef, RejectedPods
from app.state.cluster import ClusterState, object_key
from tests.builders import claim, device, device_class, node, pod, request, resource_slice

NS = "ml"
GPU, NIC = "gpu.example.com", "nic.example.com"
REJECTED = FilterOutcome(failed={"n1": "cannot allocate all claims"})
PASSED = FilterOutcome(passed=["n1"])


class Cluster:
    """A state the test changes as an informer would: apply, then tell the observer."""

    def __init__(self, max_pods: int = 100, schedulers: tuple[str, ...] = ("default-scheduler",)) -> None:
        self.state = ClusterState()
        selectors = SelectorCache(ExprEngine())
        self.state.inventory.attach_selectors(selectors)
        self.due_calls = 0
        self.pods = RejectedPods(self.state, selectors, schedulers, max_pods, on_due=self._on_due)
        self.apply("Node", node("n1"))
        self.apply("DeviceClass", device_class("gpu", f'device.driver == "{GPU}"'))
        self.apply("DeviceClass", device_class("nic", f'device.driver == "{NIC}"'))

    def _on_due(self) -> None:
        self.due_calls += 1

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        self.state.apply(kind, obj)
        self.pods.observe(kind, object_key(kind, obj), obj)

    def remove(self, kind: str, key: str) -> None:
        self.state.remove(kind, key)
        self.pods.observe(kind, key, None)

    def reject(self, name: str, class_name: str = "gpu", **pod_fields: Any) -> dict[str, Any]:
        """A pod with its own claim on one device of ``class_name``, rejected by filter."""
        self.apply("ResourceClaim", claim(NS, f"{name}-c", [request("r", class_name)]))
        obj = pod(NS, name, [f"{name}-c"])
        obj["spec"].update(pod_fields)
        self.apply("Pod", obj)
        self.pods.filtered(obj, REJECTED, self.pods.mark())
        return obj

    def due(self) -> list[str]:
        return sorted(ref.name for ref in self.pods.take_due())


def test_a_slice_helps_the_pods_whose_class_matches_its_devices() -> None:
    cluster = Cluster()
    cluster.reject("wants-gpu")
    cluster.reject("wants-nic", "nic")
    cluster.apply("ResourceSlice", resource_slice("n1-gpus", GPU, "n1", [device("gpu-0")]))
    assert cluster.due() == ["wants-gpu"]
    assert cluster.due_calls == 1
    cluster.apply("ResourceSlice", resource_slice("n1-nics", NIC, "n1", [device("nic-0")]))
    assert cluster.due() == ["wants-nic"]


def test_a_deleted_slice_helps_nobody() -> None:
    cluster = Cluster()
    cluster.apply("ResourceSlice", resource_slice("n1-gpus", GPU, "n1", [device("gpu-0")]))
    cluster.reject("wants-gpu")
    cluster.remove("ResourceSlice", "n1-gpus")
    assert cluster.due() == []
    assert len(cluster.pods) == 1


def test_a_device_class_change_helps_the_pods_asking_for_it() -> None:
    cluster = Cluster()
    cluster.reject("wants-gpu")
    cluster.reject("wants-nic", "nic")
    cluster.apply("DeviceClass", device_class("nic", "true"))
    assert cluster.due() == ["wants-nic"]


def test_a_taint_rule_change_or_deletion_helps_every_rejected_pod() -> None:
    cluster = Cluster()
    rule = {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "maintenance"},
        "spec": {"deviceSelector": {"driver": GPU}, "taint": {"key": "down", "effect": "NoSchedule"}},
    }
    cluster.apply("DeviceTaintRule", rule)
    cluster.reject("a")
    cluster.reject("b", "nic")
    cluster.remove("DeviceTaintRule", "maintenance")
    assert cluster.due() == ["a", "b"]


def test_a_deallocated_or_deleted_claim_helps_every_rejected_pod_an_unallocated_one_nobody() -> None:
    cluster = Cluster()
    cluster.apply("ResourceSlice", resource_slice("n1-gpus", GPU, "n1", [device("gpu-0"), device("gpu-1")]))
    holders = []
    for name in ("holder-0", "holder-1"):
        held = claim(NS, name, [request("r", "gpu")])
        held["status"] = {
            "allocation": {
                "devices": {
                    "results": [{"request": "r", "driver": GPU, "pool": "n1", "device": f"gpu-{name[-1]}"}]
                }
            }
        }
        cluster.apply("ResourceClaim", held)
        holders.append(held)
    cluster.reject("waiting")
    cluster.apply("ResourceClaim", claim(NS, "new-and-unallocated", [request("r", "gpu")]))
    assert cluster.due() == []
    cluster.apply("ResourceClaim", {**holders[0], "status": {}})  # deallocated
    assert cluster.due() == ["waiting"]
    cluster.reject("waiting")  # tried again, rejected again (gpu-1 still held)
    cluster.remove("ResourceClaim", f"{NS}/holder-1")
    assert cluster.due() == ["waiting"]


def test_devices_freed_from_a_hold_help_every_rejected_pod() -> None:
    """A hold made at prioritize ends without its bind: no watch event says its devices are free."""
    cluster = Cluster()
    cluster.reject("gpu-pod")
    cluster.reject("nic-pod", "nic")
    assert cluster.due() == []
    cluster.pods.devices_freed()
    assert cluster.due() == ["gpu-pod", "nic-pod"]


def test_a_pod_leaves_when_bound_deleted_or_passed() -> None:
    cluster = Cluster()
    bound = cluster.reject("bound")
    cluster.reject("deleted")
    passed = cluster.reject("passed")
    cluster.apply("Pod", {**bound, "spec": {**bound["spec"], "nodeName": "n1"}})
    cluster.remove("Pod", f"{NS}/deleted")
    cluster.pods.filtered(passed, PASSED, cluster.pods.mark())
    assert len(cluster.pods) == 0
    cluster.apply("DeviceClass", device_class("gpu", "true"))
    assert cluster.due() == []


def test_only_pods_of_the_configured_schedulers_are_kept() -> None:
    cluster = Cluster(schedulers=("dra-scheduler",))
    cluster.reject("theirs")
    cluster.reject("ours", schedulerName="dra-scheduler")
    assert len(cluster.pods) == 1
    cluster.apply("DeviceClass", device_class("gpu", "true"))
    assert cluster.due() == ["ours"]


def test_the_set_is_bounded_the_oldest_rejection_goes_first() -> None:
    cluster = Cluster(max_pods=2)
    for name in ("first", "second", "third"):
        cluster.reject(name)
    cluster.reject("second")  # rejected again: now the newest
    cluster.reject("fourth")
    assert len(cluster.pods) == 2
    assert cluster.pods.evicted == 2
    cluster.apply("DeviceClass", device_class("gpu", "true"))
    assert cluster.due() == ["fourth", "second"]


def test_a_pod_is_due_once_for_a_burst_of_events() -> None:
    cluster = Cluster()
    cluster.reject("waiting")
    for i in range(5):
        cluster.apply("ResourceSlice", resource_slice(f"n1-gpus-{i}", GPU, "n1", [device(f"gpu-{i}")]))
    assert [ref.name for ref in cluster.pods.take_due()] == ["waiting"]
    assert cluster.pods.take_due() == []


def test_an_event_during_the_decision_makes_the_rejected_pod_due_at_once() -> None:
    """The answer was decided on the state before the slice: the pod must not wait for another event."""
    cluster = Cluster()
    cluster.apply("ResourceClaim", claim(NS, "late-c", [request("r", "gpu")]))
    late = pod(NS, "late", ["late-c"])
    cluster.apply("Pod", late)
    mark = cluster.pods.mark()
    cluster.apply("ResourceSlice", resource_slice("n1-gpus", GPU, "n1", [device("gpu-0")]))
    cluster.pods.filtered(late, REJECTED, mark)
    assert cluster.pods.take_due() == [PodRef(NS, "late", f"uid-pod-{NS}-late")]
    assert cluster.due_calls == 1


@pytest.mark.parametrize("unresolved", ["no-claim-yet", "extended-resource"])
def test_a_pod_whose_classes_cannot_be_told_is_helped_by_any_slice(unresolved: str) -> None:
    cluster = Cluster()
    if unresolved == "no-claim-yet":
        obj = pod(NS, "p", templates={"gpu": "one-gpu"})  # the resourceclaim controller has not run yet
    else:
        obj = pod(NS, "p")
        obj["spec"]["containers"][0]["resources"] = {"requests": {"example.com/gpu": "1"}}
    cluster.apply("Pod", obj)
    cluster.pods.filtered(obj, REJECTED, cluster.pods.mark())
    cluster.apply("ResourceSlice", resource_slice("n1-nics", NIC, "n1", [device("nic-0")]))
    assert cluster.due() == ["p"]
