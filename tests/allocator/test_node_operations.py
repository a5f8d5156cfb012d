"""Optional node operations (KEP-5945, gate DRAOptionalNodeOperations, alpha, off).

Upstream's allocator (allocateDevice, experimental) refuses a device whose slice sets
``spec.skipNodeOperations`` while the gate is off, and with it on unless the node lists
``DRAOptionalNodeOperations`` in ``status.declaredFeatures``; an allocated device carries a copy of the
slice's list in its result.
"""

from __future__ import annotations

import pytest

from allocator.counting import Verdict, verdict
from allocator.errors import InvalidInputError
from allocator.features import FeatureGates, parse_feature_gates
from allocator.funnel import request_funnel
from allocator.model import parse_resource_slice
from allocator.nodeselector import Node
from app.state.cluster import node_from_api
from tests.allocator.builders import DRIVER_A, NODE1, World, claim, device, picked, request, slice_

DECLARING = Node("node-1", NODE1.labels, frozenset({"DRAOptionalNodeOperations"}))
ON = FeatureGates(DRAOptionalNodeOperations=True)


def world(gates: FeatureGates) -> World:
    return World(
        slices=[
            slice_("skip", DRIVER_A, "a-skip", [device("skip-0")], skipNodeOperations=["*"]),
            slice_("plain", DRIVER_A, "b-plain", [device("plain-0")]),
        ],
        gates=gates,
    )


def test_gate_on_and_declared_copies_the_list_into_the_result():
    results = world(ON).allocate(claim("c", request("d", count=2)), node=DECLARING)
    assert results is not None
    entries = {r["device"]: r for r in results[0]["devices"]["results"]}
    assert entries["skip-0"]["skipNodeOperations"] == ["*"]
    assert "skipNodeOperations" not in entries["plain-0"]


def test_gate_on_without_the_node_declaring_it_refuses_the_device():
    assert world(ON).allocate(claim("c", request("d", count=2)), node=NODE1) is None
    assert picked(world(ON).allocate(claim("c", request("d")), node=NODE1)) == [[("d", "plain-0")]]


@pytest.mark.parametrize("node", [NODE1, DECLARING])
def test_gate_off_refuses_the_device(node):
    gates = FeatureGates()
    assert gates.DRAOptionalNodeOperations is False
    assert world(gates).allocate(claim("c", request("d", count=2)), node=node) is None
    assert picked(world(gates).allocate(claim("c", request("d")), node=node)) == [[("d", "plain-0")]]


def test_the_incubating_allocator_ignores_the_field():
    # No gate of upstream's experimental allocator on: the incubating one runs, which never reads
    # skipNodeOperations: the device is allocated and its result does not carry the list.
    incubating = FeatureGates(DRADerivedAttributes=False)
    assert not incubating.experimental_allocator and not incubating.stable_allocator
    results = world(incubating).allocate(claim("c", request("d")), node=NODE1)
    assert results is not None
    assert results[0]["devices"]["results"] == [
        {"request": "d", "driver": DRIVER_A, "pool": "a-skip", "device": "skip-0"}
    ]


def test_all_mode_fails_when_a_matching_device_is_refused():
    # allocationMode All needs every matching device; a refused one fails the request, as upstream.
    assert world(FeatureGates()).allocate(claim("c", request("d", mode="All")), node=NODE1) is None


@pytest.mark.parametrize(
    ("gates", "message"),
    [
        (
            FeatureGates(),
            "slice skip skips node operations and the DRAOptionalNodeOperations feature is disabled",
        ),
        (ON, "slice skip skips node operations and node node-1 does not declare DRAOptionalNodeOperations"),
    ],
)
def test_counts_and_the_funnel_refuse_such_devices(gates, message):
    only = World(
        slices=[slice_("skip", DRIVER_A, "a-skip", [device("skip-0")], skipNodeOperations=["*"])], gates=gates
    )
    c = claim("c", request("d"))
    found = verdict(only.inventory, only.selectors, NODE1, [c])
    assert found is not None and not found.fits
    stage = request_funnel(only.inventory, only.selectors, NODE1, c, c.requests[0].alternatives[0]).stages[1]
    assert (stage.name, stage.count) == ("class_selectors", 0)
    assert [(r.rule, r.message) for r in stage.examples] == [("node-operations", message)]
    assert verdict(only.inventory, only.selectors, DECLARING, [c]) == (
        Verdict(True) if gates is ON else found
    )


def test_gate_parses_and_bad_field_is_named():
    assert parse_feature_gates("DRAOptionalNodeOperations=true").DRAOptionalNodeOperations is True
    bad = slice_("s", DRIVER_A, "p", [device("d")], skipNodeOperations="*")
    with pytest.raises(InvalidInputError, match=r"spec\.skipNodeOperations: must be a list"):
        parse_resource_slice(bad)


def test_node_declared_features_come_from_the_node_status():
    node = node_from_api(
        {
            "metadata": {"name": "n", "labels": {"a": "b"}},
            "status": {"declaredFeatures": ["DRAOptionalNodeOperations"]},
        }
    )
    assert node.declared_features == frozenset({"DRAOptionalNodeOperations"})
    assert node_from_api({"metadata": {"name": "n"}}).declared_features == frozenset()
