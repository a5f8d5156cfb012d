"""Explanation endpoints on the demo cluster and on real driver fixtures: verdicts agree with filter,
funnels, allocations and scores; claim and node views; what-if; nothing is ever changed."""

from __future__ import annotations

import asyncio
import copy
import shutil
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from app.cli.runtime import Runtime, build_runtime
from app.config.settings import Settings
from app.explain.pod import explain_object, explain_pod, parse_object
from app.explain.summary import summarize_pod
from app.explain.views import node_devices_view
from app.http.api import create_app
from app.scheduling.service import SchedulingService
from tests.app.scenario_support import FIXTURES, SKIP_REASON

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "cluster"
GPU_NODE, GAUDI_NODE, CPU_NODE = "gpu-node-1", "gaudi-node-1", "cpu-node-1"
VERDICT = {"passed": "fits", "failed": "does-not-fit", "unresolvable": "unresolvable"}


@pytest.fixture
def demo() -> Runtime:
    return build_runtime(DEMO)


@pytest.fixture
async def client(demo: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(demo.service, Settings(DEMO))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://extender") as c:
        yield c


def snapshot(service: SchedulingService) -> tuple[Any, ...]:
    """Everything explain must leave alone."""
    state = service.state
    return (
        state.inventory.revision,
        copy.deepcopy(state.objects),
        dict(service.decisions._views),
        dict(service.decisions._shared),
    )


def template_claim(name: str) -> dict[str, Any]:
    for doc in yaml.safe_load_all((DEMO / "07-resourceclaimtemplates.yaml").read_text()):
        if doc and doc["metadata"]["name"] == name:
            return doc
    raise KeyError(name)


# --- pods -------------------------------------------------------------------------------------------------


def test_explain_agrees_with_filter_for_every_demo_pod_and_changes_nothing(demo):
    service = demo.service
    nodes = sorted(service.state.objects["Node"])
    for pod in service.state.pending_pods():
        meta = pod["metadata"]
        before = snapshot(service)
        explanation = explain_pod(service, meta["namespace"], meta["name"])
        assert snapshot(service) == before, meta["name"]
        outcome = service.filter(pod, nodes)
        verdicts = {v.node: (v.verdict, v.reason) for v in explanation.nodes}
        assert explanation.error == outcome.error
        expected = {n: ("fits", "") for n in outcome.passed}
        expected |= {n: ("does-not-fit", r) for n, r in outcome.failed.items()}
        expected |= {n: ("unresolvable", r) for n, r in outcome.unresolvable.items()}
        assert verdicts == expected, meta["name"]
        for verdict in explanation.nodes:
            if verdict.verdict == "fits" and verdict.score is not None:
                # prioritize reuses what filter kept: the same score explain shows
                assert service.prioritize(pod, [verdict.node]) == [verdict.score.score]


def test_numa_quad_allocation_score_and_funnels(demo):
    explanation = explain_pod(demo.service, "demo", "numa-quad")
    assert (explanation.deviceSelection, explanation.scoringPolicy) == ("aligned", "binpack")
    assert [c.podClaimName for c in explanation.claims] == ["gpus"]
    nodes = {v.node: v for v in explanation.nodes}
    gpu = nodes[GPU_NODE]
    assert (gpu.verdict, gpu.placement) == ("fits", "numaNode 0")
    [allocation] = gpu.allocations
    assert [(d.device, d.numaNode) for d in allocation.devices] == [(f"gpu-{i}", "0") for i in range(4)]
    assert allocation.allocation["devices"]["results"][0]["tolerations"] == [
        {"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoSchedule"}
    ]
    score = gpu.score
    assert score is not None and [c.name for c in score.components] == [
        "numa",
        "pcie",
        "packing",
        "intact",
        "prioritized",
    ]
    components = {c.name: c for c in score.components}
    assert (components["numa"].value, components["numa"].detail) == (1.0, "4 device(s) on NUMA node 0")
    assert components["pcie"].value is None
    [funnel] = gpu.requests
    counts = {s.stage: s.count for s in funnel.stages}
    assert counts == {
        "in_pools": 12,
        "class_selectors": 8,
        "request_selectors": 8,
        "tolerations": 8,  # the request tolerates gpu.nvidia.com/xid
        "not_in_use": 8,
        "counters_capacity": 8,
        "constraints": 4,  # four per NUMA node
    }
    gaudi = nodes[GAUDI_NODE]
    assert gaudi.verdict == "unresolvable"
    assert gaudi.requests[0].shortAt == "class_selectors"
    assert gaudi.allocations == [] and gaudi.score is None


def test_two_gpus_pod_funnel_names_taint_and_holders_after_binds(demo):
    service = demo.service
    service.bind("demo", "gpu-single", "", GPU_NODE)
    explanation = explain_pod(service, "demo", "two-gpus", GPU_NODE)
    [verdict] = explanation.nodes
    assert verdict.verdict == "fits"
    [funnel] = verdict.requests
    taints = next(s for s in funnel.stages if s.stage == "tolerations")
    assert taints.rules == {"taint": 1}
    assert taints.examples[0].device == "gpu.nvidia.com/gpu-node-1/gpu-7"
    assert taints.examples[0].message == (
        "taint gpu.nvidia.com/xid=79:NoSchedule from ResourceSlice gpu-node-1-gpu.nvidia.com-4kq9z "
        "is not tolerated"
    )
    in_use = next(s for s in funnel.stages if s.stage == "not_in_use")
    assert in_use.rules == {"in-use": 1}
    assert in_use.examples[0].message.startswith("allocated to demo/gpu-single-gpu-")


def test_pod_with_a_missing_claim_is_unresolvable_everywhere(demo):
    state = demo.service.state
    pod = copy.deepcopy(state.get("Pod", "demo/two-gpus"))
    pod["metadata"]["name"] = "orphan"
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "does-not-exist"}]
    state.apply("Pod", pod)
    explanation = explain_pod(demo.service, "demo", "orphan")
    assert {v.verdict for v in explanation.nodes} == {"unresolvable"}
    assert explanation.nodes[0].reason == 'pod claim gpus: resourceclaim "does-not-exist" not found'
    # The header still names the pod's claim (not "no ResourceClaims"), with what stands in the way.
    assert [c.model_dump() for c in explanation.claims] == [
        {
            "podClaimName": "gpus",
            "claim": "demo/does-not-exist",
            "allocated": False,
            "extendedResources": False,
            "podGroup": "",
            "problem": 'pod claim gpus: resourceclaim "does-not-exist" not found',
        }
    ]


def test_each_claim_of_an_unresolved_pod_gets_its_own_problem(demo):
    """One claim usable (two-gpus, the demo's, allocated here), one missing, one whose template needs no
    claim (a null name in status.resourceClaimStatuses: left out, as kube-scheduler does)."""
    state = demo.service.state
    assert demo.service.bind(
        "demo", "two-gpus", state.get("Pod", "demo/two-gpus")["metadata"]["uid"], GPU_NODE
    )
    pod = copy.deepcopy(state.get("Pod", "demo/two-gpus"))
    pod["metadata"]["name"] = "mixed"
    pod["spec"]["resourceClaims"] = [
        {"name": "gpus", "resourceClaimName": "two-gpus"},
        {"name": "more", "resourceClaimName": "nope"},
        {"name": "unneeded", "resourceClaimTemplateName": "single-gpu"},
    ]
    pod["status"] = {"resourceClaimStatuses": [{"name": "unneeded", "resourceClaimName": None}]}
    state.apply("Pod", pod)
    explanation = explain_pod(demo.service, "demo", "mixed")
    assert {v.verdict for v in explanation.nodes} == {"unresolvable"}
    assert [(c.podClaimName, c.claim, c.allocated, c.problem) for c in explanation.claims] == [
        ("gpus", "demo/two-gpus", True, ""),
        ("more", "demo/nope", False, 'pod claim more: resourceclaim "nope" not found'),
    ]


def test_a_template_entry_that_needs_no_claim_leaves_the_pod_without_claims(demo):
    state = demo.service.state
    pod = copy.deepcopy(state.get("Pod", "demo/two-gpus"))
    pod["metadata"]["name"] = "nothing-needed"
    pod["spec"]["resourceClaims"] = [{"name": "unneeded", "resourceClaimTemplateName": "single-gpu"}]
    pod["status"] = {"resourceClaimStatuses": [{"name": "unneeded", "resourceClaimName": None}]}
    state.apply("Pod", pod)
    explanation = explain_pod(demo.service, "demo", "nothing-needed")
    assert explanation.claims == []
    assert {v.verdict for v in explanation.nodes} == {"fits"}


def test_pod_whose_template_claim_is_not_created_names_the_template(demo):
    state = demo.service.state
    pod = copy.deepcopy(state.get("Pod", "demo/two-gpus"))
    pod["metadata"]["name"] = "unmade"
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "some-template"}]
    pod["status"] = {}
    state.apply("Pod", pod)
    explanation = explain_pod(demo.service, "demo", "unmade")
    assert {v.verdict for v in explanation.nodes} == {"unresolvable"}
    assert [(c.podClaimName, c.claim, c.problem) for c in explanation.claims] == [
        ("gpus", "", "pod claim gpus: ResourceClaim not created yet (template some-template)")
    ]


def test_pod_without_claims_fits_everywhere(demo):
    explanation = explain_pod(demo.service, "demo", "cpu-only")
    assert [(v.node, v.verdict) for v in explanation.nodes] == [
        (CPU_NODE, "fits"),
        (GAUDI_NODE, "fits"),
        (GPU_NODE, "fits"),
    ]
    assert explanation.claims == []


async def test_pod_explain_route(client):
    answer = await client.get("/api/v1/namespaces/demo/pods/gpu-nic/explain", params={"node": GPU_NODE})
    assert answer.status_code == 200
    body = answer.json()
    [node] = body["nodes"]
    assert (node["node"], node["verdict"], node["placement"]) == (GPU_NODE, "fits", "pcieRoot pci0000:c7")
    devices = [(d["request"], d["device"], d["pcieRoot"]) for d in node["allocations"][0]["devices"]]
    assert devices == [("gpu", "gpu-6", ["pci0000:c7"]), ("nic", "pci-0000-ca-00-0", ["pci0000:c7"])]
    pcie = next(c for c in node["score"]["components"] if c["name"] == "pcie")
    assert pcie["value"] == 1.0
    assert {r["request"] for r in node["requests"]} == {"gpu", "nic"}


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/api/v1/namespaces/demo/pods/nope/explain", "pod demo/nope not found"),
        ("/api/v1/namespaces/demo/pods/gpu-nic/explain?node=nope", "node nope not found"),
        ("/api/v1/namespaces/demo/resourceclaims/nope", "resourceclaim demo/nope not found"),
        ("/api/v1/nodes/nope/devices", "node nope not found"),
    ],
)
async def test_unknown_objects_are_404(client, path, message):
    answer = await client.get(path)
    assert (answer.status_code, answer.json()) == (404, {"Error": message})


# --- what-if ----------------------------------------------------------------------------------------------


async def test_what_if_template_as_json_and_yaml_creates_nothing(client, demo):
    before = snapshot(demo.service)
    template = template_claim("gpu-nic-aligned")
    as_json = await client.post("/api/v1/explain", content=orjson.dumps(template))
    as_yaml = await client.post(
        "/api/v1/explain", content=yaml.safe_dump(template), headers={"Content-Type": "application/yaml"}
    )
    assert as_json.status_code == as_yaml.status_code == 200
    assert as_json.json() == as_yaml.json()
    body = as_json.json()
    assert (body["kind"], body["namespace"], body["name"], body["error"]) == (
        "ResourceClaimTemplate",
        "demo",
        "gpu-nic-aligned",
        "",
    )
    verdicts = {n["node"]: n["verdict"] for n in body["nodes"]}
    assert verdicts == {CPU_NODE: "unresolvable", GAUDI_NODE: "unresolvable", GPU_NODE: "fits"}
    assert snapshot(demo.service) == before
    assert demo.service.state.get("ResourceClaim", "demo/gpu-nic-aligned") is None


def test_what_if_claim_that_can_never_fit_and_invalid_claims(demo):
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "huge", "namespace": "demo"},
        "spec": {
            "devices": {
                "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 9}}]
            }
        },
    }
    answer = explain_object(demo.service, parse_object(orjson.dumps(claim)), GPU_NODE)
    [node] = answer.nodes
    assert node.verdict == "unresolvable"
    assert node.requests[0].shortAt == "class_selectors"  # 8 GPUs match the class, 9 needed
    claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "no-such-class"
    answer = explain_object(demo.service, parse_object(orjson.dumps(claim)))
    assert answer.error.endswith('deviceclass.resource.k8s.io "no-such-class" not found')
    claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = "two"
    answer = explain_object(demo.service, parse_object(orjson.dumps(claim)))
    assert (
        answer.error
        == "ResourceClaim demo/huge: spec.devices.requests[0].exactly.count: must be an integer, got str"
    )
    assert answer.nodes == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[1, 2]", "body must be one ResourceClaim or ResourceClaimTemplate object"),
        (
            b'{"kind": "Pod", "metadata": {"name": "x"}}',
            "kind Pod: expected ResourceClaim or ResourceClaimTemplate",
        ),
        (b"a: [", "body is neither JSON nor YAML"),
    ],
)
async def test_what_if_rejects_other_bodies(client, body, message):
    answer = await client.post("/api/v1/explain", content=body)
    assert answer.status_code == 400
    assert answer.json()["Error"].startswith(message)


async def test_what_if_body_cap(demo):
    app = create_app(demo.service, Settings(DEMO, server=_small_server()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as c:
        answer = await c.post("/api/v1/explain", content=b"x" * 2000)
    assert answer.status_code == 413


def _small_server() -> Any:
    from app.config.settings import ServerSettings

    return ServerSettings(max_body_bytes=1000)


# --- claims -----------------------------------------------------------------------------------------------


async def test_claim_view_after_bind_with_device_status(client, demo):
    service = demo.service
    unallocated = (await client.get("/api/v1/namespaces/demo/resourceclaims/shared-gpu")).json()
    assert (unallocated["allocated"], unallocated["allocation"], unallocated["availableOn"]) == (
        False,
        None,
        [],
    )
    assert unallocated["usedBy"] == ["demo/shared-a", "demo/shared-b"]
    service.bind("demo", "shared-a", "", GPU_NODE)
    claim = copy.deepcopy(service.state.get("ResourceClaim", "demo/shared-gpu"))
    result = claim["status"]["allocation"]["devices"]["results"][0]
    claim["status"]["devices"] = [
        {
            "driver": result["driver"],
            "pool": result["pool"],
            "device": result["device"],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Prepared",
                    "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
            "data": {"memory": "80Gi"},
            "networkData": {"interfaceName": "eth1", "ips": ["10.0.0.7/24"]},
        }
    ]
    service.state.apply("ResourceClaim", claim)
    view = (await client.get("/api/v1/namespaces/demo/resourceclaims/shared-gpu")).json()
    assert view["allocated"] is True
    assert view["availableOn"] == [GPU_NODE]
    assert [(r["request"], r["device"]) for r in view["results"]] == [("gpu", result["device"])]
    assert view["reservedFor"] == [
        {"resource": "pods", "name": "shared-a", "uid": "17c3152c-d4f3-515c-a5d4-4114328b0ab8"}
    ]
    assert view["holdsDevices"] == [f"gpu.nvidia.com/{GPU_NODE}/{result['device']}"]
    [status] = view["devices"]
    assert status["conditions"][0]["type"] == "Ready"
    assert status["networkData"] == {"interfaceName": "eth1", "ips": ["10.0.0.7/24"]}
    assert status["data"] == {"memory": "80Gi"}


# --- node devices -----------------------------------------------------------------------------------------


def test_node_devices_show_taint_sources_holders_and_usage(demo):
    service = demo.service
    gaudi = node_devices_view(service, GAUDI_NODE)
    by_name = {d.device: d for d in gaudi.devices}
    [rule_taint] = by_name["0000-1b-00-0-0x1060"].taints
    assert rule_taint.source.startswith("DeviceTaintRule ")
    assert (rule_taint.key, rule_taint.effect, rule_taint.blocksAllocation) == (
        "gaudi.intel.com/unhealthy",
        "NoExecute",
        True,
    )
    assert by_name["0000-1a-00-0-0x1060"].pcieRoot == ["pci0000:16"]
    assert by_name["0000-1a-00-0-0x1060"].numaNode is None  # not published: unknown, never 0
    service.bind("demo", "gpu-single", "", GPU_NODE)
    gpu = node_devices_view(service, GPU_NODE)
    devices = {d.device: d for d in gpu.devices}
    [own] = devices["gpu-7"].taints
    assert own.source == "ResourceSlice gpu-node-1-gpu.nvidia.com-4kq9z"
    assert devices["gpu-0"].attributes["gpu.nvidia.com/cudaComputeCapability"] == "9.0.0"
    assert devices["gpu-0"].capacity["memory"].value == "80Gi"
    held = [d for d in gpu.devices if d.inUse]
    assert len(held) == 1 and held[0].allocatedTo[0].startswith("demo/gpu-single-gpu-")
    usage = {u.deviceClass: u for u in gpu.usage}
    assert (
        usage["gpu.nvidia.com"].total,
        usage["gpu.nvidia.com"].inUse,
        usage["gpu.nvidia.com"].tainted,
    ) == (8, 1, 1)
    assert usage["gpu.nvidia.com"].wholeFreeGroups == 1  # the NUMA node the pod did not touch
    assert [(p.driver, p.usable) for p in gpu.pools] == [("dra.net", True), ("gpu.nvidia.com", True)]


async def test_node_devices_counters_left(tmp_path):
    state = tmp_path / "state"
    state.mkdir()

    def slice_(name: str, **spec: Any) -> dict[str, Any]:
        pool = {"name": "n1", "generation": 1, "resourceSliceCount": 2}
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {"driver": "gpu.example.com", "nodeName": "n1", "pool": pool, **spec},
        }

    halves = [
        {
            "name": f"gpu-0-half-{i}",
            "consumesCounters": [{"counterSet": "gpu-0-set", "counters": {"memory": {"value": "20Gi"}}}],
        }
        for i in range(2)
    ]
    counters = [{"name": "gpu-0-set", "counters": {"memory": {"value": "40Gi"}}}]
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "r", "driver": "gpu.example.com", "pool": "n1", "device": "gpu-0-half-0"}
                    ]
                }
            }
        },
    }
    objects = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"}, "spec": {}},
        slice_("n1-counters", sharedCounters=counters),
        slice_("n1-devices", devices=halves),
        claim,
    ]
    (state / "all.yaml").write_text(yaml.safe_dump_all(objects))
    view = node_devices_view(build_runtime(state).service, "n1")
    [pool] = view.pools
    [counter_set] = pool.counterSets
    assert (counter_set.name, counter_set.counters["memory"].value, counter_set.counters["memory"].left) == (
        "gpu-0-set",
        "40Gi",
        "20Gi",
    )
    assert view.devices[0].consumesCounters[0].counters == {"memory": "20Gi"}
    assert view.devices[0].allocatedTo == ["default/c"]


# --- OpenAPI ----------------------------------------------------------------------------------------------


async def test_openapi_documents_the_explain_routes_with_models(client):
    schema = (await client.get("/openapi.json")).json()
    paths = schema["paths"]
    for path in (
        "/api/v1/namespaces/{namespace}/pods/{name}/explain",
        "/api/v1/namespaces/{namespace}/resourceclaims/{name}",
        "/api/v1/nodes/{name}/devices",
        "/api/v1/explain",
    ):
        assert path in paths
    schemas = schema["components"]["schemas"]
    for model in (
        "PodExplanation",
        "NodeVerdict",
        "RequestExplanation",
        "ClaimView",
        "NodeDevices",
        "WhatIfExplanation",
    ):
        assert model in schemas
    ok = paths["/api/v1/explain"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/WhatIfExplanation"}


# --- real fixtures ----------------------------------------------------------------------------------------

NODES = "constructed/cluster-state/nodes.yaml"
NV_CLASSES = "real/nvidia-gpu/deployments/helm/dra-driver-nvidia-gpu/rendered-deviceclasses-v1.yaml"
H100_SLICE = "constructed/nvidia-gpu/h100-8gpu.resourceslice.yaml"
DRANET_H100 = "constructed/nic/dranet-hgx-h100-node-01.resourceslice.yaml"
QUICKSTART_1 = "real/nvidia-gpu/demo/specs/quickstart/v1/gpu-test1.yaml"
GAUDI_SLICE = "constructed/intel/gaudi3-8card.resourceslice.yaml"
GAUDI_TAINT_RULE = "constructed/intel/gaudi3-unhealthy.devicetaintrule.yaml"
GAUDI_CLASS = "real/intel/deployments/gaudi/base/device-class.yaml"
H100, P4D = "hgx-h100-node-01", "ip-192-168-153-160.ec2.internal"
RDMA_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "dranet-rdma"},
    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "dra.net"'}}]},
}


@pytest.fixture
def fixture_state(tmp_path: Path):
    if not FIXTURES.is_dir():
        pytest.skip(SKIP_REASON)

    def build(*relative: str, extra: list[dict[str, Any]] | None = None) -> Runtime:
        state = tmp_path / "state"
        state.mkdir()
        for i, rel in enumerate(relative):
            shutil.copyfile(FIXTURES / rel, state / f"{i:02d}-{Path(rel).name}")
        if extra:
            (state / "99-extra.yaml").write_text(yaml.safe_dump_all(extra))
        return build_runtime(state)

    return build


@pytest.mark.fixtures
def test_real_nvidia_quickstart_pod_explained(fixture_state):
    runtime = fixture_state(NODES, NV_CLASSES, H100_SLICE, DRANET_H100, QUICKSTART_1, extra=[RDMA_CLASS])
    explanation = explain_pod(runtime.service, "gpu-test1", "pod1")
    nodes = {v.node: v for v in explanation.nodes}
    assert nodes[P4D].verdict == "unresolvable"
    assert nodes[P4D].requests[0].stages[0].count == 0  # no device at all on that node
    h100 = nodes[H100]
    assert h100.verdict == "fits"
    assert h100.placement is not None and h100.placement.startswith("pcieRoot ")
    [device] = h100.allocations[0].devices
    assert device.numaNode is not None and device.pcieRoot
    # what-if: a GPU and a NIC on one root, on the real NVIDIA and DRANET inventories
    template = {
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu-nic", "namespace": "gpu-test1"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
                        {"name": "nic", "exactly": {"deviceClassName": "dranet-rdma"}},
                    ]
                }
            }
        },
    }
    answer = explain_object(runtime.service, parse_object(orjson.dumps(template)), H100)
    [node] = answer.nodes
    assert node.verdict == "fits"
    roots = [tuple(d.pcieRoot) for d in node.allocations[0].devices]
    assert len(set(roots)) == 1
    assert next(c for c in node.score.components if c.name == "pcie").value == 1.0


@pytest.mark.fixtures
def test_real_gaudi_taint_rule_in_funnel_and_inventory(fixture_state):
    runtime = fixture_state(
        GAUDI_SLICE,
        GAUDI_TAINT_RULE,
        GAUDI_CLASS,
        extra=[{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gaudi3-node-01"}}],
    )
    service = runtime.service
    [node] = sorted(service.state.objects["Node"])
    devices = node_devices_view(service, node)
    tainted = [d for d in devices.devices if d.taints]
    assert [d.device for d in tainted] == ["0000-9b-00-0-0x1060"]
    assert tainted[0].taints[0].source.startswith("DeviceTaintRule ")
    claim = {
        "kind": "ResourceClaim",
        "metadata": {"name": "all-eight", "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [{"name": "g", "exactly": {"deviceClassName": "gaudi.intel.com", "count": 8}}]
            }
        },
    }
    [verdict] = explain_object(service, claim | {"kind": "ResourceClaim"}).nodes
    assert verdict.verdict == "unresolvable"  # tainted, not in use: freeing devices would not help
    stage = next(s for s in verdict.requests[0].stages if s.stage == "tolerations")
    assert (stage.count, stage.rules) == (7, {"taint": 1})
    assert "from DeviceTaintRule" in stage.examples[0].message


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (
            b"a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
            b"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
            b"e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
            b"g: [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n",
            "aliases are expanded",
        ),
        (b'{"metadata": [], "spec": {}}', "metadata: must be an object"),
        (b'{"metadata": {"name": 5}, "spec": {}}', "metadata: must be an object"),
        (b'{"kind": "ResourceClaimTemplate", "spec": []}', "spec: must be an object"),
    ],
)
async def test_what_if_rejects_bombs_and_malformed_metadata_with_400(client, body, problem):
    response = await client.post("/api/v1/explain", content=body)
    assert response.status_code == 400
    assert problem in response.json()["Error"]


def _claim_with_parameters(levels: int, api_version: str = "resource.k8s.io/v1") -> bytes:
    """A what-if claim whose opaque config parameters are ``levels`` objects deep (the claim is level 1,
    spec 2, devices 3, config 4, the entry 5, opaque 6, parameters 7)."""
    exactly = {"exactly": {"deviceClassName": "gpu.nvidia.com"}}
    if api_version != "resource.k8s.io/v1":
        exactly = {"deviceClassName": "gpu.nvidia.com"}
    claim = {
        "apiVersion": api_version,
        "kind": "ResourceClaim",
        "metadata": {"name": "deep", "namespace": "demo"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", **exactly}],
                "config": [{"opaque": {"driver": "gpu.nvidia.com", "parameters": "@"}}],
            }
        },
    }
    nested = b'{"k":' * (levels - 6) + b"1" + b"}" * (levels - 6)
    return orjson.dumps(claim).replace(b'"@"', nested)


@pytest.mark.parametrize("api_version", ["resource.k8s.io/v1", "resource.k8s.io/v1beta1"])
@pytest.mark.parametrize("levels", [300, 1000])
async def test_what_if_json_nested_deeper_than_the_extender_encodes_is_a_400(client, api_version, levels):
    # orjson reads 1024 levels and writes 254: the copies made of the claim failed, a bare 500.
    response = await client.post("/api/v1/explain", content=_claim_with_parameters(levels, api_version))
    assert response.status_code == 400
    assert response.json()["Error"] == "body: nested more than 254 levels deep"


async def test_a_what_if_200_levels_deep_is_explained(client):
    response = await client.post("/api/v1/explain", content=_claim_with_parameters(200))
    assert response.status_code == 200, response.text
    assert response.json()["error"] == ""


async def test_what_if_accepts_a_v1beta1_claim(client):
    claim = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceClaim",
        "metadata": {"name": "old", "namespace": "demo"},
        "spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.nvidia.com"}]}},
    }
    response = await client.post("/api/v1/explain", content=orjson.dumps(claim))
    assert response.status_code == 200, response.text


async def test_explaining_every_node_stops_at_the_time_budget(client, demo):
    demo.service.filter_time_budget = -1.0
    response = await client.get("/api/v1/namespaces/demo/pods/gpu-single/explain")
    assert response.status_code == 200
    reasons = [n["reason"] for n in response.json()["nodes"]]
    assert reasons and all(r.startswith("not explained: the time budget ran out") for r in reasons)


async def test_what_if_stops_at_the_time_budget(client, demo):
    demo.service.filter_time_budget = -1.0
    response = await client.post("/api/v1/explain", content=orjson.dumps(template_claim("single-gpu")))
    assert response.status_code == 200
    reasons = [n["reason"] for n in response.json()["nodes"]]
    assert len(reasons) == 3
    assert all(r.startswith("not explained: the time budget ran out") for r in reasons)


class _SpyLock:
    """The service lock, recording how deep the explaining thread holds it at each node it explains."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.depth = 0
        self.entered = 0

    def __enter__(self) -> None:
        self.lock.acquire()
        self.depth += 1
        self.entered += 1 if self.depth == 1 else 0

    def __exit__(self, *exc: object) -> None:
        self.depth -= 1
        self.lock.release()

    def acquire(self, blocking: bool = True) -> bool:
        return self.lock.acquire(blocking)

    def release(self) -> None:
        self.lock.release()


@pytest.mark.parametrize("what", ["pod", "what-if"])
def test_explanations_hold_the_lock_for_one_node_at_a_time(demo, monkeypatch, what):
    # Filter and bind must not wait for a whole explanation: the lock is taken per node and released in
    # between, so a scheduling call waits for one node's explanation at most.
    from app.explain import pod as explain_api

    spy = _SpyLock()
    demo.service.lock = spy  # type: ignore[assignment]
    seen: list[tuple[int, int]] = []
    real = explain_api._node_verdict

    def verdict(service: Any, node: Any, pending: Any, blocked: str) -> Any:
        seen.append((spy.depth, spy.entered))
        return real(service, node, pending, blocked)

    monkeypatch.setattr(explain_api, "_node_verdict", verdict)
    if what == "pod":
        explain_pod(demo.service, "demo", "gpu-single")
    else:
        explain_object(demo.service, parse_object(orjson.dumps(template_claim("single-gpu"))))
    assert len(seen) == 3  # three nodes
    assert all(depth >= 1 for depth, _ in seen)  # each explained under the lock
    entries = [entered for _, entered in seen]
    assert entries == sorted(set(entries))  # ... taken anew for every node: released in between


async def test_a_second_explanation_while_one_runs_is_refused_at_once(demo, monkeypatch):
    from app.explain import pod as explain_api

    started, finish = threading.Event(), threading.Event()
    real = explain_api._node_verdict

    def slow(service: Any, node: Any, pending: Any, blocked: str) -> Any:
        started.set()
        finish.wait(5)
        return real(service, node, pending, blocked)

    monkeypatch.setattr(explain_api, "_node_verdict", slow)
    app = create_app(demo.service, Settings(DEMO))
    body = orjson.dumps(template_claim("single-gpu"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as c:
        first = asyncio.create_task(c.post("/api/v1/explain", content=body))
        await asyncio.to_thread(started.wait, 30)
        second = await c.post("/api/v1/explain", content=body)
        pod = await c.get("/api/v1/namespaces/demo/pods/gpu-single/explain")
        finish.set()
        assert (await first).status_code == 200
    assert second.status_code == 429
    assert second.json() == {"Error": "another explanation is running; retry when it is done"}
    assert second.headers["Retry-After"] == "1"
    assert pod.status_code == 429


async def test_what_if_parses_the_body_off_the_event_loop(client, monkeypatch):
    from app.explain import pod as explain_api

    on_loop: list[bool] = []
    real = explain_api.parse_object

    def parse(body: bytes) -> Any:
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return real(body)

    monkeypatch.setattr(explain_api, "parse_object", parse)
    template = yaml.safe_dump(template_claim("single-gpu"))
    response = await client.post("/api/v1/explain", content=template)
    assert response.status_code == 200
    assert on_loop == [False]


async def test_a_yaml_what_if_body_beyond_the_yaml_cap_is_refused_unparsed(client, monkeypatch):
    from app.explain import pod as explain_api

    monkeypatch.setattr(explain_api, "load_yaml_document", lambda *a: pytest.fail("must not parse"))
    # Under the body cap (8 MiB by default) but beyond what a claim can need.
    padding = "# " + "x" * 1000 + "\n"
    body = yaml.safe_dump(template_claim("single-gpu")) + padding * (explain_api.MAX_YAML_BYTES // 1000)
    response = await client.post("/api/v1/explain", content=body)
    assert response.status_code == 413
    assert response.json() == {
        "Error": f"a YAML body may have at most {explain_api.MAX_YAML_BYTES} bytes (JSON: the body cap)"
    }


def _typo_what_if(api_version: str = "resource.k8s.io/v1") -> dict[str, Any]:
    """A what-if claim with `cuont` for `count` (the API server's strict field validation refuses it)."""
    exactly = {"deviceClassName": "gpu.nvidia.com", "cuont": 2}
    request = {"name": "gpus", "exactly": exactly}
    if api_version == "resource.k8s.io/v1beta1":
        request = {"name": "gpus", **exactly}
    return {
        "apiVersion": api_version,
        "kind": "ResourceClaim",
        "metadata": {"name": "typo", "namespace": "demo", "lables": {}},
        "spec": {"devices": {"requests": [request]}},
    }


@pytest.mark.parametrize(
    ("api_version", "path"),
    [
        ("resource.k8s.io/v1", "spec.devices.requests[0].exactly.cuont"),
        ("resource.k8s.io/v1beta1", "spec.devices.requests[0].cuont"),
    ],
)
@pytest.mark.parametrize("encode", [orjson.dumps, yaml.safe_dump])
async def test_what_if_with_an_unknown_field_is_a_400_naming_every_path(
    client, demo, api_version, path, encode
):
    before = snapshot(demo.service)
    response = await client.post("/api/v1/explain", content=encode(_typo_what_if(api_version)))
    assert response.status_code == 400
    # kubectl's strict field validation, in document order.
    assert response.json() == {"Error": f'unknown field "metadata.lables", unknown field "{path}"'}
    assert snapshot(demo.service) == before


async def test_what_if_template_with_an_unknown_field_in_its_claim_spec_is_a_400(client):
    template = template_claim("gpu-nic-aligned")
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selecters"] = []
    response = await client.post("/api/v1/explain", content=orjson.dumps(template))
    assert response.status_code == 400
    assert response.json() == {"Error": 'unknown field "spec.spec.devices.requests[0].exactly.selecters"'}


def test_the_summary_of_a_state_without_nodes_still_names_the_pods_claims(demo):
    """No node to explain: the summary's claims come from the rules alone, not "no ResourceClaims"."""
    state = demo.service.state
    for name in list(state.objects["Node"]):
        state.remove("Node", name)
    pod = copy.deepcopy(state.get("Pod", "demo/two-gpus"))
    pod["metadata"]["name"] = "nodeless"
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "does-not-exist"}]
    state.apply("Pod", pod)
    summary = summarize_pod(demo.service, "demo", "nodeless")
    assert summary.nodes == 0
    assert [(c.podClaimName, c.problem) for c in summary.claims] == [
        ("gpus", 'pod claim gpus: resourceclaim "does-not-exist" not found')
    ]
