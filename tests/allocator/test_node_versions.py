"""Inventory node versions: every change an allocation on a node depends on must change its version,
and unrelated nodes keep theirs (so their decisions stay cached). The availability version changes only
with what can take a planned allocation's devices away."""

from __future__ import annotations

from allocator.deviceuse import AllocatedDevice, written_token
from allocator.model import parse_device_class, parse_device_taint_rule, parse_resource_slice
from allocator.nodeselector import Node
from tests.allocator.builders import CLASS_A, DRIVER_A, World, device, device_class, slice_


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
