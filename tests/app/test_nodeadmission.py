"""kube-scheduler's cheap node filters as a sample miss reads them: NodeUnschedulable, NodeAffinity
(``nodeSelector``, required node affinity) and TaintToleration (NoSchedule / NoExecute), with core/v1's
``ToleratesTaint`` rules. Expectations from those plugins' documented behaviour, by hand."""

from __future__ import annotations

from typing import Any

import pytest

from app.scheduling.nodeadmission import admits


def _node(labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "n1", "labels": labels or {}}, "spec": spec}


def _pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": spec}


NO_SCHEDULE = {"key": "gpu", "value": "busy", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("pod", "node", "expected"),
    [
        (_pod(), _node(), True),
        (_pod(), _node(unschedulable=True), False),  # cordoned
        (
            _pod(tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]),
            _node(unschedulable=True),
            True,
        ),
        (_pod(nodeSelector={"zone": "a"}), _node({"zone": "a"}), True),
        (_pod(nodeSelector={"zone": "a"}), _node({"zone": "b"}), False),
        (_pod(nodeSelector={"zone": "a"}), _node(), False),
        (_pod(), _node(taints=[NO_SCHEDULE]), False),
        (_pod(), _node(taints=[{**NO_SCHEDULE, "effect": "NoExecute"}]), False),
        (_pod(), _node(taints=[{**NO_SCHEDULE, "effect": "PreferNoSchedule"}]), True),  # scores only
        (_pod(tolerations=[{"key": "gpu", "operator": "Exists"}]), _node(taints=[NO_SCHEDULE]), True),
        (_pod(tolerations=[{"key": "gpu", "value": "busy"}]), _node(taints=[NO_SCHEDULE]), True),  # Equal
        (_pod(tolerations=[{"key": "gpu", "value": "idle"}]), _node(taints=[NO_SCHEDULE]), False),
        (
            _pod(tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}]),
            _node(taints=[NO_SCHEDULE]),
            False,  # another effect
        ),
        (_pod(tolerations=[{"operator": "Exists"}]), _node(taints=[NO_SCHEDULE]), True),  # every taint
    ],
)
def test_node_filters(pod, node, expected):
    assert admits(pod, node) is expected


def _affinity(*expressions: dict[str, Any]) -> dict[str, Any]:
    term = {"matchExpressions": list(expressions)}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def test_required_node_affinity():
    gpu_nodes = _affinity({"key": "gpu", "operator": "In", "values": ["h100"]})
    assert admits(_pod(affinity=gpu_nodes), _node({"gpu": "h100"}))
    assert not admits(_pod(affinity=gpu_nodes), _node({"gpu": "a100"}))
    assert not admits(_pod(affinity=gpu_nodes), _node())
    # A malformed affinity admits: the API server validated the pod, and a filter that reads it says why.
    broken = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": 3}}}
    assert admits(_pod(affinity=broken), _node())


@pytest.mark.parametrize(
    ("pod", "node"),
    [
        (_pod(nodeSelector=["zone"]), _node()),
        (_pod(affinity="x"), _node()),
        (_pod(affinity={"nodeAffinity": ["x"]}), _node()),
        (_pod(tolerations="x"), _node(unschedulable=True)),
        (_pod(tolerations=[None, "x", 5]), _node(taints=[NO_SCHEDULE])),
        (_pod(tolerations=5), _node(taints=[NO_SCHEDULE])),
        ({"spec": ["x"]}, _node()),
        (_pod(), _node(taints="abc")),
        (_pod(), _node(taints=["abc", None])),
        (_pod(), {"metadata": ["x"], "spec": "y"}),
    ],
)
def test_fields_of_the_wrong_type_admit_rather_than_raise(pod, node):
    assert isinstance(admits(pod, node), bool)
