"""``dra-extender explain`` by default: nodes per verdict, grouped by reason, the best nodes in full
(``app.explain.summary``). Counts worked out by hand on a six-node state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from app.cli.main import main
from tests.builders import claim, device, device_class, node, pod, request, resource_slice

DRIVER = "gpu.example.com"
NS = "ml"
GPUS = {"n1": 2, "n2": 2, "n3": 1, "n4": 1, "n5": 1, "n6": 0}


def _reason(claim_name: str, has: int, needed: int) -> str:
    return (
        f"claim {NS}/{claim_name}, request gpus: node has {has} device(s) of class gpu matching the "
        f"selectors, {needed} needed"
    )


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    objects: list[dict[str, Any]] = [device_class("gpu", f'device.driver == "{DRIVER}"')]
    for name, gpus in GPUS.items():
        objects.append(node(name))
        if gpus:
            devices = [device(f"gpu-{i}") for i in range(gpus)]
            objects.append(resource_slice(f"{name}-gpus", DRIVER, name, devices))
    objects += [claim(NS, "two", [request("gpus", "gpu", 2)]), pod(NS, "two-gpus", ["two"])]
    objects += [claim(NS, "three", [request("gpus", "gpu", 3)]), pod(NS, "three-gpus", ["three"])]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(objects))
    return tmp_path


def _summary(capsys: pytest.CaptureFixture[str], state: Path, *argv: str) -> dict[str, Any]:
    assert main(["explain", "--state", str(state), "-o", "json", *argv]) == 0
    document: dict[str, Any] = orjson.loads(capsys.readouterr().out)
    return document


def test_summary_counts_and_groups_nodes_by_reason(capsys, state_dir):
    summary = _summary(capsys, state_dir, f"{NS}/two-gpus")
    assert summary["nodes"] == 6
    assert summary["verdicts"] == {"fits": 2, "unresolvable": 4}
    groups = [(g["count"], g["verdict"], g["reason"], g["nodes"]) for g in summary["groups"]]
    assert groups == [
        (3, "unresolvable", _reason("two", 1, 2), ["n3", "n4", "n5"]),
        (2, "fits", "", ["n1", "n2"]),
        (1, "unresolvable", _reason("two", 0, 2), ["n6"]),
    ]
    # Both fitting nodes score alike: by name. Each is the full explanation of that node.
    assert [v["node"] for v in summary["best"]] == ["n1", "n2"]
    assert all(v["verdict"] == "fits" and v["allocations"] and v["requests"] for v in summary["best"])
    assert [c["claim"] for c in summary["claims"]] == [f"{NS}/two"]
    assert [v["node"] for v in _summary(capsys, state_dir, f"{NS}/two-gpus", "--best", "1")["best"]] == ["n1"]


def test_summary_without_a_fitting_node_explains_one_node_per_largest_group(capsys, state_dir):
    summary = _summary(capsys, state_dir, f"{NS}/three-gpus", "--best", "2")
    assert summary["verdicts"] == {"unresolvable": 6}
    assert [(g["count"], g["nodes"][0]) for g in summary["groups"]] == [(3, "n3"), (2, "n1"), (1, "n6")]
    best = summary["best"]
    assert [(v["node"], v["verdict"]) for v in best] == [("n3", "unresolvable"), ("n1", "unresolvable")]
    assert best[0]["reason"] == _reason("three", 1, 3)
    assert best[0]["requests"][0]["usable"] == 1  # the funnel of the node, in full


def test_summary_table_and_full_detail_on_request(capsys, state_dir):
    assert main(["explain", "--state", str(state_dir), f"{NS}/two-gpus"]) == 0
    out = capsys.readouterr().out
    assert "6 nodes: 2 fits, 4 unresolvable" in out
    assert "n3, n4, n5" in out and "== n1: fits" in out and "== n2: fits" in out
    assert "== n3" not in out  # only the best nodes in full
    assert main(["explain", "--state", str(state_dir), "--all", "-o", "json", f"{NS}/two-gpus"]) == 0
    assert [v["node"] for v in orjson.loads(capsys.readouterr().out)["nodes"]] == list(GPUS)
    assert main(["explain", "--state", str(state_dir), "--node", "n4", "-o", "json", f"{NS}/two-gpus"]) == 0
    [only] = orjson.loads(capsys.readouterr().out)["nodes"]
    assert (only["node"], only["verdict"], only["reason"]) == ("n4", "unresolvable", _reason("two", 1, 2))


def test_node_and_all_exclude_each_other(capsys, state_dir):
    assert main(["explain", "--state", str(state_dir), "--all", "--node", "n1", f"{NS}/two-gpus"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_simulate_table_ends_with_a_summary_of_pending_pods_by_reason(capsys, state_dir):
    assert main(["simulate", "--state", str(state_dir), "-o", "table"]) == 0
    out = capsys.readouterr().out
    summary = out[out.index("Summary: ") :]
    # Same creation time, so by name: three-gpus fits nowhere, then two-gpus takes n1 (both 2-GPU nodes
    # score alike: the first). three-gpus' telling reason is the one most nodes give (n3, n4, n5), the
    # pod's own claim name left out.
    assert summary.startswith("Summary: 2 pod(s): 1 placed on 1 node(s), 1 pending")
    reason = "request gpus: node has 1 device(s) of class gpu matching the selectors, 3 needed"
    [row] = [line for line in summary.splitlines() if reason in line]
    assert f"{NS}/three-gpus" in row and "│ 1 " in row


def test_simulate_json_keeps_stderr_quiet_off_a_terminal(capsys, state_dir):
    assert main(["simulate", "--state", str(state_dir)]) == 0
    out, err = capsys.readouterr()
    assert list(orjson.loads(out)) == ["pods"] and err == ""


def test_what_if_claim_is_summarized_like_a_pod_using_it(capsys, state_dir, tmp_path):
    what_if = claim(NS, "plan", [request("gpus", "gpu", 2)])
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(what_if))
    summary = _summary(capsys, state_dir, str(path))
    assert (summary["kind"], summary["name"]) == ("ResourceClaim", "plan")
    assert summary["verdicts"] == {"fits": 2, "unresolvable": 4}
    assert [v["node"] for v in summary["best"]] == ["n1", "n2"]
    # Only this process's copy of the state had the what-if pod: the next run sees the state as it is.
    assert main(["simulate", "--state", str(state_dir)]) == 0
    assert [p["name"] for p in orjson.loads(capsys.readouterr().out)["pods"]] == ["three-gpus", "two-gpus"]
