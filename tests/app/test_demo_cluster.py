"""End to end on the embedded demo cluster: `simulate` must give the placement of examples/cluster/README.md,
worked out there by hand from the upstream first-fit rules."""

from __future__ import annotations

import json
from pathlib import Path

from app.cli.main import main

DEMO = Path(__file__).resolve().parents[2] / "examples" / "cluster"
GPU, NIC, GAUDI = "gpu.nvidia.com", "dra.net", "gaudi.intel.com"
XID_TOLERATION = {"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoSchedule"}


def run_simulate(capsys, *args: str) -> dict:
    # The hand-worked placements follow upstream's device order, not the aligned default.
    assert main(["simulate", "--state", str(DEMO), "--device-selection", "first-fit", *args]) == 0
    return json.loads(capsys.readouterr().out)


def devices(pod: dict) -> list[tuple[str, str, str, str]]:
    return [
        (r["request"], r["driver"], r["pool"], r["device"])
        for c in pod["claims"]
        if c["allocation"]
        for r in c["allocation"]["devices"]["results"]
    ]


def test_simulate_places_every_placeable_pod_as_worked_out_by_hand(capsys):
    pods = {p["name"]: p for p in run_simulate(capsys)["pods"]}
    assert list(pods) == [
        "gpu-single",
        "shared-a",
        "shared-b",
        "gpu-nic",
        "gaudi-pair",
        "numa-quad",
        "cpu-only",
        "too-many-gpus",
        "two-gpus",
    ]
    node = "gpu-node-1"
    assert pods["gpu-single"]["node"] == node
    assert devices(pods["gpu-single"]) == [("gpu", GPU, node, "gpu-0")]
    assert pods["shared-a"]["node"] == node
    assert devices(pods["shared-a"]) == [("gpu", GPU, node, "gpu-1")]
    assert pods["shared-b"]["node"] == node
    assert devices(pods["shared-b"]) == [("gpu", GPU, node, "gpu-1")]
    assert devices(pods["gpu-nic"]) == [("gpu", GPU, node, "gpu-2"), ("nic", NIC, node, "pci-0000-4b-00-0")]
    assert pods["gaudi-pair"]["node"] == "gaudi-node-1"
    assert devices(pods["gaudi-pair"]) == [
        ("gaudi", GAUDI, "gaudi-node-1", "0000-1a-00-0-0x1060"),
        ("gaudi", GAUDI, "gaudi-node-1", "0000-3d-00-0-0x1060"),
    ]
    assert devices(pods["numa-quad"]) == [("gpus", GPU, node, f"gpu-{i}") for i in (4, 5, 6, 7)]
    quad_results = pods["numa-quad"]["claims"][0]["allocation"]["devices"]["results"]
    assert all(r["tolerations"] == [XID_TOLERATION] for r in quad_results)
    assert pods["cpu-only"]["node"] in ("gpu-node-1", "gaudi-node-1", "cpu-node-1")
    assert pods["cpu-only"]["claims"] == []
    for name in ("too-many-gpus", "two-gpus"):
        assert pods[name]["node"] is None
        assert pods[name]["error"] is None
        assert set(pods[name]["reasons"]) == {"gpu-node-1", "gaudi-node-1", "cpu-node-1"}
    assert pods["too-many-gpus"]["reasons"]["gpu-node-1"].endswith(
        "node has 8 device(s) of class gpu.nvidia.com matching the selectors, 9 needed"
    )
    assert pods["two-gpus"]["reasons"]["gpu-node-1"].endswith(
        "1 of 8 matching device(s) usable (6 in use, 1 tainted), 2 needed"
    )


def test_allocations_are_pinned_to_the_node(capsys):
    pods = {p["name"]: p for p in run_simulate(capsys)["pods"]}
    pinned = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-1"]}]}
        ]
    }
    assert pods["gpu-single"]["claims"][0]["allocation"]["nodeSelector"] == pinned


def test_nodes_option_restricts_candidates(capsys):
    pods = {p["name"]: p for p in run_simulate(capsys, "--nodes", "gaudi-node-1,cpu-node-1")["pods"]}
    assert pods["gpu-single"]["node"] is None
    assert set(pods["gpu-single"]["reasons"]) == {"gaudi-node-1", "cpu-node-1"}
    assert pods["gaudi-pair"]["node"] == "gaudi-node-1"
