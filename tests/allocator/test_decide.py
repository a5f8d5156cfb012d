"""``allocator.decide``: one node's decision, its three outcomes kept apart."""

from __future__ import annotations

from typing import Any

import pytest

from allocator import decide as decide_module
from allocator.decide import Fits, NoFit, Policy, SearchNeeded, Want, decide
from allocator.errors import AllocatorError
from tests.allocator.builders import DRIVER_A, NODE1, World, claim, device, request, result, slice_

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
