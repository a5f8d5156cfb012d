"""``make bench-frag``: how well the device selection keeps aligned device sets free, aligned vs first-fit.

A synthetic cluster (``bench.synthetic``, default 50 nodes) of 8-GPU nodes: NUMA node 0 = gpu-0..3, NUMA
node 1 = gpu-4..7, four PCIe roots of two GPUs each, and four RDMA NICs, one per root
(``resource.kubernetes.io/numaNode`` and ``pcieRoot`` on every device, as the NVIDIA and DRANET drivers
publish them); no taints, no other drivers. A seeded random stream of pods asking for 1-8 GPUs (sizes
weighted towards small pods, ``SIZES``; a quarter also ask for NICs, without a constraint) goes one pod at
a time through the extender's own filter -> prioritize -> bind (``SchedulingService``; the same scoring
for both policies). At each GPU utilisation checkpoint the cluster is filled up to it, then ``CHURN`` x
(running pods) random pods end, each followed by refilling: holes left by finished pods are where device
choice matters. Pods that fit nowhere are skipped (they would pend). The same stream (same seeds) runs
with each device-selection policy.

At every checkpoint two later pods are probed (filter over every node, nothing is bound):

* ``numa4``: 4 GPUs with ``matchAttribute: resource.kubernetes.io/numaNode`` (the largest single-NUMA
  request this shape allows; "8 GPUs on one NUMA node" cannot exist with 4 GPUs per NUMA node);
* ``gpu+nic``: 1 GPU and 1 NIC with ``matchAttribute: resource.kubernetes.io/pcieRoot``.

Reported per policy and checkpoint, averaged over the seeds: the share of nodes where each probe fits and
how many such pods the cluster could still take (NUMA nodes with 4 free GPUs; roots with a free GPU and a
free NIC), the stream's placed and skipped pods, and the quality of the placements made so far: 2-4 GPU
pods split over two NUMA nodes, and NIC pods whose NICs sit on their GPUs' roots. ``--score-weights
numa=0,pcie=0,intact=0`` makes both policies pick the same nodes, isolating the device choice.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from allocator.cel.expr_engine import ExprEngine
from allocator.scoring import ScoringConfig, parse_weights
from allocator.selectors import SelectorCache
from app.cli.simulate import choose_node
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState
from bench.synthetic import (
    GPU_CLASS,
    GPU_DRIVER,
    NAMESPACE,
    NIC_CLASS,
    NIC_DRIVER,
    NUMA,
    PCIE_ROOT,
    Shape,
    cluster_objects,
    gpu_pod,
    request,
)

__all__ = ["Result", "main", "run"]

SIZES = {1: 30, 2: 25, 3: 5, 4: 20, 5: 3, 6: 5, 7: 2, 8: 10}
"""GPUs per pod -> relative frequency: mostly 1, 2, 4 and 8 GPUs, as training and inference jobs ask."""

CHECKPOINTS = (0.5, 0.7, 0.85)
"""GPU utilisation at which the probes run."""

MAX_MISSES = 200
"""Consecutive pods of the stream that fit nowhere before a checkpoint is given up (cluster too full)."""

NIC_SHARE = 0.25
"""Share of the stream's pods that also ask for NICs (half as many as GPUs, rounded up), without any
constraint: jobs that want RDMA but do not say where."""

CHURN = 2.0
"""Departures per running pod at each checkpoint (each followed by arrivals back to the checkpoint):
fragmentation comes from pods ending in the middle of groups, not from filling an empty cluster."""


# --- cluster ----------------------------------------------------------------------------------------------


def cluster(nodes: int) -> list[tuple[str, dict[str, Any]]]:
    """The synthetic cluster of ``nodes`` nodes (see the module docstring) and its namespace."""
    shape = Shape(nodes, gpus=8, nics=4, tainted_every=0, accelerator_every=0)
    return [*cluster_objects(shape), ("Namespace", {"metadata": {"name": NAMESPACE}})]


PROBES = {
    "numa4": ([request("gpus", GPU_CLASS, 4)], NUMA),
    "gpu+nic": ([request("gpu", GPU_CLASS, 1), request("nic", NIC_CLASS, 1)], PCIE_ROOT),
}
PROBE_INDEX = 900_000
"""Pod index of the first probe (``gpu_pod``), above any stream pod's."""


# --- scheduling -------------------------------------------------------------------------------------------


def _schedule(service: SchedulingService, pod: dict[str, Any], nodes: list[str]) -> bool:
    """filter -> prioritize (more than one node) -> bind on the best node (ties: first), like simulate."""
    outcome = service.filter(pod, nodes)
    if outcome.error or not outcome.passed:
        return False
    meta = pod["metadata"]
    service.bind(meta["namespace"], meta["name"], meta["uid"], choose_node(service, pod, outcome.passed))
    return True


def _probe(service: SchedulingService, name: str, nodes: list[str]) -> int:
    """Nodes where the probe pod would fit now (nothing is bound; the probe is removed again)."""
    requests, constraint = PROBES[name]
    pod, claim = gpu_pod(PROBE_INDEX + list(PROBES).index(name), requests=requests, constraints=[constraint])
    state = service.state
    state.apply("ResourceClaim", claim)
    state.apply("Pod", pod)
    try:
        return len(service.filter(pod, nodes).passed)
    finally:
        state.remove("Pod", f"{NAMESPACE}/{pod['metadata']['name']}")
        state.remove("ResourceClaim", f"{NAMESPACE}/{claim['metadata']['name']}")


def _capacity(service: SchedulingService, nodes: list[str]) -> dict[str, int]:
    """How many probe pods the cluster could still take, counted from the free devices."""
    inventory = service.state.inventory
    numa4 = gpu_nic = 0
    for node in nodes:
        free_gpus = [g for g in range(8) if not inventory.is_allocated((GPU_DRIVER, node, f"gpu-{g}"))]
        numa4 += sum(1 for n in (0, 1) if sum(1 for g in free_gpus if g // 4 == n) == 4)
        for root in range(4):
            nic_free = not inventory.is_allocated((NIC_DRIVER, node, f"nic-{root}"))
            gpu_nic += nic_free and any(g // 2 == root for g in free_gpus)
    return {"numa4": numa4, "gpu+nic": gpu_nic}


def _utilisation(service: SchedulingService, nodes: list[str]) -> float:
    inventory = service.state.inventory
    used = sum(inventory.is_allocated((GPU_DRIVER, n, f"gpu-{g}")) for n in nodes for g in range(8))
    return used / (8 * len(nodes))


@dataclass(slots=True)
class Result:
    """One policy at one checkpoint (sums over the seeds; ``runs`` seeds reached it)."""

    policy: str
    checkpoint: float
    runs: int = 0
    utilisation: float = 0.0
    fits: dict[str, float] = field(default_factory=dict)
    capacity: dict[str, int] = field(default_factory=dict)
    skipped: int = 0
    placed: int = 0
    split: float = 0.0
    """Share of the placed 2-4 GPU pods whose GPUs span two NUMA nodes (each fits in one)."""
    nic_aligned: float = 0.0
    """Share of the placed pods with NICs whose every NIC is on a PCIe root of one of their GPUs."""


class _Stream:
    """The seeded pod stream on one cluster: arrivals (sizes, NICs) and departures (which running pod)."""

    def __init__(self, service: SchedulingService, names: list[str], seed: int) -> None:
        self.service, self.state, self.names = service, service.state, names
        self.arrivals = random.Random(seed)
        self.departures = random.Random(seed + 1_000_003)
        self.running: list[tuple[str, str]] = []
        self.counter = self.placed = self.skipped = 0
        self.small_multi = self.split = self.nic_pods = self.nic_aligned = 0

    def arrive(self) -> bool:
        """One new pod: filter -> prioritize -> bind; False (and nothing kept) if it fits nowhere."""
        self.counter += 1
        size = self.arrivals.choices(list(SIZES), list(SIZES.values()))[0]
        requests = [request("gpus", GPU_CLASS, size)]
        if self.arrivals.random() < NIC_SHARE:
            requests.append(request("nics", NIC_CLASS, (size + 1) // 2))
        pod, claim = gpu_pod(self.counter, requests=requests)
        keys = (f"{NAMESPACE}/{pod['metadata']['name']}", f"{NAMESPACE}/{claim['metadata']['name']}")
        self.state.apply("ResourceClaim", claim)
        self.state.apply("Pod", pod)
        if _schedule(self.service, pod, self.names):
            self.placed += 1
            self.running.append(keys)
            self._observe(keys[1])
            return True
        self.skipped += 1
        self._delete(keys)
        return False

    def _observe(self, claim_key: str) -> None:
        """Placement quality: NUMA nodes a 2-4 GPU pod spans; whether each NIC sits on a root of its GPUs."""
        claim = self.state.get("ResourceClaim", claim_key) or {}
        results = claim["status"]["allocation"]["devices"]["results"]
        gpus = [int(r["device"].split("-")[1]) for r in results if r["driver"] == GPU_DRIVER]
        nics = [int(r["device"].split("-")[1]) for r in results if r["driver"] == NIC_DRIVER]
        if 2 <= len(gpus) <= 4:
            self.small_multi += 1
            self.split += len({g // 4 for g in gpus}) > 1
        if nics:
            self.nic_pods += 1
            self.nic_aligned += all(n in {g // 2 for g in gpus} for n in nics)

    def depart(self) -> None:
        """A random running pod ends: its claim is deleted and its devices are free again."""
        if self.running:
            self._delete(self.running.pop(self.departures.randrange(len(self.running))))

    def _delete(self, keys: tuple[str, str]) -> None:
        self.state.remove("Pod", keys[0])
        self.state.remove("ResourceClaim", keys[1])

    def fill(self, target: float) -> bool:
        """Arrivals until GPU utilisation reaches ``target``; False after MAX_MISSES misses in a row."""
        misses = 0
        while _utilisation(self.service, self.names) < target:
            misses = 0 if self.arrive() else misses + 1
            if misses >= MAX_MISSES:
                return False
        return True


def run(
    policy: str,
    seed: int,
    nodes: int,
    checkpoints: Sequence[float],
    scoring: str = "binpack",
    churn: float = CHURN,
    weights: dict[str, float] | None = None,
) -> list[Result]:
    """One cluster under ``policy`` fed by the stream of ``seed``: at each checkpoint fill up to it, then
    ``churn`` x (running pods) departures each followed by refilling, then the probes."""
    state = ClusterState.from_objects(cluster(nodes))
    service = SchedulingService(state, SelectorCache(ExprEngine()), device_selection=policy)
    service.scoring = ScoringConfig(scoring, **({"weights": weights} if weights else {}))
    names = sorted(state.objects["Node"])
    stream = _Stream(service, names, seed)
    results = []
    for checkpoint in sorted(checkpoints):
        if not stream.fill(checkpoint):
            break
        for _ in range(int(churn * len(stream.running))):
            stream.depart()
            stream.fill(checkpoint)
        result = Result(
            policy,
            checkpoint,
            1,
            _utilisation(service, names),
            skipped=stream.skipped,
            placed=stream.placed,
        )
        result.split = stream.split / max(stream.small_multi, 1)
        result.nic_aligned = stream.nic_aligned / max(stream.nic_pods, 1)
        result.fits = {name: _probe(service, name, names) / len(names) for name in PROBES}
        result.capacity = _capacity(service, names)
        results.append(result)
    return results


def _merge(total: Result, one: Result) -> None:
    total.runs += 1
    total.utilisation += one.utilisation
    total.skipped += one.skipped
    total.placed += one.placed
    total.split += one.split
    total.nic_aligned += one.nic_aligned
    for name in PROBES:
        total.fits[name] = total.fits.get(name, 0.0) + one.fits[name]
        total.capacity[name] = total.capacity.get(name, 0) + one.capacity[name]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.fragmentation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--seeds", type=int, default=5, help="streams per policy (seeds 1..N)")
    parser.add_argument(
        "--checkpoints", default=",".join(str(c) for c in CHECKPOINTS), help="GPU utilisation, e.g. 0.5,0.7"
    )
    parser.add_argument("--policies", default="aligned,first-fit")
    parser.add_argument("--scoring-policy", default="binpack", choices=("binpack", "spread"))
    parser.add_argument(
        "--score-weights",
        type=parse_weights,
        default=None,
        help="e.g. numa=0,pcie=0,intact=0 (packing only: both policies then choose the same nodes, so the "
        "difference is the device selection alone)",
    )
    parser.add_argument(
        "--churn", type=float, default=CHURN, help="departures per running pod per checkpoint"
    )
    args = parser.parse_args(argv)
    checkpoints = [float(c) for c in args.checkpoints.split(",") if c]
    policies = [p for p in args.policies.split(",") if p]
    totals: dict[tuple[str, float], Result] = {}
    started = time.perf_counter()
    for policy in policies:
        for seed in range(1, args.seeds + 1):
            for one in run(
                policy, seed, args.nodes, checkpoints, args.scoring_policy, args.churn, args.score_weights
            ):
                total = totals.setdefault((policy, one.checkpoint), Result(policy, one.checkpoint))
                _merge(total, one)
    elapsed = time.perf_counter() - started
    weights = ",".join(f"{k}={v:g}" for k, v in (args.score_weights or ScoringConfig().weights).items())
    print(
        f"fragmentation: {args.nodes} nodes x 8 GPUs (2 NUMA x 4 PCIe roots, 4 NICs), {args.seeds} seeded "
        f"streams of 1-8 GPU pods, scoring {args.scoring_policy} {weights}, churn {args.churn}; "
        f"mean over the streams ({elapsed:.0f} s)"
    )
    header = (
        f"{'policy':<10} {'target':>6} {'util':>6} {'placed':>7} {'skipped':>8} "
        f"{'numa4 nodes':>12} {'numa4 cap':>10} {'gpu+nic nodes':>14} {'gpu+nic cap':>12} "
        f"{'split':>6} {'nic on root':>12}"
    )
    print(header)
    print("-" * len(header))
    for checkpoint in sorted(checkpoints):
        for policy in policies:
            total = totals.get((policy, checkpoint))
            if total is None or not total.runs:
                print(f"{policy:<10} {checkpoint:>6.0%}   (not reached)")
                continue
            n = total.runs
            print(
                f"{policy:<10} {checkpoint:>6.0%} {total.utilisation / n:>6.1%} {total.placed / n:>7.1f} "
                f"{total.skipped / n:>8.1f} {total.fits['numa4'] / n:>12.1%} "
                f"{total.capacity['numa4'] / n:>10.1f} "
                f"{total.fits['gpu+nic'] / n:>14.1%} {total.capacity['gpu+nic'] / n:>12.1f} "
                f"{total.split / n:>6.1%} {total.nic_aligned / n:>12.1%}"
            )
    print(
        "numa4: 4 GPUs on one NUMA node; gpu+nic: a GPU and a NIC on one PCIe root. 'nodes': share of nodes "
        "where the pod fits; 'cap': how many such pods the cluster could still take. Placed so far: 'split': "
        "2-4 GPU pods spread over two NUMA nodes; 'nic on root': pods with NICs whose NICs share a root with "
        "their GPUs."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
