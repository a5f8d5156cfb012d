"""Placement that keeps large pods fitting (``make bench-placement`` at scale): the same pods through the
extender and through kube-scheduler's in-tree DynamicResources plugin, on twin scenarios (each its own
drivers and nodes of ``e2e.topology``'s shape: 8 GPUs, 2 NUMA nodes, 4 PCIe roots, a NIC per root)."""

from __future__ import annotations

import pytest

from e2e.topology import Shape, add_shape_template, add_topology_nodes, held
from e2e.workload import EXTENDER_SCHEDULER, IN_TREE_SCHEDULER, Scenario, in_tree_scheduler

pytestmark = pytest.mark.e2e

TWO, NUMA4, EIGHT = "two-gpus", "numa4", "eight-gpus"


def _twins(scenario: Scenario, nodes: int, order: str) -> list[tuple[Scenario, str]]:
    in_tree_scheduler(scenario.plane)
    twin = Scenario.create(scenario.plane, f"{scenario.name}-in-tree")
    pairs = [(scenario, EXTENDER_SCHEDULER), (twin, IN_TREE_SCHEDULER)]
    for sc, _ in pairs:
        add_topology_nodes(sc, nodes, order)
        add_shape_template(sc, TWO, Shape(2))
        add_shape_template(sc, NUMA4, Shape(4, 0, "resource.kubernetes.io/numaNode"))
        add_shape_template(sc, EIGHT, Shape(8))
    return pairs


def _one_by_one(
    sc: Scenario, scheduler: str, pods: list[tuple[str, str]], limits: dict[str, str] | None = None
) -> dict[str, str]:
    """Create the pods one at a time, each once the one before has settled (a fixed order)."""
    states: dict[str, str] = {}
    for name, template in pods:
        sc.add_pod(name, template=template, scheduler=scheduler, limits=limits)
        states = sc.wait_settled(timeout=60)
    return states


def _gpus(sc: Scenario, pod: str) -> tuple[int, ...]:
    have = held(sc.pod_claim(sc.pod(pod)))
    assert have is not None, f"{pod}: claim not allocated"
    return have.gpus


def test_aligned_pairs_keep_numa_whole(scenario: Scenario) -> None:
    """One node whose GPU slice lists the GPUs alternating NUMA nodes (gpu-0, gpu-4, gpu-1, gpu-5, ...),
    two pods of 2 GPUs without a constraint, then a pod of 4 GPUs on one NUMA node (``matchAttribute``).
    By hand: first fit takes the first free GPUs in slice order, {0, 4} then {1, 5}, which leaves 2 GPUs
    free on each NUMA node, so the 4-GPU pod fits nowhere; the extender puts both pairs on one NUMA node
    (the second on the tighter one), so the other stays whole and the 4-GPU pod gets it."""
    pods = [("pair-a", TWO), ("pair-b", TWO), ("numa-four", NUMA4)]
    ours, theirs = _twins(scenario, 1, "interleaved")

    states = _one_by_one(*ours, pods)
    assert states == dict.fromkeys(states, "bound")
    numa = [{g // 4 for g in _gpus(scenario, p)} for p, _ in pods]
    assert numa[0] == numa[1] and len(numa[0]) == 1, numa
    assert numa[2] == {0, 1} - numa[0], numa

    twin = theirs[0]
    states = _one_by_one(*theirs, pods)
    assert states == {"pair-a": "bound", "pair-b": "bound", "numa-four": "unschedulable"}
    assert (_gpus(twin, "pair-a"), _gpus(twin, "pair-b")) == ((0, 4), (1, 5))


def test_packing_keeps_a_node_whole(scenario: Scenario) -> None:
    """Two nodes (64 CPUs each), four pods of 2 GPUs and 8 CPUs, then a pod of 8 GPUs. By hand:
    kube-scheduler's NodeResourcesFit (LeastAllocated over CPU and memory; 200 MB counted for a pod without
    a memory request) scores a node (64 - 8 x pods) / 64 x 100 for CPU and 99 for memory, and
    BalancedAllocation 100 - 100 x |CPU share - memory share| / 2: 93 + 93 for the empty node and 87 + 87
    for the other when the second pair comes, so it goes to the other node than the first, the fourth
    likewise (2 + 2), and the 8-GPU pod fits nowhere. With the extender, its prioritize (binpack; weights
    numa 3, packing 2, intact 1) scores the second pair 8 on the first pair's node ((3 + 2 x 4/8 + 1) / 6)
    and 7 on the empty one ((3 + 2 x 2/8 + 5/6) / 6: one of its 6 whole groups broken), then 9 and 10
    against 7; x 2 (its weight) x 10 that is 160 + 174 against 140 + 186, 180 + 161 against 326,
    200 + 149 against 326, so every pair packs on one node and the other stays whole for the 8-GPU pod."""
    pods = [(f"pair-{i}", TWO) for i in range(4)] + [("eight", EIGHT)]
    ours, theirs = _twins(scenario, 2, "numa")
    cpus = {"cpu": "8"}

    states = _one_by_one(*ours, pods, cpus)
    assert states == dict.fromkeys(states, "bound")
    nodes = {p: scenario.pod(p)["spec"]["nodeName"] for p, _ in pods}
    assert len({nodes[f"pair-{i}"] for i in range(4)}) == 1 and nodes["eight"] != nodes["pair-0"], nodes

    twin = theirs[0]
    states = _one_by_one(*theirs, pods, cpus)
    assert states == {**{f"pair-{i}": "bound" for i in range(4)}, "eight": "unschedulable"}
    per_node = [twin.pod(f"pair-{i}")["spec"]["nodeName"] for i in range(4)]
    assert sorted(per_node.count(node) for node in twin.nodes) == [2, 2], per_node
