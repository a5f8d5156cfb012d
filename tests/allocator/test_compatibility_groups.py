"""Device compatibility groups (KEP-5055, DRADeviceCompatibilityGroups), worked out by hand from the API's
field documentation: devices drawing on one counter set go together only while their
``compatibilityGroups`` share a name; a device without groups goes only with others without groups;
devices on different counter sets are never compared. With the gate off, upstream's allocators (stable
included) ignore slices that declare groups (their pool counts as incomplete)."""

from __future__ import annotations

from typing import Any

import pytest

from allocator.errors import InvalidInputError
from allocator.features import FeatureGates
from allocator.model import parse_resource_slice
from tests.allocator.builders import (
    DRIVER_A,
    NODE1,
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
ON = FeatureGates(DRADeviceCompatibilityGroups=True)


def part(name: str, counter_set: str, *groups: str) -> dict[str, Any]:
    consumption: dict[str, Any] = {"counterSet": counter_set, "counters": {"slots": {"value": "1"}}}
    if groups:
        consumption["compatibilityGroups"] = list(groups)
    return device(name) | {"consumesCounters": [consumption]}


def pool(*parts: dict[str, Any], sets: tuple[str, ...] = ("cs",)) -> list[dict[str, Any]]:
    counters = slice_("a-counters", DRIVER_A, POOL, [], count=2)
    del counters["spec"]["devices"]
    counters["spec"]["sharedCounters"] = [{"name": n, "counters": {"slots": {"value": "8"}}} for n in sets]
    return [counters, slice_("b-devices", DRIVER_A, POOL, list(parts), count=2)]


def test_devices_on_one_counter_set_need_a_common_group():
    # d0 {a}; d1 {b} shares nothing with {a}; d2 {a, b} shares "a".
    world = World(
        slices=pool(part("d0", "cs", "a"), part("d1", "cs", "b"), part("d2", "cs", "a", "b")), gates=ON
    )
    assert picked(world.allocate(claim("c", request("gpu", count=2)))) == [[("gpu", "d0"), ("gpu", "d2")]]
    # d0, d1, d2 together: d0 and d1 never share a group; d1 and d2 share "b" but then d0 is out.
    assert world.allocate(claim("c", request("gpu", count=3))) is None


def test_the_running_intersection_narrows():
    # d0 {a, b}, then d1 {b, c} leaves {b}: d2 {a} no longer fits, d3 {b} does.
    parts = (
        part("d0", "cs", "a", "b"),
        part("d1", "cs", "b", "c"),
        part("d2", "cs", "a"),
        part("d3", "cs", "b"),
    )
    world = World(slices=pool(*parts), gates=ON)
    assert picked(world.allocate(claim("c", request("gpu", count=3)))) == [
        [("gpu", "d0"), ("gpu", "d1"), ("gpu", "d3")]
    ]


def test_devices_without_groups_only_go_with_each_other():
    world = World(slices=pool(part("d0", "cs"), part("d1", "cs", "a"), part("d2", "cs")), gates=ON)
    assert picked(world.allocate(claim("c", request("gpu", count=2)))) == [[("gpu", "d0"), ("gpu", "d2")]]


def test_different_counter_sets_are_never_compared():
    world = World(slices=pool(part("d0", "cs0", "a"), part("d1", "cs1", "b"), sets=("cs0", "cs1")), gates=ON)
    assert picked(world.allocate(claim("c", request("gpu", count=2)))) == [[("gpu", "d0"), ("gpu", "d1")]]


def test_devices_allocated_elsewhere_seed_the_intersection():
    world = World(slices=pool(part("d0", "cs", "a"), part("d1", "cs", "b"), part("d2", "cs", "a")), gates=ON)
    world.allocated("default/other", result("x", "d0", pool=POOL))
    # d0 (allocated, {a}) is on the set: d1 {b} is incompatible with it, d2 {a} is not.
    assert picked(world.allocate(claim("c", request("gpu")))) == [[("gpu", "d2")]]


def test_gate_off_ignores_slices_with_groups_and_their_pool():
    world = World(slices=pool(part("d0", "cs", "a"), part("d1", "cs")))
    assert world.allocate(claim("c", request("gpu"))) is None
    assert world.inventory.ignored_slices(NODE1) == [
        "ResourceSlice b-devices uses consumesCounters[].compatibilityGroups, which is ignored while the "
        "DRADeviceCompatibilityGroups feature is disabled (its pool counts as incomplete)"
    ]


def test_stable_allocator_ignores_slices_with_groups_too():
    # Upstream's stable allocator never has the feature and filters such slices like the others.
    assert STABLE.stable_allocator
    world = World(slices=pool(part("d0", "cs", "a"), part("d1", "cs", "b")), gates=STABLE)
    assert world.allocate(claim("c", request("gpu"))) is None


@pytest.mark.parametrize(
    ("groups", "message"),
    [(["a", "b", "c"], "must have at most 2 items, got 3"), (["a", "a"], "must not contain duplicates")],
)
def test_invalid_groups_name_the_field(groups: list[str], message: str):
    body = pool(part("d0", "cs", *groups))[1]
    with pytest.raises(InvalidInputError, match=rf"consumesCounters\[0\]\.compatibilityGroups: {message}"):
        parse_resource_slice(body)
