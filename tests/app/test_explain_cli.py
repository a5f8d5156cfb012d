"""``dra-extender explain`` and ``simulate -o table`` on the demo cluster; policy flags."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest
import yaml

from app.cli.main import main
from app.cli.runtime import build_runtime
from app.explain.pod import explain_pod

DEMO = Path(__file__).resolve().parents[2] / "examples" / "cluster"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_explain_all_pod_table(capsys):
    code, out, err = run(capsys, "explain", "--state", str(DEMO), "--all", "demo/numa-quad")
    assert (code, err) == (0, "")
    assert "Pod demo/numa-quad" in out
    assert "device selection aligned, scoring binpack" in out
    # All 4 GPUs on NUMA node 0 (numa 1, weight 3), 4 of 8 in use (packing 0.5, weight 2), every whole group
    # kept whole or filled (intact 1, weight 1): 10 * (3 + 1 + 1) / 6 = 8.333, rounded 8.
    for text in (
        "== gpu-node-1: fits, score 8/10 (8.333 unrounded)",
        "gpu-node-1: score 8 (8.333 unrounded, binpack)",
        "(numaNode 0)",
        "allocation that would be chosen",
        "gpu.nvidia.com/gpu-node-1/gpu-0",
        "devices left after each stage",
        "constraints",
        "rejected devices (examples)",
        "== gaudi-node-1: unresolvable",
    ):
        assert text in out, text
    # cpu-node-1 has no device at all: only its summary row, no detail section.
    assert "== cpu-node-1" not in out


def test_explain_json_is_the_rest_answer(capsys):
    code, out, _ = run(
        capsys, "explain", "--state", str(DEMO), "--output", "json", "demo/gpu-nic", "--node", "gpu-node-1"
    )
    assert code == 0
    expected = explain_pod(build_runtime(DEMO).service, "demo", "gpu-nic", "gpu-node-1")
    assert orjson.loads(out) == expected.model_dump(mode="json")


def test_explain_policy_flags(capsys):
    code, out, _ = run(
        capsys,
        "explain",
        "--state",
        str(DEMO),
        "--output",
        "json",
        "--device-selection",
        "first-fit",
        "demo/gpu-nic",
    )
    assert code == 0
    node = next(n for n in orjson.loads(out)["best"] if n["node"] == "gpu-node-1")
    assert [d["device"] for d in node["allocations"][0]["devices"]] == ["gpu-0", "pci-0000-18-00-0"]
    assert node["placement"] == "first-fit"


def test_explain_what_if_claim_file(capsys, tmp_path):
    templates = yaml.safe_load_all((DEMO / "07-resourceclaimtemplates.yaml").read_text())
    template = next(t for t in templates if t and t["metadata"]["name"] == "four-gpus-one-numa")
    path = tmp_path / "claim.yaml"
    path.write_text(yaml.safe_dump(template))
    code, out, _ = run(capsys, "explain", "--state", str(DEMO), str(path))
    assert code == 0
    assert "What-if ResourceClaimTemplate demo/four-gpus-one-numa (nothing is created)" in out
    assert "== gpu-node-1: fits" in out


def test_explain_what_if_file_over_the_body_cap_exits_2_unread(capsys, tmp_path):
    # A 5 GiB sparse file was read whole into memory before anything looked at it.
    path = tmp_path / "claim.json"
    with path.open("wb") as handle:
        handle.truncate(5 << 30)
    code, out, err = run(capsys, "explain", "--state", str(DEMO), str(path))
    assert (code, out) == (2, "")
    assert (
        err
        == f"dra-extender: {path}: larger than 8 MiB (5368709120 bytes), the largest what-if serve takes\n"
    )


@pytest.mark.parametrize(
    ("target", "message"),
    [("demo/nope", "pod demo/nope not found"), ("nope", "pod default/nope not found")],
)
def test_explain_unknown_pod_exits_2(capsys, target, message):
    code, out, err = run(capsys, "explain", "--state", str(DEMO), target)
    assert (code, out) == (2, "")
    assert err == f"dra-extender: {message}\n"


def test_explain_unknown_node_exits_2(capsys):
    code, _, err = run(capsys, "explain", "--state", str(DEMO), "--node", "nope", "demo/gpu-nic")
    assert (code, err) == (2, "dra-extender: node nope not found\n")


def test_explain_without_rich_prints_plain_tables(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "rich.console", None)  # import fails: the plain renderer is used
    code, out, _ = run(capsys, "explain", "--state", str(DEMO), "--node", "gpu-node-1", "demo/two-gpus")
    assert code == 0
    assert "Nodes\nnode        verdict  score  placement" in out
    assert "gpu-node-1: devices left after each stage" in out


# --- simulate ---------------------------------------------------------------------------------------------


def test_simulate_human_output(capsys):
    code, out, err = run(capsys, "simulate", "--state", str(DEMO), "--output", "table")
    assert (code, err) == (0, "")
    assert "Placement: 7 of 9 pod(s) placed (device selection aligned, scoring binpack)" in out
    assert "demo/numa-quad" in out and "gpus: gpu-0, gpu-1, gpu-2, gpu-3" in out
    assert "Utilisation and fragmentation per node and device class" in out
    assert "Per device class" in out


def test_simulate_human_plain_rows(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "rich.console", None)
    code, out, _ = run(capsys, "simulate", "--state", str(DEMO), "--output", "table")
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("demo/")}
    # two-gpus is left with only the tainted gpu-7: the reason shown is gpu-node-1's, not the empty nodes'.
    assert rows["demo/two-gpus"].split(None, 2)[2] == (
        "gpu-node-1: claim demo/two-gpus, request gpus: 0 of 8 matching device(s) usable (7 in use, "
        "1 tainted), 2 needed (+2 node(s) with other reasons)"
    )
    usage = [line.split() for line in out.splitlines() if line.startswith("gpu-node-1")]
    assert ["gpu-node-1", "gpu.nvidia.com", "8", "7", "1", "1", "0", "of", "2", "1"] in usage


def test_simulate_json_stays_the_default(capsys):
    code, out, _ = run(capsys, "simulate", "--state", str(DEMO))
    assert code == 0
    document = orjson.loads(out)
    assert list(document) == ["pods"]


def test_simulate_device_selection_default_is_aligned(capsys):
    def gpu_single(*flags: str) -> str:
        code, out, _ = run(capsys, "simulate", "--state", str(DEMO), *flags)
        assert code == 0
        pod = next(p for p in orjson.loads(out)["pods"] if p["name"] == "gpu-single")
        return pod["claims"][0]["allocation"]["devices"]["results"][0]["device"]

    assert gpu_single("--device-selection", "first-fit") == "gpu-0"
    # aligned: the root whose partner GPU is tainted (one usable GPU left) is the tightest fit
    assert gpu_single() == "gpu-6"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--score-weights", "cpu=1"), "score weight 'cpu=1'"),
        (
            ("--score-weights", "numa=0,pcie=0,packing=0,intact=0,prioritized=0"),
            "at least one must be positive",
        ),
        (("--scoring-policy", "pack"), "invalid choice: 'pack'"),
        (("--device-selection", "best"), "invalid choice: 'best'"),
    ],
)
def test_bad_policy_flags_exit_2(capsys, flags, message):
    code, _, err = run(capsys, "simulate", "--state", str(DEMO), *flags)
    assert code == 2
    assert message in err


def test_spread_policy_is_accepted(capsys):
    code, out, _ = run(
        capsys, "simulate", "--state", str(DEMO), "--scoring-policy", "spread", "--score-weights", "numa=1"
    )
    assert code == 0
    assert orjson.loads(out)["pods"]


@pytest.mark.parametrize("flags", [[], ["--strict"], ["--node", "gpu-node-1"]])
def test_explain_what_if_file_with_an_unknown_field_exits_2_naming_it(capsys, tmp_path, flags):
    # Lenient state or strict, summary or full: a what-if is typed by a person, its typo is an error.
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "typo", "namespace": "demo"},
        "spec": {
            "devices": {
                "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "cuont": 2}}]
            }
        },
    }
    path = tmp_path / "claim.yaml"
    path.write_text(yaml.safe_dump(claim))
    code, out, err = run(capsys, "explain", "--state", str(DEMO), *flags, str(path))
    assert (code, out) == (2, "")
    assert err == 'dra-extender: unknown field "spec.devices.requests[0].exactly.cuont"\n'


@pytest.mark.parametrize("kind", ["a FIFO", "a character device"])
def test_explain_of_a_what_if_path_that_is_no_regular_file_exits_2_saying_so(capsys, tmp_path, kind):
    """Not 'pod default/claim.yaml not found' (and never read: a FIFO without a writer would hang)."""
    import os

    path = tmp_path / "claim.yaml"
    if kind == "a FIFO":
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    code, out, err = run(capsys, "explain", "--state", str(DEMO), str(path))
    assert (code, out) == (2, "")
    assert err == f"dra-extender: {path}: {kind}, not a regular file (a what-if is a claim file)\n"


def test_explain_of_a_pod_whose_claim_is_missing_says_so(capsys, tmp_path):
    """Not "no ResourceClaims: every node passes" above "3 unresolvable" (a pod with a claim that does
    not exist fails every node, as the table below the header says)."""
    state = tmp_path / "state"
    state.mkdir()
    for path in DEMO.glob("*.yaml"):
        text = path.read_text()
        if path.name == "09-pods.yaml":
            text = text.replace("resourceClaimName: shared-gpu", "resourceClaimName: missing-gpu")
        (state / path.name).write_text(text)
    code, out, _ = run(capsys, "explain", "--state", str(state), "demo/shared-a")
    assert code == 0
    assert "every node passes" not in out
    assert '  pod claim gpu: resourceclaim "missing-gpu" not found' in out
    assert "3 nodes: 3 unresolvable" in out
