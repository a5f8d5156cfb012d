"""``make bench-placement``: placement quality through the real kube-scheduler v1.37.2, with its in-tree
DynamicResources plugin and with the extender as ``manifests/`` ships it, on the e2e control plane
(``e2e/``), one seeded workload, the two modes alternating run by run (``bench_k8s``'s harness).

Nodes (``e2e.topology``): 8 GPUs over 2 NUMA nodes and 4 PCIe roots, a NIC on each root, as
``examples/cluster`` publishes them (two drivers; ``--slice-order interleaved`` lists the GPUs alternating
NUMA nodes). Workload (``plan``, the same pod names and templates in both modes): a fill to
``--utilisation`` of the GPUs with pods of 1, 2, 4 and 8 GPUs (``MIX``; some with a NIC under a
``matchAttribute`` constraint on the PCIe root or NUMA node), then ``--rounds`` rounds in which a share
(``--churn``) of the pods ends and new ones arrive up to the utilisation again; each batch is created at
once and left to settle (every pod bound or unschedulable). Churn pods still waiting then give up (are
deleted), and a final wave of large pods arrives (``WAVE``: 4 GPUs on one NUMA node, or 8 GPUs) - more
than the free GPUs could hold, so the count placed measures what the earlier placements left whole.

Measured per run, from the API server: where each claim's devices are; replayed (``replay``), whether
each 2-4 GPU claim without a constraint landed on one NUMA node (and each 2-GPU claim on one PCIe root)
when its node surely had such a group free; the final wave's pods and GPUs placed, and the GPUs left idle
while one of them waits; pods/s (bound pods over the time from a batch's creation to its last bind,
summed over batches), created -> bound latency of the pods bound in their own batch, and the scheduling
attempts that failed for another reason than devices (``_failed_attempts``)."""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from bench.bench_cel import table
from bench.bench_k8s import EQUAL_QPS, BoundWatch, clean, percentile, start_mode
from e2e.controlplane import ROOT, ControlPlane, build_binaries, remove
from e2e.kube import ThreadClients, poll
from e2e.topology import (
    GPUS,
    NUMA,
    PCIE_ROOT,
    SLICE_ORDERS,
    Held,
    Shape,
    add_shape_template,
    add_topology_nodes,
    claim_owner,
    gpu_numa,
    gpu_root,
    held,
)
from e2e.workload import CLAIM_NOT_CREATED, EXTENDER_SCHEDULER, IN_TREE_SCHEDULER, Scenario

RUN_DIR = ROOT / ".cache" / "bench-placement"
MODES = ("extender", "in-tree")

SHAPES = {
    "g1": Shape(1),
    "g1-nic": Shape(1, 1, PCIE_ROOT),
    "g2": Shape(2),
    "g2-nic": Shape(2, 1, PCIE_ROOT),
    "g4": Shape(4),
    "g4-nic": Shape(4, 1, NUMA),
    "g8": Shape(8),
}
MIX = {"g1": 30, "g1-nic": 10, "g2": 20, "g2-nic": 5, "g4": 15, "g4-nic": 5, "g8": 5}
"""Template -> relative frequency of the churn pods: mostly small, as inference and training jobs ask."""

WAVE = {"numa4": Shape(4, 0, NUMA), "node8": Shape(8)}
WAVE_MIX = {"numa4": 3, "node8": 1}
ALL_SHAPES = {**SHAPES, **WAVE}
QUIET = 3.0
"""Seconds a batch's outcomes must stay the same before it counts as settled."""


@dataclass(frozen=True)
class Batch:
    departures: tuple[str, ...]
    arrivals: tuple[tuple[str, str], ...]
    """(pod, template)."""


@dataclass(frozen=True)
class Plan:
    batches: tuple[Batch, ...]
    """The fill, then one batch per round of churn."""
    wave: tuple[tuple[str, str], ...]

    def template(self) -> dict[str, str]:
        """Pod -> template, over the whole plan."""
        return {pod: t for batch in (*self.batches, Batch((), self.wave)) for pod, t in batch.arrivals}


def plan(seed: int, gpus: int, rounds: int, utilisation: float, churn: float, wave: int) -> Plan:
    """The seeded workload on a cluster of ``gpus`` GPUs: arrivals until the planned pods ask for
    ``utilisation`` of them, then ``rounds`` x (``churn`` of the planned pods end, arrivals again)."""
    rng = random.Random(seed)
    live: dict[str, int] = {}
    names = (f"pod-{i:04d}" for i in range(1_000_000))

    def arrivals() -> tuple[tuple[str, str], ...]:
        out = []
        while sum(live.values()) < utilisation * gpus:
            template = rng.choices(list(MIX), list(MIX.values()))[0]
            name = next(names)
            live[name] = SHAPES[template].gpus
            out.append((name, template))
        return tuple(out)

    batches = [Batch((), arrivals())]
    for _ in range(rounds):
        leaving = tuple(rng.sample(sorted(live), round(churn * len(live))))
        for name in leaving:
            del live[name]
        batches.append(Batch(leaving, arrivals()))
    large = rng.choices(list(WAVE_MIX), list(WAVE_MIX.values()), k=wave)
    return Plan(tuple(batches), tuple((f"large-{i:03d}", t) for i, t in enumerate(large)))


@dataclass
class Alignment:
    """Claims of 2-4 GPUs without a constraint: how many had a NUMA node (2 GPUs: a PCIe root) with room
    on their node when bound, and how many of those got one."""

    numa_possible: int = 0
    numa_aligned: int = 0
    root_possible: int = 0
    root_aligned: int = 0
    claims: int = 0
    split: int = 0
    """Claims over two NUMA nodes, whether or not one had room."""
    missed: list[str] = field(default_factory=list, compare=False)
    """The claims split although a NUMA node had room: node, its GPUs and the free ones."""


def replay(
    events: Iterable[tuple[float, str, str]], holdings: dict[str, Held], shapes: dict[str, Shape]
) -> Alignment:
    """Replay ``(time, "bind" | "free", pod)`` events in time order (at equal times frees first) over
    the pods' ``holdings`` and judge each unconstrained 2-4 GPU claim against the GPUs its node surely had
    free when it was chosen.

    Binds are seen in the order they were written, which need not be the order the devices were chosen
    in (binds run concurrently), so each claim is judged against the binds of its whole stretch between
    two frees: its node's GPUs free after all of them, plus its own. Whatever else was held when it was
    chosen, these were free then, so a claim counts as having had a choice only when it surely had."""
    used: dict[str, set[int]] = {}
    found = Alignment()
    stretch: list[Held] = []

    def judge() -> None:
        for have in stretch:
            used.setdefault(have.node, set()).update(have.gpus)
        for have in stretch:
            _judge(found, have, [g for g in range(GPUS) if g not in used[have.node] or g in have.gpus])
        stretch.clear()

    for _, kind, pod in sorted(events, key=lambda e: (e[0], e[1] == "bind")):
        have = holdings.get(pod)
        if have is None:
            continue
        if kind == "free":
            judge()
            used.setdefault(have.node, set()).difference_update(have.gpus)
            continue
        if shapes[pod].constraint is None and 2 <= len(have.gpus) <= 4:
            stretch.append(have)
        else:
            used.setdefault(have.node, set()).update(have.gpus)
    judge()
    return found


def _judge(found: Alignment, have: Held, free: list[int]) -> None:
    found.claims += 1
    found.split += len(have.numa_nodes) > 1
    if max(sum(gpu_numa(g) == n for g in free) for n in (0, 1)) >= len(have.gpus):
        found.numa_possible += 1
        found.numa_aligned += len(have.numa_nodes) == 1
        if len(have.numa_nodes) > 1:
            found.missed.append(f"{have.node}: GPUs {have.gpus}, free {free}")
    if len(have.gpus) == 2 and any(sum(gpu_root(g) == r for g in free) == 2 for r in range(GPUS // 2)):
        found.root_possible += 1
        found.root_aligned += len(have.roots) == 1


@dataclass
class Run:
    mode: str
    alignment: Alignment
    wave_placed: dict[str, int]
    wave_asked: dict[str, int]
    idle_gpus: int
    """GPUs free at the end while a wave pod waits (0 when every wave pod was placed)."""
    whole_before_wave: tuple[int, int]
    """(NUMA nodes, nodes) with every GPU free when the wave arrived."""
    used_before_wave: int
    """GPUs held when the wave arrived (churn pods that never got a node hold none)."""
    churn_waiting: int
    """Churn pods still waiting when their batch settled, over all batches."""
    retries: dict[str, int]
    """Scheduling attempts that failed and were tried again, by cause (``_failed_attempts``)."""
    bound: int
    seconds: float
    latencies: list[float]
    load: float = field(default_factory=lambda: os.getloadavg()[0])

    @property
    def rate(self) -> float:
        return self.bound / self.seconds

    @property
    def large_placed(self) -> int:
        return sum(self.wave_placed.values())

    @property
    def wave_gpus(self) -> int:
        """GPUs the wave's placed pods hold."""
        return sum(n * WAVE[name].gpus for name, n in self.wave_placed.items())


class _Driver:
    """One run: the plan's batches through one scheduler on fresh nodes, with the record to judge it."""

    def __init__(self, sc: Scenario, scheduler: str, cpu_per_gpu: float) -> None:
        self.sc, self.scheduler, self.cpu_per_gpu = sc, scheduler, cpu_per_gpu
        self.watch = BoundWatch(sc.plane.client, sc.namespace)
        self.created: dict[str, float] = {}
        self.freed: dict[str, float] = {}
        self.holdings: dict[str, Held] = {}
        self.bound = 0
        self.seconds = 0.0
        self.latencies: list[float] = []

    def snapshot(self) -> None:
        """Record where every allocated claim's devices are (before its pod may be deleted)."""
        for claim in self.sc.claims():
            owner, have = claim_owner(claim), held(claim)
            if owner and have:
                self.holdings[owner] = have

    def depart(self, pods: Iterable[str]) -> None:
        """Delete ``pods`` and wait until their claims are gone (their devices free for the next batch)."""
        leaving = set(pods)
        sc = self.sc
        for name in leaving:
            sc.kube.delete("Pod", name, sc.namespace)
            sc.pods.remove(name)
        poll(
            lambda: not any(claim_owner(c) in leaving for c in sc.claims()),
            timeout=300,
            interval=0.5,
            what="claims of the departed pods gone",
        )
        now = time.monotonic()
        self.freed.update(dict.fromkeys(leaving, now))

    def arrive(self, arrivals: tuple[tuple[str, str], ...], timeout: float) -> dict[str, str]:
        """Create the batch at once, wait until it settles; returns every pod's outcome."""

        clients = ThreadClients(self.sc.plane.client)

        def create(pod: tuple[str, str]) -> None:
            cpus = self.cpu_per_gpu * ALL_SHAPES[pod[1]].gpus
            limits = {"cpu": f"{cpus:g}"} if cpus else None
            self.sc.add_pod(
                pod[0], template=pod[1], scheduler=self.scheduler, limits=limits, kube=clients.get()
            )
            self.created[pod[0]] = time.monotonic()

        start = time.monotonic()
        with clients, ThreadPoolExecutor(4) as pool:
            list(pool.map(create, arrivals))
        states = self.sc.wait_settled(timeout=timeout)
        while True:  # a pod may be bound on a later try (after a refused bind, say): until nothing moves
            time.sleep(QUIET)
            again = self.sc.wait_settled(timeout=timeout)
            if again == states:
                break
            states = again
        settled = time.monotonic()
        in_batch = [p for p, _ in arrivals if self.watch.bound.get(p, settled + 1) <= settled]
        if in_batch:
            self.bound += len(in_batch)
            self.seconds += max(self.watch.bound[p] for p in in_batch) - start
            self.latencies += [self.watch.bound[p] - self.created[p] for p in in_batch]
        self.snapshot()
        return states

    def events(self) -> list[tuple[float, str, str]]:
        return [(t, "bind", p) for p, t in self.watch.bound.items()] + [
            (t, "free", p) for p, t in self.freed.items()
        ]


RETRY_CAUSES = {
    "claim not created yet": CLAIM_NOT_CREATED,
    "bind refused (devices taken meanwhile)": "Error scheduling pod; retrying",
}


def _failed_attempts(log: Path, offset: int, namespace: str) -> dict[str, int]:
    """Attempts in kube-scheduler's log (from ``offset``) for the namespace's pods that failed but not for
    want of devices: the claim not made yet from its template (the extender is asked before it exists;
    the in-tree plugin keeps such a pod out of the queue), and errors after the pod was assumed, which
    for the extender is a bind refused because an earlier pod's bind in flight took the devices."""
    counts = dict.fromkeys(RETRY_CAUSES, 0)
    with log.open(errors="replace") as lines:
        lines.seek(offset)
        for line in lines:
            if f'pod="{namespace}/' not in line:
                continue
            for cause, text in RETRY_CAUSES.items():
                counts[cause] += text in line
    return counts


def _whole(holdings: Iterable[Held], nodes: list[str]) -> tuple[int, int]:
    used: dict[str, set[int]] = {node: set() for node in nodes}
    for have in holdings:
        used[have.node] |= set(have.gpus)
    numa = sum(not any(gpu_numa(g) == n for g in gpus) for gpus in used.values() for n in (0, 1))
    return numa, sum(not gpus for gpus in used.values())


def one_run(plane: ControlPlane, mode: str, label: str, args: argparse.Namespace, work: Plan) -> Run:
    sc = Scenario.create(plane, label)
    nodes = add_topology_nodes(sc, args.nodes, args.slice_order)
    for name, shape in ALL_SHAPES.items():
        add_shape_template(sc, name, shape)
    templates = work.template()
    scheduler = IN_TREE_SCHEDULER if mode == "in-tree" else EXTENDER_SCHEDULER
    log = plane.components["kube-scheduler-in-tree" if mode == "in-tree" else "kube-scheduler"].log
    log_start = log.stat().st_size
    run = _Driver(sc, scheduler, args.cpu_per_gpu)
    time.sleep(1.0)  # the watch is open and the informers have seen the slices
    waiting = 0
    for batch in work.batches:
        run.depart(batch.departures)
        states = run.arrive(batch.arrivals, args.timeout)
        waiting += sum(states[p] != "bound" for p, _ in batch.arrivals)
    run.depart(p for p, s in sc.outcomes().items() if s != "bound")  # waiting churn pods give up
    alive = [run.holdings[p] for p in sc.pods if p in run.holdings]
    whole = _whole(alive, nodes)
    used = sum(len(have.gpus) for have in alive)
    states = run.arrive(work.wave, args.timeout)
    run.watch.stop()
    placed = {name: 0 for name in WAVE}
    asked = {name: 0 for name in WAVE}
    for pod, template in work.wave:
        asked[template] += 1
        placed[template] += states[pod] == "bound"
    in_use = sum(len(run.holdings[p].gpus) for p in sc.pods if p in run.holdings)
    idle = GPUS * len(nodes) - in_use if sum(placed.values()) < len(work.wave) else 0
    alignment = replay(run.events(), run.holdings, {p: ALL_SHAPES[t] for p, t in templates.items()})
    retries = _failed_attempts(log, log_start, sc.namespace)
    result = Run(
        mode,
        alignment,
        placed,
        asked,
        idle,
        whole,
        used,
        waiting,
        retries,
        run.bound,
        run.seconds,
        run.latencies,
    )
    print(
        f"{label}: wave placed {placed} of {asked}, idle GPUs {idle}, aligned {alignment}, "
        f"{result.bound} pods in {result.seconds:.1f} s ({result.rate:.1f}/s), load {result.load:.1f}",
        flush=True,
    )
    clean(sc)
    return result


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "-"


def report(runs: list[Run]) -> str:
    by_mode = {m: [r for r in runs if r.mode == m] for m in MODES}

    def cell(mode: str, text: Callable[[Run], str]) -> str:
        return ", ".join(text(r) for r in by_mode[mode])

    def median(mode: str, measure: Callable[[Run], float]) -> float:
        return statistics.median(measure(r) for r in by_mode[mode])

    def ratio(measure: Callable[[Run], float], higher_better: bool = True) -> str:
        ours, theirs = median("extender", measure), median("in-tree", measure)
        if not (ours and theirs):
            return "-"
        return f"{(ours / theirs if higher_better else theirs / ours):.2f}x"

    rows: list[list[str]] = []

    def row(label: str, text: Callable[[Run], str], ratio_: str = "", target: str = "") -> None:
        rows.append([label, cell("extender", text), cell("in-tree", text), ratio_, target])

    row(
        "2-4 GPU claims on one NUMA node, where one had room",
        lambda r: _share(r.alignment.numa_aligned, r.alignment.numa_possible),
        target="all (extender)",
    )
    row(
        "2-GPU claims on one PCIe root, where one had room",
        lambda r: _share(r.alignment.root_aligned, r.alignment.root_possible),
    )
    row("2-4 GPU claims split over NUMA nodes", lambda r: _share(r.alignment.split, r.alignment.claims))
    row("churn pods waiting when their batch settled", lambda r: str(r.churn_waiting))
    for cause in RETRY_CAUSES:
        row(f"failed attempts: {cause}", lambda r: str(r.retries[cause]))  # noqa: B023
    row("GPUs in use when the wave arrived", lambda r: str(r.used_before_wave))
    row("whole NUMA nodes / nodes when the wave arrived", lambda r: "{} / {}".format(*r.whole_before_wave))
    for name in WAVE:
        row(f"wave: {name} placed", lambda r: f"{r.wave_placed[name]}/{r.wave_asked[name]}")  # noqa: B023
    row(
        "wave: large pods placed",
        lambda r: str(r.large_placed),
        ratio(lambda r: r.large_placed),
        ">= 1.25x",
    )
    row("wave: GPUs placed", lambda r: str(r.wave_gpus), ratio(lambda r: r.wave_gpus))
    row("GPUs idle while a large pod waits", lambda r: str(r.idle_gpus))
    row("pods/s (batch created -> last bound)", lambda r: f"{r.rate:.1f}", ratio(lambda r: r.rate), ">= 0.9x")
    row(
        "latency p50 / p99",
        lambda r: f"{percentile(r.latencies, 0.5):.2f} / {percentile(r.latencies, 0.99):.2f} s",
        ratio(lambda r: percentile(r.latencies, 0.5), higher_better=False),
    )
    row("load average (1 min) after the run", lambda r: f"{r.load:.1f}")
    headers = ["measure (one value per run)", "extender", "in-tree plugin", "ratio of medians", "target"]
    return table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_placement", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--nodes",
        type=int,
        default=24,
        help=f"nodes of {GPUS} GPUs over 2 NUMA nodes and 4 PCIe roots, a NIC per root",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=1,
        help="seeds the workload: pod sizes, which pods end, the wave (both modes alike)",
    )
    parser.add_argument("--utilisation", type=float, default=0.7, help="GPUs the churn pods ask for")
    parser.add_argument("--rounds", type=int, default=3, help="churn rounds after the fill")
    parser.add_argument("--churn", type=float, default=1 / 3, help="share of the pods ending per round")
    parser.add_argument(
        "--wave", type=int, default=0, help="large pods in the final wave (default: one a node)"
    )
    parser.add_argument("--runs", type=int, default=3, help="runs of each mode, alternating")
    parser.add_argument(
        "--slice-order",
        choices=SLICE_ORDERS,
        default="numa",
        help="order of a node's GPUs in its ResourceSlice: numa (NUMA node 0's first, as drivers enumerate "
        "them) or interleaved (alternating NUMA nodes)",
    )
    parser.add_argument(
        "--cpu-per-gpu",
        type=float,
        default=0.0,
        help="CPUs each pod requests per GPU (nodes have 64); 0: none, so kube-scheduler's own scoring "
        "(NodeResourcesFit) sees every node alike",
    )
    parser.add_argument(
        "--qps",
        type=float,
        default=EQUAL_QPS,
        help="the API rate limit of both kube-schedulers and the extender",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one batch may take to settle")
    args = parser.parse_args(argv)
    work = plan(
        args.seed, GPUS * args.nodes, args.rounds, args.utilisation, args.churn, args.wave or args.nodes
    )
    pods = sum(len(b.arrivals) for b in work.batches)
    remove(RUN_DIR)
    # kube-scheduler and the extender at 1.37's default gates: the workload needs no other, and the e2e
    # plane's DRANodeAllocatableResources would slow the in-tree plugin's Filter (FEATURE_GATES).
    plane = ControlPlane(RUN_DIR, build_binaries(), scheduling_gates=None)
    runs: list[Run] = []
    try:
        plane.start()
        for mode in MODES:  # both at once: the pods name their mode's scheduler
            start_mode(plane, mode, args.qps)
        for number in range(args.runs):
            for mode in MODES if number % 2 else reversed(MODES):
                runs.append(one_run(plane, mode, f"r{number}-{mode}", args, work))
    finally:
        plane.stop()
    print(
        f"\nbench-placement: {args.nodes} nodes x {GPUS} GPUs (2 NUMA nodes x 2 PCIe roots, a NIC per root; "
        f"GPU slices in {args.slice_order} order), seed {args.seed}, {args.cpu_per_gpu:g} CPUs per GPU "
        f"requested (of 64 a node): {pods} churn pods in "
        f"{len(work.batches)} batches (fill to {args.utilisation:.0%} of the GPUs, then {args.rounds} rounds "
        f"ending {args.churn:.0%}), then {len(work.wave)} large pods; API rate limit {args.qps:g} QPS "
        f"(burst {int(2 * args.qps)}) for both kube-schedulers and the extender; runs alternating"
    )
    print(report(runs))
    print(f"component logs: {RUN_DIR / 'logs'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
