"""The last bind outcome per pod (issue 18 item 3): bounded by pod count, and shown by explain so a node that
fits now still says that the last bind there failed."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest

from allocator.cel.expr_engine import ExprEngine
from allocator.selectors import SelectorCache
from app.cli.explain import render_explanation
from app.explain.pod import explain_pod
from app.scheduling.binder import BindError, BindPlan
from app.scheduling.bindlog import BindLog, BindOutcome
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState
from tests.builders import claim, device, device_class, node, pod, request, resource_slice

DRIVER = "gpu.example.com"
AT = datetime(2026, 12, 1, 21, 30, 5, tzinfo=UTC)
REFUSED = "claim ml/one: status write refused: 409 Conflict"


def clock() -> datetime:
    return AT


def test_the_least_recently_bound_pod_goes_first() -> None:
    log = BindLog(max_pods=2, now=clock)
    log.record("ml/a", "uid-a", "n1", "")
    log.record("ml/b", "uid-b", "n1", "boom")
    log.record("ml/a", "uid-a", "n2", "")  # a is the latest now
    log.record("ml/c", "uid-c", "n1", "")
    assert (log.last("ml/a", "uid-a"), log.last("ml/b", "uid-b")) == (
        BindOutcome("uid-a", "2026-12-01T21:30:05Z", "n2", ""),
        None,
    )
    assert len(log) == 2


def test_a_new_pod_of_the_same_name_has_no_outcome() -> None:
    log = BindLog(max_pods=2, now=clock)
    log.record("ml/a", "uid-a", "n1", "boom")
    assert log.last("ml/a", "uid-other") is None


def test_max_pods_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_pods: must be at least 1, got 0"):
        BindLog(max_pods=0)


class RefusingBinder:
    def bind(self, plan: BindPlan) -> None:
        raise BindError(REFUSED)


def service() -> SchedulingService:
    state = ClusterState.from_objects(
        [
            ("Node", node("n1")),
            ("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"')),
            ("ResourceSlice", resource_slice("n1-gpus", DRIVER, "n1", [device("gpu-0")])),
            ("ResourceClaim", claim("ml", "one", [request("gpu", "gpu")])),
            ("Pod", pod("ml", "p", ["one"])),
        ]
    )
    result = SchedulingService(state, SelectorCache(ExprEngine()), RefusingBinder())
    result.binding.bind_log = BindLog(now=clock)
    return result


def test_explain_shows_a_failed_bind_on_the_node_that_fits() -> None:
    svc = service()
    with pytest.raises(BindError):
        svc.bind("ml", "p", "uid-pod-ml-p", "n1")
    explanation = explain_pod(svc, "ml", "p")
    assert explanation.lastBind is not None
    assert explanation.lastBind.model_dump() == {"at": "2026-12-01T21:30:05Z", "node": "n1", "error": REFUSED}
    [verdict] = explanation.nodes
    assert (verdict.verdict, verdict.reason) == (
        "fits",
        f"the last bind here failed at 2026-12-01T21:30:05Z: {REFUSED}",
    )
    out = io.StringIO()
    render_explanation(explanation, out)
    assert f"  last bind: n1 at 2026-12-01T21:30:05Z failed: {REFUSED}\n" in out.getvalue()


def test_a_pod_never_bound_has_no_last_bind() -> None:
    explanation = explain_pod(service(), "ml", "p")
    assert explanation.lastBind is None
    assert explanation.nodes[0].reason == ""
