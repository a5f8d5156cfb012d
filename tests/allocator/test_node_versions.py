"""Inventory node versions: every change an allocation on a node depends on must change its version,
and unrelated nodes keep theirs (so their decisions stay cached). The availability version changes only
with what can take a planned allocation's devices away."""

from __future__ import annotations

from fractions import Fraction

from allocator.deviceuse import AllocatedDevice, allocated_devices, written_token
from allocator.features import FeatureGates
from allocator.model import parse_device_class, parse_device_taint_rule, parse_resource_slice
from allocator.nodeselector import Node
from tests.allocator.builders import (
    CLASS_A,
    DRIVER_A,
    NODE1,
    World,
    claim,
    device,
    device_class,
    request,
    result,
    slice_,
)
from tests.allocator.test_compatibility_groups import ON, POOL, part, pool


def world() -> World:
    w = World(
        slices=[
            slice_("s1", DRIVER_A, "node-1", [device("gpu-0")]),
            slice_("s2", DRIVER_A, "node-2", [device("gpu-0")], node="node-2"),
        ]
    )
    w.inventory.upsert_node(Node("node-1", {}))
    w.inventory.upsert_node(Node("node-2", {}))
    return w


def test_allocation_changes_only_the_node_of_the_device():
    inventory = world().inventory
    one, two = inventory.node_version("node-1"), inventory.node_version("node-2")
    inventory.set_allocation("ns/c", (AllocatedDevice((DRIVER_A, "node-1", "gpu-0"), False, "", {}),))
    assert inventory.node_version("node-1") != one
    assert inventory.node_version("node-2") == two
    one = inventory.node_version("node-1")
    inventory.reserve("bind:x", (AllocatedDevice((DRIVER_A, "node-2", "gpu-0"), False, "", {}),))
    assert inventory.node_version("node-1") == one
    assert inventory.node_version("node-2") != two


def test_slice_and_label_changes_touch_their_node_and_global_objects_touch_all():
    inventory = world().inventory
    before = {n: inventory.node_version(n) for n in ("node-1", "node-2")}
    inventory.upsert_slice(parse_resource_slice(slice_("s1", DRIVER_A, "node-1", [device("gpu-0", x=1)])))
    assert inventory.node_version("node-1") != before["node-1"]
    assert inventory.node_version("node-2") == before["node-2"]
    inventory.upsert_node(Node("node-2", {"zone": "b"}))
    assert inventory.node_version("node-2") != before["node-2"]
    for change in (
        lambda: inventory.upsert_class(parse_device_class(device_class(CLASS_A, "true"))),
        lambda: inventory.upsert_taint_rule(
            parse_device_taint_rule(
                {"metadata": {"name": "r"}, "spec": {"taint": {"key": "k", "effect": "NoSchedule"}}}
            )
        ),
        lambda: inventory.upsert_slice(
            parse_resource_slice(
                slice_("everywhere", DRIVER_A, "net", [device("nic-0")], node=None, allNodes=True)
            )
        ),
    ):
        before = {n: inventory.node_version(n) for n in ("node-1", "node-2")}
        change()
        assert all(inventory.node_version(n) != v for n, v in before.items())


def _gpu(node: str, name: str = "gpu-0") -> AllocatedDevice:
    return AllocatedDevice((DRIVER_A, node, name), False, "", {})


def _two_gpus() -> World:
    w = World(slices=[slice_("s1", DRIVER_A, "node-1", [device("gpu-0"), device("gpu-1")])])
    w.inventory.upsert_node(Node("node-1", {}))
    return w


def test_devices_moving_among_the_index_s_own_holders_keep_the_availability_version():
    """A hold planned gpu-1 while another pod's bind had gpu-0: that bind's write seen back and its
    reservation released take nothing gpu-1 relies on, though the node's version changes with each."""
    inventory = _two_gpus().inventory
    inventory.reserve("bind:a", (_gpu("node-1"),))
    inventory.reserve("hold:b", (_gpu("node-1", "gpu-1"),))
    held = inventory.availability_version("node-1")
    version = inventory.node_version("node-1")
    inventory.reserve(written_token("ns/a"), (_gpu("node-1"),))  # the binder wrote ns/a
    inventory.release("bind:a")
    inventory.set_allocation("ns/a", (_gpu("node-1"),))  # the watch shows it
    inventory.release(written_token("ns/a"))
    inventory.set_allocation("ns/a", ())  # deallocated later: frees only
    assert inventory.node_version("node-1") != version
    assert inventory.availability_version("node-1") == held


def test_an_allocation_not_written_by_the_index_s_own_binds_changes_the_availability_version():
    inventory = _two_gpus().inventory
    inventory.reserve("hold:b", (_gpu("node-1", "gpu-1"),))
    # Reserved as written to another claim: that is no permission for ns/other.
    inventory.reserve(written_token("ns/a"), (_gpu("node-1"),))
    for allocation in [(_gpu("node-1"),), (_gpu("node-1", "gpu-1"),)]:
        held = inventory.availability_version("node-1")
        inventory.set_allocation("ns/other", allocation)  # another writer's allocation
        assert inventory.availability_version("node-1") != held
        inventory.set_allocation("ns/other", ())


def test_a_slice_label_or_class_change_changes_the_availability_version():
    inventory = world().inventory
    for node, change in (
        (
            "node-1",
            lambda: inventory.upsert_slice(
                parse_resource_slice(slice_("s1", DRIVER_A, "node-1", [device("gpu-0", x=2)]))
            ),
        ),
        ("node-2", lambda: inventory.upsert_node(Node("node-2", {"zone": "c"}))),
        ("node-1", lambda: inventory.upsert_class(parse_device_class(device_class(CLASS_A, "false")))),
    ):
        held = inventory.availability_version(node)
        change()
        assert inventory.availability_version(node) != held


def _results(*results: dict) -> tuple[AllocatedDevice, ...]:
    return allocated_devices({"devices": {"results": list(results)}}, "test")


def _nic_world() -> World:
    """node-1's nic-0 with 2G of bandwidth, shared by many claims."""
    nic = device("nic-0") | {"allowMultipleAllocations": True, "capacity": {"bandwidth": {"value": "2G"}}}
    return World(slices=[slice_("s1", DRIVER_A, "node-1", [nic])], gates=FeatureGates())


def _share(share_id: str) -> dict:
    return result("r", "nic-0", shareID=share_id, consumedCapacity={"bandwidth": "1G"})


def _hold_one_gigabit(world: World) -> None:
    """Plan a claim for 1G of nic-0 and reserve it, as a prioritize hold does."""
    planned = world.allocate(claim("q", request("r", capacity={"requests": {"bandwidth": "1G"}})))
    assert planned is not None
    world.inventory.reserve("hold:q", _results(*planned[0]["devices"]["results"]))


def test_a_share_listed_once_more_than_the_claim_had_or_was_written_changes_the_availability_version():
    """ns/k held (or was written) one 1G share; it is then seen with that share listed twice: 3G of the
    nic's 2G are in use with the hold's, so the hold's plan is no longer valid."""
    for written in (False, True):
        world = _nic_world()
        inventory = world.inventory
        if written:
            inventory.reserve(written_token("ns/k"), _results(_share("s1")))
        else:
            inventory.set_allocation("ns/k", _results(_share("s1")))
        _hold_one_gigabit(world)
        held = inventory.availability_version("node-1")
        inventory.set_allocation("ns/k", _results(_share("s1"), _share("s1")))
        inventory.release(written_token("ns/k"))
        nic = (DRIVER_A, "node-1", "nic-0")
        assert inventory.consumed_capacity(nic) == {"bandwidth": Fraction(3_000_000_000)}
        assert inventory.availability_version("node-1") != held


def test_with_compatibility_groups_a_deallocation_changes_the_availability_version():
    """DRADeviceCompatibilityGroups: d0 (no groups) and d1 (group a) are in use on one counter set; the
    plan takes d2 (no groups). Once d0's claim is deallocated the set admits group a only, and the claim
    planned again gets d3: the deallocation narrowed what the hold relied on."""
    slices = pool(part("d0", "cs"), part("d1", "cs", "a"), part("d2", "cs"), part("d3", "cs", "a"))
    world = World(slices=slices, gates=ON)
    inventory = world.inventory
    world.allocated("ns/c", result("x", "d0", pool=POOL))
    world.allocated("ns/d", result("x", "d1", pool=POOL))
    planned = world.allocate(claim("q", request("gpu")))
    assert planned is not None and planned[0]["devices"]["results"][0]["device"] == "d2"
    devices = _results(*planned[0]["devices"]["results"])
    inventory.reserve("hold:q", devices)
    held = inventory.availability_version(NODE1.name)
    inventory.set_allocation("ns/c", ())
    inventory.release("hold:q")
    again = world.allocate(claim("q", request("gpu")))
    assert again is not None and again[0]["devices"]["results"][0]["device"] == "d3"
    inventory.reserve("hold:q", devices)
    assert inventory.availability_version(NODE1.name) != held
