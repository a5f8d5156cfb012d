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
    # a: empty node, on NUMA node 0 and root 0. b: NUMA node 0 still had 2 free (2, 3) and root 1 both,
    # yet b spans NUMA nodes 0 and 1 and roots 1 and 2. c, once a is gone: free 0, 1, 3 | 4, 6, 7, no NUMA
    # node with 4, so its split is not held against it. d has a constraint: not judged.
    assert found == Alignment(
        numa_possible=2, numa_aligned=1, root_possible=2, root_aligned=1, claims=3, split=2
    )


def test_a_bind_at_the_time_of_a_free_sees_the_freed_gpus() -> None:
    holdings = {
        "a": Held("n", (0, 1, 2, 3), ()),
        "b": Held("n", (4, 5), ()),
        "c": Held("n", (0, 1, 2, 4), ()),
    }
    events = [(1.0, "bind", "a"), (1.5, "bind", "b"), (2.0, "bind", "c"), (2.0, "free", "a")]
    found = replay(events, holdings, {"a": Shape(4), "b": Shape(2), "c": Shape(4)})
    # c sees NUMA node 0 whole again (a freed at the same moment): it could have had one NUMA node.
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
