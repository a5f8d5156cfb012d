"""Partitionable devices (KEP-4815, DRAPartitionableDevices), allocator-semantics §11 and §14.

Every expectation is worked out by hand: pools sorted by (driver, pool), slices by name, devices in slice
order; a device is usable when, after adding its ``consumesCounters``, every counter of every set in its
pool is still >= 0, with the consumption of devices allocated anywhere in the pool (other nodes' slices
included) already subtracted.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from allocator.errors import AllocatorError, NodeLocalError
from allocator.features import FeatureGates
from allocator.model import parse_resource_slice
from tests.allocator.builders import (
    CLASS_A,
    DRIVER_A,
    NODE1,
    NODE2,
    PINNED_NODE1,
    STABLE,
    World,
    claim,
    device,
    picked,
    request,
    result,
    slice_,
)

POOL = "pool-a"


def counters(name: str, *sets: tuple[str, dict[str, str]], count: int, **spec: Any) -> dict[str, Any]:
    """A device-less slice holding counter sets (the 1.35+ shape)."""
    body = slice_(name, DRIVER_A, POOL, [], count=count, **spec)
    del body["spec"]["devices"]
    body["spec"]["sharedCounters"] = [
        {"name": set_name, "counters": {c: {"value": v} for c, v in values.items()}}
        for set_name, values in sets
    ]
    return body


def part(name: str, *consumes: tuple[str, dict[str, str]], **attributes: Any) -> dict[str, Any]:
    d = device(name, **attributes)
    d["consumesCounters"] = [
        {"counterSet": set_name, "counters": {c: {"value": v} for c, v in values.items()}}
        for set_name, values in consumes
    ]
    return d


def devices(name: str, *items: dict[str, Any], count: int, **spec: Any) -> dict[str, Any]:
    return slice_(name, DRIVER_A, POOL, list(items), count=count, **spec)


def gpu_with_halves() -> list[dict[str, Any]]:
    """One GPU (80 memory, 8 slices): the whole GPU, two halves, and a quarter that overlaps half 0."""
    cs = "gpu-0-cs"
    return [
        counters("a-counters", (cs, {"memory": "80Gi", "slices": "8"}), count=2),
        devices(
            "b-devices",
            part("gpu-0", (cs, {"memory": "80Gi", "slices": "8"})),
            part("gpu-0-half-0", (cs, {"memory": "40Gi", "slices": "4"})),
            part("gpu-0-half-1", (cs, {"memory": "40Gi", "slices": "4"})),
            part("gpu-0-quarter-0", (cs, {"memory": "20Gi", "slices": "2"})),
            count=2,
        ),
    ]


# --- counters within a node -----------------------------------------------------------------------


def test_whole_device_first_then_partitions_are_exhausted():
    world = World(slices=gpu_with_halves())
    assert picked(world.allocate(claim("c", request("gpu")))) == [[("gpu", "gpu-0")]]
    # The whole GPU consumes every counter: no partition fits beside it.
    world.allocated("default/whole", result("x", "gpu-0", pool=POOL))
    assert world.allocate(claim("c", request("gpu"))) is None


def test_partitions_fill_the_counter_set_exactly():
    world = World(slices=gpu_with_halves())
    # count 2: gpu-0 takes all 80Gi, so slot 2 finds nothing; backtrack: half-0 (40) + half-1 (40) = 80.
    assert picked(world.allocate(claim("c", request("gpu", count=2)))) == [
        [("gpu", "gpu-0-half-0"), ("gpu", "gpu-0-half-1")]
    ]
    # count 3: 40 + 40 leaves nothing for the quarter; 40 + 20 + ... nothing else: no fit.
    assert world.allocate(claim("c", request("gpu", count=3))) is None


def test_consumption_of_allocated_partitions_is_subtracted():
    world = World(slices=gpu_with_halves()).allocated("default/other", result("x", "gpu-0-half-0", pool=POOL))
    # 40Gi / 4 slices left: gpu-0 (80) no, half-0 in use, half-1 (40) fits.
    assert picked(world.allocate(claim("c", request("gpu")))) == [[("gpu", "gpu-0-half-1")]]
    world.allocated("default/third", result("x", "gpu-0-half-1", pool=POOL))
    # Nothing left, the quarter (20Gi) included.
    assert world.allocate(claim("c", request("gpu"))) is None


def test_an_allocated_device_dropped_from_its_slice_consumes_nothing_before_and_after_a_restart():
    # The driver republishes the devices without half-0, still allocated. Upstream's checkAvailableCounters
    # (structured/internal/incubating/allocator_incubating.go) walks only the pool's published devices, so
    # the whole set is free again: gpu-0 (80Gi / 8) fits. An extender that saw half-0 published and one
    # restarted from the same objects (index rebuilt) must answer alike; the long-running one kept half-0's
    # 40Gi / 4 slices used and refused gpu-0.
    other = ("default/other", result("x", "gpu-0-half-0", pool=POOL))
    cs = "gpu-0-cs"
    without = devices(
        "b-devices",
        part("gpu-0", (cs, {"memory": "80Gi", "slices": "8"})),
        part("gpu-0-half-1", (cs, {"memory": "40Gi", "slices": "4"})),
        part("gpu-0-quarter-0", (cs, {"memory": "20Gi", "slices": "2"})),
        count=2,
    )
    running = World(slices=gpu_with_halves()).allocated(*other)
    running.inventory.upsert_slice(parse_resource_slice(without))
    restarted = World(slices=[gpu_with_halves()[0], without]).allocated(*other)
    one, two = claim("c", request("gpu")), claim("c", request("gpu", count=2))
    for world in (running, restarted):
        assert picked(world.allocate(one)) == [[("gpu", "gpu-0")]]
        assert picked(world.allocate(two)) == [[("gpu", "gpu-0-half-1"), ("gpu", "gpu-0-quarter-0")]]


def test_counters_are_shared_by_the_claims_of_one_attempt():
    world = World(slices=gpu_with_halves())
    # Claim 1 takes gpu-0 (all counters); claim 2 finds nothing; backtrack: claim 1 takes half-0 and
    # claim 2 the next device that fits, half-1.
    assert picked(world.allocate(claim("c1", request("gpu")), claim("c2", request("gpu")))) == [
        [("gpu", "gpu-0-half-0")],
        [("gpu", "gpu-0-half-1")],
    ]


def test_backtracking_gives_the_counters_back():
    cs = "cs"
    slices = [
        counters("a-counters", (cs, {"units": "2"}), count=2),
        devices(
            "b-devices",
            part("big", (cs, {"units": "2"}), group="g1"),
            part("small-0", (cs, {"units": "1"}), group="g2"),
            part("small-1", (cs, {"units": "1"}), group="g2"),
            count=2,
        ),
    ]
    constraint = [{"matchAttribute": f"{DRIVER_A}/group"}]
    world = World(slices=slices)
    # a: big (units 2 -> 0); b needs group g1: none left -> undo big (units back to 2).
    # a: small-0 (-> 1); b: big needs 2 > 1, small-1 (g2, -> 0).
    result_ = world.allocate(claim("c", request("a"), request("b"), constraints=constraint))
    assert picked(result_) == [[("a", "small-0"), ("b", "small-1")]]


def test_device_consuming_two_counter_sets_needs_both():
    slices = [
        counters("a-counters", ("link", {"lanes": "1"}), ("mem", {"gi": "1"}), count=2),
        devices(
            "b-devices",
            part("bridge", ("link", {"lanes": "1"}), ("mem", {"gi": "1"})),
            part("lane", ("link", {"lanes": "1"})),
            part("memory", ("mem", {"gi": "1"})),
            count=2,
        ),
    ]
    world = World(slices=slices)
    assert picked(world.allocate(claim("c", request("d")))) == [[("d", "bridge")]]
    world.allocated("default/m", result("x", "memory", pool=POOL))
    # mem is used up: bridge no longer fits, lane (link only) does.
    assert picked(world.allocate(claim("c", request("d")))) == [[("d", "lane")]]


def test_one_overcommitted_counter_blocks_every_counter_consuming_device_of_the_pool():
    # Two devices were allocated against a set of 1 (the driver shrank it since): "a" is at -1. Every
    # device of the pool that consumes counters is then rejected, even one using an unrelated set; a device
    # without consumesCounters is unaffected.
    slices = [
        counters("a-counters", ("a", {"x": "1"}), ("b", {"y": "1"}), count=2),
        devices(
            "b-devices",
            part("a-0", ("a", {"x": "1"})),
            part("a-1", ("a", {"x": "1"})),
            part("b-0", ("b", {"y": "1"})),
            device("plain"),
            count=2,
        ),
    ]
    world = World(slices=slices).allocated(
        "default/old", result("x", "a-0", pool=POOL), result("x", "a-1", pool=POOL)
    )
    assert picked(world.allocate(claim("c", request("d")))) == [[("d", "plain")]]
    world.allocated("default/plain", result("x", "plain", pool=POOL))
    assert world.allocate(claim("c", request("d"))) is None


# --- counters across nodes ------------------------------------------------------------------------


def fabric(**node_fields: Any) -> list[dict[str, Any]]:
    """A pool spanning two nodes: counters in a device-less slice, one link per node, 100 units shared."""
    return [
        counters("fabric-counters", ("fabric", {"bandwidth": "100"}), count=3, node=None, allNodes=True),
        devices("fabric-node-1", part("link-1", ("fabric", {"bandwidth": "60"})), count=3, node="node-1"),
        devices("fabric-node-2", part("link-2", ("fabric", {"bandwidth": "60"})), count=3, node="node-2"),
    ]


def test_devices_allocated_on_other_nodes_consume_the_pools_counters():
    world = World(slices=fabric())
    assert world.allocate(claim("c", request("link"))) == [
        {"devices": {"results": [result("link", "link-1", pool=POOL)]}, "nodeSelector": PINNED_NODE1}
    ]
    # link-2 (a slice of node-2, not visible from node-1) is allocated: 40 units left, link-1 needs 60.
    world.allocated("default/on-node-2", result("x", "link-2", pool=POOL))
    assert world.allocate(claim("c", request("link"))) is None
    assert world.allocate(claim("c", request("link")), node=NODE2) is None  # link-2 itself is in use


def per_device_slices() -> list[dict[str, Any]]:
    cs = "fabric"
    zone_z1 = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]
    }
    per_device = devices(
        "fabric-devices",
        {**part("on-node-2", (cs, {"units": "1"})), "nodeName": "node-2"},
        {**part("on-node-1", (cs, {"units": "1"})), "nodeName": "node-1"},
        {**part("anywhere", (cs, {"units": "1"})), "allNodes": True},
        {**part("in-zone-1", (cs, {"units": "1"})), "nodeSelector": zone_z1},
        count=2,
        node=None,
        perDeviceNodeSelection=True,
    )
    return [counters("fabric-counters", (cs, {"units": "3"}), count=2, node=None, allNodes=True), per_device]


def test_per_device_node_selection_picks_devices_of_the_node_and_builds_the_node_selector():
    world = World(slices=per_device_slices())
    # node-1 sees on-node-1, anywhere, in-zone-1 (NODE1 is in zone z1), in slice order.
    assert picked(world.allocate(claim("c", request("d", count=3)))) == [
        [("d", "on-node-1"), ("d", "anywhere"), ("d", "in-zone-1")]
    ]
    # A device with its own nodeName pins the allocation to the node.
    assert world.allocate(claim("c", request("d")))[0]["nodeSelector"] == PINNED_NODE1
    # node-2 sees on-node-2 and anywhere only (zone z2): 2 devices, not 3.
    assert world.allocate(claim("c", request("d", count=3)), node=NODE2) is None
    assert picked(world.allocate(claim("c", request("d", count=2)), node=NODE2)) == [
        [("d", "on-node-2"), ("d", "anywhere")]
    ]


def _named(*names: str) -> list[dict[str, Any]]:
    """A class matching only the named devices (device names have no CEL field: use an attribute)."""
    return [
        {
            "metadata": {"name": CLASS_A},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f'device.attributes["{DRIVER_A}"].id in {list(names)!r}'.replace(
                                "'", '"'
                            )
                        }
                    }
                ]
            },
        }
    ]


def per_device_with_ids() -> list[dict[str, Any]]:
    slices = per_device_slices()
    for d in slices[1]["spec"]["devices"]:
        d["attributes"] = {"id": {"string": d["name"]}}
    return slices


def test_per_device_node_selector_of_the_result():
    zone_z1 = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]
    }
    world = World(slices=per_device_with_ids(), classes=_named("anywhere"))
    assert world.allocate(claim("c", request("d"))) == [
        {"devices": {"results": [result("d", "anywhere", pool=POOL)]}}
    ]
    world = World(slices=per_device_with_ids(), classes=_named("in-zone-1"))
    assert world.allocate(claim("c", request("d"))) == [
        {"devices": {"results": [result("d", "in-zone-1", pool=POOL)]}, "nodeSelector": zone_z1}
    ]
    # Both: the allNodes device adds nothing, the merged selector is the zone term.
    world = World(slices=per_device_with_ids(), classes=_named("anywhere", "in-zone-1"))
    assert world.allocate(claim("c", request("d", count=2)))[0]["nodeSelector"] == zone_z1


def test_per_device_node_selection_shares_counters_across_nodes():
    # 3 units; on-node-2 and anywhere are allocated (by pods on node-2): 1 unit left for node-1.
    world = World(slices=per_device_with_ids()).allocated(
        "default/n2", result("x", "on-node-2", pool=POOL), result("x", "anywhere", pool=POOL)
    )
    assert picked(world.allocate(claim("c", request("d")))) == [[("d", "on-node-1")]]
    assert world.allocate(claim("c", request("d", count=2))) is None


def test_stable_allocator_sees_another_nodes_counter_slice_until_its_pool_is_complete():
    # Upstream's stable GatherPools takes a counter slice into its pool on every node: pool-a, one of its
    # two slices published (for node-2), is incomplete from node-1 too, so "all" stops there; once the
    # second slice is published, the pool is complete and has no device for node-1.
    assert STABLE.stable_allocator
    local = slice_("local", DRIVER_A, "pool-local", [device("d0")])
    world = World(
        slices=[local, counters("q0", ("cs", {"units": "1"}), count=2, node="node-2")], gates=STABLE
    )
    everything = claim("c", request("d", mode="All"))
    updating = re.escape(f"resource pool {DRIVER_A}/{POOL} is currently being updated")
    with pytest.raises(AllocatorError, match=updating):
        world.allocate(everything)
    assert picked(world.allocate(claim("c", request("d")))) == [[("d", "d0")]]
    world.inventory.upsert_slice(parse_resource_slice(devices("q1", device("far"), count=2, node="node-2")))
    assert picked(world.allocate(everything)) == [[("d", "d0")]]


# --- feature gate and validity --------------------------------------------------------------------


def test_gate_off_ignores_counter_slices_and_never_allocates_consuming_devices():
    off = FeatureGates(DRAPartitionableDevices=False)
    # The counter slice is ignored: the two-slice pool is incomplete and nothing is allocated from it.
    assert World(slices=gpu_with_halves(), gates=off).allocate(claim("c", request("gpu"))) is None
    # A one-slice pool whose devices reference counters nobody publishes: with the gate off the pool is
    # complete, consuming devices are skipped and the plain one is allocated.
    only_devices = devices("b-devices", part("p-0", ("cs", {"units": "1"})), device("plain"), count=1)
    world = World(slices=[only_devices], gates=off)
    assert picked(world.allocate(claim("c", request("d")))) == [[("d", "plain")]]
    # Gate on: the reference to a missing counter set makes the pool invalid (node-local error).
    with pytest.raises(NodeLocalError, match="invalid resource pools were encountered"):
        World(slices=[only_devices]).allocate(claim("c", request("d")))


def test_gate_off_ignores_per_device_node_selection_slices():
    world = World(slices=per_device_slices(), gates=FeatureGates(DRAPartitionableDevices=False))
    assert world.allocate(claim("c", request("d"))) is None


@pytest.mark.parametrize(
    "consumes",
    [
        # Three counter sets: API validation allows at most two per device.
        (("a", {"x": "1"}), ("b", {"y": "1"}), ("c", {"z": "1"})),
        # The same counter set twice: entries must be unique per counterSet.
        (("a", {"x": "1"}), ("a", {"x": "1"})),
    ],
)
def test_device_the_api_would_reject_makes_its_pool_invalid(consumes):
    slices = [
        counters("a-counters", ("a", {"x": "2"}), ("b", {"y": "1"}), ("c", {"z": "1"}), count=2),
        devices("b-devices", part("odd", *consumes), device("plain"), count=2),
    ]
    world = World(slices=slices)
    with pytest.raises(NodeLocalError, match="invalid resource pools were encountered"):
        world.allocate(claim("c", request("d", count=2)))
    # The pool is not used at all, not even for the plain device.
    pool = world.inventory.pools_for(NODE1)[0]
    assert pool.invalid.startswith("device odd")


# --- multi-allocatable devices with counters ------------------------------------------------------


def shared_partition_slices() -> list[dict[str, Any]]:
    shared = part("shared", ("cs", {"units": "1"}))
    shared["allowMultipleAllocations"] = True
    shared["capacity"] = {
        "memory": {"value": "10Gi", "requestPolicy": {"default": "1Gi", "validRange": {"min": "1Gi"}}}
    }
    return [
        counters("a-counters", ("cs", {"units": "1"}), count=2),
        devices("b-devices", shared, part("solo", ("cs", {"units": "1"})), count=2),
    ]


def test_shares_of_a_multi_allocatable_device_consume_its_counters_once():
    world = World(slices=shared_partition_slices())
    # Two claims, one share each, in one attempt: the first share takes the unit, the second skips the
    # counter check. solo would need the unit too.
    alloc = world.allocate(claim("c1", request("d")), claim("c2", request("d")))
    assert picked(alloc) == [[("d", "shared")], [("d", "shared")]]
    assert alloc[0]["devices"]["results"][0]["consumedCapacity"] == {"memory": "1Gi"}


def test_a_device_with_shares_counts_as_consuming_its_counters():
    world = World(slices=shared_partition_slices()).allocated(
        "default/share", result("x", "shared", pool=POOL, shareID="u-1", consumedCapacity={"memory": "1Gi"})
    )
    solo = {
        "metadata": {"name": CLASS_A},
        "spec": {"selectors": [{"cel": {"expression": "!device.allowMultipleAllocations"}}]},
    }
    assert World(slices=shared_partition_slices(), classes=[solo]).allocate(claim("c", request("d"))) == [
        {"devices": {"results": [result("d", "solo", pool=POOL)]}, "nodeSelector": PINNED_NODE1}
    ]
    world_solo = World(slices=shared_partition_slices(), classes=[solo]).allocated(
        "default/share", result("x", "shared", pool=POOL, shareID="u-1", consumedCapacity={"memory": "1Gi"})
    )
    assert world_solo.allocate(claim("c", request("d"))) is None
    # Another share of the shared device needs no counters: it fits.
    assert picked(world.allocate(claim("c", request("d")))) == [[("d", "shared")]]


# --- no-fit reason --------------------------------------------------------------------------------


def test_exhausted_counters_give_a_counters_reason_that_waiting_can_fix():
    from allocator.diagnose import diagnose

    world = World(slices=gpu_with_halves()).allocated(
        "default/other", result("x", "gpu-0-half-0", pool=POOL), result("x", "gpu-0-half-1", pool=POOL)
    )
    gpu = claim("c", request("gpu"))
    assert world.allocate(gpu) is None
    no_fit = diagnose(world.inventory, world.selectors, NODE1, [gpu])
    # gpu-0 and the quarter are free and match, but the counter set is used up: not "in use", not
    # "matching the selectors"; releasing the halves would help, so the node is not unresolvable.
    assert "counters" in no_fit.reason and "in use" not in no_fit.reason
    assert no_fit.unresolvable is False
