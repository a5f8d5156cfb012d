"""Node-allocatable resources through DRA (``app.scheduling.nodeallocatable``, gate
DRANodeAllocatableResources): statuses as upstream's buildNodeAllocatableDRAInfo writes them, the pod's demand
as PodRequests counts it, and the node fit in filter. Every number below is worked out by hand in the
comments."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import pytest

from allocator.cel.expr_engine import ExprEngine
from allocator.errors import InvalidInputError
from allocator.features import FeatureGates
from allocator.selectors import SelectorCache
from app.scheduling.nodeallocatable import ClaimUse, claim_statuses, pod_demand
from app.scheduling.sampling import NodeSampler
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState
from tests.builders import claim, device, device_class, node, pod, request, resource_slice

CPU = "cpu.example.com"
NS = "ml"
ON = dataclasses.replace(FeatureGates(), DRANodeAllocatableResources=True)


def ccx(name: str) -> dict[str, Any]:
    """A cache complex of 4 CPUs: the device is the node's CPUs (mapping)."""
    obj = device(name)
    obj["nodeAllocatableResources"] = {"cpu": {"mapping": {"deviceMultiplier": "4"}}}
    return obj


def with_allocatable(name: str, **allocatable: str) -> dict[str, Any]:
    obj = node(name)
    obj["status"] = {"allocatable": allocatable, "capacity": allocatable}
    return obj


def requesting(obj: dict[str, Any], cpu: str) -> dict[str, Any]:
    obj["spec"]["containers"][0]["resources"] = {
        **obj["spec"]["containers"][0].get("resources", {}),
        "requests": {"cpu": cpu},
    }
    return obj


def _service(gates: FeatureGates, *objects: tuple[str, dict[str, Any]]) -> SchedulingService:
    base = [
        ("Node", with_allocatable("n1", cpu="8", memory="32Gi")),
        ("DeviceClass", device_class("ccx", f'device.driver == "{CPU}"')),
        ("ResourceSlice", resource_slice("n1-ccx", CPU, "n1", [ccx("ccx-0"), ccx("ccx-1")])),
    ]
    state = ClusterState.from_objects([*base, *objects], gates)
    return SchedulingService(state, SelectorCache(ExprEngine()))


def _pod(name: str, devices: int, cpu: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("ResourceClaim", claim(NS, name, [request("cores", "ccx", devices)])),
        ("Pod", requesting(pod(NS, name, [name]), cpu)),
    ]


def test_the_mapped_cpus_count_in_the_fit_and_go_to_the_pod_status_at_bind():
    # 2 CPUs of requests + one CCX of 4 = 6 of the node's 8: fits; the status names the claim, the
    # container using it and the 4 mapped CPUs.
    svc = _service(ON, *_pod("p", 1, "2"))
    outcome = svc.filter(svc.state.get("Pod", f"{NS}/p"), ["n1"])
    assert outcome.passed == ["n1"]
    svc.bind(NS, "p", f"uid-pod-{NS}-p", "n1")
    bound = svc.state.get("Pod", f"{NS}/p")
    assert bound["spec"]["nodeName"] == "n1"
    assert bound["status"]["nodeAllocatableResourceClaimStatuses"] == [
        {
            "resourceClaimName": "p",
            "containers": ["main"],
            "mapping": [{"name": "cpu", "quantity": "4"}],
            "overhead": [],
        }
    ]


def test_what_other_pods_on_the_node_request_counts():
    # A bound pod requests 3 CPUs: 8 - 3 = 5 left, the new pod needs 2 + 4 = 6: Insufficient cpu, but a
    # node of 8 could take 6 (resolvable). Two CCX (2 + 8 = 10 > 8) could never fit (unresolvable).
    other = requesting(pod(NS, "other"), "3")
    other["spec"]["nodeName"] = "n1"
    svc = _service(ON, ("Pod", other), *_pod("one", 1, "2"), *_pod("two", 2, "2"))
    reason = "Insufficient cpu (with the node-allocatable resources of the pod's devices)"
    one = svc.filter(svc.state.get("Pod", f"{NS}/one"), ["n1"])
    assert (one.passed, one.failed, one.unresolvable) == ([], {"n1": reason}, {})
    two = svc.filter(svc.state.get("Pod", f"{NS}/two"), ["n1"])
    assert (two.passed, two.failed, two.unresolvable) == ([], {}, {"n1": reason})


def test_with_the_gate_off_the_mapping_is_ignored():
    # Two CCX with 2 CPUs of requests would need 10 of 8 CPUs; without the gate only devices count.
    svc = _service(FeatureGates(), *_pod("two", 2, "2"))
    assert svc.filter(svc.state.get("Pod", f"{NS}/two"), ["n1"]).passed == ["n1"]
    svc.bind(NS, "two", f"uid-pod-{NS}-two", "n1")
    assert "nodeAllocatableResourceClaimStatuses" not in svc.state.get("Pod", f"{NS}/two")["status"]


def test_a_claim_with_a_mapped_device_is_not_shared():
    held = claim(NS, "held", [request("cores", "ccx")])
    held["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "cores", "driver": CPU, "pool": "n1", "device": "ccx-0"}]}
        },
        "reservedFor": [{"resource": "pods", "name": "first", "uid": "uid-first"}],
    }
    svc = _service(ON, ("ResourceClaim", held), ("Pod", pod(NS, "second", ["held"])))
    outcome = svc.filter(svc.state.get("Pod", f"{NS}/second"), ["n1"])
    reason = f"node allocatable resource claim {NS}/held has a mapped device and cannot be shared across pods"
    assert outcome.unresolvable == {"n1": reason}


def test_statuses_sum_mappings_by_capacity_and_overheads_per_claim():
    # Device "socket" maps memory through its consumed capacity: 3Gi consumed x 2 = 6Gi; a GPU adds an
    # overhead of 1Gi per pod and 512Mi per referencing container. Containers a and b use claim "mem";
    # init container i uses "gpu".
    slices = [
        {
            "spec": {
                "driver": "d",
                "pool": {"name": "p"},
                "devices": [
                    {
                        "name": "socket",
                        "nodeAllocatableResources": {
                            "memory": {
                                "mapping": {"capacityKey": "d/mem", "capacityMultiplier": "2"},
                                "overhead": {"perPod": "128Mi"},
                            }
                        },
                    },
                    {
                        "name": "gpu",
                        "nodeAllocatableResources": {
                            "memory": {"overhead": {"perPod": "1Gi", "perContainer": "512Mi"}}
                        },
                    },
                ],
            }
        }
    ]
    the_pod = {
        "spec": {
            "initContainers": [{"name": "i", "resources": {"claims": [{"name": "gpu"}]}}],
            "containers": [
                {"name": "a", "resources": {"claims": [{"name": "mem"}, {"name": "gpu"}]}},
                {"name": "b", "resources": {"claims": [{"name": "mem"}]}},
            ],
        }
    }
    mem = {
        "devices": {
            "results": [
                {"driver": "d", "pool": "p", "device": "socket", "consumedCapacity": {"d/mem": "3Gi"}}
            ]
        }
    }
    gpu = {"devices": {"results": [{"driver": "d", "pool": "p", "device": "gpu"}]}}
    statuses = claim_statuses(
        the_pod, [ClaimUse("ml/mem-claim", "mem", mem), ClaimUse("ml/gpu-claim", "gpu", gpu)], slices
    )
    assert statuses == [
        {
            "resourceClaimName": "gpu-claim",
            "containers": ["i", "a"],
            "mapping": [],
            "overhead": [{"name": "memory", "perPod": "1Gi", "perContainer": "512Mi"}],
        },
        {
            "resourceClaimName": "mem-claim",
            "containers": ["a", "b"],
            "mapping": [{"name": "memory", "quantity": "6Gi"}],
            "overhead": [{"name": "memory", "perPod": "128Mi"}],
        },
    ]
    # memory: 6Gi mapped + 128Mi + (1Gi + 2 containers x 512Mi) = 6Gi + 128Mi + 2Gi
    gib = 2**30
    assert pod_demand(the_pod, statuses) == {"memory": Fraction(8 * gib + 128 * 2**20)}


def test_pod_demand_follows_pod_requests():
    # Containers 1 + 0.5 CPU; sidecar s (restartPolicy Always) 0.25 joins them: 1.75. While init
    # container i runs, s already does: 2 + 0.25 = 2.25, the peak. Overhead 0.1: 2.35.
    the_pod = {
        "spec": {
            "initContainers": [
                {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "250m"}}},
                {"name": "i", "resources": {"requests": {"cpu": "2"}}},
            ],
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "1"}}},
                {"name": "b", "resources": {"requests": {"cpu": "500m"}}},
            ],
            "overhead": {"cpu": "100m"},
        }
    }
    assert pod_demand(the_pod, []) == {"cpu": Fraction(235, 100)}
    # Pod-level requests replace the containers' sum (the overhead still adds).
    the_pod["spec"]["resources"] = {"requests": {"cpu": "3"}}
    assert pod_demand(the_pod, []) == {"cpu": Fraction(31, 10)}


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"capacityKey": "d/mem", "capacityMultiplier": "2"}, "consumedCapacity is not set"),
        ({"deviceMultiplier": "four"}, "invalid quantity 'four'"),
    ],
)
def test_bad_mappings_name_the_claim_and_device(mapping, message):
    slices = [
        {
            "spec": {
                "driver": "d",
                "pool": {"name": "p"},
                "devices": [{"name": "x", "nodeAllocatableResources": {"memory": {"mapping": mapping}}}],
            }
        }
    ]
    allocation = {"devices": {"results": [{"driver": "d", "pool": "p", "device": "x"}]}}
    with pytest.raises(InvalidInputError, match=f"ResourceClaim ml/c, device x.*{message}"):
        claim_statuses({"spec": {}}, [ClaimUse("ml/c", "c", allocation)], slices)


def test_the_node_fit_runs_before_the_sample():
    """300 nodes with one CCX each; n0..n199 have 2 CPUs (a pod of 2 CPUs and one 4-CPU-mapped CCX does
    not fit), n200..n299 have 8. Two pods with equal claims: the second is answered from the shape's kept
    answer, and its sample must be taken among the 100 nodes that still fit after the node fit, not cut
    to 144 of the 300 first (then the fit left none)."""
    names = [f"n{i}" for i in range(300)]
    # A selector reading a per-node attribute keeps the nodes from being equivalent.
    objects = [
        (
            "DeviceClass",
            device_class("ccx", f'device.driver == "{CPU}" && device.attributes["{CPU}"].serial >= 0'),
        )
    ]
    for i, name in enumerate(names):
        objects.append(("Node", with_allocatable(name, cpu="8" if i >= 200 else "2", memory="32Gi")))
        serial = dict(ccx("ccx-0"), attributes={"serial": {"int": i}})
        objects.append(("ResourceSlice", resource_slice(f"{name}-ccx", CPU, name, [serial])))
    objects += _pod("a", 1, "2") + _pod("b", 1, "2")
    state = ClusterState.from_objects(objects, ON)
    service = SchedulingService(state, SelectorCache(ExprEngine()))
    sampler = NodeSampler(0)
    for name in ("a", "b"):
        outcome = sampler.sample(
            service.filter(state.get("Pod", f"{NS}/{name}"), names, sampler=sampler), names
        )
        assert outcome.passed == names[200:], name  # 100 fit: fewer than 144, every one passed on


def test_alike_nodes_are_each_fitted():
    """Three alike 2-CPU nodes with one CCX each (4 CPUs mapped): a pod of 2 CPUs and one CCX needs 6 on
    each, so none fits. The decision shared between alike nodes chose devices only on the first; the
    others must be fitted too."""
    names = ["n0", "n1", "n2"]
    objects = [("DeviceClass", device_class("ccx", f'device.driver == "{CPU}"'))]
    for name in names:
        objects.append(("Node", with_allocatable(name, cpu="2", memory="32Gi")))
        objects.append(("ResourceSlice", resource_slice(f"{name}-ccx", CPU, name, [ccx("ccx-0")])))
    objects += _pod("a", 1, "2")
    state = ClusterState.from_objects(objects, ON)
    service = SchedulingService(state, SelectorCache(ExprEngine()))
    outcome = service.filter(state.get("Pod", f"{NS}/a"), names)
    assert outcome.passed == []
    assert sorted(outcome.unresolvable) == names
    assert all("Insufficient cpu" in reason for reason in outcome.unresolvable.values())
