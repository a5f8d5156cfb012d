"""The decisions filter keeps for the calls that follow it, each kind bounded here and nowhere else.

Three kinds, all valid only while the node's inventory version is the one they were made at:

* per claims shape and node, the ``KeptDecision`` shared by every pod whose pending claims have equal
  specs (``claims_shape``), at most ``max_shapes`` shapes (the oldest shape dropped first);
* per claims shape, the answer for a whole node list (``ShapeOutcome``), patched node by node
  afterwards, at most ``max_shapes`` of them;
* per pod, its ``PodView`` (what the decisions were made for, and the decisions that cannot be shared),
  at most ``max_kept`` views plus private decisions in total (the oldest pods' dropped first, never the
  newest: the one being filled).

kube-scheduler filters one pod at a time, so the per-pod bound only matters when many pods are
filtered but never bound. Callers hold the service's lock.
"""

from __future__ import annotations

from app.scheduling.decisions import KeptDecision, PodView, ShapeOutcome
from app.scheduling.extended import ExtendedClaim

__all__ = ["MAX_KEPT_DECISIONS", "MAX_SHAPES", "DecisionCache"]

MAX_SHAPES = 256
"""Distinct claim specs whose per-node decisions and node-list answers are kept: one per template or
shared-claim spec in use, each holding at most one decision per node."""

MAX_KEPT_DECISIONS = 200_000
"""Per-pod views plus their private per-(pod, node) decisions kept between filter and bind, in total. A
view keeps digests of the pod spec and claims, not copies (a pod spec can be a megabyte); a private
decision holds one allocation result (a few hundred bytes)."""


class DecisionCache:
    """Kept decisions by claims shape, node list and pod (module docstring)."""

    def __init__(self, max_shapes: int = MAX_SHAPES, max_kept: int = MAX_KEPT_DECISIONS) -> None:
        self.max_shapes = max_shapes
        """Shapes whose shared decisions are kept, and, separately, shapes whose node-list answer is."""
        self.max_kept = max_kept
        """Per-pod views plus their private decisions, in total."""
        self._shared: dict[bytes, dict[str, KeptDecision]] = {}
        self._answers: dict[bytes, ShapeOutcome] = {}
        self._views: dict[str, PodView] = {}
        self._kept_count = 0

    @property
    def kept_count(self) -> int:
        """Per-pod views plus their private decisions kept now (at most ``max_kept``), for metrics."""
        return self._kept_count

    def shared(self, shape: bytes) -> dict[str, KeptDecision] | None:
        """The shape's shared decisions by node (read-only for callers), or None when none is kept."""
        return self._shared.get(shape)

    def remember(self, shape: bytes, node: str, decision: KeptDecision) -> None:
        """Keep ``decision`` (reasons with claim-name placeholders) for every pod of ``shape`` on ``node``."""
        by_node = self._shared.get(shape)
        if by_node is None:
            by_node = self._shared[shape] = {}
            if len(self._shared) > self.max_shapes:
                del self._shared[next(iter(self._shared))]
        by_node[node] = decision

    def answer(self, shape: bytes) -> ShapeOutcome | None:
        """The shape's last answer for a node list, or None."""
        return self._answers.get(shape)

    def keep_answer(self, shape: bytes, answer: ShapeOutcome) -> None:
        self._answers[shape] = answer
        if len(self._answers) > self.max_shapes:
            del self._answers[next(iter(self._answers))]

    def view(self, uid: str) -> PodView | None:
        """The pod's view from its last filter, or None."""
        return self._views.get(uid)

    def adopt(self, view: PodView, *, keep: bool) -> PodView:
        """The pod's view for this filter: ``view`` as the pod's new one or, with ``keep`` (Score and
        Reserve completing the last filter), the kept one while it is for the same claims, claims shape,
        pod spec and sharing, private decisions and all."""
        last = self._views.get(view.uid)
        wanted = (view.shape, view.claims, view.pod_spec, view.shared)
        if keep and last is not None and (last.shape, last.claims, last.pod_spec, last.shared) == wanted:
            return last
        self.forget(view.uid)
        self._views[view.uid] = view
        self._keep(1)
        return view

    def keep_private(
        self, view: PodView, node: str, decision: KeptDecision, ext: ExtendedClaim | None
    ) -> None:
        """Keep a decision only this pod can use (``PodView.private``), counted towards ``max_kept`` while
        the view is the pod's current one."""
        if node not in view.private and self._views.get(view.uid) is view:
            self._keep(1)
        view.private[node] = (decision, ext)

    def decision(self, view: PodView, node: str) -> tuple[KeptDecision, ExtendedClaim | None] | None:
        """The view's decision for ``node``: its private one, else its shape's shared one (if the view
        shares them); current or not."""
        found = view.private.get(node)
        if found is None and view.shared:
            shared = self._shared.get(view.shape, {}).get(node)
            found = (shared, None) if shared is not None else None
        return found

    def forget(self, uid: str) -> None:
        view = self._views.pop(uid, None)
        if view is not None:
            self._kept_count -= 1 + len(view.private)

    def clear(self) -> None:
        """Drop everything (the policy the decisions were made under changed)."""
        self._shared.clear()
        self._answers.clear()
        for uid in list(self._views):
            self.forget(uid)

    def _keep(self, count: int) -> None:
        """``count`` more kept entries: drop the oldest views while over ``max_kept``, never the newest."""
        self._kept_count += count
        while self._kept_count > self.max_kept and len(self._views) > 1:
            self.forget(next(iter(self._views)))
