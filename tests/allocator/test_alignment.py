"""Device selection: first-fit is upstream's search; aligned picks one PCIe root / NUMA node, tightest first.

The node of these tests: 8 GPUs (driver A), NUMA node 0 = gpu-0..3, 1 = gpu-4..7, PCIe roots of two GPUs
each (p0 = gpu-0, gpu-1; p1 = gpu-2, gpu-3; ...), and 4 NICs (driver B), nic-i on root pi.
"""

from __future__ import annotations

from allocator.alignment import NUMA_ATTRIBUTE, Topology, select
from allocator.model import parse_resource_slice
from allocator.search import Allocator
from tests.allocator.builders import (
    CLASS_A,
    CLASS_B,
    DRIVER_A,
    DRIVER_B,
    NODE1,
    NUMA,
    World,
    claim,
    device,
    request,
    result,
    slice_,
    topology_gpu,
    topology_nic,
)


def topology_world(*, numa: bool = True, root: bool = True, nics: bool = True) -> World:
    slices = [slice_("gpus", DRIVER_A, "node-1", [topology_gpu(i, numa=numa, root=root) for i in range(8)])]
    if nics:
        slices.append(slice_("nics", DRIVER_B, "node-1", [topology_nic(i) for i in range(4)]))
    return World(slices=slices)


def picked(results):
    return [r["device"] for a in results for r in a["devices"]["results"]]


def choose(world: World, *claims, policy: str = "aligned", **kwargs):
    return select(world.inventory, world.selectors, NODE1, list(claims), policy, **kwargs)


def test_first_fit_is_the_upstream_search_unchanged():
    world = topology_world().allocated("default/o", result("x", "gpu-0"))
    c = claim("c", request("gpu", count=2))
    selection = choose(world, c, policy="first-fit")
    assert selection.results == Allocator(world.inventory, world.selectors).allocate(NODE1, [c])
    assert picked(selection.results) == ["gpu-1", "gpu-2"]
    assert selection.placement == "first-fit"


def test_two_gpus_take_a_whole_root_instead_of_splitting_two():
    world = topology_world().allocated("default/o", result("x", "gpu-0"))
    selection = choose(world, claim("c", request("gpu", count=2)))
    # p0 has one free GPU; p1..p3 have two; tie broken by the fullest NUMA node (0: 3 free) then name.
    assert picked(selection.results) == ["gpu-2", "gpu-3"]
    assert selection.placement == "pcieRoot p1"


def test_one_gpu_fills_the_half_used_root():
    world = topology_world().allocated("default/o", result("x", "gpu-5"))
    selection = choose(world, claim("c", request("gpu")))
    assert picked(selection.results) == ["gpu-4"]
    assert selection.placement == "pcieRoot p2"


def test_three_gpus_on_the_numa_node_that_has_room():
    world = topology_world().allocated("default/o", result("x", "gpu-0"), result("x", "gpu-1"))
    c = claim("c", request("gpu", count=3))
    assert picked(choose(world, c, policy="first-fit").results) == ["gpu-2", "gpu-3", "gpu-4"]  # split
    selection = choose(world, c)
    assert picked(selection.results) == ["gpu-4", "gpu-5", "gpu-6"]
    assert selection.placement == "numaNode 1"


def test_gpu_and_nic_share_a_root_without_a_constraint():
    world = topology_world().allocated("default/o", result("x", "gpu-0"))
    c = claim("c", request("gpu"), request("nic", class_name=CLASS_B))
    assert picked(choose(world, c, policy="first-fit").results) == ["gpu-1", "nic-0"]
    selection = choose(world, c)
    # p0 keeps gpu-1 and nic-0 (2 usable devices): the tightest root that fits both.
    assert picked(selection.results) == ["gpu-1", "nic-0"]
    world.allocated("default/p", result("x", "nic-0", driver=DRIVER_B))
    assert picked(choose(world, c).results) == ["gpu-2", "nic-1"]


def test_pod_larger_than_any_group_gets_the_most_used_groups_first():
    world = topology_world().allocated(
        "default/o", result("x", "gpu-0"), result("x", "gpu-4"), result("x", "gpu-5")
    )
    selection = choose(world, claim("c", request("gpu", count=5)))
    assert selection.placement == "fragmented groups first"
    # NUMA 1 (2 free) before NUMA 0 (3 free); within NUMA 0 the half-used root p0 first.
    assert picked(selection.results) == ["gpu-6", "gpu-7", "gpu-1", "gpu-2", "gpu-3"]


def test_claim_constraints_still_hold():
    world = topology_world().allocated("default/o", result("x", "gpu-0"))
    c = claim("c", request("gpu", count=4), constraints=[{"matchAttribute": NUMA_ATTRIBUTE}])
    selection = choose(world, c)
    assert picked(selection.results) == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]


def test_no_topology_keeps_first_fit():
    world = topology_world(numa=False, root=False, nics=False)
    selection = choose(world, claim("c", request("gpu", count=2)))
    assert picked(selection.results) == ["gpu-0", "gpu-1"]
    assert selection.placement == "first-fit (no topology published)"


def test_missing_numa_is_unknown_not_numa_zero():
    devices = [
        device("gpu-0", **{NUMA: 1}),
        device("gpu-1"),
        device("gpu-2", **{NUMA: 0}),
        device("gpu-3", **{NUMA: 0}),
    ]
    world = World(slices=[slice_("gpus", DRIVER_A, "node-1", devices)])
    topology = Topology()
    assert topology.numa(world.inventory.pools_for(NODE1)[0].slices[0].devices[1]) is None
    # NUMA 1 holds gpu-0 plus the unknown gpu-1 (unknown devices join every group): tightest group of 2.
    selection = choose(world, claim("c", request("gpu", count=2)))
    assert selection.placement == "numaNode 1"
    assert picked(selection.results) == ["gpu-0", "gpu-1"]


def test_list_numa_attribute_uses_the_physical_node_first():
    raw = slice_(
        "gpus", DRIVER_A, "node-1", [{"name": "g", "attributes": {NUMA_ATTRIBUTE: {"ints": [3, 2]}}}]
    )
    assert Topology().numa(parse_resource_slice(raw).devices[0]) == 3


def test_configured_attribute_names():
    raw = slice_("gpus", DRIVER_A, "node-1", [device("g", numa=5)])
    dev = parse_resource_slice(raw).devices[0]
    assert Topology().numa(dev) is None
    assert Topology(numa_attributes=(NUMA_ATTRIBUTE, f"{DRIVER_A}/numa")).numa(dev) == 5


def test_all_mode_keeps_first_fit():
    world = topology_world().allocated("default/o", result("x", "gpu-0"))
    c = claim("c", request("gpu", count=1), request("nics", class_name=CLASS_B, mode="All"))
    selection = choose(world, c)
    assert selection.placement == "first-fit (request nics for all devices)"
    assert picked(selection.results) == ["gpu-1", "nic-0", "nic-1", "nic-2", "nic-3"]


EVERY_OR_ONE = {
    "name": "gpu",
    "firstAvailable": [
        {"name": "every", "deviceClassName": CLASS_A, "allocationMode": "All"},
        {"name": "one", "deviceClassName": CLASS_A, "count": 1},
    ],
}


def test_a_chosen_subrequest_for_all_devices_is_named():
    selection = choose(topology_world(), claim("c", EVERY_OR_ONE))
    assert selection.placement == "first-fit (subrequest gpu/every for all devices)"
    assert len(picked(selection.results)) == 8


def test_a_fallback_subrequest_is_named_beside_the_one_for_all_devices():
    # gpu-0 is taken: "every" cannot have all GPUs, firstAvailable falls back to "one".
    world = topology_world().allocated("default/o", result("x", "gpu-0"))
    selection = choose(world, claim("c", EVERY_OR_ONE))
    assert selection.placement == "first-fit (firstAvailable chose gpu/one; gpu/every asks for all devices)"
    assert picked(selection.results) == ["gpu-1"]


def test_no_fit_is_decided_by_first_fit_alone():
    world = topology_world()
    selection = choose(world, claim("c", request("gpu", count=9)))
    assert selection.results is None


def test_zero_budget_keeps_first_fit():
    world = topology_world().allocated("default/o", result("x", "gpu-0"))
    selection = choose(world, claim("c", request("gpu", count=2)), budget=0)
    assert picked(selection.results) == ["gpu-1", "gpu-2"]
    assert selection.placement == "first-fit (no aligned allocation)"


def test_aligned_work_is_bounded():
    world = topology_world()
    selection = choose(
        world, claim("c", request("gpu", count=2)), claim("d", request("nic", class_name=CLASS_B))
    )
    assert selection.results is not None
    assert selection.devices_tried < 200


def test_select_is_deterministic():
    world = topology_world().allocated("default/o", result("x", "gpu-3"))
    c = claim("c", request("gpu", count=3))
    assert choose(world, c).results == choose(world, c).results
