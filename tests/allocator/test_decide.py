"""``allocator.decide``: one node's decision, its three outcomes kept apart."""

from __future__ import annotations

import random
from typing import Any

import pytest

from allocator import decide as decide_module
from allocator.decide import Fits, NoFit, Policy, SearchNeeded, Want, decide
from allocator.errors import AllocatorError
from tests.allocator.builders import (
    CLASS_A,
    CLASS_B,
    DRIVER_A,
    DRIVER_B,
    NODE1,
    NUMA,
    ROOT,
    World,
    claim,
    device,
    request,
    result,
    slice_,
)

POLICY = Policy()


def gpus(n: int) -> dict[str, Any]:
    return slice_("gpus", DRIVER_A, "node-1", [device(f"gpu-{i}") for i in range(n)])


def test_a_fit_comes_with_its_devices_and_score():
    world = World(slices=[gpus(2)])
    decided = decide(world.inventory, world.selectors, NODE1, [claim("c", request("r", count=2))], POLICY)
    assert isinstance(decided, Fits) and decided.fine_score is not None and decided.breakdown is not None
    assert [r["device"] for r in decided.results[0]["devices"]["results"]] == ["gpu-0", "gpu-1"]


def test_counts_settle_a_fit_without_choosing_devices_unless_asked():
    world = World(slices=[gpus(2)])
    claims = [claim("c", request("r", count=2))]
    assert decide(world.inventory, world.selectors, NODE1, claims, POLICY, Want.VERDICT) == Fits((), None)


def test_no_fit_gives_the_reason_and_whether_freeing_devices_could_help():
    world = World(slices=[gpus(2)]).allocated("default/other", result("r", "gpu-0"))
    decided = decide(world.inventory, world.selectors, NODE1, [claim("c", request("r", count=2))], POLICY)
    assert decided == NoFit(
        "claim default/c, request r: 1 of 2 matching device(s) usable (1 in use, 0 tainted), 2 needed", False
    )


def test_a_fatal_claim_raises():
    world = World(slices=[gpus(1)])
    with pytest.raises(AllocatorError):
        decide(world.inventory, world.selectors, NODE1, [claim("c", request("r", "no-such-class"))], POLICY)


def test_without_the_search_what_counts_cannot_settle_is_left_undecided():
    world = World(slices=[gpus(2)])
    all_devices = [claim("c", request("r", mode="All"))]
    with pytest.raises(SearchNeeded):
        decide(world.inventory, world.selectors, NODE1, all_devices, POLICY, search=False)


def test_devices_of_a_known_fit_are_searched_for_without_counting_first(monkeypatch):
    world = World(slices=[gpus(2)])
    claims = [claim("c", request("r", count=2))]
    counted: list[str] = []
    count = decide_module.verdict
    monkeypatch.setattr(decide_module, "verdict", lambda *a: counted.append("count") or count(*a))
    scored = decide(world.inventory, world.selectors, NODE1, claims, POLICY, Want.SCORE)
    assert counted == ["count"]
    chosen = decide(world.inventory, world.selectors, NODE1, claims, POLICY, Want.DEVICES)
    assert counted == ["count"]  # no second count
    assert isinstance(chosen, Fits) and chosen == scored


def test_a_quick_decision_takes_the_devices_one_pass_of_the_search_finds_without_counting(monkeypatch):
    # Counting before a quick search guards the event loop against a search that backtracks; a first fit
    # found in one pass over the node's devices needs no such guard, and is the fit the full decision of
    # the devices (which searches without counting) returns.
    world = World(slices=[gpus(4)]).allocated("default/other", result("r", "gpu-1"))
    claims = [claim("c", request("r", count=2))]
    full = decide(world.inventory, world.selectors, NODE1, claims, POLICY, Want.DEVICES)
    counted: list[str] = []
    count = decide_module.verdict
    monkeypatch.setattr(decide_module, "verdict", lambda *a: counted.append("count") or count(*a))
    quick = decide(world.inventory, world.selectors, NODE1, claims, POLICY, Want.DEVICES, search=False)
    assert isinstance(quick, Fits) and quick == full
    assert [r["device"] for r in quick.results[0]["devices"]["results"]] == ["gpu-0", "gpu-2"]
    assert counted == []


def test_a_quick_decision_the_first_pass_cannot_settle_is_counted_as_before():
    # gpu-0 of 2 in use: one pass finds one device of the two, so counts give the reason.
    world = World(slices=[gpus(2)]).allocated("default/other", result("r", "gpu-0"))
    claims = [claim("c", request("r", count=2))]
    quick = decide(world.inventory, world.selectors, NODE1, claims, POLICY, Want.DEVICES, search=False)
    assert quick == NoFit(
        "claim default/c, request r: 1 of 2 matching device(s) usable (1 in use, 0 tainted), 2 needed", False
    )


def test_a_quick_search_stops_after_one_pass_over_the_devices(monkeypatch):
    # Two requests on four devices: one pass is at most 2 x 4 devices tried; the search gets that limit.
    world = World(slices=[gpus(4)])
    claims = [claim("c", request("a", count=1), request("b", count=1))]
    limits: list[int | None] = []
    select = decide_module.select
    monkeypatch.setattr(
        decide_module, "select", lambda *a, **k: limits.append(k.get("first_steps")) or select(*a, **k)
    )
    decide(world.inventory, world.selectors, NODE1, claims, POLICY, Want.DEVICES, search=False)
    decide(world.inventory, world.selectors, NODE1, claims, POLICY, Want.DEVICES)
    assert limits == [8, None]


def test_a_quick_score_counts_first_as_the_full_one_does():
    # A device of another node (a perDeviceNodeSelection slice) fails the request's selector at runtime:
    # the search meets it and raises, counts skip it and say no. Both scores count first: the same "no".
    off = {**device("far"), "nodeName": "node-2"}  # no attribute x
    on = {**device("near-0", x=1), "nodeName": "node-1"}
    fabric = slice_("fabric", DRIVER_A, "fabric", [off, on], node=None, perDeviceNodeSelection=True)
    world = World(slices=[fabric])
    selector = {"cel": {"expression": 'device.attributes["driver-a.example.com"].x == 1'}}
    claims = [claim("c", request("r", count=2, selectors=[selector]))]
    full = decide(world.inventory, world.selectors, NODE1, claims, POLICY, Want.SCORE)
    assert isinstance(full, NoFit)
    assert decide(world.inventory, world.selectors, NODE1, claims, POLICY, Want.SCORE, search=False) == full


def _random_world(rng: random.Random) -> tuple[World, list[Any]]:
    """A node with GPUs of two drivers (some with topology, some tainted, some taken) and one or two claims
    of one or two requests: the shapes counts can decide and some they cannot."""

    def gpus_of(prefix: str) -> list[dict[str, Any]]:
        made = []
        for i in range(rng.randint(0, 6)):
            attributes: dict[str, Any] = {"idx": i}
            if rng.random() < 0.5:
                attributes.update({NUMA: i // 2, ROOT: f"p{i // 2}"})
            made.append(device(f"{prefix}-{i}", **attributes))
            if rng.random() < 0.15:
                made[-1]["taints"] = [{"key": "broken", "effect": "NoSchedule"}]
        return made

    a, b = gpus_of("a"), gpus_of("b")
    world = World(slices=[slice_("a", DRIVER_A, "node-1", a), slice_("b", DRIVER_B, "node-1-b", b)])
    taken = [result("r", d["name"]) for d in a if rng.random() < 0.3]
    if taken:
        world.allocated("default/other", *taken)
    claims = []
    for c in range(rng.randint(1, 2)):
        requests = []
        for r in range(rng.randint(1, 2)):
            selectors = []
            if rng.random() < 0.3:
                driver = DRIVER_A if rng.random() < 0.5 else DRIVER_B
                selectors = [{"cel": {"expression": f'device.attributes["{driver}"].idx % 2 == 0'}}]
            fields: dict[str, Any] = {"selectors": selectors} if selectors else {}
            class_name = CLASS_A if rng.random() < 0.6 else CLASS_B
            requests.append(request(f"r{r}", class_name, count=rng.randint(1, 3), **fields))
        claims.append(claim(f"c{c}", *requests))
    return world, claims


@pytest.mark.parametrize("seed", range(300))
def test_a_quick_decision_is_the_full_decision_or_declined(seed):
    # Against the full decision of the same node: the quick one may decline (SearchNeeded), never differ.
    world, claims = _random_world(random.Random(seed))

    def outcome(want: Want, search: bool) -> object:
        try:
            return decide(world.inventory, world.selectors, NODE1, claims, POLICY, want, search=search)
        except AllocatorError as e:  # fatal for the pod: the same error either way
            return (type(e), str(e))

    for want in (Want.SCORE, Want.DEVICES):
        full = outcome(want, True)
        try:
            quick = outcome(want, False)
        except SearchNeeded:
            continue
        assert quick == full
