"""Scores on hand-worked nodes: components, weights, policies, unknown topology.

Nodes: 8 GPUs (driver A), NUMA node 0 = gpu-0..3, 1 = gpu-4..7, PCIe roots p0 = gpu-0/1, p1 = gpu-2/3,
p2 = gpu-4/5, p3 = gpu-6/7; optionally 4 NICs (driver B), nic-i on root pi and NUMA node i // 2.
Default weights numa 3, pcie 2, packing 2, intact 1, prioritized 8; score = floor(10 * weighted mean + 1/2).
``prioritized`` follows the in-tree plugin's Score: 8 - i per request given its firstAvailable subrequest i.
"""

from __future__ import annotations

from typing import Any

import pytest

from allocator.nodeselector import Node
from allocator.scoring import (
    NEUTRAL,
    FineScore,
    ScoringConfig,
    parse_weights,
    points,
    points_of,
    score_allocation,
)
from tests.allocator.builders import (
    CLASS_B,
    DRIVER_A,
    DRIVER_B,
    NODE1,
    NODE2,
    NUMA,
    World,
    claim,
    device,
    request,
    result,
    slice_,
    topology_gpu,
    topology_nic,
)


def gpus(node: str, *, topology: bool = True) -> dict[str, Any]:
    devices = [topology_gpu(i, numa=topology, root=topology) for i in range(8)]
    return slice_(f"{node}-gpus", DRIVER_A, node, devices, node=node)


def nics(node: str) -> dict[str, Any]:
    devices = [topology_nic(i) for i in range(4)]
    return slice_(f"{node}-nics", DRIVER_B, node, devices, node=node)


def used(world: World, node: str, *names: str) -> World:
    return world.allocated(f"default/used-{node}", *(result("x", n, pool=node) for n in names))


def allocation(node: str, *picks: tuple[str, str, str]) -> dict[str, Any]:
    """One claim's AllocationResult: (request, driver, device) per device."""
    return {"devices": {"results": [result(req, dev, driver=drv, pool=node) for req, drv, dev in picks]}}


def score(world: World, node: Node, c, *picks, config: ScoringConfig | None = None):
    return score_allocation(
        world.inventory, world.selectors, node, [c], [allocation(node.name, *picks)], config
    )


def components(breakdown) -> dict[str, float | None]:
    return {c.name: c.value for c in breakdown.components}


def test_two_gpus_on_one_numa_node_beat_two_split_across_two():
    world = World(slices=[gpus("node-1"), gpus("node-2")])
    used(world, "node-1", "gpu-0", "gpu-1", "gpu-4", "gpu-5", "gpu-6", "gpu-7")  # free: gpu-2, gpu-3 (NUMA 0)
    used(world, "node-2", "gpu-0", "gpu-1", "gpu-2", "gpu-5", "gpu-6", "gpu-7")  # free: gpu-3 (0), gpu-4 (1)
    c = claim("c", request("gpu", count=2))
    one = score(world, NODE1, c, ("gpu", DRIVER_A, "gpu-2"), ("gpu", DRIVER_A, "gpu-3"))
    split = score(world, NODE2, c, ("gpu", DRIVER_A, "gpu-3"), ("gpu", DRIVER_A, "gpu-4"))
    # node-1: numa 1 (one node), pcie n/a (one request), packing 8/8, intact 1 (p1 filled, not broken):
    # (3 + 2 + 1) / 6 = 1 -> 10. node-2: numa 1/2, packing 1, intact 1 (no whole group): 4.5 / 6 -> 8.
    assert components(one) == {"numa": 1.0, "pcie": None, "packing": 1.0, "intact": 1.0, "prioritized": None}
    assert components(split) == {
        "numa": 0.5,
        "pcie": None,
        "packing": 1.0,
        "intact": 1.0,
        "prioritized": None,
    }
    assert (one.score, split.score) == (10, 8)


def test_gpu_and_nic_on_one_root_beat_different_roots():
    world = World(slices=[gpus("node-1"), nics("node-1")])
    c = claim("c", request("gpu"), request("nic", class_name=CLASS_B))
    same = score(world, NODE1, c, ("gpu", DRIVER_A, "gpu-2"), ("nic", DRIVER_B, "nic-1"))
    other = score(world, NODE1, c, ("gpu", DRIVER_A, "gpu-2"), ("nic", DRIVER_B, "nic-0"))
    assert components(same)["pcie"] == 1.0
    assert components(other)["pcie"] == 0.0
    assert same.score > other.score
    # same: numa 1, pcie 1, packing 2/12, intact: groups numa0 (gpu-0..3, nic-0/1) and numa1, p0..p3
    # (gpu + nic each): p1 filled, numa0 broken -> 5/6. (3 + 2 + 2/6 + 5/6) / 8 = 0.77 -> 8.
    assert same.score == 8


def test_binpack_prefers_the_fuller_node_spread_the_emptier():
    world = World(slices=[gpus("node-1"), gpus("node-2")])
    used(world, "node-1", *(f"gpu-{i}" for i in range(6)))
    c = claim("c", request("gpu"))
    binpack = ScoringConfig("binpack")
    spread = ScoringConfig("spread")
    full = score(world, NODE1, c, ("gpu", DRIVER_A, "gpu-6"), config=binpack)
    empty = score(world, NODE2, c, ("gpu", DRIVER_A, "gpu-0"), config=binpack)
    assert components(full)["packing"] == 7 / 8
    assert components(empty)["packing"] == 1 / 8
    assert full.score > empty.score
    full = score(world, NODE1, c, ("gpu", DRIVER_A, "gpu-6"), config=spread)
    empty = score(world, NODE2, c, ("gpu", DRIVER_A, "gpu-0"), config=spread)
    assert components(full)["packing"] == 1 / 8
    assert components(empty)["packing"] == 7 / 8
    assert empty.score > full.score


def test_keeping_whole_groups_intact():
    world = World(slices=[gpus("node-1")])
    c = claim("c", request("gpu", count=2))
    whole_root = score(world, NODE1, c, ("gpu", DRIVER_A, "gpu-0"), ("gpu", DRIVER_A, "gpu-1"))
    across = score(world, NODE1, c, ("gpu", DRIVER_A, "gpu-1"), ("gpu", DRIVER_A, "gpu-2"))
    # Whole free groups before: numa0, numa1, p0..p3 = 6. A whole root: numa0 broken -> 5/6;
    # across p0/p1: numa0, p0, p1 broken -> 3/6.
    assert components(whole_root)["intact"] == pytest.approx(5 / 6)
    assert components(across)["intact"] == pytest.approx(3 / 6)
    assert whole_root.score >= across.score


def test_unknown_topology_is_neutral_not_numa_zero():
    world = World(slices=[gpus("node-1", topology=False)])
    c = claim("c", request("gpu", count=2))
    breakdown = score(world, NODE1, c, ("gpu", DRIVER_A, "gpu-0"), ("gpu", DRIVER_A, "gpu-1"))
    by_name = {c.name: c for c in breakdown.components}
    assert (by_name["numa"].value, by_name["numa"].detail) == (NEUTRAL, "NUMA node unknown (not published)")
    assert (by_name["intact"].value, by_name["intact"].detail) == (
        NEUTRAL,
        "no NUMA / PCIe topology published",
    )
    # (3 * 0.5 + 2 * 2/8 + 1 * 0.5) / 6 = 0.4167 -> 4
    assert breakdown.score == 4


def test_partly_known_numa_counts_unknown_devices_as_neutral():
    devices = [device("gpu-0", **{NUMA: 0}), device("gpu-1")]
    world = World(slices=[slice_("s", DRIVER_A, "node-1", devices)])
    breakdown = score(
        world,
        NODE1,
        claim("c", request("gpu", count=2)),
        ("gpu", DRIVER_A, "gpu-0"),
        ("gpu", DRIVER_A, "gpu-1"),
    )
    numa = next(c for c in breakdown.components if c.name == "numa")
    assert numa.value == 0.5 * 1.0 + 0.5 * NEUTRAL
    assert numa.detail == "1 device(s) on NUMA node 0, 1 unknown"


def first_available(name: str, *subs: tuple[str, str]) -> dict[str, Any]:
    """A request with one firstAvailable subrequest per (name, class)."""
    return {"name": name, "firstAvailable": [{"name": n, "deviceClassName": c} for n, c in subs]}


def test_first_subrequest_on_one_node_beats_the_second_on_another():
    # Both nodes: gpu-0 (class A) and nic-0 (class B), no topology; node-1's NIC and node-2's GPU are in use.
    world = World(
        slices=[
            slice_(f"{n}-{kind}", drv, n, [device(f"{kind}-0")], node=n)
            for n in ("node-1", "node-2")
            for kind, drv in (("gpu", DRIVER_A), ("nic", DRIVER_B))
        ]
    )
    world.allocated("default/used-1", result("x", "nic-0", driver=DRIVER_B, pool="node-1"))
    world.allocated("default/used-2", result("x", "gpu-0", pool="node-2"))
    c = claim("c", first_available("dev", ("gpu", "class-a"), ("nic", CLASS_B)))
    on_1, on_2 = world.allocate(c, node=NODE1), world.allocate(c, node=NODE2)
    assert [r["request"] for r in on_1[0]["devices"]["results"]] == ["dev/gpu"]
    assert [r["request"] for r in on_2[0]["devices"]["results"]] == ["dev/nic"]
    first = score_allocation(world.inventory, world.selectors, NODE1, [c], on_1)
    second = score_allocation(world.inventory, world.selectors, NODE2, [c], on_2)
    # Upstream raw score: 8 - 0 on node-1, 8 - 1 on node-2; divided by the best possible (8).
    # Both: numa and pcie n/a (one device), packing 2/2 in use, intact 0.5 (no topology).
    # node-1: (2 + 0.5 + 8 * 1) / 11 = 0.955 -> 10; node-2: (2 + 0.5 + 8 * 7/8) / 11 = 0.864 -> 9.
    assert components(first) == {
        "numa": None,
        "pcie": None,
        "packing": 1.0,
        "intact": 0.5,
        "prioritized": 1.0,
    }
    assert components(second)["prioritized"] == 7 / 8
    assert (first.score, second.score) == (10, 9)
    detail = next(x.detail for x in second.components if x.name == "prioritized")
    assert detail == "firstAvailable rank 7 of best 8 (default/c/dev got subrequest 2 of 2)"


def test_prioritized_sums_over_first_available_requests_only():
    world = World(slices=[gpus("node-1")])
    c = claim(
        "c",
        first_available("a", ("a0", "class-a"), ("a1", "class-a"), ("a2", "class-a")),
        first_available("b", ("b0", "class-a"), ("b1", "class-a")),
        request("e"),
    )
    picks = [("a/a2", DRIVER_A, "gpu-0"), ("b/b0", DRIVER_A, "gpu-1"), ("e", DRIVER_A, "gpu-2")]
    # a: 8 - 2 = 6, b: 8 - 0 = 8, e (exactly): nothing; best possible 8 + 8.
    assert components(score(world, NODE1, c, *picks))["prioritized"] == 14 / 16
    plain = claim("p", request("gpu", count=2))
    breakdown = score(world, NODE1, plain, ("gpu", DRIVER_A, "gpu-0"), ("gpu", DRIVER_A, "gpu-1"))
    assert components(breakdown)["prioritized"] is None


def test_weights_change_the_mean():
    world = World(slices=[gpus("node-1"), gpus("node-2")])
    c = claim("c", request("gpu", count=2))
    split = [("gpu", DRIVER_A, "gpu-3"), ("gpu", DRIVER_A, "gpu-4")]
    only_numa = ScoringConfig(weights={"numa": 1, "pcie": 0, "packing": 0, "intact": 0})
    assert score(world, NODE1, c, *split, config=only_numa).score == 5
    only_packing = ScoringConfig(weights={"numa": 0, "pcie": 0, "packing": 1, "intact": 0})
    packed = score(world, NODE1, c, *split, config=only_packing)
    assert (packed.score, packed.fine_score) == (3, 3000)  # 2/8 -> 2.5 -> 3 (half up); 3.0 in thousandths


def test_weights_are_at_most_1000_so_their_sums_stay_finite():
    # Two weights of 1e308 summed to inf: the mean was inf / inf = nan, and prioritize a ValueError.
    message = (
        r"^score weights: at most 1000 each \(only their ratios matter\), got numa=1e\+308, packing=1e\+308$"
    )
    with pytest.raises(ValueError, match=message):
        ScoringConfig(weights={"numa": 1e308, "packing": 1e308})
    world = World(slices=[gpus("node-1")])
    c = claim("c", request("gpu", count=2))
    split = [("gpu", DRIVER_A, "gpu-3"), ("gpu", DRIVER_A, "gpu-4")]
    heaviest = ScoringConfig(weights={"numa": 1000, "pcie": 0, "packing": 1000, "intact": 0})
    # numa 1/2, packing 2/8: (1000 * 0.5 + 1000 * 0.25) / 2000 = 0.375 -> 3.75 -> 4 (half up)
    heavy = score(world, NODE1, c, *split, config=heaviest)
    assert (heavy.score, heavy.fine_score) == (4, 4250)


def test_a_mean_on_a_step_is_not_rounded_below_it():
    # Default weights, no topology: packing 23/25 at weight 2, intact neutral 0.5 at weight 1:
    # (2 * 23/25 + 0.5) / 3 = 0.78 exactly, 10 * 0.78 + 0.5 = 8.3 -> 8300 thousandths (unslacked floating
    # point: 8299.99...).
    devices = [topology_gpu(i, numa=False, root=False) for i in range(25)]
    world = used(
        World(slices=[slice_("node-1-gpus", DRIVER_A, "node-1", devices, node="node-1")]),
        "node-1",
        *(f"gpu-{i}" for i in range(22)),
    )
    breakdown = score(world, NODE1, claim("c", request("gpu")), ("gpu", DRIVER_A, "gpu-22"))
    assert components(breakdown)["packing"] == 23 / 25
    assert (breakdown.fine_score, breakdown.score) == (8300, 8)


def test_a_fine_score_holds_the_half_point_that_rounds_it():
    assert [points(fine) for fine in (0, 499, 500, 2999, 3000, 3833, 10_500)] == [0, 0, 0, 2, 3, 3, 10]
    assert points_of(map(FineScore, [4999, 5000, 10_999])) == [4, 5, 10]


def test_no_new_device_scores_zero():
    world = World(slices=[gpus("node-1")])
    assert score_allocation(world.inventory, world.selectors, NODE1, [], []).score == 0


def test_scores_are_deterministic():
    world = World(slices=[gpus("node-1"), nics("node-1")])
    c = claim("c", request("gpu", count=3), request("nic", class_name=CLASS_B))
    picks = [
        ("gpu", DRIVER_A, "gpu-0"),
        ("gpu", DRIVER_A, "gpu-1"),
        ("gpu", DRIVER_A, "gpu-4"),
        ("nic", DRIVER_B, "nic-0"),
    ]
    assert score(world, NODE1, c, *picks) == score(world, NODE1, c, *picks)


def test_parse_weights_and_validation():
    assert parse_weights("numa=5, intact=0") == {
        "numa": 5.0,
        "pcie": 2.0,
        "packing": 2.0,
        "intact": 0.0,
        "prioritized": 8.0,
    }
    for bad, message in [
        ("cpu=1", "score weight 'cpu=1': expected one of numa, pcie, packing, intact, prioritized=<number>"),
        ("numa", "score weight 'numa': expected one of numa, pcie, packing, intact, prioritized=<number>"),
        ("numa=x", "score weight numa: not a number: 'x'"),
    ]:
        with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
            parse_weights(bad)
    with pytest.raises(ValueError, match="scoring policy"):
        ScoringConfig("pack")
    with pytest.raises(ValueError, match="at least one must be positive"):
        ScoringConfig(weights={"numa": 0, "pcie": 0, "packing": 0, "intact": 0})
    with pytest.raises(ValueError, match=">= 0"):
        ScoringConfig(weights={"numa": -1})
