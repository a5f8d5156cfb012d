"""Real fixtures through ``dra-extender simulate``: extended resources backed by DRA, partitionable devices,
consumable capacity and binding conditions (issue 6).

Each test assembles a state directory in ``tmp_path`` from ``../shared/fixtures`` (files copied verbatim,
or a fixture changed the way a documented driver option changes it, said where it happens) plus a few
hand-written objects (Nodes, Pods standing in for Deployment replicas, a DeviceClass), runs ``simulate``
with ``--device-selection first-fit`` (upstream's device order) and compares placements and allocations
with expectations worked out BY HAND from allocator-semantics.md: pools by (driver, pool), slices by name,
devices in slice order, first fit with backtracking; counters per pool; shares up to each capacity.

Fixture files are never copied into the repository; without ``../shared/fixtures`` the tests skip.
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from app.scheduling.extended import EXTENDED_RESOURCE_CLAIM_ANNOTATION
from tests import builders
from tests.app import scenario_support as support
from tests.app.scenario_support import (
    EX,
    EX_CP,
    EXD,
    H100,
    NV,
    P4D,
    StateDir,
    dev,
    exactly,
    extended,
    node,
    share,
)
from tests.builders import claim_template

NV_EXTENDED = "real/nvidia-gpu/demo/specs/extended-resources"
NV_SHARES = "real/nvidia-gpu/demo/specs/consumable-shares"
T = "2026-09-01T10:00:{:02d}Z"  # creationTimestamps of hand-written pods: after the fixture pods (none)

# These scenarios do not compare opaque config, nor the wording of the reasons.
assert_placed = partial(support.assert_placed, check_config=False)
assert_generated = partial(support.assert_generated, check_config=False)
assert_unschedulable = partial(support.assert_unschedulable, reasons_said=False)


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    return support.state_dir(tmp_path)


# --- small builders ---------------------------------------------------------------------------------------


def assert_one_extended(
    pods: dict[str, dict[str, Any]], key: str, node_name: str, driver: str, device: str, **kw: Any
) -> None:
    """Pod ``key`` with one extended resource of count 1 on ``node_name``: its claim holds one device."""
    name = key.split("/")[1]
    assert_placed(
        pods[key],
        node_name,
        [(extended(name), [dev("container-0-request-0", driver, node_name, device)])],
        **kw,
    )


def pod(
    namespace: str,
    name: str,
    created: str,
    *,
    templates: dict[str, str] | None = None,
    limits: dict[str, Any] | None = None,
    init_limits: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A pending pod: pod claims from templates (one container uses them all) and/or extended resources in
    ``limits`` of container ``main`` (``init_limits``: an init container ``prep`` before it)."""
    container: dict[str, Any] = {"name": "main", "image": "ubuntu:24.04"}
    spec: dict[str, Any] = {"containers": [container]}
    if templates:
        spec["resourceClaims"] = [{"name": k, "resourceClaimTemplateName": v} for k, v in templates.items()]
        container["resources"] = {"claims": [{"name": k} for k in templates]}
    if limits:
        container.setdefault("resources", {})["limits"] = limits
    if init_limits:
        spec["initContainers"] = [
            {"name": "prep", "image": "ubuntu:24.04", "resources": {"limits": init_limits}}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name, "creationTimestamp": created},
        "spec": spec,
    }


def template(namespace: str, name: str, device_class: str, **fields: Any) -> dict[str, Any]:
    """A template whose claims have one request ``gpu`` of ``device_class``."""
    return claim_template(namespace, name, [exactly("gpu", device_class, **fields)])


def full_gpu_template(namespace: str) -> dict[str, Any]:
    """Template ``full-gpu``: an example-driver device with a ``full`` attribute (a whole GPU)."""
    selectors = [{"cel": {"expression": "'full' in device.attributes['gpu.example.com']"}}]
    return template(namespace, "full-gpu", EXD, selectors=selectors)


def device_class(name: str, expression: str, extended_resource: str | None = None) -> dict[str, Any]:
    obj = builders.device_class(name, expression)
    if extended_resource:
        obj["spec"]["extendedResourceName"] = extended_resource
    return obj


# NVIDIA: extended resources backed by DRA (demo/specs/extended-resources)
# ===========================================================================================================


def test_nvidia_gpu_full_pod_gets_an_extended_resource_claim_and_pod_status(state):
    # gpu.nvidia.com carries extendedResourceName nvidia.com/gpu (Helm chart default); no node lists
    # nvidia.com/gpu in its allocatable, so the request goes through DRA.
    state.fixture(support.NODES, support.NV_CLASSES, support.H100_SLICE, f"{NV_EXTENDED}/gpu-full.yaml")
    pods, cluster = state.simulate_state()
    key = "extended-resource-gpu-full/gpu-full-pod"
    assert list(pods) == [key]
    # One container, limits {nvidia.com/gpu: 1} -> request container-0-request-0, count 1: the first GPU
    # of the only GPU node, gpu-0. The A100 node has no slices in this state.
    assert_one_extended(pods, key, H100, NV, "gpu-0", failed_nodes={P4D})
    name = pods[key]["claims"][0]["name"]
    claim = cluster.get("ResourceClaim", f"extended-resource-gpu-full/{name}")
    bound = cluster.get("Pod", key)
    # What the demo's comments show kube-scheduler creates.
    assert claim["metadata"]["annotations"] == {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}
    assert claim["metadata"]["generateName"] == "gpu-full-pod-extended-resources-"
    assert claim["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "gpu-full-pod",
            "uid": bound["metadata"]["uid"],
            "controller": True,
        }
    ]
    assert claim["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-0",
            "exactly": {"deviceClassName": NV, "allocationMode": "ExactCount", "count": 1},
        }
    ]
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "gpu-full-pod", "uid": bound["metadata"]["uid"]}
    ]
    assert bound["spec"]["nodeName"] == H100
    assert bound["status"]["extendedResourceClaimStatus"] == {
        "requestMappings": [
            {
                "containerName": "cuda-container",
                "resourceName": "nvidia.com/gpu",
                "requestName": "container-0-request-0",
            }
        ],
        "resourceClaimName": name,
    }


def test_nvidia_device_plugin_node_takes_the_gpu_without_a_claim(state, capsys):
    # A node whose device plugin advertises nvidia.com/gpu: NodeResourcesFit handles the request there and
    # no device is allocated; the node without GPUs fails (no slices, nothing allocatable).
    state.fixture(support.NV_CLASSES, support.H100_SLICE, f"{NV_EXTENDED}/gpu-full.yaml")
    state.objects("nodes", node("dp-node", allocatable={"nvidia.com/gpu": "8"}), node("cpu-node"))
    pods = state.simulate(capsys)
    out = pods["extended-resource-gpu-full/gpu-full-pod"]
    assert out["node"] == "dp-node" and out["claims"] == [] and out["error"] is None
    assert set(out["reasons"]) == {"cpu-node"}


MIG_5GB_CLASS = device_class(
    # Modelled on demo/specs/extended-resources/mig-1g-12gb.yaml, for a profile an A100-40GB has.
    "mig-1g-5gb.gpu.nvidia.com",
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig' && "
    "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'",
    "nvidia.com/mig-1g.5gb",
)


def test_nvidia_extended_resources_on_a100_dynamic_mig(state, capsys):
    state.fixture(
        support.NODES,
        support.NV_CLASSES,
        support.A100_DYNAMIC_MIG,
        f"{NV_EXTENDED}/gpu-full.yaml",
        f"{NV_EXTENDED}/mig-1g-12gb.yaml",
    )
    state.objects(
        "extra",
        MIG_5GB_CLASS,
        pod("default", "mig-pair", T.format(1), limits={"nvidia.com/mig-1g.5gb": 2}),
        pod(
            "default",
            "mixed",
            T.format(2),
            limits={"nvidia.com/gpu": 1, "nvidia.com/mig-1g.5gb": 1},
            init_limits={"nvidia.com/mig-1g.5gb": 1},
        ),
    )
    pods = state.simulate(capsys)
    assert list(pods) == [
        "extended-resource-gpu-full/gpu-full-pod",
        "extended-resource-mig-1g12gb/mig-1g12gb-pod",
        "default/mig-pair",
        "default/mixed",
    ]
    # Slices are searched by name: -c8v9b holds gpu-7 and its MIG placements, then (-cs8x1 has only
    # counters) -d2f3g gpu-4, -h4j5k gpu-5. The full-GPU class matches type 'gpu': gpu-7 first.
    assert_one_extended(
        pods, "extended-resource-gpu-full/gpu-full-pod", P4D, NV, "gpu-7", failed_nodes={H100}
    )
    # An A100-40GB has no 1g.12gb profile: no device matches the class anywhere.
    out = pods["extended-resource-mig-1g12gb/mig-1g12gb-pod"]
    assert_unschedulable(out, {H100, P4D})
    assert re.fullmatch(
        r"claim extended-resource-mig-1g12gb/mig-1g12gb-pod-extended-resources-[a-z0-9]{5}, request "
        r"container-0-request-0: node has 0 device\(s\) of class mig-1g-12gb\.gpu\.nvidia\.com matching the "
        r"selectors, 1 needed",
        out["reasons"][P4D],
    )
    expected = {
        # gpu-7 consumes every counter of its set, so none of its MIG placements fits; on gpu-4 the first
        # two 1g.5gb placements (memory slices 0 and 1) do.
        "mig-pair": [
            ("container-0-request-0", "gpu-4-mig-1g5gb-19-0"),
            ("container-0-request-0", "gpu-4-mig-1g5gb-19-1"),
        ],
        # mixed: main (index 1) asks nvidia.com/gpu (request index 0 of its sorted names) and 1g.5gb (index
        # 1); init container prep (index 0) reuses main's 1g.5gb request. Whole GPU: gpu-7 in use, gpu-4 has
        # MIG devices (its counters are partly used), gpu-5 is free. 1g.5gb: gpu-4 @0 and @1 are taken, @2.
        "mixed": [("container-1-request-0", "gpu-5"), ("container-1-request-1", "gpu-4-mig-1g5gb-19-2")],
    }
    for name, results in expected.items():
        assert_placed(
            pods[f"default/{name}"],
            P4D,
            [(extended(name), [dev(request, NV, P4D, device) for request, device in results])],
            failed_nodes={H100},
        )


# ===========================================================================================================
# NVIDIA: consumable GPU shares on the H100 node (--consumable-shares=4), demo/specs/consumable-shares
# ===========================================================================================================


def test_nvidia_h100_consumable_shares_with_extended_resource_pods(state, capsys):
    state.fixture(
        support.NODES,
        support.NV_CLASSES,
        support.H100_SHARES,
        f"{NV_SHARES}/integer-sharing.yaml",
        f"{NV_SHARES}/memory-sharing.yaml",
        f"{NV_SHARES}/unlimited-sharing.yaml",
    )
    replicas = [
        # The Deployments' replicas (the loader skips Deployments), in creation order.
        *(
            pod("gpu-share-integer", f"integer-sharing-{i}", T.format(i), templates={"gpu": "gpu-1share"})
            for i in range(4)
        ),
        *(
            pod("gpu-share-memory", f"memory-sharing-{i}", T.format(10 + i), templates={"gpu": "gpu-4gi"})
            for i in range(2)
        ),
        pod("gpu-share-unlimited", "unlimited-sharing-0", T.format(20), templates={"gpu": "gpu-unlimited"}),
        pod("default", "one-gpu", T.format(30), limits={"nvidia.com/gpu": 1}),
        pod("default", "two-gpus", T.format(31), limits={"nvidia.com/gpu": 2}),
        pod("default", "five-shares", T.format(32), templates={"gpu": "five-shares"}),
    ]
    state.objects(
        "pods", *replicas, template("default", "five-shares", NV, capacity={"requests": {"shares": "5"}})
    )
    pods = state.simulate(capsys)
    assert len(pods) == 10
    # Every GPU: 4 shares (default 1) and 81559Mi of memory (default 0), multi-allocatable.
    template_shares = [  # (pod, GPU, memory of the one share)
        # gpu-1share asks nothing: shares 1, memory 0; four of them fill gpu-0.
        *((f"gpu-share-integer/integer-sharing-{i}", "gpu-0", "0") for i in range(4)),
        # gpu-4gi: memory 4Gi (1Mi steps), shares 1 by default; gpu-0 has no share left -> gpu-1.
        *((f"gpu-share-memory/memory-sharing-{i}", "gpu-1", "4Gi") for i in range(2)),
        ("gpu-share-unlimited/unlimited-sharing-0", "gpu-1", "0"),
    ]
    for key, device, memory in template_shares:
        assert_generated(
            pods,
            key,
            "gpu",
            H100,
            [share("gpu", NV, H100, device, memory=memory, shares="1")],
            failed_nodes={P4D},
        )
    # nvidia.com/gpu: 1 through DRA on a shared GPU is one more share: gpu-1's fourth.
    assert_placed(
        pods["default/one-gpu"],
        H100,
        [(extended("one-gpu"), [share("container-0-request-0", NV, H100, "gpu-1", memory="0", shares="1")])],
        failed_nodes={P4D},
    )
    # count 2: gpu-0 and gpu-1 are full; gpu-2, then slot 2 resumes after it: gpu-3.
    assert_placed(
        pods["default/two-gpus"],
        H100,
        [
            (
                extended("two-gpus"),
                [
                    share("container-0-request-0", NV, H100, "gpu-2", memory="0", shares="1"),
                    share("container-0-request-0", NV, H100, "gpu-3", memory="0", shares="1"),
                ],
            )
        ],
        failed_nodes={P4D},
    )
    # 5 shares pass the range max (4) on every GPU: the request fits no device.
    assert_unschedulable(pods["default/five-shares"], {H100, P4D})
    ids = [support.results_of(p)[0]["shareID"] for p in pods.values() if p["node"]]
    assert len(ids) == len(set(ids)) == 9


# ===========================================================================================================
# dra-example-driver: extended-resource-request demo (implicit and explicit names)
# ===========================================================================================================


def example_driver(
    state: StateDir, *, extended_resource_name: str | None = None, worker: dict[str, Any] | None = None
):
    state.fixture(
        support.EX_SLICES, f"{support.EX_DEMO}/extended-resource-request/extended-resource-request.yaml"
    )
    if extended_resource_name:
        # The chart installed with --set deviceClass.extendedResourceName=<name>.
        state.edited(
            support.EX_CLASS,
            lambda doc: doc["spec"].__setitem__("extendedResourceName", extended_resource_name),
        )
    else:
        state.fixture(support.EX_CLASS)
    return state.objects("nodes", worker or node(EX), node(EX_CP))


def test_dra_example_extended_resource_request_default_chart(state, capsys):
    pods = example_driver(state).simulate(capsys)
    assert list(pods) == ["extended-resource-request/pod0", "extended-resource-request/pod1"]
    # pod0 uses the implicit name deviceclass.resource.kubernetes.io/gpu.example.com: the first GPU.
    assert_one_extended(pods, "extended-resource-request/pod0", EX, EXD, "gpu-0", failed_nodes={EX_CP})
    # pod1 asks for example.com/gpu, which no class maps by default: it stays Pending (NodeResourcesFit).
    out = pods["extended-resource-request/pod1"]
    assert_unschedulable(out, {EX, EX_CP})
    assert out["reasons"][EX].startswith("Insufficient example.com/gpu")


def test_dra_example_extended_resource_request_with_explicit_name(state, capsys):
    pods = example_driver(state, extended_resource_name="example.com/gpu").simulate(capsys)
    assert_one_extended(pods, "extended-resource-request/pod0", EX, EXD, "gpu-0", failed_nodes={EX_CP})
    assert_one_extended(pods, "extended-resource-request/pod1", EX, EXD, "gpu-1", failed_nodes={EX_CP})


def test_dra_example_extended_resource_request_on_a_device_plugin_node(state, capsys):
    # The worker's device plugin advertises example.com/gpu: pod1 uses it there (no claim); pod0's
    # implicit name is never in allocatable, so it still gets a DRA device.
    worker = node(EX, allocatable={"example.com/gpu": "2"})
    pods = example_driver(state, extended_resource_name="example.com/gpu", worker=worker).simulate(capsys)
    assert_one_extended(pods, "extended-resource-request/pod0", EX, EXD, "gpu-0", failed_nodes={EX_CP})
    out = pods["extended-resource-request/pod1"]
    assert out["node"] == EX and out["claims"] == []


# ===========================================================================================================
# dra-example-driver: partitionable devices and shared (multi-allocatable) partitions
# ===========================================================================================================


def test_dra_example_partitionable_devices_with_extended_resource_pods(state, capsys):
    # 2 GPUs x 2 partitions: counter slice -pc1ss (gpu-<i>-counters: 80Gi, compute 100), device slice -pd2ss
    # gpu-0-partition-0, gpu-0-partition-1, gpu-0-full, gpu-1-partition-0, gpu-1-partition-1, gpu-1-full.
    state.fixture(
        support.EX_CLASS,
        support.EX_PARTITIONS,
        f"{support.EX_DEMO}/partitionable-devices/partitionable-devices.yaml",
    )
    state.objects(
        "extra",
        node(EX),
        node(EX_CP),
        pod(
            "partitionable-devices",
            "one-more",
            T.format(1),
            limits={"deviceclass.resource.kubernetes.io/gpu.example.com": 1},
        ),
        full_gpu_template("partitionable-devices"),
        pod("partitionable-devices", "full", T.format(2), templates={"gpu": "full-gpu"}),
    )
    pods = state.simulate(capsys)
    assert list(pods) == [
        "partitionable-devices/pod0",
        "partitionable-devices/one-more",
        "partitionable-devices/full",
    ]
    # count 2: partition-0 and partition-1 of gpu-0 use its 80Gi / 100 exactly.
    support.assert_demo_partitions_pod0(pods, check_config=False)
    # gpu-0-full finds gpu-0's counters used up; the next device that fits is gpu-1-partition-0.
    assert_one_extended(
        pods, "partitionable-devices/one-more", EX, EXD, "gpu-1-partition-0", failed_nodes={EX_CP}
    )
    # Both full GPUs are blocked by their partitions' counters: no fit, and freeing devices would help.
    out = pods["partitionable-devices/full"]
    assert_unschedulable(out, {EX, EX_CP})
    assert "counters" in out["reasons"][EX] and "in use" not in out["reasons"][EX]


def _multi_allocatable(document: dict[str, Any]) -> None:
    """The example driver run with allow-multiple-allocations: every device is multi-allocatable."""
    for device in document["spec"].get("devices") or ():
        device["allowMultipleAllocations"] = True


def test_dra_example_shared_partitions(state, capsys):
    state.edited(support.EX_PARTITIONS, _multi_allocatable)
    state.fixture(
        support.EX_CLASS,
        f"{support.EX_DEMO}/gpu-allow-multiple-allocations/gpu-allow-multiple-allocations.yaml",
        f"{support.EX_DEMO}/gpu-allow-multiple-allocations-partitionable/gpu-allow-multiple-allocations-partitionable.yaml",
    )
    state.objects(
        "extra",
        node(EX),
        node(EX_CP),
        full_gpu_template("default"),
        pod("default", "full-0", T.format(1), templates={"gpu": "full-gpu"}),
        pod("default", "full-1", T.format(2), templates={"gpu": "full-gpu"}),
    )
    pods = state.simulate(capsys)
    part, plain = "gpu-allow-multiple-allocations-partitionable", "gpu-allow-multiple-allocations"
    # "...-partitionable/" sorts before ".../" ('-' < '/').
    assert list(pods) == [
        f"{part}/pod0",
        f"{part}/pod1",
        f"{plain}/pod0",
        f"{plain}/pod1",
        "default/full-0",
        "default/full-1",
    ]
    # Shares of gpu-0-partition-0 (40Gi, compute 50): 8Gi/10 twice, then 16Gi/20 (32Gi/40 in all).
    for key, claim_name in (
        (f"{part}/pod0", "shared-partition-pod0"),
        (f"{part}/pod1", "shared-partition-pod1"),
    ):
        assert_placed(
            pods[key],
            EX,
            [(claim_name, [share("gpu", EXD, EX, "gpu-0-partition-0", memory="8Gi", compute="10")])],
            failed_nodes={EX_CP},
        )
    assert_placed(
        pods[f"{plain}/pod0"],
        EX,
        [("shared-gpu-pod0", [share("gpu", EXD, EX, "gpu-0-partition-0", memory="16Gi", compute="20")])],
        failed_nodes={EX_CP},
    )
    # 48Gi > 40Gi on partition-0: partition-1's first share also takes its counters (gpu-0: 80Gi / 100).
    assert_placed(
        pods[f"{plain}/pod1"],
        EX,
        [("shared-gpu-pod1", [share("gpu", EXD, EX, "gpu-0-partition-1", memory="16Gi", compute="20")])],
        failed_nodes={EX_CP},
    )
    # A full GPU asked without amounts takes all of its capacity; gpu-0-full has no counters left.
    assert_generated(
        pods,
        "default/full-0",
        "gpu",
        EX,
        [share("gpu", EXD, EX, "gpu-1-full", memory="80Gi", compute="100")],
        failed_nodes={EX_CP},
    )
    # Nothing left: gpu-1-full's capacity is used up, gpu-0-full has no counters.
    out = pods["default/full-1"]
    assert_unschedulable(out, {EX, EX_CP})
    assert "in use" not in out["reasons"][EX]


# ===========================================================================================================
# Binding conditions: the kubernetes.io example slice (network-attached, bindsToNode)
# ===========================================================================================================


def binding_state(state: StateDir) -> StateDir:
    state.fixture(support.BINDING_SLICE)
    local = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "hp-node-local"},
        "spec": {
            "driver": "dra.example.com",
            "nodeName": "hp-node",
            # Sorts after gpu-pool by name, but gpu-pool has binding conditions: it is searched last.
            "pool": {"name": "z-local", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "local-0"}],
        },
    }
    return state.objects(
        "extra",
        node("hp-node", {"accelerator-type": "high-performance"}),
        node("plain-node"),
        local,
        device_class("dra.example.com", "device.driver == 'dra.example.com'"),
        template("default", "one", "dra.example.com"),
        *(pod("default", f"pod-{i}", T.format(i), templates={"gpu": "one"}) for i in range(3)),
    )


def test_binding_conditions_devices_come_last_and_are_pinned(state):
    pods, cluster = binding_state(state).simulate_state()
    # plain-node has no devices (the fabric slice selects accelerator-type=high-performance nodes).
    assert_generated(
        pods,
        "default/pod-0",
        "gpu",
        "hp-node",
        [dev("gpu", "dra.example.com", "z-local", "local-0")],
        failed_nodes={"plain-node"},
    )
    # The fabric GPU: conditions copied, pinned to the node by bindsToNode although its slice uses a selector.
    conditions = {
        "bindingConditions": ["dra.example.com/is-prepared"],
        "bindingFailureConditions": ["dra.example.com/preparing-failed"],
    }
    assert_generated(
        pods,
        "default/pod-1",
        "gpu",
        "hp-node",
        [dev("gpu", "dra.example.com", "gpu-pool", "gpu-1", **conditions)],
        failed_nodes={"plain-node"},
    )
    assert_unschedulable(pods["default/pod-2"], {"hp-node", "plain-node"})
    # With both binding gates on the binder stamps allocationTimestamp on every claim (upstream bindClaim).
    for pod in ("default/pod-0", "default/pod-1"):
        claim_name = pods[pod]["claims"][0]["name"]
        assert (
            "allocationTimestamp"
            in cluster.get("ResourceClaim", f"default/{claim_name}")["status"]["allocation"]
        )


def test_binding_conditions_gate_off(state, capsys):
    pods = binding_state(state).simulate(capsys, "--feature-gates", "DRADeviceBindingConditions=false")
    assert pods["default/pod-0"]["node"] == "hp-node"
    # gpu-1 is not selectable without the gate.
    assert_unschedulable(pods["default/pod-1"], {"hp-node", "plain-node"})
