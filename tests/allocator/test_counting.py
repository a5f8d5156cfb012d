"""Counts decide "fits" / "does not fit" only where the search agrees; everything else is left to it.

The reference is the search itself (``Allocator.allocate``), run on the same node: a count verdict must be
the search's answer, and there must be one whenever the requests cannot compete for a device.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from allocator.counting import countable, verdict
from allocator.diagnose import diagnose
from allocator.errors import AllocatorError
from tests.allocator.builders import (
    CLASS_A,
    CLASS_B,
    DRIVER_A,
    DRIVER_B,
    NODE1,
    World,
    claim,
    device,
    request,
    result,
    slice_,
)


def gpus(n: int) -> dict[str, Any]:
    return slice_("gpus", DRIVER_A, "node-1", [device(f"gpu-{i}", model="x") for i in range(n)])


def counts_say(world: World, *claims) -> bool | None:
    found = verdict(world.inventory, world.selectors, NODE1, list(claims))
    return None if found is None else found.fits


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"requests": [request("r", count=2)]}, True),
        ({"requests": [request("r", mode="All")]}, False),
        ({"requests": [request("r", adminAccess=True)]}, False),
        ({"requests": [request("r", capacity={"requests": {"memory": "1Gi"}})]}, False),
        ({"requests": [{"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": CLASS_A}]}]}, False),
        ({"requests": [request("a"), request("b")], "constraints": [{"matchAttribute": "x.y/z"}]}, False),
        ({"requests": [request("r", count=33)]}, False),
    ],
)
def test_countable_shapes(spec, expected):
    parsed = claim("c", *spec["requests"], constraints=spec.get("constraints"))
    assert countable([parsed]) is expected


def test_enough_free_devices_fit_and_too_few_do_not():
    world = World(slices=[gpus(3)]).allocated("default/other", result("r", "gpu-0"))
    assert counts_say(world, claim("c", request("r", count=2))) is True
    short = verdict(world.inventory, world.selectors, NODE1, [claim("c", request("r", count=3))])
    assert short is not None and not short.fits and short.no_fit is not None
    assert short.no_fit.reason == (
        "claim default/c, request r: 2 of 3 matching device(s) usable (1 in use, 0 tainted), 3 needed"
    )
    assert not short.no_fit.unresolvable  # freeing gpu-0 would help
    assert world.allocate(claim("c", request("r", count=3))) is None


def test_no_fit_next_to_an_invalid_pool_is_left_to_the_search():
    # The search reports the invalid pool (a node-local error) rather than a plain "does not fit".
    duplicate = [device("gpu-0"), device("gpu-0")]
    world = World(slices=[gpus(1), slice_("bad", DRIVER_A, "broken", duplicate)])
    assert counts_say(world, claim("c", request("r"))) is True
    assert counts_say(world, claim("c", request("r", count=2))) is None


def test_requests_that_could_share_a_device_are_left_to_the_search():
    world = World(slices=[gpus(2)])
    two_claims = [claim("a", request("r")), claim("b", request("r"))]
    assert counts_say(world, *two_claims) is None
    assert world.allocate(*two_claims) is not None


def test_a_cel_error_on_some_device_is_left_to_the_search():
    # gpu-1 lacks the attribute the selector reads: whether that is an error depends on the search order.
    world = World(slices=[slice_("gpus", DRIVER_A, "node-1", [device("gpu-0", mem=80), device("gpu-1")])])
    selector = [{"cel": {"expression": f'device.attributes["{DRIVER_A}"].mem > 40'}}]
    wanted = claim("c", request("r", selectors=selector))
    assert counts_say(world, wanted) is None
    assert world.allocate(wanted) is not None


def test_shared_or_counter_consuming_devices_are_left_to_the_search():
    shared = device("gpu-0")
    shared["allowMultipleAllocations"] = True
    world = World(slices=[slice_("gpus", DRIVER_A, "node-1", [shared, device("gpu-1")])])
    assert counts_say(world, claim("c", request("r"))) is None


def test_devices_whose_node_selector_a_result_cannot_carry_are_left_to_the_search():
    # The search finds the device, then refuses to write a result with a two-term node selector.
    two_terms = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z9"]}]},
        ]
    }
    world = World(slices=[slice_("s", DRIVER_A, "pool", [device("a")], node=None, nodeSelector=two_terms)])
    wanted = claim("c", request("r"))
    with pytest.raises(AllocatorError, match="2 terms"):
        world.allocate(wanted)
    assert counts_say(world, wanted) is None


def test_fatal_claim_errors_are_raised_as_the_search_raises_them():
    world = World(slices=[gpus(2)])
    broken = claim("c", request("r", class_name="no-such-class"))
    with pytest.raises(AllocatorError) as by_search:
        world.allocate(broken)
    with pytest.raises(AllocatorError) as by_counts:
        counts_say(world, broken)
    assert str(by_counts.value) == str(by_search.value)


def _random_world(rng: random.Random) -> World:
    def devices(prefix: str, n: int) -> list[dict[str, Any]]:
        made = []
        for i in range(n):
            made.append(device(f"{prefix}-{i}", model=rng.choice("xy")))
            if rng.random() < 0.2:
                made[-1]["taints"] = [{"key": "maint", "effect": rng.choice(["NoSchedule", "NoExecute"])}]
        return made

    world = World(
        slices=[
            slice_("a", DRIVER_A, "node-1", devices("gpu", rng.randint(0, 6))),
            slice_("b", DRIVER_B, "node-1", devices("nic", rng.randint(0, 4))),
        ]
    )
    taken = [result("r", f"gpu-{i}") for i in range(6) if rng.random() < 0.3]
    taken += [result("r", f"nic-{i}", DRIVER_B) for i in range(4) if rng.random() < 0.3]
    return world.allocated("default/other", *taken) if taken else world


def _random_request(rng: random.Random, name: str, class_name: str, driver: str) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if rng.random() < 0.5:
        model = rng.choice("xy")
        fields["selectors"] = [{"cel": {"expression": f'device.attributes["{driver}"].model == "{model}"'}}]
    if rng.random() < 0.3:
        fields["tolerations"] = [{"key": "maint", "operator": "Exists"}]
    return request(name, class_name, count=rng.randint(1, 3), **fields)


def test_counts_agree_with_the_search_on_random_nodes():
    rng = random.Random(11)
    fitting = {True: 0, False: 0}
    for _ in range(400):
        world = _random_world(rng)
        kinds = rng.choice(
            [[(CLASS_A, DRIVER_A)], [(CLASS_A, DRIVER_A), (CLASS_B, DRIVER_B)], [(CLASS_A, DRIVER_A)] * 2]
        )
        requests = [_random_request(rng, f"r{i}", c, d) for i, (c, d) in enumerate(kinds)]
        claims = (
            [claim("c", *requests)]
            if rng.random() < 0.5
            else [claim(f"c{i}", r) for i, r in enumerate(requests)]
        )
        by_search = world.allocate(*claims) is not None
        by_counts = verdict(world.inventory, world.selectors, NODE1, claims)
        if by_counts is not None:
            assert by_counts.fits == by_search, claims
            fitting[by_counts.fits] += 1
            # A "no" carries the reason the search path gives (allocator.diagnose after the search).
            assert by_counts.no_fit == (
                None if by_search else diagnose(world.inventory, world.selectors, NODE1, claims)
            )
        if len({c for c, _ in kinds}) == len(kinds):  # requests of distinct classes never compete
            assert by_counts is not None, claims
    assert min(fitting.values()) > 50  # the generator makes both nodes that fit and nodes that do not
