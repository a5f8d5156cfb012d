"""The device funnel: every rejection rule has its own stage, rule name and message; counts per stage."""

from __future__ import annotations

import pytest

from allocator.classusage import class_usage
from allocator.derived import ClusterAttribute, ClusterDerivation
from allocator.diagnose import diagnose
from allocator.features import FeatureGates
from allocator.funnel import STAGES, claim_funnels, request_funnel
from allocator.model import Claim
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


def gpus(n: int = 4, **spec):
    return slice_("s1", DRIVER_A, "node-1", [device(f"gpu-{i}", numa=i // 2) for i in range(n)], **spec)


def funnel(world: World, c: Claim, index: int = 0):
    """Full funnels of ``c`` on node-1; the one of request alternative ``index``."""
    return claim_funnels(world.inventory, world.selectors, NODE1, c)[index]


def only_rejection(f, stage: str):
    """The stage's single example, after checking every other stage removed nothing."""
    for s in f.stages:
        if s.name != stage:
            assert s.rejected == 0, (s.name, s.examples)
    found = f.stage(stage)
    assert found.rejected == 1
    return found.examples[0]


def test_stages_in_order_and_all_pass():
    world = World(slices=[gpus()])
    f = funnel(world, claim("c", request("gpu", count=2)))
    assert [s.name for s in f.stages] == list(STAGES)
    assert [s.count for s in f.stages] == [4] * 7
    assert (f.needed, f.usable, f.short, f.device_class, f.request) == (2, 4, "", CLASS_A, "gpu")


def test_incomplete_pool_is_rejected_in_pools():
    world = World(slices=[gpus(1, count=2)])  # resourceSliceCount 2, one slice published
    r = only_rejection(funnel(world, claim("c", request("gpu"))), "in_pools")
    assert r.rule == "pool-incomplete"
    assert r.message == "pool node-1 is incomplete"


def test_invalid_pool_is_rejected_in_pools():
    world = World(slices=[slice_("s1", DRIVER_A, "node-1", [device("gpu-0"), device("gpu-0")])])
    f = funnel(world, claim("c", request("gpu")))
    assert f.stage("in_pools").count == 0
    assert {e.rule for e in f.stage("in_pools").examples} == {"pool-invalid"}
    assert f.stage("in_pools").examples[0].message == "pool node-1 is invalid: duplicate device name gpu-0"


def test_class_selector_rejection_names_class_and_selector():
    classes = [
        device_class(CLASS_A, f'device.driver == "{DRIVER_A}"', f"device.attributes['{DRIVER_A}'].numa == 1")
    ]
    world = World(slices=[gpus()], classes=classes)
    f = funnel(world, claim("c", request("gpu")))
    assert f.stage("class_selectors").count == 2
    example = f.stage("class_selectors").examples[0]
    assert (example.device, example.rule) == (f"{DRIVER_A}/node-1/gpu-0", "class-selector")
    assert (
        example.message == f"class class-a: selector #1 is false: device.attributes['{DRIVER_A}'].numa == 1"
    )


def test_missing_class_is_its_own_rule():
    world = World(slices=[gpus(1)])
    r = only_rejection(funnel(world, claim("c", request("gpu", class_name="nope"))), "class_selectors")
    assert (r.rule, r.message) == ("class-missing", "DeviceClass nope not found")


def test_binding_conditions_with_the_gate_off():
    dev = {**device("gpu-0"), "bindingConditions": ["Ready"], "bindingFailureConditions": ["Failed"]}
    world = World(
        slices=[slice_("s1", DRIVER_A, "node-1", [dev])], gates=FeatureGates(DRADeviceBindingConditions=False)
    )
    r = only_rejection(funnel(world, claim("c", request("gpu"))), "class_selectors")
    assert r.rule == "binding-conditions"
    assert "DRADeviceBindingConditions" in r.message


def test_cel_runtime_error_is_reported_not_raised():
    world = World(slices=[gpus(1)])
    c = claim(
        "c", request("gpu", selectors=[{"cel": {"expression": f"device.attributes['{DRIVER_A}'].nope"}}])
    )
    r = only_rejection(funnel(world, c), "request_selectors")
    assert r.rule == "cel-error"
    assert r.message.startswith(
        f"claim default/c: selector #0 on device {DRIVER_A}/node-1/gpu-0: CEL runtime error"
    )


def test_request_selector_rejection():
    world = World(slices=[gpus()])
    c = claim(
        "c", request("gpu", selectors=[{"cel": {"expression": f"device.attributes['{DRIVER_A}'].numa == 1"}}])
    )
    f = funnel(world, c)
    assert f.stage("request_selectors").count == 2
    example = f.stage("request_selectors").examples[0]
    assert example.rule == "request-selector"
    assert (
        example.message == f"claim default/c: selector #0 is false: device.attributes['{DRIVER_A}'].numa == 1"
    )


def test_own_taint_names_the_slice_and_rule_taint_names_the_rule():
    tainted = {**device("gpu-0"), "taints": [{"key": "xid", "value": "79", "effect": "NoSchedule"}]}
    rule = {
        "metadata": {"name": "unhealthy"},
        "spec": {"deviceSelector": {"device": "gpu-1"}, "taint": {"key": "health", "effect": "NoExecute"}},
    }
    world = World(
        slices=[slice_("s1", DRIVER_A, "node-1", [tainted, device("gpu-1"), device("gpu-2")])], rules=[rule]
    )
    f = funnel(world, claim("c", request("gpu")))
    stage = f.stage("tolerations")
    assert (stage.count, stage.rejected, dict(stage.rules)) == (1, 2, {"taint": 2})
    assert [e.message for e in stage.examples] == [
        "taint xid=79:NoSchedule from ResourceSlice s1 is not tolerated",
        "taint health:NoExecute from DeviceTaintRule unhealthy is not tolerated",
    ]
    tolerating = claim("c", request("gpu", tolerations=[{"key": "xid", "operator": "Exists"}]))
    assert funnel(world, tolerating).stage("tolerations").count == 2


def test_device_in_use_names_its_holder():
    world = World(slices=[gpus(2)]).allocated("default/other", result("x", "gpu-0"))
    r = only_rejection(funnel(world, claim("c", request("gpu"))), "not_in_use")
    assert (r.device, r.rule, r.message) == (
        f"{DRIVER_A}/node-1/gpu-0",
        "in-use",
        "allocated to default/other",
    )


def test_admin_access_ignores_use():
    world = World(slices=[gpus(2)]).allocated("default/other", result("x", "gpu-0"))
    f = funnel(world, claim("c", request("gpu", adminAccess=True)))
    assert f.stage("not_in_use").count == 2


def _partitioned(gates: FeatureGates | None = None) -> World:
    counters = {"name": "gpu-0-counters", "counters": {"memory": {"value": "40Gi"}}}
    parts = [
        {
            "name": f"gpu-0-part-{i}",
            "consumesCounters": [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "20Gi"}}}],
        }
        for i in range(3)
    ]
    return World(slices=[slice_("s1", DRIVER_A, "node-1", parts, sharedCounters=[counters])], gates=gates)


def test_counters_exhausted_by_allocated_partitions():
    world = _partitioned().allocated("default/a", result("x", "gpu-0-part-0"), result("x", "gpu-0-part-1"))
    f = funnel(world, claim("c", request("part")))
    stage = f.stage("counters_capacity")
    assert (f.stage("not_in_use").count, stage.count) == (1, 0)
    assert stage.examples[0].rule == "counters"
    assert stage.examples[0].message == "counter set gpu-0-counters: memory needs 20Gi, 0 left in pool node-1"
    assert f.short == "counters_capacity"


def test_partitionable_devices_with_the_gate_off():
    # Without the gate, counter references are not checked, so the pool is valid; the device is not usable.
    part = {"name": "p", "consumesCounters": [{"counterSet": "set", "counters": {"m": {"value": "1"}}}]}
    world = World(
        slices=[slice_("s1", DRIVER_A, "node-1", [part])], gates=FeatureGates(DRAPartitionableDevices=False)
    )
    r = only_rejection(funnel(world, claim("c", request("part"))), "counters_capacity")
    assert (r.rule, r.message) == (
        "partitionable-disabled",
        "device consumes counters and the DRAPartitionableDevices feature is disabled",
    )


def test_capacity_request_larger_than_the_device():
    dev = {"name": "nic-0", "capacity": {"bandwidth": {"value": "10G"}}}
    world = World(slices=[slice_("s1", DRIVER_A, "node-1", [dev])])
    c = claim("c", request("nic", capacity={"requests": {"bandwidth": "20G"}}))
    r = only_rejection(funnel(world, c), "counters_capacity")
    assert r.rule == "capacity"
    assert (
        r.message == "requested capacity bandwidth=20G does not fit the device's capacity or request policy"
    )
    missing = claim("c", request("nic", capacity={"requests": {"other": "1"}}))
    assert (
        only_rejection(funnel(world, missing), "counters_capacity").message == "device has no capacity other"
    )


def test_shared_device_without_enough_capacity_left():
    dev = {"name": "nic-0", "allowMultipleAllocations": True, "capacity": {"bandwidth": {"value": "10G"}}}
    world = World(slices=[slice_("s1", DRIVER_A, "node-1", [dev])]).allocated(
        "default/a", result("x", "nic-0", shareID="s-1", consumedCapacity={"bandwidth": "8G"})
    )
    c = claim("c", request("nic", capacity={"requests": {"bandwidth": "4G"}}))
    r = only_rejection(funnel(world, c), "counters_capacity")
    assert r.message == "capacity bandwidth: needs 4G, 2G of 10G left"


def test_match_attribute_missing_and_too_rare():
    devices = [device("gpu-0", numa=0), device("gpu-1", numa=1), device("gpu-2", numa=1), device("gpu-3")]
    world = World(slices=[slice_("s1", DRIVER_A, "node-1", devices)])
    c = claim("c", request("gpu", count=2), constraints=[{"matchAttribute": f"{DRIVER_A}/numa"}])
    f = funnel(world, c)
    stage = f.stage("constraints")
    assert (stage.count, stage.rejected) == (2, 2)
    assert [(e.device.rpartition("/")[2], e.rule, e.message) for e in stage.examples] == [
        ("gpu-3", "constraint #0 matchAttribute", f"device has no attribute {DRIVER_A}/numa"),
        (
            "gpu-0",
            "constraint #0 matchAttribute",
            f"only 1 usable device(s) have {DRIVER_A}/numa=0, 2 needed",
        ),
    ]
    assert f.short == ""
    three = claim("c", request("gpu", count=3), constraints=[{"matchAttribute": f"{DRIVER_A}/numa"}])
    assert funnel(world, three).short == "constraints"


def test_match_attribute_across_requests_needs_a_value_both_have():
    world = World(
        slices=[
            slice_("a", DRIVER_A, "node-1", [device("gpu-0", root="r0"), device("gpu-1", root="r1")]),
            slice_("b", "driver-b.example.com", "node-1", [device("nic-0", root="r1")]),
        ]
    )
    c = claim(
        "c",
        request("gpu"),
        request("nic", class_name="class-b"),
        constraints=[{"matchAttribute": "root"}],  # bare name: not qualified, no device has it
    )
    assert funnel(world, c).stage("constraints").count == 0
    qualified = claim(
        "c",
        request("gpu", selectors=[]),
        request("nic", class_name="class-b"),
        constraints=[{"requests": ["gpu"], "matchAttribute": f"{DRIVER_A}/root"}],
    )
    assert funnel(world, qualified).stage("constraints").count == 1  # one device per root value
    # Across drivers the attribute must be in a shared domain: use a device attribute both carry.
    both = World(
        slices=[
            slice_("a", DRIVER_A, "node-1", [device("gpu-0", x__root="r0"), device("gpu-1", x__root="r1")]),
            slice_("b", "driver-b.example.com", "node-1", [device("nic-0", x__root="r1")]),
        ]
    )
    c = claim(
        "c", request("gpu"), request("nic", class_name="class-b"), constraints=[{"matchAttribute": "x/root"}]
    )
    gpu = funnel(both, c, 0)
    assert gpu.stage("constraints").count == 1
    assert [e.device.rpartition("/")[2] for e in gpu.stage("constraints").examples] == ["gpu-0"]
    assert (
        "is not available to every request the constraint covers"
        in gpu.stage("constraints").examples[0].message
    )


def test_distinct_attribute_keeps_one_device_per_value():
    devices = [device("nic-0", port=1), device("nic-1", port=1), device("nic-2", port=2)]
    world = World(slices=[slice_("s1", DRIVER_A, "node-1", devices)])
    c = claim("c", request("nic", count=2), constraints=[{"distinctAttribute": f"{DRIVER_A}/port"}])
    stage = funnel(world, c).stage("constraints")
    assert (stage.count, stage.rejected) == (2, 1)
    assert stage.examples[0].rule == "constraint #0 distinctAttribute"
    assert stage.examples[0].message == f"attribute value 1 already used by {DRIVER_A}/node-1/nic-0"


def test_first_available_alternatives_each_get_a_funnel():
    world = World(slices=[gpus()])
    c = claim(
        "c",
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "big", "deviceClassName": CLASS_A, "count": 8},
                {"name": "small", "deviceClassName": CLASS_A, "count": 2},
            ],
        },
    )
    funnels = claim_funnels(world.inventory, world.selectors, NODE1, c)
    assert [(f.request, f.needed, f.short) for f in funnels] == [
        ("gpu/big", 8, "in_pools"),
        ("gpu/small", 2, ""),
    ]


def test_request_funnel_can_stop_early_for_diagnose():
    world = World(slices=[gpus()])
    c = claim("c", request("gpu"))
    f = request_funnel(
        world.inventory, world.selectors, NODE1, c, c.requests[0].alternatives[0], last="not_in_use"
    )
    assert [s.name for s in f.stages] == list(STAGES[:5])


# --- diagnose uses the funnel -----------------------------------------------------------------------------


def test_diagnose_names_the_request_short_at_constraints():
    devices = [device("gpu-0", numa=0), device("gpu-1", numa=1)]
    world = World(slices=[slice_("s1", DRIVER_A, "node-1", devices)])
    c = claim("c", request("gpu", count=2), constraints=[{"matchAttribute": f"{DRIVER_A}/numa"}])
    assert world.allocate(c) is None
    no_fit = diagnose(world.inventory, world.selectors, NODE1, [c])
    assert not no_fit.unresolvable
    assert no_fit.reason.startswith(
        "claim default/c, request gpu: 1 device(s) left after constraints, 2 needed ("
    )


def test_diagnose_names_the_request_short_at_counters():
    world = _partitioned().allocated("default/a", result("x", "gpu-0-part-0"), result("x", "gpu-0-part-1"))
    c = claim("c", request("part"))
    assert world.allocate(c) is None
    assert diagnose(world.inventory, world.selectors, NODE1, [c]).reason == (
        "claim default/c, request part: 0 device(s) left after counters / capacity, 1 needed "
        f"({DRIVER_A}/node-1/gpu-0-part-2: counter set gpu-0-counters: memory needs 20Gi, "
        "0 left in pool node-1)"
    )


@pytest.mark.parametrize(
    ("allocated", "reason", "unresolvable"),
    [
        (
            (),
            "claim default/c, request gpu: node has 4 device(s) of class class-a matching the selectors, "
            "5 needed",
            True,
        ),
        (
            ("gpu-0",),
            "claim default/c, request gpu: 3 of 4 matching device(s) usable (1 in use, 0 tainted), 4 needed",
            False,
        ),
    ],
)
def test_diagnose_keeps_its_one_line_reasons(allocated, reason, unresolvable):
    world = World(slices=[gpus()])
    if allocated:
        world.allocated("default/other", *(result("x", d) for d in allocated))
    count = 5 if not allocated else 4
    no_fit = diagnose(world.inventory, world.selectors, NODE1, [claim("c", request("gpu", count=count))])
    assert (no_fit.reason, no_fit.unresolvable) == (reason, unresolvable)


# --- utilisation ------------------------------------------------------------------------------------------


def test_class_usage_counts_use_taints_and_whole_groups():
    tainted = {**device("gpu-3", numa=1), "taints": [{"key": "k", "effect": "NoSchedule"}]}
    devices = [device("gpu-0", numa=0), device("gpu-1", numa=0), device("gpu-2", numa=1), tainted]
    world = World(slices=[slice_("s1", DRIVER_A, "node-1", devices)]).allocated(
        "default/o", result("x", "gpu-2")
    )
    groups = {f"{DRIVER_A}/node-1/gpu-{i}": ("numa", i // 2) for i in range(4)}
    [usage] = class_usage(world.inventory, world.selectors, NODE1, groups)
    assert (usage.device_class, usage.total, usage.in_use, usage.free, usage.tainted) == (CLASS_A, 4, 1, 3, 1)
    assert (usage.groups_total, usage.groups_free, usage.largest_free_group) == (2, 1, 2)


def test_match_attribute_on_a_derived_attribute():
    derived = [{"name": "numa", "expression": f"device.attributes['{DRIVER_A}'].numa"}]
    c = claim(
        "c", request("gpu", count=2, derivedAttributes=derived), constraints=[{"matchAttribute": "numa"}]
    )
    world = World(slices=[gpus()])
    stage = funnel(world, c).stage("constraints")
    assert (stage.count, stage.rejected) == (2, 0)
    assert world.allocate(c) is not None
    failing = [{"name": "numa", "expression": f"device.attributes['{DRIVER_A}'].nope"}]
    c = claim(
        "c", request("gpu", count=2, derivedAttributes=failing), constraints=[{"matchAttribute": "numa"}]
    )
    stage = funnel(world, c).stage("constraints")
    assert stage.count == 0
    assert stage.examples[0].rule == "cel-error"
    assert "derived attribute numa" in stage.examples[0].message


def test_a_cluster_wide_derived_attribute_error_rejects_no_device():
    world = World(slices=[slice_("s1", DRIVER_A, "node-1", [device("gpu-0"), device("gpu-1", numa=1)])])
    numa = f"device.attributes['{DRIVER_A}'].numa"
    world.inventory.set_cluster_attributes(
        ClusterDerivation([ClusterAttribute("x.com/numa", numa)], world.selectors)
    )
    # gpu-0 lacks the attribute (its expression failed there); it is still a candidate like gpu-1.
    assert funnel(world, claim("c", request("gpu"))).count("class_selectors") == 2
    # Scoring and alignment see the cluster-wide attribute like a driver's own.
    assert world.inventory.pools_for(NODE1)[0].slices[0].devices[1].attribute("x.com/numa") == 1
