"""Acceptance scenarios: ``dra-extender simulate`` on state directories assembled from the shared fixtures.

Each test copies real driver manifests (NVIDIA GPU, dra-example-driver, Intel, AMD, SR-IOV, DRANET) and the
constructed node inventories from ``../shared/fixtures`` into ``tmp_path``, adds the few small objects the
fixtures lack (Node objects, a DeviceClass, pods for Deployment templates), runs ``simulate`` and compares
the placement and the exact allocation of every claim with an expectation worked out BY HAND from
``shared/reference/allocator-semantics.md`` (pools sorted by (driver, pool), slices by name, devices in
list order, first fit with backtracking, constraints, taints, counters, capacity). The one-line comment
above each expectation says why those devices.

Fixture files are never copied into the repository; a missing ``../shared/fixtures`` skips the tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.app import scenario_support as support
from tests.app.scenario_support import (
    A100_DYNAMIC_MIG,
    BINDING_SLICE,
    EX,
    EX_CLASS,
    EX_CP,
    EX_DEMO,
    EX_PARTITIONS,
    EX_SLICES,
    EXD,
    H100,
    H100_SHARES,
    H100_SLICE,
    NODES,
    NV,
    NV_CLASSES,
    P4D,
    UID,
    StateDir,
    assert_fatal,
    assert_generated,
    assert_placed,
    assert_unschedulable,
    dev,
    exactly,
    generated,
    gpu_partitions,
    load_fixture,
    node,
    pinned,
    results_of,
    share,
)
from tests.builders import claim_template, device_class

# --- fixture paths (relative to FIXTURES) ------------------------------------------------------------------

A100_STATIC_MIG = "constructed/nvidia-gpu/a100-p4d-static-mig-half-balanced.resourceslice.yaml"
QUICKSTART = "real/nvidia-gpu/demo/specs/quickstart/v1"
BATS = "real/nvidia-gpu/tests/bats/specs"
CLUSTER_STATE = "constructed/cluster-state"
DRANET_H100 = "constructed/nic/dranet-hgx-h100-node-01.resourceslice.yaml"
CPU_H100 = "constructed/cpu/dra-cpu-hgx-h100-node-01-grouped-numa.resourceslice.yaml"
EFA = "real/dranet/examples/aws_eks_examples/gpu-efa"

EX_NET = "constructed/dra-example-driver/net-profile-2nic-consumable.resourceslice.yaml"
TAINTS = "device-taints-tolerations/device-taint-pod-toleration"  # below EX_DEMO

GAUDI_SLICE = "constructed/intel/gaudi3-8card.resourceslice.yaml"
GAUDI_TAINT_RULE = "constructed/intel/gaudi3-unhealthy.devicetaintrule.yaml"  # v1alpha3, converted on load
GAUDI_CLASS = "real/intel/deployments/gaudi/base/device-class.yaml"
GAUDI_EXAMPLES = "real/intel/deployments/gaudi/examples"
XPU_SLICE = "constructed/intel/gpu-max1550-4card.resourceslice.yaml"
INTEL_GPU_CLASSES = "real/intel/deployments/gpu/base/device-class.yaml"
INTEL_GPU = "real/intel/deployments/gpu"

SRIOV_SLICE = "constructed/nic/sriov-cx6dx-8vf.resourceslice.yaml"
SRIOV_CLASS = "real/sriov/deployments/helm/dra-driver-sriov/templates/deviceclass.yaml"
SRIOV_DEMO = "real/sriov/demo"

# --- node / driver names ------------------------------------------------------------------------------------

GAUDI_NODE = "gaudi3-node-01"
XPU_NODE = "xpu-max1550-node-01"
CPU_NODE = "cpu-node-01"
SRIOV_NODE = "worker-sriov-01"
GAUDI, XPU, DRANET = "gaudi.intel.com", "gpu.intel.com", "dra.net"
SRIOV = "sriovnetwork.k8snetworkplumbingwg.io"

XID_TOLERATION = {"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoSchedule"}
# creationTimestamps of hand-written pods: they sort after fixture pods (which have none)
T = "2026-09-01T10:00:0{}Z"


# --- hand-written objects -----------------------------------------------------------------------------------


def pod(
    namespace: str,
    name: str,
    *,
    templates: dict[str, str] | None = None,
    claims: dict[str, str] | None = None,
    created: str | None = None,
    node_name: str | None = None,
) -> dict[str, Any]:
    """A pod with ``spec.resourceClaims`` (pod claim name → template / claim) and one container using all."""
    resource_claims = [{"name": k, "resourceClaimTemplateName": v} for k, v in (templates or {}).items()]
    resource_claims += [{"name": k, "resourceClaimName": v} for k, v in (claims or {}).items()]
    metadata: dict[str, Any] = {"namespace": namespace, "name": name}
    if created:
        metadata["creationTimestamp"] = created
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "ctr",
                "image": "ubuntu:24.04",
                "resources": {"claims": [{"name": c["name"]} for c in resource_claims]},
            }
        ],
        "resourceClaims": resource_claims,
    }
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if node_name:
        spec["nodeName"] = node_name
        obj["status"] = {"phase": "Running"}
    return obj


# --- state directory ----------------------------------------------------------------------------------------


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    # Upstream placements: first-fit (the default device selection is aligned); output holds only pods.
    return support.state_dir(tmp_path, pods_only=True)


# ===========================================================================================================
# NVIDIA GPU driver: quickstart and bats specs on the constructed 8x H100 node (default driver gates)
# ===========================================================================================================


def nvidia_h100(state: StateDir, *specs: str) -> StateDir:
    """Both constructed nodes; only the H100 node publishes GPUs, so ip-192-168-153-160 never fits."""
    return state.fixture(NODES, NV_CLASSES, H100_SLICE, *specs)


def test_nvidia_quickstart_gpu_test1_two_pods_get_distinct_gpus(state, capsys):
    pods = nvidia_h100(state, f"{QUICKSTART}/gpu-test1.yaml").simulate(capsys)
    assert list(pods) == ["gpu-test1/pod1", "gpu-test1/pod2"]
    # One pool (hgx-h100-node-01, one slice); first fit: pod1 takes gpu-0, pod2 the next free one, gpu-1.
    assert_generated(pods, "gpu-test1/pod1", "gpu", H100, [dev("gpu", NV, H100, "gpu-0")], failed_nodes={P4D})
    assert_generated(pods, "gpu-test1/pod2", "gpu", H100, [dev("gpu", NV, H100, "gpu-1")], failed_nodes={P4D})


def test_nvidia_quickstart_gpu_test2_two_containers_share_one_claim(state, capsys):
    pods = nvidia_h100(state, f"{QUICKSTART}/gpu-test2.yaml").simulate(capsys)
    assert list(pods) == ["gpu-test2/pod"]
    # Both containers use the one template claim: a single request, a single device, the first one (gpu-0).
    assert_generated(
        pods, "gpu-test2/pod", "shared-gpu", H100, [dev("gpu", NV, H100, "gpu-0")], failed_nodes={P4D}
    )


def test_nvidia_quickstart_gpu_test3_claim_shared_across_pods(state, capsys):
    pods = nvidia_h100(state, f"{QUICKSTART}/gpu-test3.yaml").simulate(capsys)
    assert list(pods) == ["gpu-test3/pod1", "gpu-test3/pod2"]
    # pod1 allocates the standalone claim single-gpu (gpu-0); pod2 reuses that allocation as is, and the
    # claim's node selector rules out the other node.
    shared = [("single-gpu", [dev("gpu", NV, H100, "gpu-0")])]
    assert_placed(pods["gpu-test3/pod1"], H100, shared, failed_nodes={P4D})
    assert_placed(pods["gpu-test3/pod2"], H100, shared, failed_nodes={P4D})


def test_nvidia_quickstart_gpu_test5_two_requests_with_opaque_config(state, capsys):
    pods = nvidia_h100(state, f"{QUICKSTART}/gpu-test5.yaml").simulate(capsys)
    assert list(pods) == ["gpu-test5/pod0"]
    template = next(
        d for d in load_fixture(f"{QUICKSTART}/gpu-test5.yaml") if d["kind"] == "ResourceClaimTemplate"
    )
    ts_config, mps_config = template["spec"]["spec"]["devices"]["config"]
    # Requests in spec order: ts-gpu takes gpu-0, mps-gpu gpu-1. The class has no config; each claim config
    # names one of the two requests, so both are kept once, FromClaim, with their requests list.
    assert_generated(
        pods,
        "gpu-test5/pod0",
        "shared-gpus",
        H100,
        [dev("ts-gpu", NV, H100, "gpu-0"), dev("mps-gpu", NV, H100, "gpu-1")],
        failed_nodes={P4D},
        config=[
            [
                {"source": "FromClaim", "requests": ["ts-gpu"], "opaque": ts_config["opaque"]},
                {"source": "FromClaim", "requests": ["mps-gpu"], "opaque": mps_config["opaque"]},
            ]
        ],
    )


def test_nvidia_quickstart_all_in_one_cluster(state, capsys):
    pods = nvidia_h100(state, *(f"{QUICKSTART}/gpu-test{i}.yaml" for i in (1, 2, 3, 5))).simulate(capsys)
    # Pods have no creationTimestamp: namespace/name order. Each takes the next free GPU in list order;
    # gpu-test3/pod2 reuses pod1's claim (gpu-3), so gpu-test5 gets gpu-4 and gpu-5.
    assert list(pods) == [
        "gpu-test1/pod1",
        "gpu-test1/pod2",
        "gpu-test2/pod",
        "gpu-test3/pod1",
        "gpu-test3/pod2",
        "gpu-test5/pod0",
    ]
    assert_generated(pods, "gpu-test1/pod1", "gpu", H100, [dev("gpu", NV, H100, "gpu-0")])
    assert_generated(pods, "gpu-test1/pod2", "gpu", H100, [dev("gpu", NV, H100, "gpu-1")])
    assert_generated(pods, "gpu-test2/pod", "shared-gpu", H100, [dev("gpu", NV, H100, "gpu-2")])
    assert_placed(pods["gpu-test3/pod1"], H100, [("single-gpu", [dev("gpu", NV, H100, "gpu-3")])])
    assert_placed(pods["gpu-test3/pod2"], H100, [("single-gpu", [dev("gpu", NV, H100, "gpu-3")])])
    assert results_of(pods["gpu-test5/pod0"]) == [
        dev("ts-gpu", NV, H100, "gpu-4"),
        dev("mps-gpu", NV, H100, "gpu-5"),
    ]


def test_nvidia_quickstart_gpu_test6_cel_runtime_error_is_fatal(state, capsys):
    # gpu-test6's selector reads device.attributes['gpu.nvidia.com'].index, which the driver does not publish.
    # On the H100 node the productName test (a100) is false first, so `&&` never reads index. On the A100
    # node the MIG devices fail the class selector (type == 'mig'); gpu-4 is the first full GPU: its name
    # matches a100 and `.index` is a missing key in an existing map -> CEL runtime error -> fatal for the pod.
    state.fixture(NODES, NV_CLASSES, H100_SLICE, A100_STATIC_MIG, f"{QUICKSTART}/gpu-test6.yaml")
    state.objects("pod", pod("gpu-test6", "pod-0", templates={"a100": "a100"}))  # the Deployment's pod
    pods = state.simulate(capsys)
    out = pods["gpu-test6/pod-0"]
    claim_name = out["claims"][0]["name"]
    assert claim_name == generated("pod-0", "a100")
    assert_fatal(
        out, f"claim gpu-test6/{claim_name}: selector #0 on device {NV}/{P4D}/gpu-4: CEL runtime error: "
    )
    assert "no such key" in out["error"] and "index" in out["error"]


def test_nvidia_bats_gpu_2pods_2gpus(state, capsys):
    pods = nvidia_h100(state, f"{BATS}/gpu-2pods-2gpus.yaml").simulate(capsys)
    assert list(pods) == ["default/pod1", "default/pod2"]
    # Namespace defaults to "default"; first fit gives pod1 gpu-0 and pod2 gpu-1 (distinct full GPUs).
    assert_generated(pods, "default/pod1", "gpu", H100, [dev("gpu", NV, H100, "gpu-0")], failed_nodes={P4D})
    assert_generated(pods, "default/pod2", "gpu", H100, [dev("gpu", NV, H100, "gpu-1")], failed_nodes={P4D})


def test_nvidia_bats_gpu_two_claims_one_pod(state, capsys):
    pods = nvidia_h100(state, f"{BATS}/gpu-two-claims-one-pod.yaml").simulate(capsys)
    # The pod's two claims are allocated together, in spec.resourceClaims order: gpu-a gpu-0, gpu-b gpu-1.
    assert_placed(
        pods["default/pod-two-claims"],
        H100,
        [
            (generated("pod-two-claims", "gpu-a"), [dev("gpu", NV, H100, "gpu-0")]),
            (generated("pod-two-claims", "gpu-b"), [dev("gpu", NV, H100, "gpu-1")]),
        ],
        failed_nodes={P4D},
    )


def test_nvidia_bats_gpu_cel_nomatch_is_unschedulable_everywhere(state, capsys):
    # Both nodes publish GPUs (H100 full GPUs; A100 static MIG + 4 full GPUs), every full GPU has a
    # productName, none is "NONEXISTENT-GPU-XYZ": no error, just no fit on either node.
    state.fixture(NODES, NV_CLASSES, H100_SLICE, A100_STATIC_MIG, f"{BATS}/gpu-cel-nomatch.yaml")
    pods = state.simulate(capsys)
    assert list(pods) == ["default/pod-cel-nomatch"]
    assert_unschedulable(pods["default/pod-cel-nomatch"], {H100, P4D})


def test_nvidia_a100_static_mig_selectors_and_prioritized_profiles(state, capsys):
    # Static MIG (half-balanced): GPUs 0-3 each carry 2g.10gb@0 (28 SM, 9856Mi), 1g.5gb@2/@3 (14 SM, 4864Mi),
    # 3g.20gb@4 (42 SM, 19968Mi), in that order; GPUs 4-7 are full GPUs (type gpu). No counters.
    state.fixture(
        NODES,
        NV_CLASSES,
        H100_SLICE,
        A100_STATIC_MIG,
        f"{BATS}/gpu-multiple-mig.yaml",
        f"{BATS}/gpu-anymig.yaml",
        f"{BATS}/gpu-simple-mig.yaml",
        f"{CLUSTER_STATE}/resourceclaimtemplates-and-classes.yaml",
    )
    state.objects(
        "pods",
        *(
            pod("team-a", f"mig-{i}", templates={"mig": "mig-large-or-small"}, created=T.format(i))
            for i in range(5)
        ),
    )
    pods = state.simulate(capsys)
    assert list(pods) == [
        "default/pod-2mig",
        "default/pod-anymig",
        "default/pod-mig1g",
        *(f"team-a/mig-{i}" for i in range(5)),
    ]
    # mig2 wants > 50 multiprocessors: no static MIG device has that (3g.20gb has 42); the H100 node has no
    # MIG devices at all.
    assert_unschedulable(pods["default/pod-2mig"], {H100, P4D})
    # Any MIG device: the first in the slice.
    assert_generated(
        pods,
        "default/pod-anymig",
        "migdev",
        P4D,
        [dev("anymig", NV, P4D, "gpu-0-mig-2g10gb-14-0")],
        failed_nodes={H100},
    )
    # > 10 SM and > 10Gi memory: 2g.10gb has only 9856Mi, so the first fit is gpu-0's 3g.20gb.
    assert_generated(
        pods,
        "default/pod-mig1g",
        "migdev",
        P4D,
        [dev("mig1g", NV, P4D, "gpu-0-mig-3g20gb-9-4")],
        failed_nodes={H100},
    )
    # firstAvailable large (3g.20gb) while one is free: gpu-1, gpu-2, gpu-3; then small (2g.10gb) on the GPUs
    # whose 2g.10gb is still free: gpu-1, gpu-2 (gpu-0's went to pod-anymig).
    expected = [
        ("mig/large", "gpu-1-mig-3g20gb-9-4"),
        ("mig/large", "gpu-2-mig-3g20gb-9-4"),
        ("mig/large", "gpu-3-mig-3g20gb-9-4"),
        ("mig/small", "gpu-1-mig-2g10gb-14-0"),
        ("mig/small", "gpu-2-mig-2g10gb-14-0"),
    ]
    for i, (request, device) in enumerate(expected):
        assert_generated(
            pods, f"team-a/mig-{i}", "mig", P4D, [dev(request, NV, P4D, device)], failed_nodes={H100}
        )


def test_nvidia_h100_health_taints_with_numa_aligned_gpus_and_nics(state, capsys):
    # gpu-0..3 NUMA 0, gpu-4..7 NUMA 1; gpu-3 has xid=79:NoSchedule, gpu-6 xid=13 with effect None
    # (informational). RDMA NICs pci-0000-18/40/4f/5e NUMA 0, -9a/c0/ce/dc NUMA 1.
    state.fixture(
        NODES,
        NV_CLASSES,
        "constructed/nvidia-gpu/h100-8gpu-health-taints.resourceslice.yaml",
        DRANET_H100,
        f"{CLUSTER_STATE}/resourceclaimtemplates-and-classes.yaml",
    )
    state.objects(
        "pods",
        pod("team-a", "quad-0", templates={"gpus": "gpu-nic-numa"}, created=T.format(1)),
        pod("team-a", "pair-0", templates={"gpus": "two-numa-local-gpus"}, created=T.format(2)),
        pod("team-a", "pair-1", templates={"gpus": "two-numa-local-gpus"}, created=T.format(3)),
        pod("team-a", "quad-1", templates={"gpus": "gpu-nic-numa"}, created=T.format(4)),
        pod("team-a", "pair-2", templates={"gpus": "two-numa-local-gpus"}, created=T.format(5)),
    )
    pods = state.simulate(capsys)
    assert list(pods) == [f"team-a/{n}" for n in ("quad-0", "pair-0", "pair-1", "quad-1", "pair-2")]
    xid = {"tolerations": [XID_TOLERATION]}
    nic = lambda name: dev("nic", DRANET, H100, name)  # noqa: E731
    # gpu-0, gpu-1 (NUMA 0) and the first two NUMA-0 NICs.
    assert_generated(
        pods,
        "team-a/quad-0",
        "gpus",
        H100,
        [
            dev("gpu", NV, H100, "gpu-0", **xid),
            dev("gpu", NV, H100, "gpu-1", **xid),
            nic("pci-0000-18-00-0"),
            nic("pci-0000-40-00-0"),
        ],
        failed_nodes={P4D},
    )
    # gpu-2 has no NUMA-0 partner (gpu-3 tainted, no toleration): backtrack to gpu-4 + gpu-5 (NUMA 1).
    assert_generated(
        pods,
        "team-a/pair-0",
        "gpus",
        H100,
        [dev("gpu", NV, H100, "gpu-4"), dev("gpu", NV, H100, "gpu-5")],
        failed_nodes={P4D},
    )
    # Again gpu-2 fails; gpu-6's taint has effect None and does not block: gpu-6 + gpu-7.
    assert_generated(
        pods,
        "team-a/pair-1",
        "gpus",
        H100,
        [dev("gpu", NV, H100, "gpu-6"), dev("gpu", NV, H100, "gpu-7")],
        failed_nodes={P4D},
    )
    # The xid toleration (Exists, NoSchedule) admits gpu-3: gpu-2 + gpu-3 with the next NUMA-0 NICs.
    assert_generated(
        pods,
        "team-a/quad-1",
        "gpus",
        H100,
        [
            dev("gpu", NV, H100, "gpu-2", **xid),
            dev("gpu", NV, H100, "gpu-3", **xid),
            nic("pci-0000-4f-00-0"),
            nic("pci-0000-5e-00-0"),
        ],
        failed_nodes={P4D},
    )
    # All 8 GPUs are allocated.
    assert_unschedulable(pods["team-a/pair-2"], {H100, P4D})


# ===========================================================================================================
# NVIDIA A100 with DynamicMIG: partitionable devices (full GPU and MIG placements share counter sets)
# ===========================================================================================================


def a100_dynamic_mig(state: StateDir) -> StateDir:
    state.fixture(
        NODES, NV_CLASSES, A100_DYNAMIC_MIG, f"{BATS}/gpu-2pods-2gpus.yaml", f"{QUICKSTART}/gpu-test4.yaml"
    )
    return state.objects(
        "pods",
        pod("gpu-test4", "pod-0", templates={"mig-devices": "mig-devices"}),  # one replica of the Deployment
        pod("default", "pod3", templates={"gpu": "rct-single-gpu-full"}, created=T.format(1)),
    )


def test_nvidia_a100_dynamic_mig_full_gpus_and_mig_placements_share_counters(state, capsys):
    pods = a100_dynamic_mig(state).simulate(capsys)
    assert list(pods) == ["default/pod1", "default/pod2", "gpu-test4/pod-0", "default/pod3"]
    # One pool of 9 slices; slices are searched by NAME: -c8v9b (gpu-7), -d2f3g (gpu-4), -h4j5k (gpu-5),
    # -l6z7x (gpu-6), ... (the counter slice -cs8x1 has no devices). So the first full GPUs are gpu-7, gpu-4.
    assert_generated(pods, "default/pod1", "gpu", P4D, [dev("gpu", NV, P4D, "gpu-7")], failed_nodes={H100})
    assert_generated(pods, "default/pod2", "gpu", P4D, [dev("gpu", NV, P4D, "gpu-4")], failed_nodes={H100})
    # gpu-7/gpu-4 consume all of their counter sets, so none of their MIG placements fits; on gpu-5 the first
    # fits are 1g.5gb@0 and @1 (memory-slice-0/1), 2g.10gb@0 needs slices 0-1 (taken) -> @2, 3g.20gb@0 needs
    # 0-3 -> @4. Totals 98 SM, 7 CE, 39552Mi: exactly within gpu-5-counter-set; all share gpu-5's parentUUID.
    assert_generated(
        pods,
        "gpu-test4/pod-0",
        "mig-devices",
        P4D,
        [
            dev("mig-1g-5gb-0", NV, P4D, "gpu-5-mig-1g5gb-19-0"),
            dev("mig-1g-5gb-1", NV, P4D, "gpu-5-mig-1g5gb-19-1"),
            dev("mig-2g-10gb", NV, P4D, "gpu-5-mig-2g10gb-14-2"),
            dev("mig-3g-20gb", NV, P4D, "gpu-5-mig-3g20gb-9-4"),
        ],
        failed_nodes={H100},
    )
    # The full gpu-5 needs 98 multiprocessors but its MIG placements use all 98: next slice by name is gpu-6.
    assert_generated(pods, "default/pod3", "gpu", P4D, [dev("gpu", NV, P4D, "gpu-6")], failed_nodes={H100})


def test_nvidia_a100_dynamic_mig_needs_partitionable_devices_gate(state, capsys):
    pods = a100_dynamic_mig(state).simulate(capsys, "--feature-gates", "DRAPartitionableDevices=false")
    # Gate off: the counter slice is ignored and every device has consumesCounters, so none can be allocated.
    # That is "no fit" (ExactCount only), not a fatal error.
    for key in ("default/pod1", "default/pod2", "gpu-test4/pod-0", "default/pod3"):
        assert_unschedulable(pods[key], {H100, P4D})


# ===========================================================================================================
# NVIDIA cluster state: consumable capacity (GPU shares) and NUMA alignment of GPUs and RDMA NICs
# ===========================================================================================================


def test_cluster_state_consumable_shares_and_numa_aligned_gpus_and_nics(state, capsys):
    state.fixture(
        NODES,
        NV_CLASSES,
        A100_DYNAMIC_MIG,
        H100_SHARES,
        DRANET_H100,
        CPU_H100,
        f"{CLUSTER_STATE}/pods.yaml",
        f"{CLUSTER_STATE}/resourceclaims.yaml",
        f"{CLUSTER_STATE}/resourceclaimtemplates-and-classes.yaml",
    )
    state.objects(
        "extra",
        claim_template(
            "team-a",
            "gpu-4shares",
            [
                exactly(
                    "gpu",
                    NV,
                    selectors=[{"cel": {"expression": "device.allowMultipleAllocations == true"}}],
                    capacity={"requests": {"shares": "4"}},
                )
            ],
        ),
        pod("team-a", "gpu-nic-numa-0", templates={"gpus": "gpu-nic-numa"}, created=T.format(1)),
        pod("team-a", "share-20gi", templates={"gpu": "gpu-1share-20gi"}, created=T.format(2)),
        pod("team-a", "whole-by-shares", templates={"gpu": "gpu-4shares"}, created=T.format(3)),
    )
    pods = state.simulate(capsys)
    # Running pods (trainer-0, mig-infer-0, shared-a, shared-b) are not scheduled again.
    assert list(pods) == [
        "team-a/pending-2gpu",
        "team-a/gpu-nic-numa-0",
        "team-a/share-20gi",
        "team-a/whole-by-shares",
    ]
    # The constructed claim pending-2gpu-gpus-b7n1m has no ownerReference to pending-2gpu, so (as upstream's
    # resourceclaim.IsForPod) it was "not created for this pod": unresolvable on every node, not fatal.
    assert_unschedulable(pods["team-a/pending-2gpu"], {H100, P4D})
    assert "not created for this pod" in pods["team-a/pending-2gpu"]["reasons"][H100]
    # gpu-nic-numa-0 (same template, proper generated claim): the A100 node has no dra.net NICs. On the
    # H100 node the GPUs are multi-allocatable:
    # no capacity request -> policy defaults (memory 0, shares 1); slot 2 resumes after gpu-0 -> gpu-1;
    # both NUMA 0, so the NICs must be NUMA 0 too: the first two RDMA NICs pci-0000-18/40 (NUMA 0).
    gpu_share = {
        "tolerations": [XID_TOLERATION],
        "shareID": UID,
        "consumedCapacity": {"memory": "0", "shares": "1"},
    }
    assert_generated(
        pods,
        "team-a/gpu-nic-numa-0",
        "gpus",
        H100,
        [
            dev("gpu", NV, H100, "gpu-0", **gpu_share),
            dev("gpu", NV, H100, "gpu-1", **gpu_share),
            dev("nic", DRANET, H100, "pci-0000-18-00-0"),
            dev("nic", DRANET, H100, "pci-0000-40-00-0"),
        ],
        failed_nodes={P4D},
    )
    # share-20gi: gpu-0 holds 1 of 4 shares and 0 memory: another share (1 share, 20Gi) fits on gpu-0.
    assert_generated(
        pods,
        "team-a/share-20gi",
        "gpu",
        H100,
        [share("gpu", NV, H100, "gpu-0", memory="20Gi", shares="1")],
        failed_nodes={P4D},
    )
    # whole-by-shares wants all 4 shares: gpu-0 has 2 used, gpu-1 has 1 used, gpu-2 is untouched.
    assert_generated(
        pods,
        "team-a/whole-by-shares",
        "gpu",
        H100,
        [share("gpu", NV, H100, "gpu-2", memory="0", shares="4")],
        failed_nodes={P4D},
    )
    share_ids = [
        results_of(pods[key])[0]["shareID"] for key in ("team-a/gpu-nic-numa-0", "team-a/share-20gi")
    ]
    assert len(set(share_ids)) == 2  # two shares of gpu-0, each with its own shareID


# ===========================================================================================================
# NVIDIA + DRANET (real AWS p4d dumps): GPU and EFA aligned on resource.kubernetes.io/pcieRoot
# ===========================================================================================================


def test_dranet_gpu_efa_pcie_root_alignment(state, capsys):
    # Real dumps of ip-192-168-153-160: GPUs 0-1 on pci0000:10, 2-3 on :20, 4-5 on :90, 6-7 on :a0; one EFA
    # per root (pci-0000-{10,20,90,a0}-1b-0; the -01-0 devices are ENA, not matched by the EFA class).
    # The real claim nccl-test-dra-worker-0-gpu-efa-example already holds gpu-6 and pci-0000-a0-1b-0.
    state.fixture(
        NODES,
        NV_CLASSES,
        f"{EFA}/device-class.yaml",
        f"{EFA}/resource-claim-template.yaml",
        f"{EFA}/resource-claim.yaml",
        f"{EFA}/resourceslice-dranet.yaml",
        f"{EFA}/resourceslice-gpu.yaml",
    )
    state.objects(
        "pods",
        pod("default", "aligned-0", templates={"gpu-efa": "gpu-efa-aligned"}, created=T.format(1)),
        pod("default", "aligned-1", templates={"gpu-efa": "gpu-efa-aligned"}, created=T.format(2)),
        pod("default", "unaligned-0", templates={"gpu-efa": "gpu-efa-unaligned"}, created=T.format(3)),
        pod("default", "aligned-2", templates={"gpu-efa": "gpu-efa-aligned"}, created=T.format(4)),
    )
    pods = state.simulate(capsys)
    assert list(pods) == [
        "default/aligned-0",
        "default/aligned-1",
        "default/unaligned-0",
        "default/aligned-2",
    ]
    # gpu-0 (:10) and the EFA on :10.
    assert_generated(
        pods,
        "default/aligned-0",
        "gpu-efa",
        P4D,
        [dev("gpu", NV, P4D, "gpu-0"), dev("efa", DRANET, P4D, "pci-0000-10-1b-0")],
        failed_nodes={H100},
    )
    # gpu-1 (:10) first, but the :10 EFA is taken and the others are on other roots (or in use):
    # backtrack to gpu-2 (:20) with the :20 EFA.
    assert_generated(
        pods,
        "default/aligned-1",
        "gpu-efa",
        P4D,
        [dev("gpu", NV, P4D, "gpu-2"), dev("efa", DRANET, P4D, "pci-0000-20-1b-0")],
        failed_nodes={H100},
    )
    # No constraint: first free GPU (gpu-1) and first free EFA (:90), on different PCIe roots.
    assert_generated(
        pods,
        "default/unaligned-0",
        "gpu-efa",
        P4D,
        [dev("gpu", NV, P4D, "gpu-1"), dev("efa", DRANET, P4D, "pci-0000-90-1b-0")],
        failed_nodes={H100},
    )
    # Every EFA is now in use (the :a0 one by the pre-existing claim): no GPU can be paired.
    assert_unschedulable(pods["default/aligned-2"], {H100, P4D})


# ===========================================================================================================
# dra-example-driver demos on the README's `kubectl get resourceslice` dump (8 GPUs on the kind worker)
# ===========================================================================================================


def dra_example(state: StateDir, *demos: str) -> StateDir:
    state.fixture(EX_SLICES, EX_CLASS, *(f"{EX_DEMO}/{d}" for d in demos))
    return state.objects("nodes", node(EX), node(EX_CP))


def test_dra_example_basic_resourceclaimtemplate_and_cel_selector(state, capsys):
    pods = dra_example(
        state,
        "basic-resourceclaimtemplate/basic-resourceclaimtemplate.yaml",
        "cel-selector/cel-selector.yaml",
    ).simulate(capsys)
    assert list(pods) == [
        "basic-resourceclaimtemplate/pod0",
        "basic-resourceclaimtemplate/pod1",
        "cel-selector/pod0",
    ]
    # pod0 and pod1 take gpu-0 and gpu-1; every GPU has model LATEST-GPU-MODEL (bare name = driver domain)
    # and 80Gi >= 4Gi, so the CEL-selector pod gets the next free one, gpu-2.
    assert_generated(
        pods,
        "basic-resourceclaimtemplate/pod0",
        "gpu",
        EX,
        [dev("gpu", EXD, EX, "gpu-0")],
        failed_nodes={EX_CP},
    )
    assert_generated(
        pods,
        "basic-resourceclaimtemplate/pod1",
        "gpu",
        EX,
        [dev("gpu", EXD, EX, "gpu-1")],
        failed_nodes={EX_CP},
    )
    assert_generated(
        pods, "cel-selector/pod0", "gpu", EX, [dev("gpu", EXD, EX, "gpu-2")], failed_nodes={EX_CP}
    )


def test_dra_example_basic_multiple_requests(state, capsys):
    pods = dra_example(state, "basic-multiple-requests/basic-multiple-requests.yaml").simulate(capsys)
    # Two requests of one claim, in spec order: gpu-1 -> gpu-0, gpu-2 -> gpu-1 (gpu-0 picked in this attempt).
    assert_generated(
        pods,
        "basic-multiple-requests/pod0",
        "gpus",
        EX,
        [dev("gpu-1", EXD, EX, "gpu-0"), dev("gpu-2", EXD, EX, "gpu-1")],
        failed_nodes={EX_CP},
    )


def test_dra_example_prioritized_alternatives(state, capsys):
    pods = dra_example(state, "prioritized-alternatives/prioritized-alternatives.yaml").simulate(capsys)
    assert list(pods) == ["prioritized-alternatives/pod0", "prioritized-alternatives/pod1"]
    # pod0: no BLEEDING-EDGE-GPU model, no GPU with >= 1Ti memory (80Gi): third subrequest older-gpu, gpu-0.
    assert_generated(
        pods,
        "prioritized-alternatives/pod0",
        "gpu",
        EX,
        [dev("gpu/older-gpu", EXD, EX, "gpu-0")],
        failed_nodes={EX_CP},
    )
    # pod1: the first subrequest (model LATEST-GPU-MODEL) matches: gpu-1, the next free GPU.
    assert_generated(
        pods,
        "prioritized-alternatives/pod1",
        "gpu",
        EX,
        [dev("gpu/latest-gpu", EXD, EX, "gpu-1")],
        failed_nodes={EX_CP},
    )


def test_dra_example_admin_access_all_mode(state, capsys):
    dra_example(
        state,
        "admin-access/admin-access.yaml",
        "basic-resourceclaimtemplate/basic-resourceclaimtemplate.yaml",
    )
    # A running workload already holds gpu-0 through an allocated claim.
    state.objects(
        "busy",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"namespace": "default", "name": "busy-gpu"},
            "spec": {"devices": {"requests": [exactly("gpu", EXD)]}},
            "status": {
                "allocation": {
                    "devices": {"results": [dev("gpu", EXD, EX, "gpu-0")]},
                    "nodeSelector": pinned(EX),
                },
                "reservedFor": [
                    {"resource": "pods", "name": "busy", "uid": "0c0ffee0-0000-4000-8000-000000000001"}
                ],
            },
        },
        {
            **pod("default", "busy", claims={"gpu": "busy-gpu"}, node_name=EX),
            "metadata": {
                "namespace": "default",
                "name": "busy",
                "uid": "0c0ffee0-0000-4000-8000-000000000001",
            },
        },
    )
    pods = state.simulate(capsys)
    assert list(pods) == [
        "admin-access/pod0",
        "basic-resourceclaimtemplate/pod0",
        "basic-resourceclaimtemplate/pod1",
    ]
    # All + adminAccess: every matching device of the node, in-use gpu-0 included, each marked adminAccess.
    assert_generated(
        pods,
        "admin-access/pod0",
        "admin-gpus",
        EX,
        [dev("admin-gpu", EXD, EX, f"gpu-{i}", adminAccess=True) for i in range(8)],
        failed_nodes={EX_CP},
    )
    # Admin allocations do not count as in use; busy-gpu's gpu-0 does: the normal pods get gpu-1 and gpu-2.
    assert_generated(
        pods,
        "basic-resourceclaimtemplate/pod0",
        "gpu",
        EX,
        [dev("gpu", EXD, EX, "gpu-1")],
        failed_nodes={EX_CP},
    )
    assert_generated(
        pods,
        "basic-resourceclaimtemplate/pod1",
        "gpu",
        EX,
        [dev("gpu", EXD, EX, "gpu-2")],
        failed_nodes={EX_CP},
    )


EX_UNHEALTHY_TOLERATION = {
    "key": "gpu.example.com/unhealthy",
    "operator": "Equal",
    "value": "true",
    "effect": "NoExecute",
}


def test_dra_example_device_taint_rule_and_toleration(state, capsys):
    # The (v1beta2) DeviceTaintRule taints every gpu.example.com device: unhealthy=true:NoExecute.
    pods = dra_example(
        state,
        f"{TAINTS}/1-device-taint-rule.yaml",
        f"{TAINTS}/2-basic-resourceclaimtemplate.yaml",
    ).simulate(capsys)
    assert list(pods) == [
        "basic-resourceclaimtemplate/pod-with-toleration",
        "basic-resourceclaimtemplate/pod-without-toleration",
    ]
    # The toleration matches key, value (Equal) and effect: gpu-0, with the toleration copied into the result.
    assert_generated(
        pods,
        "basic-resourceclaimtemplate/pod-with-toleration",
        "gpu",
        EX,
        [dev("gpu", EXD, EX, "gpu-0", tolerations=[EX_UNHEALTHY_TOLERATION])],
        failed_nodes={EX_CP},
    )
    # No toleration: every device carries the NoExecute taint.
    assert_unschedulable(pods["basic-resourceclaimtemplate/pod-without-toleration"], {EX, EX_CP})


def test_dra_example_device_taint_rule_ignored_without_its_gate(state, capsys):
    pods = dra_example(
        state,
        f"{TAINTS}/1-device-taint-rule.yaml",
        f"{TAINTS}/2-basic-resourceclaimtemplate.yaml",
    ).simulate(capsys, "--feature-gates", "DRADeviceTaintRules=false")
    # Rules off: no device is tainted. Tolerations are still copied; the second pod takes gpu-1.
    assert_generated(
        pods,
        "basic-resourceclaimtemplate/pod-with-toleration",
        "gpu",
        EX,
        [dev("gpu", EXD, EX, "gpu-0", tolerations=[EX_UNHEALTHY_TOLERATION])],
    )
    assert_generated(
        pods, "basic-resourceclaimtemplate/pod-without-toleration", "gpu", EX, [dev("gpu", EXD, EX, "gpu-1")]
    )


def test_dra_example_partitionable_devices(state, capsys):
    # gpu profile, 2 GPUs x 2 partitions: counter slice -pc1ss (gpu-<i>-counters: 80Gi, compute 100), device
    # slice -pd2ss: gpu-0-partition-0, gpu-0-partition-1, gpu-0-full, gpu-1-partition-0, -1, gpu-1-full.
    state.fixture(EX_CLASS, EX_PARTITIONS, f"{EX_DEMO}/partitionable-devices/partitionable-devices.yaml")
    state.objects(
        "extra",
        node(EX),
        node(EX_CP),
        claim_template("partitionable-devices", "one-gpu", [exactly("gpu", EXD)]),
        pod(
            "partitionable-devices",
            "pod1",
            templates={"gpu-partitions": "gpu-partitions"},
            created=T.format(1),
        ),
        pod("partitionable-devices", "pod2", templates={"gpu": "one-gpu"}, created=T.format(2)),
    )
    pods = state.simulate(capsys)
    assert list(pods) == [
        "partitionable-devices/pod0",
        "partitionable-devices/pod1",
        "partitionable-devices/pod2",
    ]
    # Two partitions of gpu-0 use its 80Gi / 100 compute exactly.
    support.assert_demo_partitions_pod0(pods)
    # gpu-0-full finds its counters exhausted; the next fits are gpu-1's two partitions.
    assert_generated(
        pods,
        "partitionable-devices/pod1",
        "gpu-partitions",
        EX,
        gpu_partitions("gpu-partition", 1),
        failed_nodes={EX_CP},
    )
    # Only the two full GPUs are left and both counter sets are used up.
    assert_unschedulable(pods["partitionable-devices/pod2"], {EX, EX_CP})


NET_CLASS = device_class("net.example.com", "device.driver == 'net.example.com'")


def net_consumable(state: StateDir) -> StateDir:
    state.fixture(EX_NET, f"{EX_DEMO}/net-consumable-capacity/net-consumable-capacity.yaml")
    return state.objects(
        "extra",
        node(EX),
        node(EX_CP),
        NET_CLASS,
        claim_template(
            "net-consumable-capacity",
            "nic-90g-in-1g-out",
            [
                exactly(
                    "nic",
                    "net.example.com",
                    capacity={"requests": {"ingressBandwidth": "90G", "egressBandwidth": "1G"}},
                )
            ],
        ),
        pod("net-consumable-capacity", "pod2", templates={"nic": "nic-90g-in-1g-out"}, created=T.format(1)),
    )


def test_dra_example_net_consumable_capacity(state, capsys):
    pods = net_consumable(state).simulate(capsys)
    assert list(pods) == [
        "net-consumable-capacity/pod0",
        "net-consumable-capacity/pod1",
        "net-consumable-capacity/pod2",
    ]
    net = "net.example.com"
    # nic-0 is multi-allocatable: pod0's share takes 10G in / 5G out and the vfs default (1).
    assert_generated(
        pods,
        "net-consumable-capacity/pod0",
        "nic",
        EX,
        [share("nic", net, EX, "nic-0", vfs="1", ingressBandwidth="10G", egressBandwidth="5G")],
        failed_nodes={EX_CP},
    )
    # 10G + 5G of 100G in: pod1 shares nic-0 too.
    assert_generated(
        pods,
        "net-consumable-capacity/pod1",
        "nic",
        EX,
        [share("nic", net, EX, "nic-0", vfs="1", ingressBandwidth="5G", egressBandwidth="5G")],
        failed_nodes={EX_CP},
    )
    # 15G + 90G > 100G on nic-0: pod2 goes to nic-1.
    assert_generated(
        pods,
        "net-consumable-capacity/pod2",
        "nic",
        EX,
        [share("nic", net, EX, "nic-1", vfs="1", ingressBandwidth="90G", egressBandwidth="1G")],
        failed_nodes={EX_CP},
    )
    ids = {results_of(p)[0]["shareID"] for p in pods.values()}
    assert len(ids) == 3


def test_dra_example_net_capacity_requests_without_gate_are_fatal(state, capsys):
    pods = net_consumable(state).simulate(capsys, "--feature-gates", "DRAConsumableCapacity=false")
    # Capacity requests with DRAConsumableCapacity off: a pre-check error, fatal for the pod (§4).
    for key in (
        "net-consumable-capacity/pod0",
        "net-consumable-capacity/pod1",
        "net-consumable-capacity/pod2",
    ):
        out = pods[key]
        message = (
            f"claim net-consumable-capacity/{out['claims'][0]['name']}, request nic: has capacity requests, "
            "but the DRAConsumableCapacity feature is disabled"
        )
        assert_fatal(out, message)
        assert out["error"] == message


# ===========================================================================================================
# Intel: Gaudi3 with the driver's health DeviceTaintRule; Max 1550 GPUs with a driver-published taint
# ===========================================================================================================


ADMIN_NAMESPACE_DEFAULT = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": "default", "labels": {"resource.kubernetes.io/admin-access": "true"}},
}


def gaudi(state: StateDir, *, admin_namespace: bool = True) -> StateDir:
    # Gaudi3 devices in list order (pcieRoot): 19,1a (:17) 33,34 (:30) 9a,9b (:97) b3,b4 (:b0); the v1alpha3
    # rule taints 0000-9b-00-0-0x1060 with gaudi.intel.com/unhealthy=CriticalError:NoExecute.
    state.fixture(
        GAUDI_SLICE,
        GAUDI_TAINT_RULE,
        GAUDI_CLASS,
        f"{GAUDI_EXAMPLES}/pod-inline.yaml",
        f"{GAUDI_EXAMPLES}/deployment-inline.yaml",
        f"{GAUDI_EXAMPLES}/monitor-pod-inline.yaml",
    )
    if admin_namespace:  # monitor-pod uses adminAccess: the docs ask for this namespace label
        state.objects("namespace", ADMIN_NAMESPACE_DEFAULT)
    return state.objects(
        "extra",
        node(GAUDI_NODE),
        node(CPU_NODE),
        claim_template("default", "four-gaudi3", [exactly("gaudi", GAUDI, count=4)]),
        claim_template("default", "one-gaudi3", [exactly("gaudi", GAUDI)]),
        pod(
            "default", "gaudi-test-0", templates={"resource": "two-gaudi3"}, created=T.format(1)
        ),  # Deployment pod
        pod("default", "gaudi-quad", templates={"resource": "four-gaudi3"}, created=T.format(2)),
        pod("default", "gaudi-one", templates={"resource": "one-gaudi3"}, created=T.format(3)),
    )


def gaudi_device(pci: str) -> str:
    return f"0000-{pci}-00-0-0x1060"


def test_intel_gaudi_device_taint_rule(state, capsys):
    pods = gaudi(state).simulate(capsys)
    assert list(pods) == [
        "default/monitor-pod",
        "default/test-inline-claim",
        "default/gaudi-test-0",
        "default/gaudi-quad",
        "default/gaudi-one",
    ]
    g = lambda req, pci: dev(req, GAUDI, GAUDI_NODE, gaudi_device(pci))  # noqa: E731
    # claim1: the first card.
    assert_placed(
        pods["default/test-inline-claim"],
        GAUDI_NODE,
        [("claim1", [g("gaudi", "19")])],
        failed_nodes={CPU_NODE},
    )
    # two-gaudi3 (model == 'Gaudi3' matches all): the next two, 1a and 33.
    assert_generated(
        pods,
        "default/gaudi-test-0",
        "resource",
        GAUDI_NODE,
        [g("gaudi", "1a"), g("gaudi", "33")],
        failed_nodes={CPU_NODE},
    )
    # Four more: 34, 9a, then 9b is tainted (no toleration) and skipped, b3, b4.
    assert_generated(
        pods,
        "default/gaudi-quad",
        "resource",
        GAUDI_NODE,
        [g("gaudi", p) for p in ("34", "9a", "b3", "b4")],
        failed_nodes={CPU_NODE},
    )
    # Only the tainted 9b is left.
    assert_unschedulable(pods["default/gaudi-one"], {GAUDI_NODE, CPU_NODE})


def test_intel_gaudi_monitor_keyless_tolerations_do_not_tolerate_valued_taint(state, capsys):
    pods = gaudi(state).simulate(capsys)
    # monitor-claim: All + adminAccess with tolerations {effect: NoExecute} / {effect: NoSchedule}: no key
    # (matches every key) but operator defaults to Equal, so the value "" must equal the taint's value
    # "CriticalError": not tolerated (§10). Admin access does not bypass taints, and All mode cannot skip
    # the tainted 9b: no fit on the Gaudi node; the CPU node has no Gaudi (All with zero devices fails).
    assert_unschedulable(pods["default/monitor-pod"], {GAUDI_NODE, CPU_NODE})


def test_intel_gaudi_monitor_without_admin_namespace_label_is_unschedulable_saying_why(state, capsys):
    pods = gaudi(state, admin_namespace=False).simulate(capsys)
    # API validation admits adminAccess only in namespaces labelled resource.kubernetes.io/admin-access=true;
    # kube-scheduler does not check it: the monitor is unschedulable as with the label (the tainted card), and
    # the reasons add the label's explanation. The pod without an admin claim is not affected.
    out = pods["default/monitor-pod"]
    claim_name = out["claims"][0]["name"]
    assert_unschedulable(out, {GAUDI_NODE, CPU_NODE})
    label = (
        f"claim default/{claim_name}: admin access to devices requires the "
        "`resource.kubernetes.io/admin-access: true` label"
    )
    assert all(label in why for why in out["reasons"].values())
    assert pods["default/test-inline-claim"]["node"] == GAUDI_NODE


def test_intel_gaudi_device_taint_rules_gate_off(state, capsys):
    pods = gaudi(state).simulate(capsys, "--feature-gates", "DRADeviceTaintRules=false")
    g = lambda req, pci, **kw: dev(req, GAUDI, GAUDI_NODE, gaudi_device(pci), **kw)  # noqa: E731
    monitor_tolerations = [{"effect": "NoExecute"}, {"effect": "NoSchedule"}]
    cards = ("19", "1a", "33", "34", "9a", "9b", "b3", "b4")
    # Without the rule nothing is tainted: the monitor gets all 8 cards (admin access, tolerations copied) ...
    assert_generated(
        pods,
        "default/monitor-pod",
        "resource",
        GAUDI_NODE,
        [g("gaudi", p, adminAccess=True, tolerations=monitor_tolerations) for p in cards],
        failed_nodes={CPU_NODE},
    )
    # ... which does not block normal claims; 9b is usable, so the quad takes 34, 9a, 9b, b3 and the last b4.
    assert_placed(pods["default/test-inline-claim"], GAUDI_NODE, [("claim1", [g("gaudi", "19")])])
    assert_generated(
        pods, "default/gaudi-test-0", "resource", GAUDI_NODE, [g("gaudi", "1a"), g("gaudi", "33")]
    )
    assert_generated(
        pods, "default/gaudi-quad", "resource", GAUDI_NODE, [g("gaudi", p) for p in ("34", "9a", "9b", "b3")]
    )
    assert_generated(pods, "default/gaudi-one", "resource", GAUDI_NODE, [g("gaudi", "b4")])


def test_intel_gpu_max1550_driver_published_taint(state, capsys):
    # 4 GPUs in list order 29, 3a, 9a, ca; 9a carries HealthIssues-memorytemperature:NoExecute in the slice.
    state.fixture(
        XPU_SLICE,
        INTEL_GPU_CLASSES,
        f"{INTEL_GPU}/tests/multi-gpu/multi-gpu-pod.yaml",
        f"{INTEL_GPU}/examples/resource-claim-template.yaml",
    )
    ns = "intel-gpu-resource-driver"
    state.objects(
        "extra",
        node(XPU_NODE),
        node(CPU_NODE),
        pod(ns, "gpu-pod-a", templates={"resource": "claim1"}, created=T.format(1)),
        pod(ns, "gpu-pod-b", templates={"resource": "claim1"}, created=T.format(2)),
    )
    pods = state.simulate(capsys)
    assert list(pods) == [f"{ns}/multi-gpu-test", f"{ns}/gpu-pod-a", f"{ns}/gpu-pod-b"]
    x = lambda pci: dev("gpu", XPU, XPU_NODE, f"0000-{pci}-00-0-0x0bd5")  # noqa: E731
    # count 2: the first two GPUs.
    assert_generated(
        pods, f"{ns}/multi-gpu-test", "resource", XPU_NODE, [x("29"), x("3a")], failed_nodes={CPU_NODE}
    )
    # 9a is tainted NoExecute and claim1 has no toleration: ca.
    assert_generated(pods, f"{ns}/gpu-pod-a", "resource", XPU_NODE, [x("ca")], failed_nodes={CPU_NODE})
    # Only the tainted 9a is left.
    assert_unschedulable(pods[f"{ns}/gpu-pod-b"], {XPU_NODE, CPU_NODE})


def test_intel_first_available_gpu_or_gaudi(state, capsys):
    state.fixture(
        XPU_SLICE,
        GAUDI_SLICE,
        INTEL_GPU_CLASSES,
        GAUDI_CLASS,
        f"{INTEL_GPU}/examples/pod-inline-first-available.yaml",
    )
    state.objects("nodes", node(XPU_NODE), node(GAUDI_NODE))
    key = "default/test-inline-first-available"
    # Only the Gaudi node: no gpu.intel.com device there; the second subrequest (gaudi) takes the first card.
    pods = state.simulate(capsys, "--nodes", GAUDI_NODE)
    assert_generated(
        pods,
        key,
        "resource",
        GAUDI_NODE,
        [dev("ai-accelerator/gaudi", GAUDI, GAUDI_NODE, gaudi_device("19"))],
        failed_nodes=set(),
    )
    # Only the Max 1550 node: the first subrequest (gpu) fits: the first GPU.
    pods = state.simulate(capsys, "--nodes", XPU_NODE)
    assert_generated(
        pods,
        key,
        "resource",
        XPU_NODE,
        [dev("ai-accelerator/gpu", XPU, XPU_NODE, "0000-29-00-0-0x0bd5")],
        failed_nodes=set(),
    )


# ===========================================================================================================
# SR-IOV: VFs of one ConnectX-6 Dx PF; the resource-alignment demo pairs a VF with a gpu.example.com GPU
# ===========================================================================================================


def sriov(state: StateDir, *, gpu_class: bool) -> StateDir:
    state.fixture(
        SRIOV_SLICE,
        SRIOV_CLASS,
        f"{SRIOV_DEMO}/vfio-driver/vfio-driver-config.yaml",
        f"{SRIOV_DEMO}/multiple-vf-claim/multiple-vf-one-claim.yaml",
        f"{SRIOV_DEMO}/resource-alignment/resource-alignment.yaml",
    )
    if gpu_class:
        state.fixture(EX_CLASS)
    return state.objects("nodes", node(SRIOV_NODE), node(CPU_NODE))


def _sriov_vf_pod_expectations(pods: dict[str, dict[str, Any]]) -> None:
    vfio = load_fixture(f"{SRIOV_DEMO}/vfio-driver/vfio-driver-config.yaml")
    (class_config,) = next(d for d in vfio if d["kind"] == "DeviceClass")["spec"]["config"]
    (vfio_claim_config,) = next(d for d in vfio if d["kind"] == "ResourceClaimTemplate")["spec"]["spec"][
        "devices"
    ]["config"]
    # vf-test2 (first by namespace): class vf-test2 has a config -> FromClass first, then the claim's own
    # config (FromClaim); both cover the only request "vf", so requests are cleared on both.
    assert_generated(
        pods,
        "vf-test2/pod0",
        "vf",
        SRIOV_NODE,
        [dev("vf", SRIOV, SRIOV_NODE, "0000-3b-00-2")],
        failed_nodes={CPU_NODE},
        config=[
            [
                {"source": "FromClass", "opaque": class_config["opaque"]},
                {"source": "FromClaim", "opaque": vfio_claim_config["opaque"]},
            ]
        ],
    )
    template = next(
        d
        for d in load_fixture(f"{SRIOV_DEMO}/multiple-vf-claim/multiple-vf-one-claim.yaml")
        if d["kind"] == "ResourceClaimTemplate"
    )
    (vf_config,) = template["spec"]["spec"]["devices"]["config"]
    # count 2: the next two VFs; the claim config names the only request, so its requests are cleared.
    assert_generated(
        pods,
        "vf-test3/pod0",
        "vf",
        SRIOV_NODE,
        [dev("vf", SRIOV, SRIOV_NODE, "0000-3b-00-3"), dev("vf", SRIOV, SRIOV_NODE, "0000-3b-00-4")],
        failed_nodes={CPU_NODE},
        config=[[{"source": "FromClaim", "opaque": vf_config["opaque"]}]],
    )


def test_sriov_vfs_and_pcie_root_alignment_with_a_gpu(state, capsys):
    pods = sriov(state, gpu_class=True).simulate(capsys)
    assert list(pods) == ["vf-test2/pod0", "vf-test3/pod0", "vf-test5/pod0"]
    _sriov_vf_pod_expectations(pods)
    # resource-alignment needs a VF and a gpu.example.com GPU on the same pcieRoot: no node has both
    # (no GPU at all here), so no fit anywhere, without error.
    assert_unschedulable(pods["vf-test5/pod0"], {SRIOV_NODE, CPU_NODE})


def test_sriov_resource_alignment_unknown_device_class_is_fatal(state, capsys):
    pods = sriov(state, gpu_class=False).simulate(capsys)
    _sriov_vf_pod_expectations(pods)
    # Without the gpu.example.com DeviceClass the request "gpu" fails the pre-checks: fatal (§4).
    out = pods["vf-test5/pod0"]
    claim_name = out["claims"][0]["name"]
    assert claim_name == generated("pod0", "vf")
    assert_fatal(
        out, f"claim vf-test5/{claim_name}, request gpu: could not retrieve device class gpu.example.com"
    )


# ===========================================================================================================
# Network-attached pools: IMEX channels (historical v1alpha3 slices selected by clique labels)
# ===========================================================================================================

IMEX_CLUSTER = "0f884867-ba2f-4294-9155-b495ff367eea"
IMEX_CLASS = device_class(
    "imex.nvidia.com",  # the historical chart class; not among the rendered ones
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'imex-channel'",
)


def clique_node(name: str, clique: str | None) -> dict[str, Any]:
    if clique is None:
        return node(name)
    return node(name, {"nvidia.com/gpu.clusteruuid": IMEX_CLUSTER, "nvidia.com/gpu.cliqueid": clique})


def test_nvidia_imex_channels_from_node_selector_pools(state, capsys):
    state.fixture(
        NV_CLASSES,
        H100_SLICE,
        "real/nvidia-gpu/demo/clusters/kind/scripts/imex-resourceslice.yaml",
        f"{QUICKSTART}/imex-test1.yaml",
    )
    state.objects(
        "extra",
        IMEX_CLASS,
        clique_node(H100, "1"),
        clique_node("gb-node-clique2", "2"),
        clique_node(CPU_NODE, None),
        # two replicas each of imex-test1's deployment0 and deployment1
        *(
            pod(
                "imex-test1",
                f"deployment{d}-{r}",
                templates={"gpus": "node-gpus"},
                claims={"imex-channel": f"deployment{d}-imex-channel"},
            )
            for d in (0, 1)
            for r in (0, 1)
        ),
    )
    pods = state.simulate(capsys)
    assert list(pods) == [f"imex-test1/deployment{d}-{r}" for d in (0, 1) for r in (0, 1)]
    clique1_pool = f"imex-domain-{IMEX_CLUSTER}-1"
    clique1_selector = {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "nvidia.com/gpu.clusteruuid", "operator": "In", "values": [IMEX_CLUSTER]},
                    {"key": "nvidia.com/gpu.cliqueid", "operator": "In", "values": ["1"]},
                ]
            }
        ]
    }
    # The H100 node is in clique 1: its channel pool is imex-domain-...-1 (selected by labels, not
    # nodeName), so the channel claim gets that slice's node selector instead of a pinned node. The
    # clique-2 node has no GPUs, the CPU node neither GPUs nor channels. Each deployment's shared channel
    # claim is allocated by its first replica (channel-0, then channel-1) and reused by the second;
    # every replica gets its own GPU in order.
    for i, (d, r) in enumerate((d, r) for d in (0, 1) for r in (0, 1)):
        name = f"deployment{d}-{r}"
        assert_placed(
            pods[f"imex-test1/{name}"],
            H100,
            [
                (generated(name, "gpus"), [dev("gpu", NV, H100, f"gpu-{i}")]),
                (f"deployment{d}-imex-channel", [dev("channel", NV, clique1_pool, f"imex-channel-{d}")]),
            ],
            failed_nodes={"gb-node-clique2", CPU_NODE},
            node_selectors=[pinned(H100), clique1_selector],
        )


# ===========================================================================================================
# Binding conditions (website example slice): such pools are searched last; conditions copied to the result
# ===========================================================================================================


def binding_conditions(state: StateDir) -> StateDir:
    # dra.example.com pool gpu-pool: one device gpu-1 (bindsToNode, bindingConditions), attached by the
    # label accelerator-type=high-performance; the kind worker carries that label and also has the 8
    # gpu.example.com GPUs of the README dump.
    state.fixture(EX_SLICES, EX_CLASS, BINDING_SLICE)
    return state.objects(
        "extra",
        node(EX, {"accelerator-type": "high-performance"}),
        node(EX_CP),
        device_class(
            "any-example-gpu", "device.driver == 'dra.example.com' || device.driver == 'gpu.example.com'"
        ),
        device_class("dra.example.com", "device.driver == 'dra.example.com'"),
        claim_template("bc", "any-gpu", [exactly("gpu", "any-example-gpu")]),
        claim_template("bc", "prepared-gpu", [exactly("gpu", "dra.example.com")]),
        pod("bc", "any-0", templates={"gpu": "any-gpu"}, created=T.format(1)),
        pod("bc", "bound-0", templates={"gpu": "prepared-gpu"}, created=T.format(2)),
        pod("bc", "bound-1", templates={"gpu": "prepared-gpu"}, created=T.format(3)),
    )


def test_binding_conditions_pool_last_and_conditions_in_result(state, capsys):
    pods = binding_conditions(state).simulate(capsys)
    assert list(pods) == ["bc/any-0", "bc/bound-0", "bc/bound-1"]
    # By (driver, pool) dra.example.com/gpu-pool would come first, but pools with binding-condition devices
    # are searched after all others: the plain gpu.example.com gpu-0.
    assert_generated(pods, "bc/any-0", "gpu", EX, [dev("gpu", EXD, EX, "gpu-0")], failed_nodes={EX_CP})
    # Only gpu-pool matches: gpu-1 with its conditions copied; bindsToNode pins the claim to the node
    # although the slice uses a label selector.
    assert_generated(
        pods,
        "bc/bound-0",
        "gpu",
        EX,
        [
            dev(
                "gpu",
                "dra.example.com",
                "gpu-pool",
                "gpu-1",
                bindingConditions=["dra.example.com/is-prepared"],
                bindingFailureConditions=["dra.example.com/preparing-failed"],
            )
        ],
        failed_nodes={EX_CP},
    )
    # The pool's only device is taken.
    assert_unschedulable(pods["bc/bound-1"], {EX, EX_CP})


def test_binding_conditions_gate_off_makes_such_devices_unselectable(state, capsys):
    pods = binding_conditions(state).simulate(capsys, "--feature-gates", "DRADeviceBindingConditions=false")
    # Gate off: gpu-1 (with bindingConditions) is not selectable; the any-class pod still gets gpu-0.
    assert_generated(pods, "bc/any-0", "gpu", EX, [dev("gpu", EXD, EX, "gpu-0")])
    assert_unschedulable(pods["bc/bound-0"], {EX, EX_CP})
    assert_unschedulable(pods["bc/bound-1"], {EX, EX_CP})


# ===========================================================================================================
# AMD Instinct MI300X (SPX/NPS1: 8 full GPUs, no partitions)
# ===========================================================================================================

AMD_NODE = "mi300x-node-01"
AMD_SLICE = "constructed/amd/mi300x-8gpu.resourceslice.yaml"
AMD_CLASS = "real/amd-rocm/helm-charts-k8s/templates/deviceclass.yaml"  # v1beta1, converted on load
AMD_EXAMPLES = "real/amd-rocm/example"


def test_amd_single_gpu(state, capsys):
    state.fixture(AMD_SLICE, AMD_CLASS, f"{AMD_EXAMPLES}/example.yaml")
    state.objects("nodes", node(AMD_NODE), node(CPU_NODE))
    pods = state.simulate(capsys)
    # Devices gpu-<card>-<render> in list order: the first is gpu-1-128.
    assert_generated(
        pods,
        "gpu-test/pod1",
        "gpu",
        AMD_NODE,
        [dev("gpu", "gpu.amd.com", AMD_NODE, "gpu-1-128")],
        failed_nodes={CPU_NODE},
    )


def test_amd_demo_files_sharing_a_namespace(state, capsys):
    state.fixture(
        AMD_SLICE,
        AMD_CLASS,
        f"{AMD_EXAMPLES}/example.yaml",
        f"{AMD_EXAMPLES}/example-partitions-distinct-parents.yaml",
        f"{AMD_EXAMPLES}/example-partitions-same-parent.yaml",
    )
    state.objects("nodes", node(AMD_NODE), node(CPU_NODE))
    pods = state.simulate(capsys)
    assert list(pods) == [
        "gpu-test/pod-two-partitions-distinct-parents",
        "gpu-test/pod-two-partitions-same-parent",
        "gpu-test/pod1",
    ]
    # The partition examples select type == "amdgpu-partition": an unpartitioned MI300X has none.
    assert_unschedulable(pods["gpu-test/pod-two-partitions-distinct-parents"], {AMD_NODE, CPU_NODE})
    assert_unschedulable(pods["gpu-test/pod-two-partitions-same-parent"], {AMD_NODE, CPU_NODE})
    assert_generated(
        pods,
        "gpu-test/pod1",
        "gpu",
        AMD_NODE,
        [dev("gpu", "gpu.amd.com", AMD_NODE, "gpu-1-128")],
        failed_nodes={CPU_NODE},
    )


# ===========================================================================================================
# Incomplete pool: the static-MIG slice (count 1) and the DynamicMIG slices (count 9) of the same pool and
# generation are both present (the old slice was not removed when the driver switched modes)
# ===========================================================================================================


def test_nvidia_a100_mixed_static_and_dynamic_slices_make_the_pool_incomplete(state, capsys):
    state.fixture(NODES, NV_CLASSES, A100_STATIC_MIG, A100_DYNAMIC_MIG, f"{BATS}/gpu-2pods-2gpus.yaml")
    state.objects(
        "extra",
        claim_template("default", "all-gpus", [exactly("gpus", NV, allocationMode="All")]),
        pod("default", "all-gpus", templates={"gpus": "all-gpus"}, created=T.format(1)),
    )
    pods = state.simulate(capsys)
    assert list(pods) == ["default/pod1", "default/pod2", "default/all-gpus"]
    # Pool gpu.nvidia.com/ip-192-168-153-160 has 10 slices at generation 1 but announces 1 or 9: incomplete,
    # so none of its devices is used; the H100 node has no GPUs here. ExactCount: simply no fit.
    assert_unschedulable(pods["default/pod1"], {H100, P4D})
    assert_unschedulable(pods["default/pod2"], {H100, P4D})
    # All mode over an incomplete pool is a fatal pre-check error (the H100 node, tried first, has no pool).
    out = pods["default/all-gpus"]
    claim_name = out["claims"][0]["name"]
    assert out["error"] == (
        f"claim default/{claim_name}, request gpus: asks for all devices, but resource pool "
        f"{NV}/{P4D} is currently being updated"
    )
    assert_fatal(out, f"claim default/{claim_name}, request gpus:")


def test_nvidia_consumable_shares_real_specs(state, capsys):
    # H100 in --consumable-shares=4 mode: every GPU is multi-allocatable with capacities shares (4; policy
    # default 1, range 1..4) and memory (81559Mi; default 0, step 1Mi).
    state.fixture(
        NODES,
        NV_CLASSES,
        H100_SHARES,
        f"{BATS}/gpu-consumable-shares-integer.yaml",
        f"{BATS}/gpu-consumable-shares-memory.yaml",
        "real/nvidia-gpu/demo/specs/consumable-shares/integer-sharing.yaml",
    )
    ns = "gpu-share-integer"
    state.objects(
        "replicas",  # five replicas of the integer-sharing Deployment (the demo runs four)
        *(pod(ns, f"pod-{i}", templates={"gpu": "gpu-1share"}, created=T.format(i)) for i in range(5)),
    )
    pods = state.simulate(capsys)
    assert list(pods) == [
        "default/pod-share-integer-0",
        "default/pod-share-integer-1",
        "default/pod-share-memory-0",
        "default/pod-share-memory-1",
        *(f"{ns}/pod-{i}" for i in range(5)),
    ]

    def one_share(device: str, memory: str) -> list[dict[str, Any]]:
        return [share("gpu", NV, H100, device, memory=memory, shares="1")]

    # Each claim takes one share (requested 1 or the policy default) and memory as requested (default 0):
    # the four bats pods fill gpu-0's 4 shares (2 x 0 + 2 x 2Gi memory).
    for name, memory in (("integer-0", "0"), ("integer-1", "0"), ("memory-0", "2Gi"), ("memory-1", "2Gi")):
        assert_generated(
            pods, f"default/pod-share-{name}", "gpu", H100, one_share("gpu-0", memory), failed_nodes={P4D}
        )
    # gpu-0 has no share left: the replicas fill gpu-1 (4 shares), the fifth goes to gpu-2.
    for i, device in enumerate(("gpu-1", "gpu-1", "gpu-1", "gpu-1", "gpu-2")):
        assert_generated(pods, f"{ns}/pod-{i}", "gpu", H100, one_share(device, "0"), failed_nodes={P4D})


def test_intel_gpu_e2e_selector_specs(state, capsys):
    # The Intel GPU driver's e2e specs on the Max 1550 node: 29, 3a, 9a (tainted NoExecute), ca; all i915,
    # family "Data Center Max", 131072Mi, sriov true.
    tests = f"{INTEL_GPU}/tests"
    state.fixture(
        XPU_SLICE,
        INTEL_GPU_CLASSES,
        *(
            f"{tests}/{t}/{t}-pod.yaml"
            for t in ("driver-selector", "family-selector", "memory-selector", "multi-gpu", "sriov-check")
        ),
    )
    state.objects("nodes", node(XPU_NODE), node(CPU_NODE))
    pods = state.simulate(capsys)
    ns = "intel-gpu-resource-driver"
    assert list(pods) == [
        f"{ns}/{n}"
        for n in (
            "driver-selector-test",
            "family-selector-test",
            "memory-selector-test",
            "multi-gpu-test",
            "sriov-check-test",
        )
    ]
    x = lambda pci: dev("gpu", XPU, XPU_NODE, f"0000-{pci}-00-0-0x0bd5")  # noqa: E731
    # driver == "i915": the first GPU.
    assert_generated(
        pods, f"{ns}/driver-selector-test", "resource", XPU_NODE, [x("29")], failed_nodes={CPU_NODE}
    )
    # family.startsWith("Arc"): no Max 1550 matches.
    assert_unschedulable(pods[f"{ns}/family-selector-test"], {XPU_NODE, CPU_NODE})
    # memory >= 1Gi: the next free GPU.
    assert_generated(
        pods, f"{ns}/memory-selector-test", "resource", XPU_NODE, [x("3a")], failed_nodes={CPU_NODE}
    )
    # Two GPUs wanted, but of 9a and ca only ca is usable (9a tainted).
    assert_unschedulable(pods[f"{ns}/multi-gpu-test"], {XPU_NODE, CPU_NODE})
    # sriov == true: ca.
    assert_generated(pods, f"{ns}/sriov-check-test", "resource", XPU_NODE, [x("ca")], failed_nodes={CPU_NODE})


# ===========================================================================================================
# All mode on MIG inventories: exclusive All allocations; the 32-device claim limit
# ===========================================================================================================

STATIC_MIGS = [
    f"gpu-{g}-mig-{m}" for g in range(4) for m in ("2g10gb-14-0", "1g5gb-19-2", "1g5gb-19-3", "3g20gb-9-4")
]


def test_nvidia_all_mode_takes_every_static_mig_device(state, capsys):
    state.fixture(NODES, NV_CLASSES, A100_STATIC_MIG)
    state.objects(
        "extra",
        claim_template("default", "all-migs", [exactly("migs", "mig.nvidia.com", allocationMode="All")]),
        claim_template("default", "one-mig", [exactly("mig", "mig.nvidia.com")]),
        pod("default", "all-migs", templates={"migs": "all-migs"}, created=T.format(1)),
        pod("default", "one-mig", templates={"mig": "one-mig"}, created=T.format(2)),
    )
    pods = state.simulate(capsys)
    # All: the 16 MIG devices of the node in slice order (full GPUs 4-7 are type gpu, not mig).
    assert_generated(
        pods,
        "default/all-migs",
        "migs",
        P4D,
        [dev("migs", NV, P4D, d) for d in STATIC_MIGS],
        failed_nodes={H100},
    )
    # A normal (non-admin) All allocation is exclusive: no MIG device is left.
    assert_unschedulable(pods["default/one-mig"], {H100, P4D})


def test_nvidia_all_mode_claim_limit_and_prioritized_fallback(state, capsys):
    # DynamicMIG: 8 GPUs x 25 MIG placements = 200 devices of class mig.nvidia.com.
    state.fixture(NODES, NV_CLASSES, A100_DYNAMIC_MIG)
    state.objects(
        "extra",
        claim_template("default", "all-migs", [exactly("migs", "mig.nvidia.com", allocationMode="All")]),
        claim_template(
            "default",
            "all-migs-or-one-gpu",
            [
                {
                    "name": "gpus",
                    "firstAvailable": [
                        {"name": "all-migs", "deviceClassName": "mig.nvidia.com", "allocationMode": "All"},
                        {"name": "one-gpu", "deviceClassName": "gpu.nvidia.com"},
                    ],
                }
            ],
        ),
        pod("default", "all-migs", templates={"migs": "all-migs"}, created=T.format(1)),
        pod("default", "all-or-one", templates={"gpus": "all-migs-or-one-gpu"}, created=T.format(2)),
    )
    pods = state.simulate(capsys)
    # Plain All over 200 devices: the claim-size pre-check (> 32) is fatal.
    out = pods["default/all-migs"]
    claim_name = out["claims"][0]["name"]
    message = (
        f"claim default/{claim_name}, request migs: adding 200 devices exceeds the claim limit of 32, "
        "with 0 already accounted for"
    )
    assert_fatal(out, message)
    assert out["error"] == message
    # firstAvailable: the pre-check counts the smallest alternative (1); the All subrequest then fails only
    # on the 32-result limit, so the next subrequest is tried: one full GPU, gpu-7 (first slice by name).
    assert_generated(
        pods, "default/all-or-one", "gpus", P4D, [dev("gpus/one-gpu", NV, P4D, "gpu-7")], failed_nodes={H100}
    )
