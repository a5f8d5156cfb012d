"""``make bench-placement``'s bookkeeping, which needs no control plane: the seeded plan, the replay that
judges each claim against its node's free GPUs when it was bound, and reading claims back."""

from __future__ import annotations

from bench.bench_placement import MIX, SHAPES, WAVE, Alignment, _whole, plan, replay
from e2e.topology import Held, Shape, held


def test_replay_judges_each_claim_against_the_gpus_free_when_it_was_bound() -> None:
    two, four, constrained = Shape(2), Shape(4), Shape(4, 1, "resource.kubernetes.io/numaNode")
    holdings = {
        "a": Held("n", (0, 1), ()),
        "b": Held("n", (2, 5), ()),
        "c": Held("n", (0, 1, 3, 4), ()),
        "d": Held("m", (4, 5, 6, 7), (2,)),
    }
    events = [(1.0, "bind", "a"), (2.0, "bind", "b"), (3.0, "free", "a"), (4.0, "bind", "c")]
    events.append((5.0, "bind", "d"))
    found = replay(events, holdings, {"a": two, "b": two, "c": four, "d": constrained})
    # a and b share a stretch (no free between them), which ends with 0, 1, 2, 5 held. a: free then
    # 3, 4, 6, 7 and its own 0, 1: on NUMA node 0 and root 0, as it could. b: 3, 4, 6, 7 and its own 2, 5,
    # so NUMA node 0 had 2 and root 1 both, yet b spans NUMA nodes 0 and 1 and roots 1 and 2. c, once a is
    # gone: free 6, 7 and its own 0, 1, 3, 4, no NUMA node with 4, so its split is not held against it.
    # d has a constraint: not judged.
    assert found == Alignment(
        numa_possible=2, numa_aligned=1, root_possible=2, root_aligned=1, claims=3, split=2
    )


def test_a_claim_is_judged_against_what_its_stretch_of_binds_left_free() -> None:
    # Binds written in another order than their devices were chosen: x's (3, 4) shows first, but the
    # node ends the stretch full, so x may have been chosen last, when 3 and 4 were all that was free.
    # Judged one by one in written order x would look split on an empty node.
    holdings = {
        "x": Held("n", (3, 4), ()),
        "w": Held("n", (0, 1), ()),
        "u1": Held("n", (2,), ()),
        "u2": Held("n", (5,), ()),
        "w2": Held("n", (6, 7), ()),
    }
    shapes = {"x": Shape(2), "w": Shape(2), "u1": Shape(1), "u2": Shape(1), "w2": Shape(2)}
    events = [(float(t), "bind", pod) for t, pod in enumerate(holdings)]
    found = replay(events, holdings, shapes)
    # x: free {3, 4}, one GPU per NUMA node and per root: no choice. w: {0, 1}, w2: {6, 7}: one each.
    assert found == Alignment(
        numa_possible=2, numa_aligned=2, root_possible=2, root_aligned=2, claims=3, split=1
    )


def test_a_bind_at_the_time_of_a_free_sees_the_freed_gpus() -> None:
    holdings = {
        "a": Held("n", (0, 1, 2, 3), ()),
        "b": Held("n", (4, 5), ()),
        "c": Held("n", (0, 1, 2, 4), ()),
    }
    events = [(1.0, "bind", "a"), (1.5, "bind", "b"), (2.0, "bind", "c"), (2.0, "free", "a")]
    found = replay(events, holdings, {"a": Shape(4), "b": Shape(2), "c": Shape(4)})
    # a and b: one stretch, each had its NUMA node. c comes after the free of a at the same moment, so it
    # had NUMA node 0 whole again (free 3, 6, 7 and its own 0, 1, 2, 4), yet spans both.
    assert (found.numa_possible, found.numa_aligned, found.split) == (3, 2, 1)


def test_the_plan_is_seeded_and_refills_to_the_utilisation() -> None:
    gpus = 8 * 10
    first = plan(7, gpus, rounds=3, utilisation=0.7, churn=0.25, wave=5)
    assert first == plan(7, gpus, rounds=3, utilisation=0.7, churn=0.25, wave=5)
    assert first != plan(8, gpus, rounds=3, utilisation=0.7, churn=0.25, wave=5)
    live: dict[str, int] = {}
    for batch in first.batches:
        assert set(batch.departures) <= set(live)
        for pod in batch.departures:
            del live[pod]
        assert batch.arrivals, "every batch brings pods"
        for pod, template in batch.arrivals:
            assert template in MIX and pod not in live
            live[pod] = SHAPES[template].gpus
        # Arrivals stop at the first pod that reaches 70 % (56 GPUs): at most one pod (8 GPUs) above.
        assert 56 <= sum(live.values()) < 56 + 8
    assert len(first.batches) == 4 and len(first.wave) == 5
    assert {template for _, template in first.wave} <= set(WAVE)


def test_whole_groups_count_numa_nodes_and_nodes_with_every_gpu_free() -> None:
    # n1: GPUs 0-3 (NUMA node 0) held, NUMA node 1 whole; n2: one GPU of each NUMA node; n3: empty.
    holdings = [Held("n1", (0, 1, 2, 3), ()), Held("n2", (3,), ()), Held("n2", (7,), (3,))]
    assert _whole(holdings, ["n1", "n2", "n3"]) == (1 + 0 + 2, 1)


def test_held_reads_gpus_and_nics_of_an_allocated_claim() -> None:
    results = [
        {"request": "gpus", "driver": "x.gpu.example.com", "pool": "node-1", "device": "gpu-6"},
        {"request": "gpus", "driver": "x.gpu.example.com", "pool": "node-1", "device": "gpu-4"},
        {"request": "nics", "driver": "x.nic.example.com", "pool": "node-1", "device": "nic-2"},
    ]
    claim = {"status": {"allocation": {"devices": {"results": results}}}}
    have = held(claim)
    assert have == Held("node-1", (4, 6), (2,))
    assert have.numa_nodes == {1} and have.roots == {2, 3}
    assert held({"status": {}}) is None
