"""What the state keeps of API objects (``app.state.compact``): equal parts once, nothing read changed."""

from __future__ import annotations

import copy

from app.state.cluster import ClusterState
from app.state.compact import editable_copy
from tests.builders import claim, device, pod, request, resource_slice

DRIVER = "gpu.example.com"


def test_claims_of_one_spec_and_pods_of_one_workload_share_their_parts():
    state = ClusterState()
    for name in ("a", "b"):
        state.apply("ResourceClaim", claim("ml", name, [request("gpu", "gpu")]))
        state.apply("Pod", pod("ml", name, ["shared"]))
    claims, pods = state.objects["ResourceClaim"], state.objects["Pod"]
    assert claims["ml/a"]["spec"] is claims["ml/b"]["spec"]
    assert pods["ml/a"]["spec"]["containers"] is pods["ml/b"]["spec"]["containers"]
    assert pods["ml/a"]["metadata"]["name"] == "a" and pods["ml/b"]["metadata"]["name"] == "b"


def test_claims_of_one_spec_are_parsed_once_each_with_its_own_identity():
    state = ClusterState()
    for name in ("a", "b"):
        state.apply("ResourceClaim", claim("ml", name, [request("gpu", "gpu", 2)]))
    state.apply("ResourceClaim", claim("ml", "c", [request("gpu", "gpu", 3)]))
    a, b, c = (state.parsed_claim(f"ml/{name}") for name in "abc")
    assert (b.namespace, b.name, b.uid) == (
        "ml",
        "b",
        state.objects["ResourceClaim"]["ml/b"]["metadata"]["uid"],
    )
    assert b.uid != a.uid
    assert b.requests is a.requests  # taken from a's parse
    assert [alt.count for r in c.requests for alt in r.alternatives] == [3]


def test_parts_equal_in_python_but_not_in_the_api_are_not_shared():
    state = ClusterState()
    counts = {"one": 1, "float": 1.0, "bool": True}  # 1 == 1.0 == True
    for name, count in counts.items():
        obj = claim("ml", name, [request("gpu", "gpu")])
        obj["spec"]["devices"]["requests"][0]["exactly"]["count"] = count
        state.apply("ResourceClaim", obj)
    specs = [state.objects["ResourceClaim"][f"ml/{name}"]["spec"] for name in counts]
    assert [s["devices"]["requests"][0]["exactly"]["count"] for s in specs] == list(counts.values())
    assert [type(s["devices"]["requests"][0]["exactly"]["count"]) for s in specs] == [int, float, bool]


def test_a_slice_keeps_only_the_devices_read_as_published():
    mapped = {**device("gpu-1"), "nodeAllocatableResources": {"cpu": {"mapping": {"deviceMultiplier": "1"}}}}
    state = ClusterState()
    state.apply("ResourceSlice", resource_slice("n1-gpus", DRIVER, "n1", [device("gpu-0"), mapped]))
    assert state.get("ResourceSlice", "n1-gpus")["spec"]["devices"] == [mapped]
    assert [d.name for d in state.inventory.slice("n1-gpus").devices] == ["gpu-0", "gpu-1"]
    assert state.node_allocatable_slices == {"n1-gpus"}
    state.apply("ResourceSlice", resource_slice("n2-gpus", DRIVER, "n2", [device("gpu-0")]))
    assert state.node_allocatable_slice_objects() == [state.get("ResourceSlice", "n1-gpus")]
    state.remove("ResourceSlice", "n1-gpus")
    assert state.node_allocatable_slice_objects() == []


def test_an_editable_copy_is_a_deep_copy():
    obj = {
        "spec": {"devices": [{"name": "gpu-0", "count": 1, "ratio": 1.5, "on": True}]},
        "big": 2**70,
        "t": (1, [2]),
    }
    copied = editable_copy(obj)
    assert copied == copy.deepcopy(obj)
    copied["spec"]["devices"][0]["count"] = 2
    copied["t"][1].append(3)
    assert obj["spec"]["devices"][0]["count"] == 1 and obj["t"] == (1, [2])
