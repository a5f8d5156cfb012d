"""The operator's question on a live cluster: ``dra-extender explain`` / ``simulate --kubeconfig`` against
the e2e control plane (a read-only snapshot through the API server), after the real kube-scheduler has
left a pod unschedulable."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import orjson
import pytest

from e2e.controlplane import ROOT
from e2e.workload import Scenario, allocated_devices

pytestmark = pytest.mark.e2e


def _cli(*argv: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "app", *argv, "-o", "json"],
        capture_output=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return orjson.loads(done.stdout)


def test_explain_and_simulate_read_the_live_cluster(scenario: Scenario) -> None:
    # 2 nodes x 2 devices: "fits" (2 devices) binds; "too-big" (4 devices) fits on no node.
    scenario.add_nodes(2, 2)
    scenario.add_claim("two", count=2)
    scenario.add_pod("fits", claim="two")
    scenario.add_claim("four", count=4)
    scenario.add_pod("too-big", claim="four")
    assert scenario.wait_settled(timeout=120, expect_bound=1) == {"fits": "bound", "too-big": "unschedulable"}
    live = ["--kubeconfig", str(scenario.plane.admin_kubeconfig)]
    pod = f"{scenario.namespace}/too-big"

    summary = _cli("explain", *live, pod)
    reason = (
        f"claim {scenario.namespace}/four, request gpu: node has 2 device(s) of class "
        f"{scenario.device_class} matching the selectors, 4 needed"
    )
    [group] = [g for g in summary["groups"] if g["reason"] == reason]
    assert (group["verdict"], group["count"], group["nodes"]) == ("unresolvable", 2, sorted(scenario.nodes))
    assert summary["verdicts"].get("fits", 0) == 0

    full = _cli("explain", *live, "--all", pod)
    verdicts = {v["node"]: v["verdict"] for v in full["nodes"] if v["node"] in scenario.nodes}
    assert verdicts == dict.fromkeys(scenario.nodes, "unresolvable")

    simulated = {(p["namespace"], p["name"]): p for p in _cli("simulate", *live)["pods"]}
    assert simulated[(scenario.namespace, "too-big")]["node"] is None
    assert (scenario.namespace, "fits") not in simulated  # bound already: not pending

    # Read-only: the snapshot allocated nothing and bound nothing.
    assert allocated_devices(scenario.kube.get("ResourceClaim", "four", scenario.namespace)) == []
    assert not scenario.pod("too-big")["spec"].get("nodeName")
