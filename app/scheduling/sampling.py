"""Which of filter's passing nodes go back to kube-scheduler: as many as kube-scheduler itself would score.

kube-scheduler stops filtering once it has found ``percentageOfNodesToScore`` of the cluster's nodes
feasible and scores only those (``0``, its default: 50 % minus one point per 125 nodes, at least 5 %; never
fewer than 100 nodes). Sampling there would happen before the extender sees the devices, and a sample
without a free device fails the pod although another node has one, so the shipped
KubeSchedulerConfiguration scores every node (``percentageOfNodesToScore: 100``) and the extender samples
instead, after the device check: it passes on the number of nodes kube-scheduler would have scored, the
first that fit walking the asked list from where the last walk stopped (as kube-scheduler walks its nodes
from ``nextStartNodeIndex``), so consecutive pods see different nodes. Every node that fits still counts:
a pod fails only when none does. Without this, kube-scheduler's score plugins and its decoding of the
extender's answers run over every node for every pod, which at 5000 nodes cost more than the in-tree
plugin's whole cycle.

A cluster may still let kube-scheduler sample (``SchedulingSettings.scheduler_percentage_of_nodes_to_score``
below 100), trading that price for a smaller cycle at thousands of nodes. ``SchedulerSample`` then keeps a
miss from costing a preemption for devices or a wait for an unrelated event: a pod rejected on every
node of its sample while a node outside it has the devices (and passes kube-scheduler's cheap node
filters, ``app.scheduling.nodeadmission``) is answered with the sample's nodes unresolvable
(kube-scheduler's preemption tries only nodes that failed as resolvable, nodes outside the sample counting
as unresolvable, and the extender's own preemption only pods rejected for devices in use) and retried at
once through the requeuer; kube-scheduler's next sample starts where the last cycle's ended
(``nextStartNodeIndex``, moved on by every pod's cycle).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

from app.scheduling.decisions import FilterOutcome

__all__ = ["MIN_NODES", "NodeSampler", "SchedulerSample", "nodes_to_score"]

MIN_NODES = 100
"""kube-scheduler's ``minFeasibleNodesToFind``: below this many nodes every one is scored."""

MIN_ADAPTIVE_PERCENTAGE = 5
"""kube-scheduler's ``minFeasibleNodesPercentageToFind``: the adaptive share never goes below it."""


def nodes_to_score(percentage: int, nodes: int) -> int:
    """How many of ``nodes`` kube-scheduler scores with ``percentageOfNodesToScore: percentage``."""
    if nodes < MIN_NODES:
        return nodes
    if percentage == 0:
        percentage = max(50 - nodes // 125, MIN_ADAPTIVE_PERCENTAGE)
    return max(nodes * percentage // 100, MIN_NODES)


class NodeSampler:
    """Walks the asked nodes from where the last walk ended, keeping the first ``nodes_to_score`` that fit,
    as kube-scheduler walks its node list from ``nextStartNodeIndex``."""

    def __init__(self, percentage: int, cluster_nodes: Callable[[], int] | None = None) -> None:
        self.percentage = percentage
        self.cluster_nodes = cluster_nodes
        """How many nodes the cluster has: kube-scheduler sizes its sample from all its nodes, not only those
        its own filters passed (which it asks about). None: the nodes asked."""
        self._start = 0
        """Where the next walk starts. Filters run on several threads; two reading the same start give
        two pods the same sample, which is what kube-scheduler would do without rotating: no lock."""

    def take(self, asked: Sequence[str], fits: Callable[[str], bool]) -> list[str] | None:
        """The sample of ``asked`` among the nodes that ``fits``, in the order asked; None when every node
        asked may be scored (nothing to cut)."""
        limit = self._limit(asked)
        if limit >= len(asked):
            return None
        start = self._start % len(asked)
        tail = list(itertools.islice(filter(fits, itertools.islice(asked, start, None)), limit))
        head: list[str] = []
        if len(tail) < limit:
            head = list(itertools.islice(filter(fits, itertools.islice(asked, start)), limit - len(tail)))
        # The next walk starts after the last node kept (kube-scheduler: after the last one checked).
        # When fewer than ``limit`` fit, every node was checked, and the next walk starts where this did.
        if len(tail) == limit:
            self._start = asked.index(tail[-1], start) + 1
        elif head and len(head) + len(tail) == limit:
            self._start = asked.index(head[-1], 0, start) + 1
        return head + tail

    def sample(self, outcome: FilterOutcome, asked: Sequence[str]) -> FilterOutcome:
        """``outcome`` with its passing nodes cut to the sample (a copy when cut: the outcome may be a kept
        answer); as it is when it was cut already (``FilterOutcome.sampled``) or nothing is to be cut."""
        if outcome.sampled or len(outcome.passed) <= self._limit(asked):
            return outcome
        passing = set(outcome.passed)
        chosen = self.take(asked, passing.__contains__)
        if chosen is None:
            return outcome
        return dataclasses.replace(outcome, passed=chosen, in_request_order=True, sampled=True)

    def _limit(self, asked: Sequence[str]) -> int:
        nodes = len(asked) if self.cluster_nodes is None else max(len(asked), self.cluster_nodes())
        return nodes_to_score(self.percentage, nodes)


class SchedulerSample:
    """kube-scheduler's own sampling before the extender, and the pods it missed for (module docstring).

    ``percentage``: kube-scheduler's ``percentageOfNodesToScore``; 100 never samples. ``cluster_nodes``: how
    many nodes the cluster has. A pod is retried at once at most as many times before it passes a filter
    as it takes samples to cover the cluster: more misses mean the nodes with its devices are ones
    kube-scheduler's own filters reject beyond those ``fits_outside`` repeats (``app.scheduling.
    nodeadmission``), and it waits for an event like any rejected pod. Counts of at most ``max_pods``
    pods are kept, the least recently missed forgotten first."""

    def __init__(self, percentage: int, cluster_nodes: Callable[[], int], max_pods: int = 10_000) -> None:
        self.percentage = percentage
        self.cluster_nodes = cluster_nodes
        self.max_pods = max_pods
        self._misses: OrderedDict[str, int] = OrderedDict()
        """Pod UID -> misses retried since it last passed a filter, the latest last."""
        self._lock = threading.Lock()

    def may_miss(self, outcome: FilterOutcome, asked: int) -> bool:
        """Whether ``outcome`` rejects the pod on a sample that left nodes out: the question for
        ``miss``, whose answer needs a decision over the nodes outside it."""
        if outcome.passed or outcome.error or self.percentage >= 100:
            return False
        nodes = self.cluster_nodes()
        quota = nodes_to_score(self.percentage, nodes)
        # Fewer names than kube-scheduler's quota: it ran out of nodes, having checked every one.
        return quota < nodes and asked >= quota

    def miss(
        self, pod_uid: str, outcome: FilterOutcome, asked: int, fits_outside: Callable[[], str | None]
    ) -> FilterOutcome | None:
        """``outcome`` answered as a sample miss, or None when it is not one. ``fits_outside``: a node
        outside the sample whose devices fit the pod, or None."""
        if self.percentage >= 100:
            return None
        if outcome.passed:
            with self._lock:
                self._misses.pop(pod_uid, None)
            return None
        if not self.may_miss(outcome, asked):
            return None
        with self._lock:
            count = self._misses.get(pod_uid, 0)
        if count >= math.ceil(self.cluster_nodes() / max(asked, 1)):
            return None
        node = fits_outside()
        if node is None:
            return None
        with self._lock:
            self._misses[pod_uid] = count + 1
            self._misses.move_to_end(pod_uid)
            while len(self._misses) > self.max_pods:
                self._misses.popitem(last=False)
        note = (
            f"; node {node}, outside kube-scheduler's sample of {asked} nodes, has the devices: "
            "retried without preemption"
        )
        rejected = {**outcome.failed, **outcome.unresolvable}
        unresolvable = {name: reason + note for name, reason in rejected.items()}
        return dataclasses.replace(outcome, failed={}, unresolvable=unresolvable)
