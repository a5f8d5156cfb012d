"""Which of filter's passing nodes go back to kube-scheduler: as many as kube-scheduler itself would score.

kube-scheduler stops filtering once it has found ``percentageOfNodesToScore`` of the cluster's nodes
feasible and scores only those (``0``, its default: 50 % minus one point per 125 nodes, at least 5 %; never
fewer than 100 nodes). Sampling there would happen before the extender sees the devices, and a sample
without a free device fails the pod although another node has one, so the shipped
KubeSchedulerConfiguration scores every node (``percentageOfNodesToScore: 100``) and the extender samples
instead, after the device check: it passes on the number of nodes kube-scheduler would have scored, taken
in turn around the passing list (kube-scheduler rotates its first node the same way), so consecutive pods
see different nodes. Every node that fits still counts: a pod fails only when none does. Without this,
kube-scheduler's score plugins and its decoding of the extender's answers run over every node for every
pod, which at 5000 nodes costs more than the in-tree plugin's whole cycle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from app.scheduling.decisions import FilterOutcome

__all__ = ["MIN_NODES", "NodeSampler", "nodes_to_score"]

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
    """Cuts filter's passing nodes to ``nodes_to_score``, starting each answer where the last one ended."""

    def __init__(self, percentage: int) -> None:
        self.percentage = percentage
        self._start = 0
        """Where the next sample starts. Filters run on several threads; two reading the same start give
        two pods the same sample, which is what kube-scheduler would do without rotating: no lock."""

    def sample(self, outcome: FilterOutcome, asked: Sequence[str]) -> FilterOutcome:
        """``outcome`` with at most ``nodes_to_score(percentage, len(asked))`` passing nodes (a copy when
        cut: the outcome may be a kept answer)."""
        passed = outcome.passed
        limit = nodes_to_score(self.percentage, len(asked))
        if len(passed) <= limit:
            return outcome
        start = self._start % len(passed)
        end = start + limit
        self._start = end
        # A window that wraps is taken as its two ends in passing order, so an answer in the order asked
        # stays in that order (``FilterOutcome.in_request_order``).
        chosen = passed[start:end] if end <= len(passed) else passed[: end - len(passed)] + passed[start:]
        return dataclasses.replace(outcome, passed=chosen)
