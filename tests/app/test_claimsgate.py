"""``ClaimsGate.pre_filter``: what PreFilter hands the node decider, or the answer for every node."""

from __future__ import annotations

import threading

from app.scheduling.claimsgate import ClaimsGate
from app.scheduling.cycle import CycleState
from app.scheduling.decisions import FilterOutcome
from app.scheduling.inflight import BindsInFlight
from app.state.cluster import ClusterState
from tests.builders import claim, device, device_class, node, pod, request, resource_slice

DRIVER = "gpu.example.com"


def gate(*objects: tuple[str, dict]) -> tuple[ClaimsGate, BindsInFlight]:
    state = ClusterState.from_objects(
        [
            ("Node", node("n1")),
            ("Node", node("n2")),
            ("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"')),
            ("ResourceSlice", resource_slice("n1-gpus", DRIVER, "n1", [device("gpu-0")])),
            *objects,
        ]
    )
    binds = BindsInFlight(threading.RLock())
    return ClaimsGate(state, binds), binds


def test_a_claim_another_bind_writes_leaves_only_its_node_and_is_out_of_the_pending_claims():
    claims = [("ResourceClaim", claim("ml", c, [request("gpu", "gpu")])) for c in ("shared", "own")]
    the_gate, binds = gate(*claims, ("Pod", pod("ml", "b", ["shared", "own"])))
    binds.start("ml/a", "n1", ["ml/shared"])
    cycle = the_gate.pre_filter(the_gate.state.get("Pod", "ml/b"), ["n1", "n2"], None)
    assert isinstance(cycle, CycleState)
    assert [c.key for c in cycle.pending] == ["ml/own"]
    assert cycle.beside == frozenset({"ml/shared"})
    assert cycle.elsewhere == {
        "n2": "claim ml/shared is being allocated for pod ml/a on node n1; only that node can use it"
    }
    assert cycle.shared  # nothing of the pod's own: the shape's decisions serve it


def test_a_bind_of_the_pod_in_flight_fails_every_node():
    the_gate, binds = gate(
        ("ResourceClaim", claim("ml", "c", [request("gpu", "gpu")])), ("Pod", pod("ml", "p", ["c"]))
    )
    binds.start("ml/p", "n1", ["ml/c"])
    outcome = the_gate.pre_filter(the_gate.state.get("Pod", "ml/p"), ["n1", "n2"], None)
    reason = "pod ml/p is being bound to node n1; retry once that bind is done"
    assert outcome == FilterOutcome(failed={"n1": reason, "n2": reason})


def test_node_objects_sent_keep_the_decisions_the_pods_own():
    the_gate, _ = gate(
        ("ResourceClaim", claim("ml", "c", [request("gpu", "gpu")])), ("Pod", pod("ml", "p", ["c"]))
    )
    sent = {"n1": node("n1")}
    cycle = the_gate.pre_filter(the_gate.state.get("Pod", "ml/p"), ["n1"], sent)
    assert isinstance(cycle, CycleState) and not cycle.shared and cycle.nodes is sent
