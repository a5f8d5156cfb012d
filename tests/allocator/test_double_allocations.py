"""``Inventory.double_allocations``: devices two claims hold where one has the device whole."""

from __future__ import annotations

from fractions import Fraction

from allocator.deviceuse import AllocatedDevice
from allocator.inventory import Inventory

GPU = ("gpu.example.com", "n1", "gpu-0")
SHARED = ("gpu.example.com", "n1", "gpu-1")


def _whole(device: tuple[str, str, str], admin: bool = False) -> tuple[AllocatedDevice, ...]:
    return (AllocatedDevice(device, admin, "", {}),)


def _share(share: str) -> tuple[AllocatedDevice, ...]:
    return (AllocatedDevice(SHARED, False, share, {"memory": Fraction(10)}),)


def test_a_device_whole_in_two_claims_is_one():
    inventory = Inventory()
    inventory.set_allocation("ml/b", _whole(GPU))
    inventory.set_allocation("ml/a", _whole(GPU))
    assert inventory.double_allocations() == [(GPU, ("ml/a", "ml/b"))]
    inventory.set_allocation("ml/b", ())  # deallocated
    assert inventory.double_allocations() == []


def test_shares_of_one_device_are_not_but_a_share_beside_the_whole_device_is():
    inventory = Inventory()
    inventory.set_allocation("ml/s1", _share("s1"))
    inventory.set_allocation("ml/s2", _share("s2"))
    assert inventory.double_allocations() == []
    inventory.set_allocation("ml/w", _whole(SHARED))
    assert inventory.double_allocations() == [(SHARED, ("ml/s1", "ml/s2", "ml/w"))]


def test_binds_in_flight_and_admin_access_are_not():
    inventory = Inventory()
    inventory.set_allocation("ml/a", _whole(GPU))
    inventory.reserve("bind:1:ml/p", _whole(GPU))  # its own bind, until the watch shows the write
    inventory.set_allocation("ml/admin", _whole(GPU, admin=True))  # admin access uses no device
    assert inventory.double_allocations() == []


def test_one_claim_naming_a_device_twice_is_not():
    inventory = Inventory()
    inventory.set_allocation("ml/a", _whole(GPU) + _whole(GPU))
    assert inventory.double_allocations() == []
