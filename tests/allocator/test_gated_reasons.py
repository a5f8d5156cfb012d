"""Reasons that name a field whose feature gate is off (issue 18 item 2), with upstream's behaviour kept:
DRAPartitionableDevices off ignores slices with sharedCounters or perDeviceNodeSelection (and devices that
consume counters); DRAListTypeAttributes off compares attribute values as scalars, so a list-typed value
matches no other device."""

from __future__ import annotations

from typing import Any

import pytest

from allocator.diagnose import diagnose
from allocator.features import FeatureGates
from allocator.funnel import claim_funnels
from tests.allocator.builders import DRIVER_A, NODE1, World, claim, device, picked, request, slice_

PARTITIONABLE_OFF = FeatureGates(DRAPartitionableDevices=False)
LISTS_OFF = FeatureGates(DRAListTypeAttributes=False)
LISTS_ON = FeatureGates(DRAListTypeAttributes=True)
NUMA = f"{DRIVER_A}/numa"


def counter_slice() -> dict[str, Any]:
    body = slice_("gpu-counters", DRIVER_A, "node-1", [], count=2)
    body["spec"]["sharedCounters"] = [{"name": "gpu-0-cs", "counters": {"memory": {"value": "80Gi"}}}]
    return body


def test_an_ignored_counter_slice_still_completes_its_pool():
    # Upstream (checked by the oracle): a slice the node ignores while DRAPartitionableDevices is off still
    # counts towards resourceSliceCount, so the pool is complete and its other devices are allocated.
    devices = slice_("gpu-devices", DRIVER_A, "node-1", [device("gpu-0")], count=2)
    world = World(slices=[counter_slice(), devices], gates=PARTITIONABLE_OFF)
    assert picked(world.allocate(claim("c", request("gpu")))) == [[("gpu", "gpu-0")]]
    assert picked(world.allocate(claim("c", request("gpu", mode="All")))) == [[("gpu", "gpu-0")]]


def test_a_node_whose_slice_is_ignored_names_it():
    linked = {**device("link-0"), "nodeName": "node-1"}
    fabric = slice_("fabric", DRIVER_A, "fabric", [linked], node=None, perDeviceNodeSelection=True)
    world = World(slices=[fabric], gates=PARTITIONABLE_OFF)
    no_fit = diagnose(world.inventory, world.selectors, NODE1, [claim("c", request("gpu"))])
    assert no_fit.reason == (
        "claim default/c, request gpu: node has 0 device(s) of class class-a matching the selectors, "
        "1 needed (ResourceSlice fabric uses perDeviceNodeSelection, which is ignored while the "
        "DRAPartitionableDevices feature is disabled)"
    )
    assert World(slices=[fabric]).allocate(claim("c", request("gpu"))) is not None


def numa_lists(*values: list[int]) -> list[dict[str, Any]]:
    devices = [{"name": f"gpu-{i}", "attributes": {NUMA: {"ints": v}}} for i, v in enumerate(values)]
    return [slice_("gpus", DRIVER_A, "node-1", devices)]


def test_with_list_attributes_off_a_list_matches_no_other_device():
    pair = claim("c", request("gpu", count=2), constraints=[{"matchAttribute": NUMA}])
    assert World(slices=numa_lists([1, 2], [1, 2]), gates=LISTS_OFF).allocate(pair) is None
    both = World(slices=numa_lists([1, 2], [1, 2]), gates=LISTS_ON).allocate(pair)
    assert picked(both) == [[("gpu", "gpu-0"), ("gpu", "gpu-1")]]
    one = claim("c", request("gpu"), constraints=[{"matchAttribute": NUMA}])
    assert World(slices=numa_lists([1, 2]), gates=LISTS_OFF).allocate(one) is not None


def test_with_list_attributes_off_a_list_is_distinct_only_as_the_first_device():
    pair = claim("c", request("gpu", count=2), constraints=[{"distinctAttribute": NUMA}])
    assert World(slices=numa_lists([1, 2], [3, 4]), gates=LISTS_OFF).allocate(pair) is None
    assert World(slices=numa_lists([1, 2], [3, 4]), gates=LISTS_ON).allocate(pair) is not None


@pytest.mark.parametrize(
    ("constraint", "second", "message"),
    [
        (
            "matchAttribute",
            [1, 2],
            f"{NUMA}=[1, 2] is list-typed: with the DRAListTypeAttributes feature disabled a list matches "
            "no other device",
        ),
        (
            "distinctAttribute",
            [3, 4],
            f"{NUMA}=[3, 4] is list-typed: with the DRAListTypeAttributes feature disabled a list is "
            "distinct only as the first device",
        ),
    ],
)
def test_with_list_attributes_off_the_reason_names_the_gate(constraint, second, message):
    world = World(slices=numa_lists([1, 2], second), gates=LISTS_OFF)
    pair = claim("c", request("gpu", count=2), constraints=[{constraint: NUMA}])
    [f] = claim_funnels(world.inventory, world.selectors, NODE1, pair)
    examples = [(e.device.rpartition("/")[2], e.message) for e in f.stage("constraints").examples]
    assert examples == [("gpu-1", message)]
