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
    """Whether ``node`` (a core/v1 Node) passes those rules for ``pod``. A field of the wrong type, or a
    node affinity that does not parse, admits: the API server validated the objects, and the filter that
    reads them reports the error (a wrong guess here costs a retry, not a pod)."""
    spec = _mapping(pod.get("spec"))
    meta = _mapping(node.get("metadata"))
    labels = _mapping(meta.get("labels"))
    node_spec = _mapping(node.get("spec"))
    tolerations = [t for t in _items(spec.get("tolerations")) if isinstance(t, Mapping)]
    if node_spec.get("unschedulable") is True and not _tolerated(_UNSCHEDULABLE_TAINT, tolerations):
        return False
    for key, value in _mapping(spec.get("nodeSelector")).items():
        if labels.get(key) != value:
            return False
    required = _mapping(_mapping(spec.get("affinity")).get("nodeAffinity")).get(
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
        for taint in _items(node_spec.get("taints"))
        if isinstance(taint, Mapping) and taint.get("effect") in _BLOCKING_EFFECTS
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _tolerated(taint: Mapping[str, Any], tolerations: list[Mapping[str, Any]]) -> bool:
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
