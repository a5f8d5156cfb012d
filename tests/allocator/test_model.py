"""Parsing API objects into allocator models: field-path errors and reuse across slice updates."""

from __future__ import annotations

import copy
from typing import Any

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


def test_a_slice_republished_with_the_same_devices_keeps_them_all():
    old = parse_resource_slice(slice_("s1", DRIVER_A, "node-1", [device("gpu-0"), device("gpu-1")]))
    update = slice_("s1", DRIVER_A, "node-1", [device("gpu-0"), device("gpu-1")])
    update["metadata"]["resourceVersion"] = "2"
    assert parse_resource_slice(update, old).devices is old.devices


def test_a_value_republished_with_another_type_is_parsed_again():
    # 1 == True in Python: the republished device is compared as published, and the bool is refused.
    old = parse_resource_slice(slice_("s1", DRIVER_A, "node-1", [device("gpu-0", numa=1)]))
    update = slice_("s1", DRIVER_A, "node-1", [device("gpu-0", numa=1)])
    update["spec"]["devices"][0]["attributes"]["numa"] = {"int": True}
    with pytest.raises(InvalidInputError, match=r"attributes\.numa\.int: must be of type int"):
        parse_resource_slice(update, old)


def test_a_device_beyond_what_json_holds_is_reused_too():
    big = {**device("gpu-0"), "capacity": {"memory": {"value": 2**70}}}  # an integer beyond 64 bits
    old = parse_resource_slice(slice_("s1", DRIVER_A, "node-1", [big]))
    new = parse_resource_slice(slice_("s1", DRIVER_A, "node-1", [copy.deepcopy(big)]), old)
    assert new.devices[0] is old.devices[0]


def test_alike_devices_hold_equal_values_once():
    a, b = (
        # Each value built apart, as a JSON decoder does.
        parse_resource_slice(slice_(f"s{i}", DRIVER_A, f"node-{i}", [device("gpu-0", model="H" + str(100))]))
        for i in (1, 2)
    )
    first, second = a.devices[0], b.devices[0]
    assert first.cel.attributes[DRIVER_A] is second.cel.attributes[DRIVER_A]
    assert first.attribute(f"{DRIVER_A}/model") is second.attribute(f"{DRIVER_A}/model")


def test_alike_devices_of_other_nodes_share_one_description_and_any_other_field_sets_one_apart():
    def parsed(node: str, **fields: Any) -> Any:
        published = {**device("gpu-0", uuid=f"GPU-{node}", model="H100"), **fields}
        return parse_resource_slice(slice_(f"s-{node}", DRIVER_A, node, [published], node=node)).devices[0]

    first = parsed("node-1")
    # Another pool, node and uuid: the attributes are left out, so the description is one object.
    assert parsed("node-2").description is first.description
    others = [
        parsed("node-3", name="gpu-1"),
        parsed("node-4", capacity={"memory": {"value": "40Gi"}}),
        parsed("node-5", taints=[{"key": "xid", "value": "79", "effect": "NoSchedule"}]),
        parsed("node-6", allowMultipleAllocations=True),
        parsed("node-7", bindingConditions=["attached"], bindingFailureConditions=["failed"]),
    ]
    assert len({first.description, *(d.description for d in others)}) == 1 + len(others)
    # Per-device node selection: each device names its own node, which is not part of its description.
    own_node = [parsed(node, nodeName=node) for node in ("node-8", "node-9")]
    assert own_node[0].description is own_node[1].description
    assert own_node[0].description != first.description


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


@pytest.mark.parametrize(
    ("attribute", "message"),
    [
        ({"int": 2**63}, r"attributes\.x\.int: must fit in a signed 64-bit integer"),
        ({"version": "not-semver"}, r"attributes\.x\.version: must be a semantic version"),
        ({"version": "1.2"}, r"attributes\.x\.version: must be a semantic version"),
    ],
)
def test_attribute_values_are_validated_as_the_api_server_does(attribute, message):
    obj = slice_("s1", DRIVER_A, "node-1", [device("gpu-0")])
    obj["spec"]["devices"][0]["attributes"] = {"x": attribute}
    with pytest.raises(InvalidInputError, match=message):
        parse_resource_slice(obj)


def test_negative_capacity_is_rejected():
    obj = slice_("s1", DRIVER_A, "node-1", [device("gpu-0")])
    obj["spec"]["devices"][0]["capacity"] = {"memory": {"value": "-1"}}
    with pytest.raises(InvalidInputError, match=r"capacity\.memory\.value: must not be negative, got -1"):
        parse_resource_slice(obj)


def test_alike_devices_share_one_parsed_capacity_map():
    devices = [device(f"gpu-{i}", n=i) for i in range(3)]
    for d, memory in zip(devices, ["80Gi", "80Gi", "40Gi"], strict=True):
        d["capacity"] = {"memory": {"value": memory}}
    parsed = parse_resource_slice(slice_("s1", DRIVER_A, "node-1", devices)).devices
    assert parsed[0].capacity is parsed[1].capacity and parsed[0].cel.capacity is parsed[1].cel.capacity
    assert parsed[2].capacity is not parsed[0].capacity
    assert [d.capacity["memory"].value.text for d in parsed] == ["80Gi", "80Gi", "40Gi"]
    assert parsed[2].cel.capacity == {DRIVER_A: {"memory": parsed[2].capacity["memory"].value}}
    # A bad map is still refused on every device publishing it, naming the field.
    bad = slice_("s2", DRIVER_A, "node-1", [device("gpu-0"), device("gpu-1")])
    for d in bad["spec"]["devices"]:
        d["capacity"] = {"memory": {"value": "-1"}}
    for _ in range(2):
        with pytest.raises(
            InvalidInputError, match=r"devices\[0\]\.capacity\.memory\.value: must not be negative"
        ):
            parse_resource_slice(bad)


def _claim(requests, constraints=None):
    devices = {"requests": requests, **({"constraints": constraints} if constraints else {})}
    return {"metadata": {"name": "c", "namespace": "ns"}, "spec": {"devices": devices}}


def test_claim_with_more_than_32_requests_is_rejected():
    requests = [{"name": f"r{i}", "exactly": {"deviceClassName": "x"}} for i in range(33)]
    with pytest.raises(InvalidInputError, match=r"spec\.devices\.requests: must have at most 32 items"):
        parse_claim(_claim(requests))


def test_constraint_must_name_existing_requests():
    requests = [{"name": "gpu", "firstAvailable": [{"name": "big", "deviceClassName": "x"}]}]
    parse_claim(_claim(requests, [{"requests": ["gpu", "gpu/big"], "matchAttribute": "a.b/c"}]))
    with pytest.raises(
        InvalidInputError, match=r"constraints\[0\]\.requests\[0\]: no request or subrequest named nic"
    ):
        parse_claim(_claim(requests, [{"requests": ["nic"], "matchAttribute": "a.b/c"}]))
