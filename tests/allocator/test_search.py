"""Allocator rules, each with an expected allocation worked out by hand from allocator-semantics.md."""

from __future__ import annotations

import pytest

from allocator.errors import (
    CELCompileError,
    CELEvalError,
    ClaimConstraintError,
    FeatureDisabledError,
    InvalidInputError,
    NodeLocalError,
    SearchLimitError,
    SearchTimeoutError,
)
from allocator.features import FeatureGates
from allocator.search import CLOCK_CHECK_STEPS, Allocator, Deadline
from tests.allocator.builders import (
    CLASS_A,
    CLASS_B,
    DRIVER_A,
    DRIVER_B,
    NODE1,
    NODE2,
    PINNED_NODE1,
    World,
    claim,
    device,
    device_class,
    picked,
    request,
    result,
    slice_,
)


def four_gpus(**spec):
    return slice_("s1", DRIVER_A, "node-1", [device(f"gpu-{i}", numa=i % 2) for i in range(4)], **spec)


# --- basics ---------------------------------------------------------------------------------------


def test_single_device_first_in_slice_order_and_pinned_to_node():
    world = World(slices=[four_gpus()])
    assert world.allocate(claim("c", request("gpu"))) == [
        {"devices": {"results": [result("gpu", "gpu-0")]}, "nodeSelector": PINNED_NODE1}
    ]


def test_count_takes_consecutive_devices():
    world = World(slices=[four_gpus()])
    assert picked(world.allocate(claim("c", request("gpu", count=3)))) == [
        [("gpu", "gpu-0"), ("gpu", "gpu-1"), ("gpu", "gpu-2")]
    ]


def test_devices_allocated_to_other_claims_are_skipped():
    world = World(slices=[four_gpus()]).allocated("default/other", result("x", "gpu-0"), result("x", "gpu-2"))
    assert picked(world.allocate(claim("c", request("gpu", count=2)))) == [
        [("gpu", "gpu-1"), ("gpu", "gpu-3")]
    ]


def test_not_enough_devices_is_no_fit_not_error():
    world = World(slices=[four_gpus()])
    assert world.allocate(claim("c", request("gpu", count=5))) is None


def test_other_node_sees_nothing():
    world = World(slices=[four_gpus()])
    assert world.allocate(claim("c", request("gpu")), node=NODE2) is None


def test_several_claims_get_distinct_devices_in_claim_order():
    world = World(slices=[four_gpus()])
    assert picked(world.allocate(claim("a", request("gpu", count=2)), claim("b", request("gpu")))) == [
        [("gpu", "gpu-0"), ("gpu", "gpu-1")],
        [("gpu", "gpu-2")],
    ]


def test_requests_of_different_classes():
    world = World(slices=[four_gpus(), slice_("n1", DRIVER_B, "node-1", [device("nic-0")])])
    allocation = world.allocate(claim("c", request("gpu"), request("nic", CLASS_B)))
    assert allocation[0]["devices"]["results"] == [
        result("gpu", "gpu-0"),
        result("nic", "nic-0", driver=DRIVER_B),
    ]


# --- selectors ------------------------------------------------------------------------------------


def test_request_selectors_and_class_selectors_must_all_match():
    # The class keeps NUMA 1 (gpu-1, gpu-3); the request keeps labels other than "g1": only gpu-3 is left.
    classes = [
        device_class(CLASS_A, f'device.driver == "{DRIVER_A}"', f'device.attributes["{DRIVER_A}"].numa == 1')
    ]
    slices = [
        slice_("s1", DRIVER_A, "node-1", [device(f"gpu-{i}", numa=i % 2, label=f"g{i}") for i in range(4)])
    ]
    world = World(slices=slices, classes=classes)
    sel = [{"cel": {"expression": f'device.attributes["{DRIVER_A}"].label != "g1"'}}]
    assert picked(world.allocate(claim("c", request("gpu", selectors=sel)))) == [[("gpu", "gpu-3")]]
    assert world.allocate(claim("c", request("gpu", count=2, selectors=sel))) is None


def test_cel_runtime_error_is_fatal_and_names_device():
    world = World(slices=[four_gpus()])
    sel = [{"cel": {"expression": f'device.attributes["{DRIVER_A}"].missing == 1'}}]
    with pytest.raises(
        CELEvalError,
        match=rf"claim default/c: selector #0 on device {DRIVER_A}/node-1/gpu-0: "
        "CEL runtime error: .*missing",
    ):
        world.allocate(claim("c", request("gpu", selectors=sel)))


def test_cel_compile_error_names_class():
    world = World(slices=[four_gpus()], classes=[device_class(CLASS_A, "device.driver ==")])
    with pytest.raises(CELCompileError, match=r"class class-a: selector #0: CEL compile error"):
        world.allocate(claim("c", request("gpu")))


def test_unknown_class_is_fatal():
    world = World(slices=[four_gpus()])
    with pytest.raises(
        InvalidInputError,
        match=r"claim default/c, request gpu: could not retrieve device class "
        r'nope: deviceclass.resource.k8s.io "nope" not found',
    ):
        world.allocate(claim("c", request("gpu", "nope")))


def test_selector_without_cel_is_fatal():
    world = World(slices=[four_gpus()])
    with pytest.raises(InvalidInputError, match=r"selector #0: CEL expression empty"):
        world.allocate(claim("c", request("gpu", selectors=[{}])))


# --- All mode -------------------------------------------------------------------------------------


def test_all_mode_takes_every_matching_device():
    world = World(slices=[four_gpus()])
    assert picked(world.allocate(claim("c", request("gpu", mode="All")))) == [
        [("gpu", f"gpu-{i}") for i in range(4)]
    ]


def test_all_mode_fails_when_one_device_is_in_use():
    world = World(slices=[four_gpus()]).allocated("default/other", result("x", "gpu-3"))
    assert world.allocate(claim("c", request("gpu", mode="All"))) is None


def test_all_mode_with_zero_matching_devices_fails():
    world = World(slices=[four_gpus()])
    assert world.allocate(claim("c", request("nic", CLASS_B, mode="All"))) is None


def test_all_mode_on_incomplete_pool_is_fatal():
    world = World(slices=[four_gpus(count=2)])
    with pytest.raises(
        InvalidInputError,
        match=rf"asks for all devices, but resource pool {DRIVER_A}/node-1 is "
        "currently being updated",
    ):
        world.allocate(claim("c", request("gpu", mode="All")))


def test_all_mode_constraint_violation_is_fatal():
    world = World(slices=[four_gpus()])
    c = claim("c", request("gpu", mode="All"), constraints=[{"matchAttribute": f"{DRIVER_A}/numa"}])
    with pytest.raises(
        ClaimConstraintError,
        match=rf"cannot add device {DRIVER_A}/node-1/gpu-1 because a claim "
        "constraint would not be satisfied",
    ):
        world.allocate(c)


# --- pools ----------------------------------------------------------------------------------------


def test_incomplete_pool_is_never_used_for_exact_count():
    world = World(slices=[four_gpus(count=2)])
    assert world.allocate(claim("c", request("gpu"))) is None


def test_only_newest_generation_counts():
    old = slice_("a-old", DRIVER_A, "node-1", [device("old-0")], generation=1)
    new = slice_("b-new", DRIVER_A, "node-1", [device("new-0")], generation=2)
    world = World(slices=[old, new])
    assert picked(world.allocate(claim("c", request("gpu")))) == [[("gpu", "new-0")]]


def test_pools_in_name_order_then_slices_in_name_order():
    slices = [
        slice_("z-slice", DRIVER_A, "pool-b", [device("b-0")]),
        slice_("y-second", DRIVER_A, "pool-a", [device("a-1")], count=2),
        slice_("x-first", DRIVER_A, "pool-a", [device("a-0")], count=2),
    ]
    world = World(slices=slices)
    assert picked(world.allocate(claim("c", request("gpu", count=3)))) == [
        [("gpu", "a-0"), ("gpu", "a-1"), ("gpu", "b-0")]
    ]


def test_invalid_pool_is_node_local_error_when_nothing_else_fits():
    dup = slice_("s1", DRIVER_A, "node-1", [device("gpu-0"), device("gpu-0")])
    with pytest.raises(NodeLocalError, match="invalid resource pools were encountered"):
        World(slices=[dup]).allocate(claim("c", request("gpu")))


def test_invalid_pool_is_ignored_when_another_pool_fits():
    dup = slice_("s1", DRIVER_A, "a-pool", [device("gpu-0"), device("gpu-0")])
    good = slice_("s2", DRIVER_A, "b-pool", [device("ok-0")])
    assert picked(World(slices=[dup, good]).allocate(claim("c", request("gpu")))) == [[("gpu", "ok-0")]]


def test_all_nodes_slice_gives_no_node_selector_and_node_selector_slice_is_merged():
    everywhere = slice_("s1", DRIVER_A, "net", [device("dev-0")], node=None, allNodes=True)
    allocation = World(slices=[everywhere]).allocate(claim("c", request("x")))
    assert allocation == [{"devices": {"results": [result("x", "dev-0", pool="net")]}}]
    selector = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]
    }
    zoned = slice_("s1", DRIVER_A, "net", [device("dev-0")], node=None, nodeSelector=selector)
    world = World(slices=[zoned])
    assert world.allocate(claim("c", request("x")))[0]["nodeSelector"] == selector
    assert world.allocate(claim("c", request("x")), node=NODE2) is None


# --- firstAvailable -------------------------------------------------------------------------------


def first_available(name, *subs):
    return {"name": name, "firstAvailable": list(subs)}


def test_first_available_falls_through_to_next_subrequest():
    world = World(slices=[four_gpus()])
    r = first_available(
        "gpu",
        {"name": "eight", "deviceClassName": CLASS_A, "count": 8},
        {"name": "two", "deviceClassName": CLASS_A, "count": 2},
    )
    assert picked(world.allocate(claim("c", r))) == [[("gpu/two", "gpu-0"), ("gpu/two", "gpu-1")]]


def test_first_available_disabled_gate_is_fatal():
    world = World(slices=[four_gpus()], gates=FeatureGates(DRAPrioritizedList=False))
    r = first_available("gpu", {"name": "one", "deviceClassName": CLASS_A})
    with pytest.raises(
        FeatureDisabledError, match="has subrequests, but the DRAPrioritizedList feature is disabled"
    ):
        world.allocate(claim("c", r))


# --- search effort: limits prune, running out is its own outcome --------------------------------


def gpus(n, **attributes):
    return slice_("s1", DRIVER_A, "node-1", [device(f"gpu-{i}", **attributes) for i in range(n)])


def test_subrequest_over_the_results_limit_is_skipped_without_trying_devices():
    # 16 + 17 > 32 results: upstream's allocateOne returns errAllocationResultMaxSizeExceeded before
    # placing any device of "big" and moves on to "one"; no device combination is tried for "big".
    world = World(slices=[gpus(40)])
    r = first_available(
        "more",
        {"name": "big", "deviceClassName": CLASS_A, "count": 17},
        {"name": "one", "deviceClassName": CLASS_A, "count": 1},
    )
    allocator = Allocator(world.inventory, world.selectors)
    result = allocator.allocate(NODE1, [claim("c", request("base", count=16), r)])
    assert picked(result)[0][-1] == ("more/one", "gpu-16")
    assert allocator.stats.devices_tried == 16 + 17  # base's 16; "one" passes those 16 and takes the next
    # The limit found in a later request unwinds to the nearest firstAvailable: once "big" took 20 devices,
    # "rest" (13) cannot fit, and no other choice of 20 devices changes that: "small" is next.
    r = first_available(
        "first",
        {"name": "big", "deviceClassName": CLASS_A, "count": 20},
        {"name": "small", "deviceClassName": CLASS_A, "count": 1},
    )
    allocator = Allocator(world.inventory, world.selectors)
    result = allocator.allocate(NODE1, [claim("c", r, request("rest", count=13))])
    assert picked(result)[0][:2] == [("first/small", "gpu-0"), ("rest", "gpu-1")]
    assert allocator.stats.devices_tried == 20 + 1 + 14  # "rest" passes gpu-0, now taken by "small"


def test_fewer_usable_devices_than_slots_prunes_the_search():
    # 16 of 20 devices match "fast", "all-fast" wants 17: 2^16 partial combinations without count pruning.
    devices = [device(f"gpu-{i}", fast=i < 16) for i in range(20)]
    world = World(slices=[slice_("s1", DRIVER_A, "node-1", devices)])
    fast = [{"cel": {"expression": f'device.attributes["{DRIVER_A}"].fast'}}]
    r = first_available(
        "gpu",
        {"name": "all-fast", "deviceClassName": CLASS_A, "count": 17, "selectors": fast},
        {"name": "any", "deviceClassName": CLASS_A, "count": 1},
    )
    allocator = Allocator(world.inventory, world.selectors)
    assert picked(allocator.allocate(NODE1, [claim("c", r)])) == [[("gpu/any", "gpu-0")]]
    assert allocator.stats.devices_tried < 1000  # without count pruning: over 65,000


def test_a_step_budget_set_by_the_caller_is_its_own_reason_not_no_fit():
    # numa 0,1,0,1,0: the three devices on NUMA node 0 take five steps to find (two constraint misses).
    world = World(
        slices=[slice_("s1", DRIVER_A, "node-1", [device(f"gpu-{i}", numa=i % 2) for i in range(5)])]
    )
    c = claim("c", request("gpu", count=3), constraints=[{"matchAttribute": f"{DRIVER_A}/numa"}])
    assert picked(world.allocate(c)) == [[("gpu", "gpu-0"), ("gpu", "gpu-2"), ("gpu", "gpu-4")]]
    allocator = Allocator(world.inventory, world.selectors)
    allocator.max_steps = 3
    with pytest.raises(SearchLimitError, match="search limit reached after 3 steps"):
        allocator.allocate(NODE1, [c])


def test_a_request_no_device_can_satisfy_ends_the_search_as_no_fit():
    # No device has fast == true, so claim "b" can never be satisfied: no fit. Without looking ahead the
    # search tries all C(24, 6) = 134,596 choices of "six" for claim "a" before saying so.
    world = World(
        slices=[slice_("s1", DRIVER_A, "node-1", [device(f"gpu-{i}", fast=False) for i in range(24)])]
    )
    fast = [{"cel": {"expression": f'device.attributes["{DRIVER_A}"].fast'}}]
    claims = [claim("a", request("six", count=6)), claim("b", request("fast", selectors=fast))]
    allocator = Allocator(world.inventory, world.selectors)
    assert allocator.allocate(NODE1, claims) is None
    assert allocator.stats.devices_tried < 1000


@pytest.mark.parametrize(
    ("constraint", "count"),
    [
        # fast is true or false: three devices with pairwise different values do not exist.
        ({"distinctAttribute": f"{DRIVER_A}/fast"}, 3),
        # numa 0 on 12 devices and 1 on 12: thirteen on one NUMA node do not exist.
        ({"matchAttribute": f"{DRIVER_A}/numa"}, 13),
    ],
)
def test_a_constraint_no_device_set_can_satisfy_ends_the_search_as_no_fit(constraint, count):
    devices = [device(f"gpu-{i}", fast=i % 2 == 0, numa=i % 2) for i in range(24)]
    world = World(slices=[slice_("s1", DRIVER_A, "node-1", devices)])
    claims = [
        claim("a", request("six", count=6)),
        claim("b", request("g", count=count), constraints=[constraint]),
    ]
    allocator = Allocator(world.inventory, world.selectors)
    assert allocator.allocate(NODE1, claims) is None
    assert allocator.stats.devices_tried < 2000


def test_an_earlier_selector_error_keeps_the_search_going_past_an_unsatisfiable_request():
    # gpu-23 has no "numa": upstream's search reaches it for request "one" once every choice after gpu-0..22
    # failed, and fails the pod with that CEL error. Ending early at the unsatisfiable claim "b" would answer
    # no fit instead; the search keeps going until its deadline, and timing out is never a wrong answer.
    # The clock advances 1 s per read, read every CLOCK_CHECK_STEPS devices: the 5 s deadline passes at the
    # fifth read.
    devices = [device(f"gpu-{i}", numa=0, fast=False) for i in range(23)] + [device("gpu-23", fast=False)]
    world = World(slices=[slice_("s1", DRIVER_A, "node-1", devices)])
    numa0 = [{"cel": {"expression": f'device.attributes["{DRIVER_A}"].numa == 0'}}]
    fast = [{"cel": {"expression": f'device.attributes["{DRIVER_A}"].fast'}}]
    claims = [
        claim("a", request("one", selectors=numa0), request("six", count=6)),
        claim("b", request("fast", selectors=fast)),
    ]
    ticks = iter(range(1000))
    allocator = Allocator(world.inventory, world.selectors, Deadline(5, clock=lambda: next(ticks)))
    timed_out = r"timed out trying to allocate devices \(filter timeout 5 s"
    with pytest.raises(SearchTimeoutError, match=timed_out):
        allocator.allocate(NODE1, claims)
    assert allocator.stats.devices_tried == 5 * CLOCK_CHECK_STEPS


def test_the_search_has_no_step_limit():
    # firstAvailable s0 takes 12 of the 16 devices, and "other" cannot have 5 of the 4 left: upstream tries
    # every choice of s0 (about 94,000 steps) before s1 and fits. The product once gave up after 50,000 steps;
    # it now drops s0 at its first slot, as 12 + 5 devices are more than the node has.
    world = World(slices=[slice_("s1", DRIVER_A, "node-1", [device(f"gpu-{i}") for i in range(16)])])
    first_available = {
        "name": "gpu",
        "firstAvailable": [
            {"name": "twelve", "deviceClassName": CLASS_A, "count": 12},
            {"name": "one", "deviceClassName": CLASS_A, "count": 1},
        ],
    }
    wanted = claim("c", first_available, request("other", count=5))
    allocator = Allocator(world.inventory, world.selectors)
    found = allocator.allocate(NODE1, [wanted])
    assert picked(found) == [[("gpu/one", "gpu-0"), *(("other", f"gpu-{i}") for i in range(1, 6))]]
    assert allocator.stats.devices_tried < 1000


def test_a_choice_leaving_fewer_free_devices_than_the_rest_needs_is_dropped():
    # Claim "a" takes 6 of 10 devices first, then "b" needs 5: 11 > 10 for every choice of "a", so the search
    # ends after one scan instead of trying all C(10, 6) = 210 choices of "a" (each with "b" scanning).
    world = World(slices=[slice_("s1", DRIVER_A, "node-1", [device(f"gpu-{i}") for i in range(10)])])
    claims = [claim("a", request("six", count=6)), claim("b", request("five", count=5))]
    allocator = Allocator(world.inventory, world.selectors)
    assert allocator.allocate(NODE1, claims) is None
    assert allocator.stats.devices_tried <= 20


def test_supply_pruning_leaves_devices_that_could_fail_the_pod_to_the_search():
    # gpu-0 has no "numa": claim "b"'s selector fails there, which upstream reaches once "a" no longer holds
    # it, after 126 choices of "a" (and fails the pod). Pruning by supply (6 + 5 > 10) would answer no fit;
    # it stays off, and the error comes.
    devices = [device("gpu-0")] + [device(f"gpu-{i}", numa=0) for i in range(1, 10)]
    world = World(slices=[slice_("s1", DRIVER_A, "node-1", devices)])
    numa0 = [{"cel": {"expression": f'device.attributes["{DRIVER_A}"].numa == 0'}}]
    claims = [claim("a", request("six", count=6)), claim("b", request("five", count=5, selectors=numa0))]
    with pytest.raises(CELEvalError):
        Allocator(world.inventory, world.selectors).allocate(NODE1, claims)


# --- constraints ----------------------------------------------------------------------------------


def test_match_attribute_backtracks_to_a_consistent_set():
    # numa of gpu-0..3 is 0,1,0,1: two devices on one NUMA node are gpu-0 and gpu-2.
    world = World(slices=[four_gpus()])
    c = claim("c", request("gpu", count=2), constraints=[{"matchAttribute": f"{DRIVER_A}/numa"}])
    assert picked(world.allocate(c)) == [[("gpu", "gpu-0"), ("gpu", "gpu-2")]]


def test_match_attribute_across_requests_and_missing_attribute_fails():
    gpus = slice_(
        "s1",
        DRIVER_A,
        "node-1",
        [device("gpu-0", **{"example.com__root": "r0"}), device("gpu-1", **{"example.com__root": "r1"})],
    )
    nics = slice_("s2", DRIVER_B, "node-1", [device("nic-0"), device("nic-1", **{"example.com__root": "r1"})])
    world = World(slices=[gpus, nics])
    c = claim(
        "c", request("gpu"), request("nic", CLASS_B), constraints=[{"matchAttribute": "example.com/root"}]
    )
    assert picked(world.allocate(c)) == [[("gpu", "gpu-1"), ("nic", "nic-1")]]


def test_distinct_attribute():
    world = World(slices=[four_gpus()])
    c = claim("c", request("a"), request("b"), constraints=[{"distinctAttribute": f"{DRIVER_A}/numa"}])
    assert picked(world.allocate(c)) == [[("a", "gpu-0"), ("b", "gpu-1")]]


def test_empty_constraint_is_fatal():
    world = World(slices=[four_gpus()])
    with pytest.raises(InvalidInputError, match=r"claim default/c, constraint #0: empty constraint"):
        world.allocate(claim("c", request("gpu"), constraints=[{"requests": ["gpu"]}]))


def test_claim_limit_of_32_devices():
    world = World(slices=[four_gpus()])
    with pytest.raises(
        InvalidInputError,
        match="request gpu: adding 33 devices exceeds the claim limit of 32, with 0 already",
    ):
        world.allocate(claim("c", request("gpu", count=33)))


# --- taints, tolerations, admin access ------------------------------------------------------------


def tainted_gpus(effect="NoSchedule"):
    devices = [device("gpu-0"), device("gpu-1")]
    devices[0]["taints"] = [{"key": "health", "value": "bad", "effect": effect}]
    return slice_("s1", DRIVER_A, "node-1", devices)


@pytest.mark.parametrize(
    ("effect", "expected"), [("NoSchedule", "gpu-1"), ("NoExecute", "gpu-1"), ("None", "gpu-0")]
)
def test_untolerated_taints_block_only_noschedule_and_noexecute(effect, expected):
    assert picked(World(slices=[tainted_gpus(effect)]).allocate(claim("c", request("gpu")))) == [
        [("gpu", expected)]
    ]


def test_toleration_allows_device_and_is_copied_into_result():
    toleration = {"key": "health", "operator": "Equal", "value": "bad", "effect": "NoSchedule"}
    allocation = World(slices=[tainted_gpus()]).allocate(claim("c", request("gpu", tolerations=[toleration])))
    assert allocation[0]["devices"]["results"] == [result("gpu", "gpu-0", tolerations=[toleration])]


def test_toleration_with_wrong_value_does_not_match():
    toleration = {"key": "health", "operator": "Equal", "value": "good"}
    allocation = World(slices=[tainted_gpus()]).allocate(claim("c", request("gpu", tolerations=[toleration])))
    assert picked(allocation) == [[("gpu", "gpu-1")]]


def test_device_taint_rule_taints_matching_device():
    rule = {
        "metadata": {"name": "r"},
        "spec": {
            "deviceSelector": {"driver": DRIVER_A, "device": "gpu-0"},
            "taint": {"key": "k", "effect": "NoExecute"},
        },
    }
    world = World(slices=[four_gpus()], rules=[rule])
    assert picked(world.allocate(claim("c", request("gpu")))) == [[("gpu", "gpu-1")]]


def test_taint_gate_off_ignores_taints():
    world = World(slices=[tainted_gpus()], gates=FeatureGates(DRADeviceTaints=False))
    assert picked(world.allocate(claim("c", request("gpu")))) == [[("gpu", "gpu-0")]]


def test_admin_access_ignores_other_claims_but_not_taints():
    world = World(slices=[tainted_gpus()]).allocated("default/other", result("x", "gpu-1"))
    allocation = world.allocate(claim("c", request("gpu", adminAccess=True)))
    assert allocation[0]["devices"]["results"] == [result("gpu", "gpu-1", adminAccess=True)]


def test_admin_access_gate_off_is_fatal():
    world = World(slices=[four_gpus()], gates=FeatureGates(DRAAdminAccess=False))
    with pytest.raises(FeatureDisabledError, match="admin access is requested, but the feature is disabled"):
        world.allocate(claim("c", request("gpu", adminAccess=False)))


# --- config ---------------------------------------------------------------------------------------


def test_class_and_claim_config_with_requests_cleared_when_covering_all():
    opaque_a = {"opaque": {"driver": DRIVER_A, "parameters": {"mode": "a"}}}
    opaque_b = {"opaque": {"driver": DRIVER_B, "parameters": {"mode": "b"}}}
    classes = [
        device_class(CLASS_A, f'device.driver == "{DRIVER_A}"', config=[opaque_a]),
        device_class(CLASS_B, f'device.driver == "{DRIVER_B}"'),
    ]
    world = World(slices=[four_gpus(), slice_("n", DRIVER_B, "node-1", [device("nic-0")])], classes=classes)
    claim_cfg = [{"requests": ["nic"], **opaque_b}, {"requests": ["gpu", "nic"], **opaque_b}, {**opaque_a}]
    allocation = world.allocate(claim("c", request("gpu"), request("nic", CLASS_B), config=claim_cfg))
    assert allocation[0]["devices"]["config"] == [
        {"source": "FromClass", "requests": ["gpu"], **opaque_a},
        {"source": "FromClaim", "requests": ["nic"], **opaque_b},
        {"source": "FromClaim", **opaque_b},
        {"source": "FromClaim", **opaque_a},
    ]


# --- partitionable devices and consumable capacity ------------------------------------------------


def partitioned_gpu():
    counters = slice_(
        "a-counters",
        DRIVER_A,
        "node-1",
        [],
        count=2,
        sharedCounters=[{"name": "gpu-0-cs", "counters": {"memory": {"value": "40Gi"}}}],
    )
    del counters["spec"]["devices"]

    def part(name, memory):
        d = device(name)
        d["consumesCounters"] = [{"counterSet": "gpu-0-cs", "counters": {"memory": {"value": memory}}}]
        return d

    devices = slice_(
        "b-devices",
        DRIVER_A,
        "node-1",
        [part("gpu-0", "40Gi"), part("gpu-0-half-0", "20Gi"), part("gpu-0-half-1", "20Gi")],
        count=2,
    )
    return [counters, devices]


def test_counters_whole_device_excludes_partitions():
    world = World(slices=partitioned_gpu())
    assert picked(world.allocate(claim("c", request("gpu")))) == [[("gpu", "gpu-0")]]
    world.allocated("default/other", result("x", "gpu-0"))
    assert world.allocate(claim("c", request("gpu"))) is None


def test_counters_partitions_fit_together():
    world = World(slices=partitioned_gpu()).allocated("default/other", result("x", "gpu-0-half-0"))
    # 20Gi of 40Gi left: the whole GPU (40Gi) no longer fits, the other half does.
    assert picked(world.allocate(claim("c", request("gpu")))) == [[("gpu", "gpu-0-half-1")]]


def test_partitionable_gate_off_ignores_counter_slices():
    world = World(slices=partitioned_gpu(), gates=FeatureGates(DRAPartitionableDevices=False))
    assert world.allocate(claim("c", request("gpu"))) is None


def shared_nic():
    d = device("nic-0")
    d["allowMultipleAllocations"] = True
    d["capacity"] = {
        "bandwidth": {
            "value": "10G",
            "requestPolicy": {"default": "1G", "validRange": {"min": "1G", "step": "1G"}},
        }
    }
    return [slice_("s1", DRIVER_A, "node-1", [d])]


def test_consumable_capacity_shares_round_up_to_step():
    world = World(slices=shared_nic())
    req = request("nic", capacity={"requests": {"bandwidth": "2500M"}})
    entry = world.allocate(claim("c", req))[0]["devices"]["results"][0]
    assert entry["device"] == "nic-0"
    assert entry["consumedCapacity"] == {"bandwidth": "3G"}
    assert len(entry["shareID"]) == 36


def test_consumable_capacity_two_shares_in_one_claim_and_exhaustion():
    world = World(slices=shared_nic())
    req = request("nic", capacity={"requests": {"bandwidth": "5G"}})
    two = world.allocate(claim("c", req, {**req, "name": "nic2"}))
    assert [r["device"] for r in two[0]["devices"]["results"]] == ["nic-0", "nic-0"]
    three = claim("c", req, {**req, "name": "nic2"}, {**req, "name": "nic3"})
    assert world.allocate(three) is None


def test_default_capacity_when_not_requested():
    world = World(slices=shared_nic())
    entry = world.allocate(claim("c", request("nic")))[0]["devices"]["results"][0]
    assert entry["consumedCapacity"] == {"bandwidth": "1G"}


def test_capacity_request_for_unknown_capacity_skips_device():
    world = World(slices=shared_nic())
    assert world.allocate(claim("c", request("nic", capacity={"requests": {"memory": "1Gi"}}))) is None


def test_capacity_gate_off_rejects_capacity_requests():
    world = World(slices=shared_nic(), gates=FeatureGates(DRAConsumableCapacity=False))
    with pytest.raises(FeatureDisabledError, match="has capacity requests, but the DRAConsumableCapacity"):
        world.allocate(claim("c", request("nic", capacity={"requests": {"bandwidth": "1G"}})))


# --- binding conditions ---------------------------------------------------------------------------


def test_pools_with_binding_conditions_are_tried_last_and_conditions_copied():
    waiting = device("fabric-0")
    waiting["bindingConditions"] = ["attached"]
    waiting["bindsToNode"] = True
    slices = [
        slice_("s1", DRIVER_A, "a-pool", [waiting]),
        slice_("s2", DRIVER_A, "b-pool", [device("plain-0")]),
    ]
    world = World(slices=slices)
    assert picked(world.allocate(claim("c", request("gpu")))) == [[("gpu", "plain-0")]]
    both = world.allocate(claim("c", request("gpu", count=2)))[0]["devices"]["results"]
    assert both == [
        result("gpu", "plain-0", pool="b-pool"),
        result("gpu", "fabric-0", pool="a-pool", bindingConditions=["attached"]),
    ]


def test_binding_conditions_gate_off_makes_device_unselectable():
    waiting = device("fabric-0")
    waiting["bindingConditions"] = ["attached"]
    world = World(
        slices=[slice_("s1", DRIVER_A, "p", [waiting])], gates=FeatureGates(DRADeviceBindingConditions=False)
    )
    assert world.allocate(claim("c", request("gpu"))) is None


def test_search_stats_count_work():
    from allocator.search import Allocator

    world = World(slices=[four_gpus()])
    allocator = Allocator(world.inventory, world.selectors)
    allocator.allocate(NODE1, [claim("c", request("gpu", count=2))])
    assert allocator.stats.devices_tried == 2
    assert allocator.stats.placements == 2
    assert DRIVER_B and CLASS_B  # builders used elsewhere
