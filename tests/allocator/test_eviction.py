"""``allocator.eviction.ReleasedView``: the inventory's in-use answers without some claims' uses."""

from __future__ import annotations

from fractions import Fraction

from allocator.deviceuse import AllocatedDevice
from allocator.eviction import ReleasedView
from allocator.inventory import Inventory

GPU = ("gpu.example.com", "n1", "gpu-0")
SHARED = ("gpu.example.com", "n1", "gpu-1")


def _exclusive(device: tuple[str, str, str]) -> tuple[AllocatedDevice, ...]:
    return (AllocatedDevice(device, False, "", {}),)


def _share(share: str, memory: int) -> tuple[AllocatedDevice, ...]:
    return (AllocatedDevice(SHARED, False, share, {"memory": Fraction(memory)}),)


def _inventory() -> Inventory:
    inventory = Inventory()
    inventory.set_allocation("ml/a", _exclusive(GPU))
    inventory.set_allocation("ml/s1", _share("s1", 10))
    inventory.set_allocation("ml/s2", _share("s2", 30))
    return inventory


def test_a_released_exclusive_claim_frees_its_device():
    inventory = _inventory()
    view = ReleasedView(inventory, {"ml/a": _exclusive(GPU)})
    assert (view.is_allocated(GPU), view.is_exclusively_allocated(GPU)) == (False, False)
    assert inventory.is_allocated(GPU)  # the inventory itself is unchanged


def test_a_released_share_gives_back_only_its_capacity():
    # Shares of 10 and 30: releasing s2 leaves 10 consumed, the device still in use (not exclusively).
    view = ReleasedView(_inventory(), {"ml/s2": _share("s2", 30)})
    assert view.consumed_capacity(SHARED) == {"memory": Fraction(10)}
    assert (view.is_allocated(SHARED), view.is_exclusively_allocated(SHARED)) == (True, False)
    both = ReleasedView(_inventory(), {"ml/s1": _share("s1", 10), "ml/s2": _share("s2", 30)})
    assert (both.is_allocated(SHARED), both.consumed_capacity(SHARED)) == (False, {})


def test_a_bind_reservation_is_never_released():
    inventory = _inventory()
    inventory.reserve("bind-1", _exclusive(GPU))
    view = ReleasedView(inventory, {"ml/a": _exclusive(GPU)})
    assert (view.is_allocated(GPU), view.is_exclusively_allocated(GPU)) == (True, True)


def test_devices_no_released_claim_used_are_answered_by_the_inventory():
    view = ReleasedView(_inventory(), {"ml/a": _exclusive(GPU)})
    assert view.consumed_capacity(SHARED) == {"memory": Fraction(40)}
    assert view.gates is not None  # everything else is the inventory's
