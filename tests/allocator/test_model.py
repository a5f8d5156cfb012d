"""Parsing API objects into allocator models: field-path errors and reuse across slice updates."""

from __future__ import annotations

import copy

import pytest

from allocator.errors import InvalidInputError
from allocator.model import parse_claim, parse_resource_slice
from tests.allocator.builders import DRIVER_A, device, slice_


def test_unchanged_devices_are_reused_by_a_slice_update_and_changed_ones_reparsed():
    old = parse_resource_slice(
        slice_("s1", DRIVER_A, "node-1", [device("gpu-0", numa=0), device("gpu-1", numa=1)])
    )
    update = slice_("s1", DRIVER_A, "node-1", [device("gpu-0", numa=0), device("gpu-1", numa=0)])
    new = parse_resource_slice(copy.deepcopy(update), old)
    assert new.devices[0] is old.devices[0]
    assert new.devices[1] is not old.devices[1]
    assert new.devices[1].attribute(f"{DRIVER_A}/numa") == 0


def test_devices_of_another_pool_are_not_reused():
    old = parse_resource_slice(slice_("s1", DRIVER_A, "pool-a", [device("gpu-0")]))
    new = parse_resource_slice(slice_("s1", DRIVER_A, "pool-b", [device("gpu-0")]), old)
    assert new.devices[0] is not old.devices[0]
    assert new.devices[0].id == (DRIVER_A, "pool-b", "gpu-0")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda s: s["spec"]["devices"][1].update(attributes={"x": {"int": "7"}}),
            r"ResourceSlice s1: spec\.devices\[1\]\.attributes\.x\.int: must be of type int",
        ),
        (
            lambda s: s["spec"]["pool"].update(generation="1"),
            r"ResourceSlice s1: spec\.pool\.generation: must be an integer, got str",
        ),
        (
            lambda s: s["spec"]["devices"][0].update(capacity={"memory": {"value": "lots"}}),
            r"spec\.devices\[0\]\.capacity\.memory\.value: invalid quantity 'lots'",
        ),
    ],
)
def test_slice_errors_name_the_field(mutate, message):
    obj = slice_("s1", DRIVER_A, "node-1", [device("gpu-0"), device("gpu-1")])
    mutate(obj)
    with pytest.raises(InvalidInputError, match=message):
        parse_resource_slice(obj)


def test_claim_errors_name_the_field():
    obj = {
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "x", "count": "2"}}]}
        },
    }
    with pytest.raises(
        InvalidInputError,
        match=r"ResourceClaim ns/c: spec\.devices\.requests\[0\]\.exactly\.count: "
        "must be an integer, got str",
    ):
        parse_claim(obj)
