"""Filter passing on only the nodes with the best device score (``SchedulingSettings.device_scoring``
``filter``).

kube-scheduler scores the nodes left after filtering: its score plugins over each of them, then the
extenders' prioritize, one more round trip its serial cycle waits on. With one node left it skips all of
that. With the device score as one of its scores (``prioritize``, the default) every pod's cycle pays for
both. Ranked in filter instead, device placement comes first: the nodes passed on are those with the best
device score, kube-scheduler's own preferences (preferred node affinity, topology spread, resource
balance) choose among them, and a pod whose best node is strictly best (binpack's common case: a node
earlier pods started filling) goes there with no scoring at all.

The device score compared is the fine one (``allocator.scoring``), before prioritize's rounding to 0..10:
rounded, binpack's node with one device of 8 in use ties with every empty node, and such ties sent 39-49 %
of the pods of ``make bench-k8s`` through kube-scheduler's scoring, which then spread them to empty nodes.

The nodes left out are omitted from the answer, as a sample's are (``app.scheduling.sampling``):
kube-scheduler reads the failed nodes only when none passes, and then none is left out. The best are
taken among every node of the asked list that fits, so the extender takes no sample of its own here (the
best nodes are the cut); where kube-scheduler samples, the list is its sample. Deciding and scoring share
the filter call's time budget, and a node not scored within it is passed on with the best: it may be as
good, and ranking it last would drop it unseen.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["best_tier"]


def best_tier(passed: Sequence[str], scores: Sequence[int | None]) -> list[str]:
    """The nodes of ``passed`` whose fine score (``scores``, in the same order) is the highest, in order,
    and those not scored (None: not decided within the filter's time budget), which may be as good."""
    top = max((score for score in scores if score is not None), default=0)
    return [name for name, score in zip(passed, scores, strict=True) if score is None or score == top]
