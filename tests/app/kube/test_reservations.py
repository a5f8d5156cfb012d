"""``app.kube.reservations``: a fence's lifetime, read from resourceVersions and time."""

from __future__ import annotations

import threading

from allocator.deviceuse import allocated_devices
from app.kube.reservations import FENCE_SECONDS, WrittenReservations
from app.state.cluster import ClusterState
from tests.app.kube.conftest import DRIVER, NS, FakeClock
from tests.builders import claim, request

GPU0 = allocated_devices(
    {"devices": {"results": [{"request": "r", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}}, "t"
)


def claim_at(version: int) -> dict:
    found = claim(NS, "p-gpu", [request("gpu", "gpu", 1)])
    found["metadata"]["resourceVersion"] = str(version)
    return found


def fenced_at(version: str, index_version: int) -> tuple[WrittenReservations, ClusterState, FakeClock]:
    state, clock = ClusterState(), FakeClock()
    state.apply("ResourceClaim", claim_at(index_version))
    reservations = WrittenReservations(state, threading.RLock(), clock, ttl=600.0)
    reservations.fence(f"{NS}/p-gpu", GPU0, version)
    return reservations, state, clock


def test_a_fence_outlives_the_versions_before_its_write_and_ends_at_the_first_after_it():
    # The index is two versions behind the one the write was sent with (12): 11 is older, 13 is newer.
    reservations, state, _ = fenced_at("12", index_version=10)
    assert state.inventory.is_allocated(GPU0[0].id)
    reservations.observe("ResourceClaim", f"{NS}/p-gpu", claim_at(11))
    reservations.observe("ResourceClaim", f"{NS}/p-gpu", claim_at(12))
    assert state.inventory.is_allocated(GPU0[0].id)
    reservations.observe("ResourceClaim", f"{NS}/p-gpu", claim_at(13))
    assert not state.inventory.is_allocated(GPU0[0].id)
    assert f"{NS}/p-gpu" not in reservations


def test_a_fence_ends_when_the_claim_is_deleted():
    reservations, state, _ = fenced_at("12", index_version=12)
    reservations.observe("ResourceClaim", f"{NS}/p-gpu", None)
    assert not state.inventory.is_allocated(GPU0[0].id)


def test_no_fence_for_a_write_the_index_shows_overtaken():
    reservations, state, _ = fenced_at("12", index_version=14)
    assert not state.inventory.is_allocated(GPU0[0].id)
    assert f"{NS}/p-gpu" not in reservations


def test_a_fence_ends_once_the_api_server_has_given_up_on_the_request():
    reservations, state, clock = fenced_at("12", index_version=12)
    clock.advance(FENCE_SECONDS - 1)
    reservations.expire()
    assert state.inventory.is_allocated(GPU0[0].id)
    clock.advance(1)
    reservations.expire()
    assert not state.inventory.is_allocated(GPU0[0].id)
