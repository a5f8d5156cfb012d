"""Each per-device rule once: the funnel counts exactly the devices the search could pick.

For every request alternative of generated states (``tests/oracle/states.py``) the funnel's usable count
(after every per-device stage) must equal the number of devices the search itself places for that
alternative when it is offered one device at a time: a one-device copy of the alternative, in a claim
without the other requests and without constraints (the funnel's constraint stage is a question about the
whole claim, not about one device). The search is asked as a black box, so the two sides are computed
independently of each other.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings

from allocator.errors import AllocatorError, NodeLocalError
from allocator.features import FeatureGates
from allocator.funnel import request_funnel
from allocator.model import Claim, DeviceRequest, Request
from allocator.search import Allocator, Candidate
from tests.allocator.builders import DRIVER_A, NODE1, World, claim, device, request, result, slice_
from tests.oracle.product import Loaded, load
from tests.oracle.states import states

STATES = 300


def _probe(claim: Claim, alt: DeviceRequest) -> Claim:
    """A claim asking for one device as ``alt`` would, and nothing else."""
    one = replace(alt, mode="ExactCount", count=1)
    return replace(claim, requests=(Request(alt.parent, (one,), alt.is_subrequest),), constraints=())


def pickable(loaded: Loaded, claim: Claim, alt: DeviceRequest) -> list[str] | None:
    """The devices (``driver/pool/device``) the search places for ``alt`` when each is the only one it
    may take; None when the search refuses the request itself (a pod-fatal validation error, before any
    device is looked at: the funnel has nothing to agree with then)."""
    probe = _probe(claim, alt)
    try:
        Allocator(loaded.inventory, loaded.selectors).validate([probe])
    except AllocatorError:
        return None
    pools = loaded.inventory.pools_for(loaded.node)
    devices = [d for pool in pools for s in pool.slices for d in s.devices]
    picked = []
    for index, offered in enumerate(devices):

        def only(found: list[Candidate], index: int = index) -> list[Candidate]:
            return found[index : index + 1]

        try:
            results = Allocator(loaded.inventory, loaded.selectors).allocate(loaded.node, [probe], only)
        except (AllocatorError, NodeLocalError):
            continue  # failing the pod (a CEL or capacity error) or the node (no fit, an invalid pool)
        if results is not None:
            picked.append(f"{offered.driver}/{offered.pool}/{offered.name}")
    return picked


def _agree(loaded: Loaded) -> list[dict[str, Any]]:
    """Per request alternative whose funnel and search disagree: both answers."""
    found = []
    for claim_ in loaded.claims:
        for req in claim_.requests:
            for alt in req.alternatives:
                picked = pickable(loaded, claim_, alt)
                if picked is None:
                    continue
                funnel = request_funnel(loaded.inventory, loaded.selectors, loaded.node, claim_, alt)
                if funnel.usable != len(picked):
                    stages = [(s.name, s.count, [r.message for r in s.examples]) for s in funnel.stages]
                    found.append({"request": alt.name, "search": picked, "funnel": stages})
    return found


@settings(
    max_examples=STATES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(state=states())
def test_funnel_counts_the_devices_the_search_can_pick(state: dict[str, Any]) -> None:
    try:
        loaded = load(state)
    except AllocatorError:
        return
    disagreements = _agree(loaded)
    assert not disagreements, f"state: {json.dumps(state)}\n{json.dumps(disagreements, indent=1)}"


def attached(name: str) -> dict[str, Any]:
    d = device(name)
    d["bindingConditions"] = ["dra.example.com/attached"]
    return d


def test_binding_conditions_need_both_gates_in_the_funnel_too():
    """kube-scheduler enables devices with binding conditions only when DRADeviceBindingConditions and
    DRAResourceClaimDeviceStatus are both on: with the second off, the attached device is usable by
    neither the search nor the funnel (the funnel used to count it)."""
    gates = FeatureGates(DRADeviceBindingConditions=True, DRAResourceClaimDeviceStatus=False)
    world = World(
        slices=[slice_("s1", DRIVER_A, "node-1", [device("plain"), attached("attached")])], gates=gates
    )
    c = claim("c", request("r", count=2))
    loaded = Loaded(world.inventory, world.selectors, NODE1, [c])
    alt = c.requests[0].alternatives[0]
    assert pickable(loaded, c, alt) == [f"{DRIVER_A}/node-1/plain"]
    funnel = request_funnel(world.inventory, world.selectors, NODE1, c, alt)
    assert funnel.usable == 1
    assert world.allocate(c) is None


def shared(name: str) -> dict[str, Any]:
    d = device(name)
    d["allowMultipleAllocations"] = True
    return d


def usable_both_ways(world: World, c: Claim) -> tuple[list[str] | None, int]:
    """What the search can pick for the claim's first request, and the funnel's usable count."""
    alt = c.requests[0].alternatives[0]
    loaded = Loaded(world.inventory, world.selectors, NODE1, [c])
    return pickable(loaded, c, alt), request_funnel(world.inventory, world.selectors, NODE1, c, alt).usable


def test_a_share_is_in_use_while_consumable_capacity_is_off():
    """With DRAConsumableCapacity off, upstream counts every allocated device whole (a share too): the
    shared device is in use for the search and the funnel alike (the funnel used to count it)."""
    world = World(
        slices=[slice_("s1", DRIVER_A, "node-1", [device("plain"), shared("multi")])],
        gates=FeatureGates(DRAConsumableCapacity=False),
    )
    world.allocated("default/other", result("r", "multi", shareID="11111111-1111-1111-1111-111111111111"))
    assert usable_both_ways(world, claim("c", request("r"))) == ([f"{DRIVER_A}/node-1/plain"], 1)


def test_admin_access_may_share_a_device_allocated_without_share_id():
    """An adminAccess request may take a device in use, also a multi-allocatable one allocated without
    shareID (the funnel used to refuse it as "allocated exclusively")."""
    world = World(slices=[slice_("s1", DRIVER_A, "node-1", [device("plain"), shared("multi")])])
    world.allocated("default/other", result("r", "multi"))
    both = [f"{DRIVER_A}/node-1/plain", f"{DRIVER_A}/node-1/multi"]
    assert usable_both_ways(world, claim("c", request("r", adminAccess=True))) == (both, 2)
