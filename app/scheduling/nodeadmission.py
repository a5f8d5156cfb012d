"""Whether kube-scheduler's own node filters could admit a pod on a node: the cheap rules of its
NodeUnschedulable, NodeAffinity (``spec.nodeSelector`` and required node affinity) and TaintToleration
plugins, read from the Node as the extender watches it.

Only for telling a sample miss (``app.scheduling.sampling.SchedulerSample``): a node outside
kube-scheduler's sample counts as one the pod could go to only if these let it, so a pod whose free
devices are on cordoned, tainted or unselected nodes is an ordinary rejection (and may be preempted for),
not a miss retried at once. kube-scheduler's other filters (resources, ports, volumes, spread) are not
repeated here: a node they reject costs the pod a retry, at most as many as samples cover the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allocator.errors import InvalidInputError
from allocator.nodeselector import Node, parse_node_selector

__all__ = ["admits"]

_UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
"""What a cordoned node (``spec.unschedulable``) is to NodeUnschedulable: a taint the pod may tolerate."""

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
"""Taint effects TaintToleration filters on (PreferNoSchedule only scores)."""


def admits(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Whether ``node`` (a core/v1 Node) passes those rules for ``pod``. A pod's node affinity that does
    not parse admits (the API server validated it; the filter that reads it reports the error)."""
    spec = pod.get("spec") or {}
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    node_spec = node.get("spec") or {}
    tolerations = spec.get("tolerations") or ()
    if node_spec.get("unschedulable") and not _tolerated(_UNSCHEDULABLE_TAINT, tolerations):
        return False
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required:
        try:
            selector = parse_node_selector(required, "spec.affinity.nodeAffinity")
        except InvalidInputError:
            return True
        if not selector.matches(Node(str(meta.get("name") or ""), labels)):
            return False
    return all(
        _tolerated(taint, tolerations)
        for taint in node_spec.get("taints") or ()
        if taint.get("effect") in _BLOCKING_EFFECTS
    )


def _tolerated(taint: Mapping[str, Any], tolerations: Any) -> bool:
    """core/v1 ``Toleration.ToleratesTaint``: an empty effect or key matches every one, ``Exists`` any
    value, ``Equal`` (the default operator) the same value. ``Lt`` / ``Gt`` (behind
    TaintTolerationComparisonOperators) count as tolerating: a wrong guess costs a retry, not a pod."""
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("key") and toleration["key"] != taint.get("key"):
            continue
        operator = toleration.get("operator") or "Equal"
        if operator == "Equal":
            if (toleration.get("value") or "") == (taint.get("value") or ""):
                return True
        elif operator in ("Exists", "Lt", "Gt"):
            return True
    return False
