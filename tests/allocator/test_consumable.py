"""Consumable capacity and shared devices (KEP-5075, DRAConsumableCapacity), allocator-semantics §12.

Hand-worked rules: every device capacity is consumed by a request (requested amount rounded up to the
``requestPolicy``; unrequested: the policy default, else the whole value); a multi-allocatable device takes
shares until the sum (existing shares + shares picked in this attempt + this one) would pass a capacity;
a request naming a capacity the device lacks skips the device; results of multi-allocatable devices carry
a fresh ``shareID`` and ``consumedCapacity`` for every capacity.
"""

from __future__ import annotations

import re
import uuid
from fractions import Fraction
from typing import Any

import pytest

from allocator.capacity import capacity_consumption
from allocator.features import FeatureGates
from allocator.model import parse_resource_slice
from allocator.quantity import parse_quantity
from tests.allocator.builders import (
    CLASS_A,
    DRIVER_A,
    PINNED_NODE1,
    World,
    claim,
    device,
    request,
    result,
    slice_,
)

UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def shared(name: str, capacity: dict[str, Any] | None = None, **attributes: Any) -> dict[str, Any]:
    d = device(name, **attributes)
    d["allowMultipleAllocations"] = True
    if capacity is not None:
        d["capacity"] = capacity
    return d


def cap(value: str, **policy: Any) -> dict[str, Any]:
    return {"value": value, **({"requestPolicy": policy} if policy else {})}


def wants(name: str, count: int | None = None, **amounts: str) -> dict[str, Any]:
    fields: dict[str, Any] = {"capacity": {"requests": dict(amounts)}} if amounts else {}
    return request(name, count=count, **fields)


def entries(allocations) -> list[list[tuple[str, str, dict[str, str] | None]]]:
    """(request, device, consumedCapacity) per result; asserts the shareID shape where present."""
    out = []
    for a in allocations:
        rows = []
        for r in a["devices"]["results"]:
            if "shareID" in r:
                assert UID.match(r["shareID"]), r["shareID"]
            rows.append((r["request"], r["device"], r.get("consumedCapacity")))
        out.append(rows)
    return out


def nics(*devices_: dict[str, Any]) -> World:
    return World(slices=[slice_("s1", DRIVER_A, "node-1", list(devices_))])


def bandwidth_nic(name: str = "nic-0", **attributes: Any) -> dict[str, Any]:
    """10G of bandwidth in 1G steps from 1G, default 1G; 4 queues without policy."""
    return shared(
        name,
        {"bandwidth": cap("10G", default="1G", validRange={"min": "1G", "step": "1G"}), "queues": cap("4")},
        **attributes,
    )


# --- shares ---------------------------------------------------------------------------------------


def test_share_consumes_requested_defaults_and_whole_unrequested_capacities():
    world = nics(bandwidth_nic())
    # bandwidth 2500M rounds up to 3G; queues has no policy and is not requested: all 4.
    assert entries(world.allocate(claim("c", wants("nic", bandwidth="2500M")))) == [
        [("nic", "nic-0", {"bandwidth": "3G", "queues": "4"})]
    ]
    # Nothing requested: the bandwidth default (1G), the whole queue capacity.
    assert entries(world.allocate(claim("c", wants("nic")))) == [
        [("nic", "nic-0", {"bandwidth": "1G", "queues": "4"})]
    ]


def test_unrequested_capacity_without_default_takes_it_all_so_shares_must_ask_amounts():
    world = nics(bandwidth_nic())
    # Every share takes all 4 queues unless it asks for fewer: only one share fits.
    assert world.allocate(claim("c", wants("a"), wants("b"))) is None
    two = world.allocate(claim("c", wants("a", queues="2"), wants("b", queues="2")))
    assert entries(two) == [
        [
            ("a", "nic-0", {"bandwidth": "1G", "queues": "2"}),
            ("b", "nic-0", {"bandwidth": "1G", "queues": "2"}),
        ]
    ]
    ids = [r["shareID"] for r in two[0]["devices"]["results"]]
    assert len(set(ids)) == 2


def test_existing_shares_count_and_a_full_device_is_skipped():
    world = nics(bandwidth_nic("nic-0"), bandwidth_nic("nic-1")).allocated(
        "default/other",
        result("x", "nic-0", shareID=str(uuid.uuid4()), consumedCapacity={"bandwidth": "6G", "queues": "1"}),
    )
    # nic-0 has 4G bandwidth and 3 queues left: 5G does not fit, nic-1 takes it.
    assert entries(world.allocate(claim("c", wants("nic", bandwidth="5G", queues="1")))) == [
        [("nic", "nic-1", {"bandwidth": "5G", "queues": "1"})]
    ]
    # 4G fits exactly next to the existing share.
    assert entries(world.allocate(claim("c", wants("nic", bandwidth="4G", queues="3")))) == [
        [("nic", "nic-0", {"bandwidth": "4G", "queues": "3"})]
    ]


def test_shares_of_one_attempt_add_up_across_claims():
    world = nics(bandwidth_nic("nic-0"), bandwidth_nic("nic-1"))
    c1 = claim("c1", wants("nic", bandwidth="6G", queues="1"))
    c2 = claim("c2", wants("nic", bandwidth="5G", queues="1"))
    assert entries(world.allocate(c1, c2)) == [
        [("nic", "nic-0", {"bandwidth": "6G", "queues": "1"})],
        [("nic", "nic-1", {"bandwidth": "5G", "queues": "1"})],
    ]


def test_one_request_never_takes_two_shares_of_one_device():
    # Slot 2 resumes after the device of slot 1 (§5.1): count 2 needs two devices.
    world = nics(bandwidth_nic("nic-0"))
    assert world.allocate(claim("c", wants("nic", count=2, queues="1"))) is None
    world = nics(bandwidth_nic("nic-0"), bandwidth_nic("nic-1"))
    assert [d for _, d, _ in entries(world.allocate(claim("c", wants("nic", count=2, queues="1"))))[0]] == [
        "nic-0",
        "nic-1",
    ]


def test_exhausted_capacity_means_no_fit():
    world = nics(bandwidth_nic()).allocated(
        "default/full",
        result("x", "nic-0", shareID=str(uuid.uuid4()), consumedCapacity={"bandwidth": "10G", "queues": "0"}),
    )
    # The default share (1G) no longer fits.
    assert world.allocate(claim("c", wants("nic", queues="1"))) is None


def test_device_without_capacities_gets_a_share_id_and_no_consumed_capacity():
    world = nics(shared("vf-pool"))
    alloc = world.allocate(claim("c", wants("a"), wants("b")))
    results_ = alloc[0]["devices"]["results"]
    assert [(r["request"], r["device"], "consumedCapacity" in r) for r in results_] == [
        ("a", "vf-pool", False),
        ("b", "vf-pool", False),
    ]
    assert all(UID.match(r["shareID"]) for r in results_)


def test_consumed_capacity_keeps_the_devices_spelling_of_names():
    d = shared("nic-0", {f"{DRIVER_A}/bandwidth": cap("10G"), "queues": cap("4")})
    world = nics(d)
    # Request names may use the other spelling: bare "bandwidth" is the driver's domain.
    assert entries(
        world.allocate(claim("c", wants("nic", bandwidth="2G", **{f"{DRIVER_A}/queues": "1"})))
    ) == [[("nic", "nic-0", {f"{DRIVER_A}/bandwidth": "2G", "queues": "1"})]]


def test_request_for_a_capacity_the_device_lacks_skips_the_device():
    world = nics(
        bandwidth_nic("nic-0"),
        shared("nic-1", {"bandwidth": cap("10G"), "queues": cap("4"), "memory": cap("1Gi")}),
    )
    assert entries(world.allocate(claim("c", wants("nic", memory="1Gi", queues="1")))) == [
        [("nic", "nic-1", {"bandwidth": "10G", "queues": "1", "memory": "1Gi"})]
    ]
    # Another domain is not the driver's: nothing matches.
    assert world.allocate(claim("c", wants("nic", **{"other.example.com/bandwidth": "1G"}))) is None


# --- request policies -----------------------------------------------------------------------------


def consumption(capacity: dict[str, Any], fractional: bool = True, **amounts: str) -> dict[str, str] | None:
    d = parse_resource_slice(slice_("s", DRIVER_A, "node-1", [shared("d", capacity)])).devices[0]
    got = capacity_consumption(d, {k: parse_quantity(v) for k, v in amounts.items()}, fractional)
    return None if got is None else {k: str(v) for k, v in got.items()}


@pytest.mark.parametrize(
    ("amount", "expected"),
    [
        ("1", "2"),  # below the smallest valid value: rounded up to it
        ("2", "2"),
        ("3", "5"),  # the smallest valid value >= the request
        ("8", "8"),
        ("9", None),  # above every valid value: violates the policy, device skipped
    ],
)
def test_valid_values_round_up(amount, expected):
    policy = {"validValues": ["2", "5", "8"], "default": "2"}
    got = consumption({"slots": cap("8", **policy)}, slots=amount)
    assert got == (None if expected is None else {"slots": expected})


@pytest.mark.parametrize(
    ("amount", "expected"),
    [
        ("500M", "1000000000"),  # below min: min
        ("1G", "1000000000"),
        ("2500M", "3000000000"),  # min + n*step, rounded up
        ("4G", "4000000000"),
        ("4001M", None),  # rounds to 5G > max 4G: does not fit
    ],
)
def test_valid_range_rounds_up_to_min_plus_steps_and_respects_max(amount, expected):
    policy = {"validRange": {"min": "1G", "max": "4G", "step": "1G"}}
    got = consumption({"bw": cap("10G", **policy)}, bw=amount)
    assert got == (None if expected is None else {"bw": expected})


@pytest.mark.parametrize(
    ("text", "value"), [("1Ei", 2**60), ("2E", 2 * 10**18), ("3e2", 300), ("1e-3", Fraction(1, 1000))]
)
def test_quantity_suffixes_and_exponents(text, value):
    assert parse_quantity(text).value == value


def test_quantities_beyond_the_digit_and_exponent_bounds_are_refused():
    assert parse_quantity("1e1000").value == 10**1000
    for text in ("1e1001", "1e-1001", "1" * 1001, "1e9999999999"):
        with pytest.raises(ValueError, match="more than 1000 digits or a decimal exponent beyond"):
            parse_quantity(text)


@pytest.mark.parametrize(("fractional", "rounded"), [(True, "3/2"), (False, "2")])
def test_valid_range_arithmetic_follows_the_fractional_capacity_range_gate(fractional, rounded):
    # min 500m, step 1, request 1.5 (values from upstream v0.37.2 roundUpRange, via the oracle).
    # DRAFractionalCapacityRange on: milli-units, 1500 - 500 = one step of 1000 -> 1500m.
    # Off: whole units as Quantity.Value() rounds up: (2 - 1) = one step -> 1 + 1 = 2, and the step check
    # compares the rounded-up integers too, so 2 is valid.
    policy = {"validRange": {"min": "500m", "step": "1"}}
    assert consumption({"cores": cap("8", **policy)}, fractional, cores="1500m") == {"cores": rounded}
    # Below min: min itself (500m), also valid.
    assert consumption({"cores": cap("8", **policy)}, fractional, cores="100m") == {"cores": "1/2"}


def test_request_above_the_capacity_does_not_fit_even_without_policy():
    assert consumption({"bw": cap("10G")}, bw="11G") is None
    assert consumption({"bw": cap("10G")}, bw="10G") == {"bw": "10000000000"}


# --- exclusive devices ----------------------------------------------------------------------------


def test_capacity_requests_filter_exclusive_devices_without_shares():
    small = device("small")
    small["capacity"] = {"memory": cap("40Gi")}
    big = device("big")
    big["capacity"] = {"memory": cap("80Gi")}
    world = World(slices=[slice_("s1", DRIVER_A, "node-1", [small, big])])
    alloc = world.allocate(claim("c", wants("gpu", memory="60Gi")))
    # Exclusive device: no shareID, no consumedCapacity; the whole device is taken.
    assert alloc == [{"devices": {"results": [result("gpu", "big")]}, "nodeSelector": PINNED_NODE1}]


def test_exclusively_allocated_multi_device_cannot_be_shared_and_leftover_shares_block_a_single_device():
    # An allocation without shareID (made when the device was not multi-allocatable) holds it exclusively.
    world = nics(bandwidth_nic()).allocated("default/old", result("x", "nic-0"))
    assert world.allocate(claim("c", wants("nic", queues="1"))) is None
    # A device with shares that is no longer multi-allocatable cannot be allocated at all.
    single = device("nic-0")
    single["capacity"] = {"bandwidth": cap("10G"), "queues": cap("4")}
    world = nics(single).allocated(
        "default/share",
        result("x", "nic-0", shareID=str(uuid.uuid4()), consumedCapacity={"bandwidth": "1G", "queues": "1"}),
    )
    assert world.allocate(claim("c", wants("nic"))) is None


def test_class_can_tell_shared_from_dedicated_devices():
    dedicated_class = {
        "metadata": {"name": CLASS_A},
        "spec": {"selectors": [{"cel": {"expression": "!device.allowMultipleAllocations"}}]},
    }
    world = World(
        slices=[slice_("s1", DRIVER_A, "node-1", [bandwidth_nic("nic-0"), device("nic-1")])],
        classes=[dedicated_class],
    )
    assert entries(world.allocate(claim("c", wants("nic")))) == [[("nic", "nic-1", None)]]


# --- distinctAttribute ----------------------------------------------------------------------------


def test_distinct_attribute_spreads_shares_over_devices():
    world = nics(bandwidth_nic("nic-0", port="a"), bandwidth_nic("nic-1", port="b"))
    a, b = wants("a", queues="1"), wants("b", queues="1")
    # Without a constraint both shares land on nic-0.
    assert [d for _, d, _ in entries(world.allocate(claim("c", a, b)))[0]] == ["nic-0", "nic-0"]
    distinct = [{"distinctAttribute": f"{DRIVER_A}/port"}]
    assert [d for _, d, _ in entries(world.allocate(claim("c", a, b, constraints=distinct)))[0]] == [
        "nic-0",
        "nic-1",
    ]
    # Three requests over two ports: the third has no distinct value left.
    c = wants("c", queues="1")
    assert world.allocate(claim("c", a, b, c, constraints=distinct)) is None


def test_distinct_attribute_needs_the_attribute():
    world = nics(bandwidth_nic("nic-0"), bandwidth_nic("nic-1", port="b"))
    distinct = [{"distinctAttribute": f"{DRIVER_A}/port"}]
    # nic-0 lacks the attribute: only nic-1 qualifies, so a second request finds nothing.
    assert [
        d for _, d, _ in entries(world.allocate(claim("c", wants("a", queues="1"), constraints=distinct)))[0]
    ] == ["nic-1"]
    assert (
        world.allocate(claim("c", wants("a", queues="1"), wants("b", queues="1"), constraints=distinct))
        is None
    )


# --- gate -----------------------------------------------------------------------------------------


def test_gate_off_devices_are_exclusive_and_results_carry_no_shares():
    world = World(
        slices=[slice_("s1", DRIVER_A, "node-1", [bandwidth_nic("nic-0")])],
        gates=FeatureGates(DRAConsumableCapacity=False),
    )
    assert world.allocate(claim("c", request("nic"))) == [
        {"devices": {"results": [result("nic", "nic-0")]}, "nodeSelector": PINNED_NODE1}
    ]
    # One allocation holds it: a second request in the same claim finds nothing.
    assert world.allocate(claim("c", request("a"), request("b"))) is None


def test_exhausted_capacity_gives_a_capacity_reason_that_waiting_can_fix():
    from allocator.diagnose import diagnose
    from tests.allocator.builders import NODE1

    world = nics(bandwidth_nic()).allocated(
        "default/full",
        result("x", "nic-0", shareID=str(uuid.uuid4()), consumedCapacity={"bandwidth": "10G", "queues": "0"}),
    )
    nic = claim("c", wants("nic", queues="1"))
    assert world.allocate(nic) is None
    no_fit = diagnose(world.inventory, world.selectors, NODE1, [nic])
    assert "capacity" in no_fit.reason and "in use" not in no_fit.reason
    assert no_fit.unresolvable is False
