"""Extended resources backed by DRA (KEP-5004): class mapping, the generated claim, filter/prioritize/bind.

Expected request names, counts and mappings are worked out by hand from upstream's rules
(extender-protocol.md §4.4, ``extendeddynamicresources.go``): ``container-<i>-request-<j>`` with ``i`` the
index in initContainers + containers and ``j`` the index of the name among the container's sorted request
names; non-sidecar init containers reuse the long-lived containers' requests at or after their index and
only the largest init request per name is kept.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from allocator.cel.expr_engine import ExprEngine
from allocator.features import FeatureGates
from allocator.selectors import SelectorCache
from app.cli.simulate import simulate
from app.explain.pod import explain_pod
from app.explain.summary import summarize_pod
from app.scheduling.binder import BindError, BindPlan
from app.scheduling.extended import (
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    DeviceClassResolver,
    extended_claim_name,
    find_extended_claim,
    is_dra_extended_resource_name,
    pod_extended_resources,
)
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState
from app.state.podclaims import ClaimNotReady
from tests.builders import claim, device, device_class, node, request, resource_slice

DRIVER = "gpu.example.com"
GPU = "example.com/gpu"
IMPLICIT = "deviceclass.resource.kubernetes.io/gpu.example.com"
NS = "default"
POD_UID = "uid-pod-default-p"

Obj = dict[str, Any]


# --- builders -------------------------------------------------------------------------------------------


def gpu_class(name: str = "gpu.example.com", resource: str | None = GPU, created: str | None = None) -> Obj:
    obj = device_class(name, f'device.driver == "{DRIVER}"')
    if resource is not None:
        obj["spec"]["extendedResourceName"] = resource
    if created is not None:
        obj["metadata"]["creationTimestamp"] = created
    return obj


def container(
    name: str,
    limits: dict[str, Any] | None = None,
    requests: dict[str, Any] | None = None,
    restart_policy: str | None = None,
) -> Obj:
    c: Obj = {"name": name, "image": "registry.example/app:1"}
    resources: Obj = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    if resources:
        c["resources"] = resources
    if restart_policy:
        c["restartPolicy"] = restart_policy
    return c


def xpod(
    name: str = "p",
    *containers: Obj,
    init: list[Obj] | None = None,
    uid: str | None = None,
    claims: list[str] | None = None,
    created: str = "2026-01-01T00:00:00Z",
) -> Obj:
    spec: Obj = {"containers": list(containers) or [container("main", {GPU: 1})]}
    if init:
        spec["initContainers"] = init
    if claims:
        spec["resourceClaims"] = [{"name": c, "resourceClaimName": c} for c in claims]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": uid or f"uid-pod-{NS}-{name}",
            "creationTimestamp": created,
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def gpu_node(name: str, gpus: int = 2, allocatable: dict[str, str] | None = None) -> list[tuple[str, Obj]]:
    obj = node(name)
    if allocatable:
        obj["status"] = {"allocatable": allocatable}
    objects = [("Node", obj)]
    if gpus:
        objects.append(
            (
                "ResourceSlice",
                resource_slice(f"{name}-gpus", DRIVER, name, [device(f"gpu-{i}") for i in range(gpus)]),
            )
        )
    return objects


def service(*objects: tuple[str, Obj], gates: FeatureGates | None = None) -> SchedulingService:
    state = ClusterState.from_objects(list(objects), gates)
    return SchedulingService(state, SelectorCache(ExprEngine()))


def requests_of(ext_claim) -> list[tuple[str, str, int]]:
    return [
        (r["name"], r["exactly"]["deviceClassName"], r["exactly"]["count"])
        for r in ext_claim.obj["spec"]["devices"]["requests"]
    ]


def mappings_of(ext_claim) -> list[tuple[str, str, str]]:
    return [(m.container_name, m.resource_name, m.request_name) for m in ext_claim.mappings]


def plan(pod: Obj, *classes: Obj, node_obj: Obj | None = None, claims: dict[str, Obj] | None = None):
    ext = pod_extended_resources(pod, classes or [gpu_class()], claims or {}, FeatureGates())
    assert ext is not None
    return ext.claim_for_node(node_obj)


def result(req: str, dev: str, pool: str = "n1") -> Obj:
    return {"request": req, "driver": DRIVER, "pool": pool, "device": dev}


# --- names and class mapping ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("nvidia.com/gpu", True),
        ("example.com/gpu", True),
        (IMPLICIT, True),
        ("deviceclass.resource.kubernetes.io/", False),
        ("cpu", False),
        ("memory", False),
        ("hugepages-2Mi", False),
        ("kubernetes.io/batch-slots", False),
        ("requests.nvidia.com/gpu", False),
    ],
)
def test_dra_extended_resource_names(name, expected):
    assert is_dra_extended_resource_name(name) is expected


def test_resolver_maps_explicit_and_implicit_names():
    resolver = DeviceClassResolver([gpu_class("a", "example.com/gpu"), gpu_class("b", None)])
    assert resolver.class_for("example.com/gpu") == "a"
    # Every class, with or without extendedResourceName, is reachable under the implicit name.
    assert resolver.class_for("deviceclass.resource.kubernetes.io/a") == "a"
    assert resolver.class_for("deviceclass.resource.kubernetes.io/b") == "b"
    assert resolver.class_for("deviceclass.resource.kubernetes.io/missing") is None
    assert resolver.class_for("example.com/other") is None


def test_resolver_newest_class_wins_a_shared_name_ties_go_to_the_first_name():
    older = gpu_class("zz-old", GPU, created="2026-01-01T00:00:00Z")
    newer = gpu_class("zz-new", GPU, created="2026-02-01T00:00:00Z")
    assert DeviceClassResolver([newer, older]).class_for(GPU) == "zz-new"
    assert DeviceClassResolver([older, newer]).class_for(GPU) == "zz-new"
    same_b = gpu_class("b", GPU, created="2026-03-01T00:00:00Z")
    same_a = gpu_class("a", GPU, created="2026-03-01T00:00:00Z")
    assert DeviceClassResolver([same_b, same_a]).class_for(GPU) == "a"
    assert DeviceClassResolver([same_a, same_b]).class_for(GPU) == "a"


def test_no_extended_resources_no_plan():
    assert (
        pod_extended_resources(xpod("p", container("c", {"cpu": "1"})), [gpu_class()], {}, FeatureGates())
        is None
    )
    # A name no class maps: kube-scheduler's NodeResourcesFit handles it, not DRA.
    pod = xpod("p", container("c", {"other.example.com/fpga": 1}))
    assert pod_extended_resources(pod, [gpu_class()], {}, FeatureGates()) is None
    # Gate off: the whole feature is off.
    pod = xpod("p", container("c", {GPU: 1}))
    assert pod_extended_resources(pod, [gpu_class()], {}, FeatureGates(DRAExtendedResource=False)) is None
    # Zero quantity is not a request.
    assert (
        pod_extended_resources(xpod("p", container("c", {GPU: 0})), [gpu_class()], {}, FeatureGates()) is None
    )


# --- the generated claim --------------------------------------------------------------------------------


def test_claim_shape_for_one_container():
    pod = xpod("trainer", container("main", {GPU: 2}))
    ext = plan(pod)
    name = extended_claim_name(NS, "trainer")
    assert (
        name.startswith("trainer-extended-resources-") and len(name) == len("trainer-extended-resources-") + 5
    )
    meta = ext.obj["metadata"]
    assert meta["name"] == name
    assert meta["generateName"] == "trainer-extended-resources-"
    assert meta["namespace"] == NS
    assert meta["annotations"] == {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "trainer",
            "uid": "uid-pod-default-trainer",
            "controller": True,
        }
    ]
    assert ext.obj["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-0",
            "exactly": {"deviceClassName": "gpu.example.com", "allocationMode": "ExactCount", "count": 2},
        }
    ]
    assert ext.pod_status() == {
        "requestMappings": [
            {"containerName": "main", "resourceName": GPU, "requestName": "container-0-request-0"}
        ],
        "resourceClaimName": name,
    }


def test_request_index_counts_every_request_name_of_the_container_sorted():
    # Sorted names: cpu, example.com/gpu, memory -> the GPU is request 1; limits fill in for requests.
    pod = xpod("p", container("main", limits={GPU: 1, "memory": "1Gi"}, requests={"cpu": "500m"}))
    ext = plan(pod)
    assert requests_of(ext) == [("container-0-request-1", "gpu.example.com", 1)]


def test_implicit_name_and_explicit_name_in_one_container():
    pod = xpod("p", container("main", {GPU: 1, "deviceclass.resource.kubernetes.io/other": 2}))
    ext = plan(pod, gpu_class(), gpu_class("other", None))
    # Names sorted: deviceclass.resource.kubernetes.io/other (index 0), example.com/gpu (index 1).
    assert requests_of(ext) == [
        ("container-0-request-0", "other", 2),
        ("container-0-request-1", "gpu.example.com", 1),
    ]
    assert mappings_of(ext) == [
        ("main", "deviceclass.resource.kubernetes.io/other", "container-0-request-0"),
        ("main", GPU, "container-0-request-1"),
    ]


def test_requests_sorted_by_name_as_strings():
    containers = [container(f"c{i}", {GPU: 1} if i in (2, 10) else {"cpu": "1"}) for i in range(11)]
    ext = plan(xpod("p", *containers))
    # "container-10-..." sorts before "container-2-..."; mappings keep container order.
    assert [r[0] for r in requests_of(ext)] == ["container-10-request-0", "container-2-request-0"]
    assert mappings_of(ext) == [("c2", GPU, "container-2-request-0"), ("c10", GPU, "container-10-request-0")]


def test_init_container_reuses_a_later_containers_request():
    # init (index 0) wants 1, main (index 1) wants 2: main's request covers the init container.
    pod = xpod("p", container("main", {GPU: 2}), init=[container("setup", {GPU: 1})])
    ext = plan(pod)
    assert requests_of(ext) == [("container-1-request-0", "gpu.example.com", 2)]
    assert mappings_of(ext) == [
        ("main", GPU, "container-1-request-0"),
        ("setup", GPU, "container-1-request-0"),
    ]


def test_init_container_asks_only_for_what_later_containers_do_not_cover():
    pod = xpod("p", container("main", {GPU: 1}), init=[container("setup", {GPU: 3})])
    ext = plan(pod)
    assert requests_of(ext) == [
        ("container-0-request-0", "gpu.example.com", 2),
        ("container-1-request-0", "gpu.example.com", 1),
    ]
    assert mappings_of(ext) == [
        ("main", GPU, "container-1-request-0"),
        ("setup", GPU, "container-1-request-0"),
        ("setup", GPU, "container-0-request-0"),
    ]


def test_only_the_largest_init_request_is_kept():
    pod = xpod(
        "p",
        container("main", {"cpu": "1"}),
        init=[container("a", {GPU: 1}), container("b", {GPU: 2}), container("c", {GPU: 1})],
    )
    ext = plan(pod)
    assert requests_of(ext) == [("container-1-request-0", "gpu.example.com", 2)]
    assert mappings_of(ext) == [
        ("a", GPU, "container-1-request-0"),
        ("b", GPU, "container-1-request-0"),
        ("c", GPU, "container-1-request-0"),
    ]


def test_sidecar_is_long_lived_and_reusable_only_by_earlier_init_containers():
    # Order: init "early" (0), sidecar "proxy" (1, restartPolicy Always), init "late" (2), main (3).
    pod = xpod(
        "p",
        container("main", {"cpu": "1"}),
        init=[
            container("early", {GPU: 1}),
            container("proxy", {GPU: 1}, restart_policy="Always"),
            container("late", {GPU: 1}),
        ],
    )
    ext = plan(pod)
    # early reuses the sidecar's request; late (after the sidecar) has nothing to reuse and asks itself.
    assert requests_of(ext) == [
        ("container-1-request-0", "gpu.example.com", 1),
        ("container-2-request-0", "gpu.example.com", 1),
    ]
    assert mappings_of(ext) == [
        ("proxy", GPU, "container-1-request-0"),
        ("early", GPU, "container-1-request-0"),
        ("late", GPU, "container-2-request-0"),
    ]


def test_node_allocatable_selects_the_device_plugin_path_per_resource():
    pod = xpod("p", container("main", {GPU: 1, "deviceclass.resource.kubernetes.io/other": 1}))
    classes = (gpu_class(), gpu_class("other", None))
    plugin_node = {"metadata": {"name": "n"}, "status": {"allocatable": {GPU: "4"}}}
    ext = plan(pod, *classes, node_obj=plugin_node)
    assert requests_of(ext) == [("container-0-request-0", "other", 1)]
    # Allocatable 0 still means DRA.
    zero = {"metadata": {"name": "n"}, "status": {"allocatable": {GPU: "0"}}}
    assert len(requests_of(plan(pod, *classes, node_obj=zero))) == 2
    both = {"status": {"allocatable": {GPU: "1", "deviceclass.resource.kubernetes.io/other": "1"}}}
    assert plan(pod, *classes, node_obj=both) is None


def test_non_integer_quantity_makes_no_request_and_malformed_is_an_error():
    from allocator.errors import InvalidInputError

    pod = xpod("p", container("a", {GPU: "500m"}), container("b", {GPU: 1}))
    assert requests_of(plan(pod)) == [("container-1-request-0", "gpu.example.com", 1)]
    with pytest.raises(
        InvalidInputError, match=r"pod default/p: spec.containers\[0\].resources: example.com/gpu"
    ):
        pod_extended_resources(xpod("p", container("a", {GPU: "lots"})), [gpu_class()], {}, FeatureGates())


def test_claim_name_is_deterministic_cut_and_avoids_taken_names():
    first = extended_claim_name(NS, "p")
    assert extended_claim_name(NS, "p") == first
    assert extended_claim_name(NS, "p", {first}) != first
    long_name = "x" * 60
    name = extended_claim_name(NS, long_name)
    assert len(name) == 63 and name.startswith("x" * 58)


def test_find_extended_claim_needs_annotation_and_controller_owner():
    pod = xpod("p")
    owned = {
        "metadata": {
            "name": "p-extended-resources-abcde",
            "namespace": NS,
            "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": POD_UID, "controller": True}
            ],
        }
    }
    assert find_extended_claim(pod, [owned]) is owned
    no_annotation = copy.deepcopy(owned)
    del no_annotation["metadata"]["annotations"]
    not_controller = copy.deepcopy(owned)
    not_controller["metadata"]["ownerReferences"][0]["controller"] = False
    other_uid = copy.deepcopy(owned)
    other_uid["metadata"]["ownerReferences"][0]["uid"] = "someone-else"
    other_ns = copy.deepcopy(owned)
    other_ns["metadata"]["namespace"] = "elsewhere"
    assert find_extended_claim(pod, [no_annotation, not_controller, other_uid, other_ns]) is None


# --- filter, prioritize, bind ---------------------------------------------------------------------------


def test_filter_allocates_the_extended_claim_per_node():
    svc = service(
        ("DeviceClass", gpu_class()),
        *gpu_node("n1", gpus=2),
        *gpu_node("n2", gpus=1),
        *gpu_node("n3", gpus=0, allocatable={GPU: "8"}),
        ("Pod", xpod("p", container("main", {GPU: 2}))),
    )
    outcome = svc.filter(svc.state.get("Pod", "default/p"), ["n1", "n2", "n3"])
    assert outcome.error == ""
    # n3 offers the GPUs through the device plugin: no DRA allocation, the node passes.
    assert outcome.passed == ["n1", "n3"]
    name = extended_claim_name(NS, "p")
    assert outcome.failed == {}
    assert outcome.unresolvable == {
        "n2": f"claim default/{name}, request container-0-request-0: node has 1 device(s) of class "
        "gpu.example.com matching the selectors, 2 needed"
    }


def test_bind_creates_the_claim_and_the_pod_status():
    svc = service(
        ("DeviceClass", gpu_class()), *gpu_node("n1", gpus=3), ("Pod", xpod("p", container("main", {GPU: 2})))
    )
    pod = svc.state.get("Pod", "default/p")
    assert svc.filter(pod, ["n1"]).passed == ["n1"]
    svc.bind(NS, "p", POD_UID, "n1")
    name = extended_claim_name(NS, "p")
    created = svc.state.get("ResourceClaim", f"default/{name}")
    assert created is not None
    assert created["metadata"]["annotations"] == {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}
    assert created["metadata"]["generateName"] == "p-extended-resources-"
    assert created["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    assert created["metadata"]["ownerReferences"][0]["uid"] == POD_UID
    assert created["status"]["allocation"]["devices"]["results"] == [
        result("container-0-request-0", "gpu-0"),
        result("container-0-request-0", "gpu-1"),
    ]
    assert created["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": POD_UID}]
    bound = svc.state.get("Pod", "default/p")
    assert bound["spec"]["nodeName"] == "n1"
    assert bound["status"]["extendedResourceClaimStatus"] == {
        "requestMappings": [
            {"containerName": "main", "resourceName": GPU, "requestName": "container-0-request-0"}
        ],
        "resourceClaimName": name,
    }
    # The devices are in use now: a second pod gets the third GPU only.
    svc.state.apply("Pod", xpod("q", container("main", {GPU: 2})))
    assert svc.filter(svc.state.get("Pod", "default/q"), ["n1"]).passed == []
    svc.state.apply("Pod", xpod("r", container("main", {GPU: 1})))
    svc.bind(NS, "r", "uid-pod-default-r", "n1")
    r_claim = svc.state.get("ResourceClaim", f"default/{extended_claim_name(NS, 'r')}")
    assert r_claim["status"]["allocation"]["devices"]["results"] == [result("container-0-request-0", "gpu-2")]


def test_bind_on_device_plugin_node_creates_no_claim():
    svc = service(
        ("DeviceClass", gpu_class()),
        *gpu_node("n1", gpus=0, allocatable={GPU: "2"}),
        ("Pod", xpod("p", container("main", {GPU: 2}))),
    )
    svc.bind(NS, "p", POD_UID, "n1")
    assert svc.state.objects["ResourceClaim"] == {}
    bound = svc.state.get("Pod", "default/p")
    assert bound["spec"]["nodeName"] == "n1"
    assert "extendedResourceClaimStatus" not in bound["status"]


def test_user_claims_are_allocated_before_the_extended_claim():
    user = claim(NS, "mine", [request("gpu", "gpu.example.com")])
    svc = service(
        ("DeviceClass", gpu_class()),
        *gpu_node("n1", gpus=2),
        ("ResourceClaim", user),
        ("Pod", xpod("p", container("main", {GPU: 1}), claims=["mine"])),
    )
    effective = svc.effective_claims(svc.state.get("Pod", "default/p"), "n1")
    assert [c.name for c in effective.pending] == ["mine", extended_claim_name(NS, "p")]
    assert effective.extended is not None and effective.extended.claim is effective.pending[-1]
    svc.bind(NS, "p", POD_UID, "n1")
    assert svc.state.get("ResourceClaim", "default/mine")["status"]["allocation"]["devices"]["results"] == [
        result("gpu", "gpu-0")
    ]
    ext = svc.state.get("ResourceClaim", f"default/{extended_claim_name(NS, 'p')}")
    assert ext["status"]["allocation"]["devices"]["results"] == [result("container-0-request-0", "gpu-1")]


def test_effective_claims_on_a_device_plugin_node_have_no_extended_claim():
    svc = service(
        ("DeviceClass", gpu_class()),
        *gpu_node("n1", gpus=0, allocatable={GPU: "1"}),
        ("Pod", xpod("p", container("main", {GPU: 1}))),
    )
    effective = svc.effective_claims(svc.state.get("Pod", "default/p"), "n1")
    assert effective.pending == [] and effective.extended is None and effective.allocated == []


def test_prioritize_counts_the_extended_claims_devices():
    svc = service(
        ("DeviceClass", gpu_class()),
        *gpu_node("n1", gpus=2),
        *gpu_node("n2", gpus=4),
        ("Pod", xpod("p", container("main", {GPU: 2}))),
    )
    pod = svc.state.get("Pod", "default/p")
    # Packing score: 2 of 2 devices on n1 (10), 2 of 4 on n2 (5).
    scores = dict(zip(["n1", "n2"], svc.prioritize(pod, ["n1", "n2"]), strict=True))
    assert scores["n1"] > scores["n2"] > 0


def test_gate_off_passes_every_node_without_a_claim():
    svc = service(
        ("DeviceClass", gpu_class()),
        *gpu_node("n1", gpus=0),
        ("Pod", xpod("p")),
        gates=FeatureGates(DRAExtendedResource=False),
    )
    assert svc.filter(svc.state.get("Pod", "default/p"), ["n1"]).passed == ["n1"]
    svc.bind(NS, "p", POD_UID, "n1")
    assert svc.state.objects["ResourceClaim"] == {}


def test_malformed_quantity_is_a_filter_error():
    svc = service(
        ("DeviceClass", gpu_class()), *gpu_node("n1"), ("Pod", xpod("p", container("main", {GPU: "x"})))
    )
    outcome = svc.filter(svc.state.get("Pod", "default/p"), ["n1"])
    assert outcome.passed == [] and outcome.error.startswith("pod default/p: spec.containers[0].resources")


@pytest.mark.parametrize("quantity", ["1e20000000", "1e5000", "9" * 5000])
def test_an_absurdly_large_quantity_is_a_filter_error_not_a_crash(quantity):
    svc = service(
        ("DeviceClass", gpu_class()), *gpu_node("n1"), ("Pod", xpod("p", container("main", {GPU: quantity})))
    )
    outcome = svc.filter(svc.state.get("Pod", "default/p"), ["n1"])
    assert outcome.passed == [] and "more than 1000 digits or a decimal exponent beyond" in outcome.error


def test_class_selectors_apply_to_the_extended_claim():
    # The class selects another driver: no device matches, so the node fails (not fatal).
    picky = device_class("picky", 'device.driver == "other.example.com"')
    picky["spec"]["extendedResourceName"] = "example.com/picky"
    svc = service(
        ("DeviceClass", picky),
        *gpu_node("n1"),
        ("Pod", xpod("p", container("main", {"example.com/picky": 1}))),
    )
    outcome = svc.filter(svc.state.get("Pod", "default/p"), ["n1"])
    assert (
        outcome.passed == [] and "class picky matching the selectors, 1 needed" in outcome.unresolvable["n1"]
    )


def stale_claim(allocated_device: str | None) -> Obj:
    obj = claim(NS, "p-extended-resources-old00", [request("container-0-request-0", "gpu.example.com")])
    obj["metadata"]["annotations"] = {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": POD_UID, "controller": True}
    ]
    if allocated_device:
        obj["status"] = {
            "allocation": {"devices": {"results": [result("container-0-request-0", allocated_device)]}},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": POD_UID}],
        }
    return obj


def test_leftover_extended_claim_is_deleted_and_the_pod_filtered_again():
    # The leftover claim holds gpu-0 of the only GPU: upstream fails the attempt, deletes the claim in
    # PostFilter and succeeds on the next attempt. The service does both in one filter call.
    svc = service(
        ("DeviceClass", gpu_class()),
        *gpu_node("n1", gpus=1),
        ("ResourceClaim", stale_claim("gpu-0")),
        ("Pod", xpod("p")),
    )
    assert svc.state.inventory.is_allocated((DRIVER, "n1", "gpu-0"))
    outcome = svc.filter(svc.state.get("Pod", "default/p"), ["n1"])
    assert outcome.passed == ["n1"]
    assert svc.state.get("ResourceClaim", "default/p-extended-resources-old00") is None
    assert not svc.state.inventory.is_allocated((DRIVER, "n1", "gpu-0"))
    svc.bind(NS, "p", POD_UID, "n1")
    assert svc.state.get("Pod", "default/p")["status"]["extendedResourceClaimStatus"][
        "resourceClaimName"
    ] == (extended_claim_name(NS, "p"))


class _WriteOnlyBinder:
    """A binder without ``delete_claim``: leftovers cannot be removed."""

    def bind(self, plan: BindPlan) -> None:  # pragma: no cover - never reached
        raise AssertionError


LEFTOVER_REASON = (
    "ResourceClaim default/p-extended-resources-old00: extended-resource claim from an earlier "
    "scheduling attempt; it must be deleted before the pod is scheduled again"
)


def _undeletable_leftover(*nodes: str) -> SchedulingService:
    """Pod p with its leftover extended-resource claim, which the binder cannot delete."""
    svc = service(
        ("DeviceClass", gpu_class()),
        *(obj for name in nodes for obj in gpu_node(name)),
        ("ResourceClaim", stale_claim(None)),
        ("Pod", xpod("p")),
    )
    svc.binder = _WriteOnlyBinder()
    return svc


def test_leftover_extended_claim_fails_every_node_when_it_cannot_be_deleted():
    svc = _undeletable_leftover("n1", "n2")
    pod = svc.state.get("Pod", "default/p")
    outcome = svc.filter(pod, ["n1", "n2"])
    reason = LEFTOVER_REASON
    assert outcome.passed == [] and outcome.unresolvable == {"n1": reason, "n2": reason}
    with pytest.raises(ClaimNotReady, match="earlier scheduling attempt"):
        svc.effective_claims(pod, "n1")


def test_explain_names_the_leftover_extended_claim_that_blocks_every_node():
    """Not "no ResourceClaims: every node passes" above every node unresolvable."""
    svc = _undeletable_leftover("n1")
    explanation = explain_pod(svc, NS, "p")
    reason = LEFTOVER_REASON
    assert [(v.verdict, v.reason) for v in explanation.nodes] == [("unresolvable", reason)]
    assert [(c.extendedResources, c.claim, c.problem) for c in explanation.claims] == [
        (True, "default/p-extended-resources-old00", reason)
    ]


def test_the_summary_leaves_a_leftover_extended_claim_in_place():
    """explain's summary reports the state as it is, as ``--all`` does: the leftover claim blocks the only
    node. filter would delete it (upstream's PostFilter) and find the node fits."""
    svc = service(
        ("DeviceClass", gpu_class()),
        *gpu_node("n1", gpus=1),
        ("ResourceClaim", stale_claim("gpu-0")),
        ("Pod", xpod("p")),
    )
    summary = summarize_pod(svc, NS, "p")
    assert summary.verdicts == {"unresolvable": 1}
    assert svc.state.get("ResourceClaim", "default/p-extended-resources-old00") is not None
    assert svc.filter(svc.state.get("Pod", "default/p"), ["n1"]).passed == ["n1"]


def test_a_failed_bind_creates_nothing():
    svc = service(("DeviceClass", gpu_class()), *gpu_node("n1"), ("Pod", xpod("p")))
    real_apply = svc.state.apply

    def failing_apply(kind, obj):
        if kind == "Pod":
            raise RuntimeError("apiserver said no")
        real_apply(kind, obj)

    svc.state.apply = failing_apply  # type: ignore[method-assign]
    with pytest.raises(BindError, match="apiserver said no"):
        svc.bind(NS, "p", POD_UID, "n1")
    assert svc.state.objects["ResourceClaim"] == {}
    assert not svc.state.inventory.is_allocated((DRIVER, "n1", "gpu-0"))
    assert "extendedResourceClaimStatus" not in svc.state.get("Pod", "default/p")["status"]


def test_simulate_lists_the_extended_claim():
    svc = service(
        ("DeviceClass", gpu_class()),
        *gpu_node("n1", gpus=1),
        ("Pod", xpod("a", container("main", {GPU: 1}), created="2026-01-01T00:00:01Z")),
        ("Pod", xpod("b", container("main", {IMPLICIT: 1}), created="2026-01-01T00:00:02Z")),
    )
    pods = simulate(svc)["pods"]
    assert [(p["name"], p["node"]) for p in pods] == [("a", "n1"), ("b", None)]
    assert pods[0]["claims"] == [
        {
            "name": extended_claim_name(NS, "a"),
            "allocation": {
                "devices": {"results": [result("container-0-request-0", "gpu-0")]},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                    ]
                },
            },
        }
    ]
    assert pods[1]["claims"] == []
    assert "1 matching device(s) usable (1 in use" in pods[1]["reasons"]["n1"]


def test_missing_extended_resources_stands_in_for_node_resources_fit():
    from app.scheduling.extended import missing_extended_resources

    pod = xpod("p", container("main", {GPU: 1, "other.example.com/fpga": 1, IMPLICIT: 1, "cpu": "1"}))
    classes = [gpu_class()]
    bare = {"metadata": {"name": "n"}}
    # example.com/gpu and the implicit name are backed by DRA; the FPGA nobody provides.
    assert missing_extended_resources(pod, bare, classes, FeatureGates()) == ["other.example.com/fpga"]
    with_fpga = {"metadata": {"name": "n"}, "status": {"allocatable": {"other.example.com/fpga": "2"}}}
    assert missing_extended_resources(pod, with_fpga, classes, FeatureGates()) == []
    # Without DRAExtendedResource nothing is delegated to DRA.
    assert missing_extended_resources(pod, with_fpga, classes, FeatureGates(DRAExtendedResource=False)) == [
        IMPLICIT,
        GPU,
    ]


def test_simulate_keeps_nodes_lacking_an_unbacked_extended_resource_from_filter():
    svc = service(
        ("DeviceClass", gpu_class()),
        *gpu_node("n1", gpus=1),
        *gpu_node("n2", gpus=1, allocatable={"other.example.com/fpga": "1"}),
        ("Pod", xpod("p", container("main", {GPU: 1, "other.example.com/fpga": 1}))),
    )
    (out,) = simulate(svc)["pods"]
    assert out["node"] == "n2"
    assert out["reasons"] == {
        "n1": "Insufficient other.example.com/fpga (not in node allocatable and no DeviceClass backs it)"
    }
    assert out["claims"][0]["allocation"]["devices"]["results"] == [
        result("container-0-request-0", "gpu-0", pool="n2")
    ]
