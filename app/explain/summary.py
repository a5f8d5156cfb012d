"""``dra-extender explain`` at cluster scale: every node's verdict grouped by reason, the best nodes in full.

A full explanation (``app.explain.pod``) runs the device funnel and a search on every node: tens of
thousands of lines and tens of seconds at a few thousand nodes. What an operator asks first is "why is
this pod pending", answered by the summary:

* ``verdicts``: how many nodes fit, do not fit, are unresolvable;
* ``groups``: the nodes grouped by (verdict, reason), largest group first, with a few node names each;
* ``best``: the full explanation of the ``best`` nodes: the fitting ones with the highest device score,
  unrounded as device scoring in filter ranks them (ties by name), or, when none fits, one node of each
  of the largest groups (its funnel shows why).

The verdicts and scores are filter's own (what kube-scheduler would get from the extender:
``SchedulingService.rank`` then ``filter`` on every node, so that each equivalence class is decided
once, with its score), so they cost what one filter costs, and only the ``best`` nodes are explained in
full. A what-if claim is summarized through a pod using it, added
to the command line's copy of the state (``summarize_what_if``).

Nothing is written: filter decides without a scheduling attempt's effects (``attempt=False``: no
leftover claim deleted, none deallocated), keeping only its decision cache.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.explain.models import BadObject, NodeVerdict, NotFound, PodClaimSummary, Verdict
from app.explain.pod import explain_pod
from app.scheduling.service import SchedulingService
from app.state.uids import stable_uid

__all__ = ["NODES_PER_GROUP", "ExplanationSummary", "ReasonGroup", "summarize_pod", "summarize_what_if"]

NODES_PER_GROUP = 5
"""Node names listed per group (the first in name order); the count says how many there are."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class ReasonGroup(_Model):
    verdict: Verdict
    reason: str = Field(description="filter's reason, the same on every node of the group ('' when it fits)")
    count: int
    nodes: list[str] = Field(description=f"the first {NODES_PER_GROUP} nodes of the group, by name")


class ExplanationSummary(_Model):
    kind: str = Field(description="Pod, or ResourceClaim / ResourceClaimTemplate for a what-if")
    namespace: str
    name: str
    nodeName: str | None = Field(default=None, description="spec.nodeName when the pod is bound already")
    deviceSelection: str
    scoringPolicy: str
    claims: list[PodClaimSummary]
    error: str = Field(description="an error that fails the pod on every node (filter Error), or ''")
    nodes: int = Field(description="nodes considered")
    verdicts: dict[str, int] = Field(description="nodes per verdict")
    groups: list[ReasonGroup] = Field(description="nodes grouped by verdict and reason, largest first")
    best: list[NodeVerdict] = Field(description="full explanations of the best nodes (see the module)")


def _groups(verdicts: Sequence[tuple[str, Verdict, str]]) -> list[ReasonGroup]:
    """(node, verdict, reason) → groups, largest first (ties: fitting first, then by reason)."""
    members: dict[tuple[Verdict, str], list[str]] = {}
    for node, verdict, reason in sorted(verdicts):
        members.setdefault((verdict, reason), []).append(node)
    ordered = sorted(members.items(), key=lambda item: (-len(item[1]), item[0][0] != "fits", item[0]))
    return [
        ReasonGroup(verdict=verdict, reason=reason, count=len(nodes), nodes=nodes[:NODES_PER_GROUP])
        for (verdict, reason), nodes in ordered
    ]


def _representatives(groups: Sequence[ReasonGroup], best: int) -> list[str]:
    """One node of each of the ``best`` largest groups (when no node fits)."""
    return [group.nodes[0] for group in groups[:best]]


def summarize_pod(service: SchedulingService, namespace: str, name: str, best: int = 3) -> ExplanationSummary:
    """The summary for pod ``namespace/name`` of the state. Raises NotFound."""
    with service.lock:
        pod = service.state.get("Pod", f"{namespace}/{name}")
        if pod is None:
            raise NotFound(f"pod {namespace}/{name} not found")
        names = sorted(service.state.objects["Node"])
    # Scored first: filter first would decide by counts, and scoring then look every node up again.
    deadline = time.monotonic() + service.filter_time_budget
    scores = service.rank(pod, names, deadline=deadline)  # None only from a quick ranking, which this is not
    score = dict(zip(names, scores, strict=True)) if scores is not None else {}
    outcome = service.filter(pod, names, attempt=False)  # as explain_pod: the state as it is
    verdicts: list[tuple[str, Verdict, str]] = [(n, "fits", "") for n in outcome.passed]
    verdicts += [(n, "does-not-fit", r) for n, r in outcome.failed.items()]
    verdicts += [(n, "unresolvable", r) for n, r in outcome.unresolvable.items()]
    groups = [] if outcome.error else _groups(verdicts)
    if outcome.error or not outcome.passed:
        chosen = _representatives(groups, best)
    else:

        def best_first(node: str) -> tuple[int, str]:
            fine = score.get(node)
            return (-fine if fine is not None else 1, node)  # a node not scored in time goes last

        chosen = sorted(outcome.passed, key=best_first)[:best]
    details = [explain_pod(service, namespace, name, node) for node in chosen]
    # With no node in the state, explain_pod of no node still says what the pod's claims are.
    first = details[0] if details else explain_pod(service, namespace, name, names[0] if names else None)
    return ExplanationSummary(
        kind="Pod",
        namespace=namespace,
        name=name,
        nodeName=(pod.get("spec") or {}).get("nodeName") or None,
        deviceSelection=service.device_selection,
        scoringPolicy=service.scoring.policy,
        claims=first.claims,
        error=outcome.error,
        nodes=len(names),
        verdicts=dict(Counter(verdict for _, verdict, _ in verdicts)) if not outcome.error else {},
        groups=groups,
        best=[verdict for d in details for verdict in d.nodes],
    )


def summarize_what_if(
    service: SchedulingService, obj: Mapping[str, Any], best: int = 3
) -> ExplanationSummary:
    """The summary for a what-if ResourceClaim or ResourceClaimTemplate (``app.explain.pod.parse_object``):
    the claim (or the template's claim) and a pending pod using it are added to ``service``'s state, as
    ``<name>.what-if``, and summarized as a pod would be. For the command line only: its state is a copy
    that ends with the process (the REST what-if never changes the state). Raises BadObject when the
    names are taken."""
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace") or "default", meta.get("name") or "what-if"
    spec = obj.get("spec") or {}
    if obj.get("kind") == "ResourceClaimTemplate":
        spec = spec.get("spec") or {}
    scratch = f"{name}.what-if"
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": scratch,
            "namespace": namespace,
            "uid": stable_uid("ResourceClaim", namespace, scratch),
        },
        "spec": spec,
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": scratch, "namespace": namespace, "uid": stable_uid("Pod", namespace, scratch)},
        "spec": {
            "containers": [{"name": "what-if", "resources": {"claims": [{"name": "claim"}]}}],
            "resourceClaims": [{"name": "claim", "resourceClaimName": scratch}],
        },
    }
    with service.lock:
        for kind, scratch_obj in (("ResourceClaim", claim), ("Pod", pod)):
            if service.state.get(kind, f"{namespace}/{scratch}") is not None:
                raise BadObject(f"{kind} {namespace}/{scratch} exists: rename the what-if object")
            service.state.apply(kind, scratch_obj)
    summary = summarize_pod(service, namespace, scratch, best)
    return summary.model_copy(update={"kind": str(obj.get("kind")), "name": name})
