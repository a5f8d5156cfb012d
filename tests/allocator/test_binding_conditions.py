"""Binding conditions (KEP-5007, DRADeviceBindingConditions with DRAResourceClaimDeviceStatus), §13-§15.

Hand-worked rules: pools holding a device with ``bindingConditions`` are searched after every other pool
(whole pool, slice order inside unchanged); the result entry copies ``bindingConditions`` and
``bindingFailureConditions``; ``bindsToNode`` pins the allocation to the node even for a slice usable from
every node; with the gates off such devices are not selectable. kube-scheduler enables the devices only
when both DRADeviceBindingConditions and DRAResourceClaimDeviceStatus are on.
"""

from __future__ import annotations

from typing import Any

import pytest

from allocator.features import FeatureGates
from app.scheduling.binder import claim_after_bind
from tests.allocator.builders import (
    DRIVER_A,
    DRIVER_B,
    NODE2,
    PINNED_NODE1,
    World,
    claim,
    device,
    request,
    result,
    slice_,
)


def attached(name: str, *, binds: bool = False, failure: list[str] | None = None) -> dict[str, Any]:
    d = device(name)
    d["bindingConditions"] = ["dra.example.com/attached"]
    if failure:
        d["bindingFailureConditions"] = failure
    if binds:
        d["bindsToNode"] = True
    return d


def picked(allocations):
    return [[(r["request"], r["pool"], r["device"]) for r in a["devices"]["results"]] for a in allocations]


def fabric_world(gates: FeatureGates | None = None) -> World:
    return World(
        slices=[
            # a-pool sorts first by name but holds a device with binding conditions: it goes last, with
            # its plain device too.
            slice_("s-a", DRIVER_A, "a-pool", [device("a-plain"), attached("a-attached")]),
            slice_("s-b", DRIVER_A, "b-pool", [device("b-plain")]),
            slice_("s-c", DRIVER_A, "c-pool", [device("c-plain")]),
        ],
        gates=gates,
    )


def test_pools_with_binding_conditions_are_searched_last():
    world = fabric_world()
    assert picked(world.allocate(claim("c", request("d", count=4)))) == [
        [
            ("d", "b-pool", "b-plain"),
            ("d", "c-pool", "c-plain"),
            ("d", "a-pool", "a-plain"),
            ("d", "a-pool", "a-attached"),
        ]
    ]
    assert picked(world.allocate(claim("c", request("d")))) == [[("d", "b-pool", "b-plain")]]


def test_conditions_are_copied_into_the_result():
    failure = ["dra.example.com/attach-failed"]
    world = World(slices=[slice_("s", DRIVER_A, "p", [attached("f-0", failure=failure)])])
    assert world.allocate(claim("c", request("d"))) == [
        {
            "devices": {
                "results": [
                    result(
                        "d",
                        "f-0",
                        pool="p",
                        bindingConditions=["dra.example.com/attached"],
                        bindingFailureConditions=failure,
                    )
                ]
            },
            "nodeSelector": PINNED_NODE1,
        }
    ]


def test_binds_to_node_pins_a_network_attached_device():
    plain = World(slices=[slice_("s", DRIVER_A, "fabric", [attached("f-0")], node=None, allNodes=True)])
    # allNodes slice: usable everywhere, no nodeSelector.
    assert plain.allocate(claim("c", request("d"))) == [
        {
            "devices": {
                "results": [result("d", "f-0", pool="fabric", bindingConditions=["dra.example.com/attached"])]
            }
        }
    ]
    pinned = World(
        slices=[slice_("s", DRIVER_A, "fabric", [attached("f-0", binds=True)], node=None, allNodes=True)]
    )
    alloc = pinned.allocate(claim("c", request("d")), node=NODE2)
    assert alloc[0]["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-2"]}]}
        ]
    }


@pytest.mark.parametrize(
    "gates",
    [
        FeatureGates(DRADeviceBindingConditions=False),
        # kube-scheduler's allocator feature is DRADeviceBindingConditions && DRAResourceClaimDeviceStatus.
        FeatureGates(DRAResourceClaimDeviceStatus=False),
    ],
)
def test_gates_off_make_devices_with_conditions_unselectable(gates):
    world = fabric_world(gates)
    # The three plain devices are still allocatable (a-pool still last), a-attached is not.
    assert picked(world.allocate(claim("c", request("d", count=3)))) == [
        [("d", "b-pool", "b-plain"), ("d", "c-pool", "c-plain"), ("d", "a-pool", "a-plain")]
    ]
    assert world.allocate(claim("c", request("d", count=4))) is None
    only = World(slices=[slice_("s", DRIVER_B, "p", [attached("f-0")])], gates=gates)
    assert only.allocate(claim("c", request("d", class_name="class-b"))) is None


def test_allocation_timestamp_is_set_on_every_bound_claim_with_both_gates_on():
    # Upstream bindClaim: with DRADeviceBindingConditions and DRAResourceClaimDeviceStatus on, every claim it
    # binds gets allocationTimestamp when it has none, binding conditions or not; one already set is kept.
    pod = {"metadata": {"name": "p", "uid": "u"}}
    base = {"metadata": {"name": "c"}, "spec": {}}
    with_conditions = {"devices": {"results": [result("d", "f-0", bindingConditions=["x"])]}}
    without = {"devices": {"results": [result("d", "gpu-0")]}}
    on = FeatureGates()
    assert "allocationTimestamp" in claim_after_bind(base, with_conditions, pod, on)["status"]["allocation"]
    assert "allocationTimestamp" in claim_after_bind(base, without, pod, on)["status"]["allocation"]
    shared = {**base, "status": {"allocation": without, "reservedFor": [{"uid": "other"}]}}
    assert "allocationTimestamp" in claim_after_bind(shared, None, pod, on)["status"]["allocation"]
    stamped = {**base, "status": {"allocation": {**without, "allocationTimestamp": "2026-01-02T03:04:05Z"}}}
    assert claim_after_bind(stamped, None, pod, on)["status"]["allocation"]["allocationTimestamp"] == (
        "2026-01-02T03:04:05Z"
    )
    for off in (
        FeatureGates(DRADeviceBindingConditions=False),
        FeatureGates(DRAResourceClaimDeviceStatus=False),
    ):
        assert (
            "allocationTimestamp"
            not in claim_after_bind(base, with_conditions, pod, off)["status"]["allocation"]
        )
        assert "allocationTimestamp" not in claim_after_bind(shared, None, pod, off)["status"]["allocation"]
