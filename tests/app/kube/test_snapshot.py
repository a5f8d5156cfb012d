"""``explain`` and ``simulate`` on a live cluster (``--kubeconfig``): a read-only snapshot of the fake API
server through the real kubernetes-asyncio client, then the same logic as a state directory."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.cli.main import main
from tests.app.kube.conftest import DRIVER, NS, seed_cluster
from tests.app.kube.fakeapi import FakeKubeAPI
from tests.builders import claim, pod, request


def _seed(api: FakeKubeAPI) -> None:
    """n1: gpu-0, gpu-1; n2: gpu-0, tainted NoSchedule by a DeviceTaintRule. p-pair (2 GPUs, created
    first) can only go to n1; then p-one (1 GPU) finds n1 full and n2's only GPU tainted."""
    seed_cluster(api)
    api.add("ResourceClaim", claim(NS, "pair", [request("gpus", "gpu", 2)]))
    api.add("ResourceClaim", claim(NS, "one", [request("gpu", "gpu")]))
    api.add("Pod", pod(NS, "p-pair", ["pair"], created="2026-01-01T00:01:00Z"))
    api.add("Pod", pod(NS, "p-one", ["one"], created="2026-01-01T00:02:00Z"))
    api.add(
        "DeviceTaintRule",
        {
            "apiVersion": "resource.k8s.io/v1beta2",
            "kind": "DeviceTaintRule",
            "metadata": {"name": "n2-broken"},
            "spec": {
                "deviceSelector": {"driver": DRIVER, "pool": "n2", "device": "gpu-0"},
                "taint": {"key": "example.com/broken", "effect": "NoSchedule"},
            },
        },
    )


async def _cli(*argv: str) -> tuple[int, str, str]:
    """``main`` on a worker thread (it runs its own event loop), stdout and stderr captured."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()

    def run() -> int:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            return main(list(argv))

    code = await asyncio.to_thread(run)
    return code, out.getvalue(), err.getvalue()


async def test_simulate_reads_the_live_cluster_and_writes_nothing(api: FakeKubeAPI, tmp_path: Path):
    _seed(api)
    kubeconfig = str(api.kubeconfig(tmp_path))
    code, out, err = await _cli("simulate", "--kubeconfig", kubeconfig, "--context", "fake", "-o", "json")
    assert code == 0, err
    pods = {p["name"]: p for p in orjson.loads(out)["pods"]}
    assert list(pods) == ["p-pair", "p-one"]
    assert pods["p-pair"]["node"] == "n1"
    assert pods["p-one"]["node"] is None
    assert "taint" in pods["p-one"]["reasons"]["n2"]  # the DeviceTaintRule was read (served at v1beta2)
    assert api.writes() == []
    assert {r.method for r in api.requests} == {"GET"}
    assert not (api.get("ResourceClaim", NS, "pair").get("status") or {}).get("allocation")


async def test_explain_reads_the_live_cluster(api: FakeKubeAPI, tmp_path: Path):
    _seed(api)
    kubeconfig = str(api.kubeconfig(tmp_path))
    code, out, err = await _cli("explain", "--kubeconfig", kubeconfig, "-o", "json", f"{NS}/p-pair")
    assert code == 0, err
    summary: dict[str, Any] = orjson.loads(out)
    assert summary["verdicts"] == {"fits": 1, "unresolvable": 1}
    assert [v["node"] for v in summary["best"]] == ["n1"]


async def test_an_unreachable_cluster_exits_2_naming_the_problem(tmp_path: Path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    api = FakeKubeAPI()
    api.url = f"http://127.0.0.1:{port}"  # nothing listens there
    code, out, err = await _cli("simulate", "--kubeconfig", str(api.kubeconfig(tmp_path)))
    assert (code, out) == (2, "")
    assert "dra-extender: reading the cluster: " in err and "cannot connect" in err


async def test_state_and_live_cluster_flags(tmp_path: Path):
    code, _, err = await _cli("explain", "--state", str(tmp_path), "--context", "x", "ns/p")
    assert code == 2 and "--state and --kubeconfig/--context exclude each other" in err
    code, _, err = await _cli("simulate")
    assert code == 2 and "simulate needs --state DIR, or a live cluster" in err
    code, _, err = await _cli("simulate", "--kubeconfig", str(tmp_path / "absent"))
    assert code == 2 and "cannot load the Kubernetes client configuration" in err


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "the kubeconfig file is empty"),
        ("\n# nothing here yet\n", "the kubeconfig file is empty"),
        ("[]\n", "not a kubeconfig: expected a mapping (apiVersion, clusters, users, contexts), got a list"),
        ("clusters: [\n", "not valid YAML: "),
    ],
)
async def test_an_unusable_kubeconfig_file_is_named_with_what_is_wrong(tmp_path, text, problem):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(text)
    expected = f"dra-extender: cannot load the Kubernetes client configuration: {kubeconfig}: {problem}"
    code, _, err = await _cli("simulate", "--kubeconfig", str(kubeconfig))
    assert code == 2 and err.startswith(expected), err
    with socket.socket() as free:  # serve reads it the same way
        free.bind(("127.0.0.1", 0))
        port = str(free.getsockname()[1])
    code, _, err = await _cli("serve", "--kubeconfig", str(kubeconfig), "--port", port)
    assert code == 2 and expected in err, err
