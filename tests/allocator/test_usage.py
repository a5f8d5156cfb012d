"""Device use per DeviceClass, driver, pool and state (the inventory gauges of /metrics), counted by hand."""

from __future__ import annotations

from allocator.deviceuse import AllocatedDevice
from allocator.usage import UsageSnapshot
from tests.allocator.builders import CLASS_A, DRIVER_A, DRIVER_B, World, device, device_class, slice_


def _held(name: str, *, admin: bool = False) -> AllocatedDevice:
    return AllocatedDevice((DRIVER_A, "p", name), admin, "", {})


def test_each_current_device_is_in_one_state_per_class_it_matches():
    tainted = device("d3")
    tainted["taints"] = [{"key": "k", "effect": "NoExecute"}]
    harmless = device("d4")
    harmless["taints"] = [{"key": "k", "effect": "None"}]  # does not keep claims away
    world = World(
        slices=[
            slice_("old", DRIVER_A, "p", [device("gone-0"), device("gone-1")], generation=1),
            slice_(
                "new", DRIVER_A, "p", [device(f"d{i}") for i in range(3)] + [tainted, harmless], generation=2
            ),
            slice_("b", DRIVER_B, "q", [device("e0")]),
        ],
        classes=[
            device_class(CLASS_A, f'device.driver == "{DRIVER_A}"'),
            device_class("wide", "true"),  # every device
            device_class("broken", 'device.attributes["x"].y == 1'),  # fails on every device: matches none
        ],
    )
    inventory = world.inventory
    inventory.set_allocation("ns/c", (_held("d0"), _held("d2", admin=True)))
    inventory.reserve("bind:1", (_held("d0"), _held("d1")))  # d0 is allocated already: counts once
    usage = UsageSnapshot.take(inventory, world.selectors).count()
    # Pool p (generation 2 only): d0 allocated, d1 reserved, d3 tainted, d2 (admin access) and d4 free.
    expected_p = {"allocated": 1, "reserved": 1, "tainted": 1, "free": 2}
    for device_class_name in (CLASS_A, "wide"):
        got = {
            state: n
            for (c, d, p, state), n in usage.items()
            if (c, d, p) == (device_class_name, DRIVER_A, "p")
        }
        assert got == expected_p
    assert usage[("wide", DRIVER_B, "q", "free")] == 1
    assert not [key for key in usage if key[0] == "broken"]
    assert sum(usage.values()) == 2 * 5 + 1


def test_a_device_no_class_matches_counts_under_the_empty_class():
    world = World(
        slices=[slice_("b", DRIVER_B, "q", [device("e0")])], classes=[device_class(CLASS_A, "false")]
    )
    assert UsageSnapshot.take(world.inventory, world.selectors).count() == {("", DRIVER_B, "q", "free"): 1}
