"""``serve`` in cluster mode with ``--log-format json``: every line on stderr is a JSON record, the startup
banner, uvicorn's lifecycle, a failed bind (at warning, with the pod, the node and the reason) and a config
file reload too; the reload shows in the metrics."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from pathlib import Path

import httpx

from tests.app.kube.conftest import NS, add_pod, seed_cluster
from tests.app.kube.fakeapi import FakeKubeAPI
from tests.ports import free_ports

REPO = Path(__file__).resolve().parents[3]


async def test_cluster_mode_logs_only_json(api: FakeKubeAPI, tmp_path: Path):
    seed_cluster(api)
    add_pod(api, "p")
    [port] = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {"PYTHONPATH": str(REPO)}
    config = tmp_path / "extender.yaml"
    header = "apiVersion: dra-extender.io/v1alpha1\nkind: ExtenderConfiguration\n"
    config.write_text(header + "scheduling: {deviceSelection: aligned}\n")
    argv = ["-m", "app", "serve", "--kubeconfig", str(api.kubeconfig(tmp_path)), "--port", str(port)]
    argv += ["--config", str(config)]
    server = await asyncio.create_subprocess_exec(
        sys.executable, *argv, "--log-format", "json", cwd=REPO, env=env, stderr=asyncio.subprocess.PIPE
    )
    try:
        async with httpx.AsyncClient(base_url=url) as http:
            deadline = asyncio.get_running_loop().time() + 60
            while True:
                assert server.returncode is None and asyncio.get_running_loop().time() < deadline, "no start"
                try:
                    if (await http.get("/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
            binding = {"PodName": "p", "PodNamespace": NS, "PodUID": f"uid-pod-{NS}-p", "Node": "n9"}
            assert (await http.post("/scheduler/bind", json=binding)).json()["Error"]
            config.write_text(header + "scheduling: {deviceSelection: first-fit}\n")
            edited = hashlib.sha256(config.read_bytes()).hexdigest()
            while (
                f'dra_extender_config_hash{{sha256="{edited}"}} 1.0' not in (await http.get("/metrics")).text
            ):
                assert asyncio.get_running_loop().time() < deadline + 30, "the edit was never applied"
                await asyncio.sleep(0.2)
    finally:
        server.terminate()
        _, err = await server.communicate()
    records = [json.loads(line) for line in err.decode().splitlines()]  # every line
    [banner] = [r for r in records if r["logger"] == "app.cli.serve"]
    assert banner["msg"].startswith(f"dra-extender: cluster mode, API server {api.url}; serving {url} ")
    assert "Application startup complete." in [r["msg"] for r in records if r["logger"] == "uvicorn.error"]
    [failed] = [r for r in records if r["msg"] == "bind failed"]
    assert failed["level"] == "warning"
    assert (failed["pod"], failed["node"]) == (f"{NS}/p", "n9")
    assert failed["reason"] == "node n9 is not known to dra-extender"
    [reloaded] = [r for r in records if r["logger"] == "app.cli.reload"]
    assert reloaded["level"] == "info"
    assert (
        reloaded["msg"]
        == f"config {config} reloaded: applied scheduling.deviceSelection aligned -> first-fit"
    )
