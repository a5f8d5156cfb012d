"""Cluster mode end to end through the HTTP layer: readiness gates the verbs, the runtime on its own thread
(as ``serve`` runs it), and the ``serve`` flags for cluster mode and TLS."""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.cli import main as cli
from app.cli.flags import cluster_settings, parser
from app.cli.runtime import StartupError
from app.cli.serve import _ssl_options
from app.config.settings import ClusterSettings, ServerSettings, Settings
from app.http.api import create_app
from app.kube.runtime import BackgroundRuntime, ClusterRuntime
from tests.app.kube.conftest import NS, TEST_SETTINGS, eventually, seed_cluster
from tests.app.kube.fakeapi import FakeKubeAPI
from tests.builders import claim, pod, request


def _http(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://extender")


async def test_readyz_and_the_verbs_wait_for_the_informers(api: FakeKubeAPI, clock, tmp_path):
    seed_cluster(api)
    api.add("ResourceClaim", claim(NS, "c", [request("gpu", "gpu")]))
    p = api.add("Pod", pod(NS, "p", ["c"]))
    gate = api.gate("GET", r"^/api/v1/pods$")
    runtime = ClusterRuntime(
        dataclasses.replace(TEST_SETTINGS, kubeconfig=api.kubeconfig(tmp_path)), clock=clock
    )
    await runtime.start()
    app = create_app(runtime.service, Settings(None, cluster=runtime.settings), ready=runtime.ready)
    try:
        async with _http(app) as http:
            assert (await http.get("/livez")).status_code == 200
            ready = await http.get("/readyz")
            assert ready.status_code == 503 and ready.json() == {"status": "syncing"}
            args = orjson.dumps({"Pod": p, "NodeNames": ["n1", "n2"]})
            refused = (await http.post("/scheduler/filter", content=args)).json()
            assert "still syncing" in refused["Error"]
            assert (await http.post("/scheduler/prioritize", content=args)).json() == []
            gate.set()
            await eventually(runtime.ready)
            assert (await http.get("/readyz")).status_code == 200
            decided = (await http.post("/scheduler/filter", content=args)).json()
            assert decided["NodeNames"] == ["n1", "n2"] and decided["Error"] == ""
    finally:
        await runtime.stop()


async def test_on_synced_is_called_once_when_every_informer_has_listed_and_readiness_waits_for_it(
    api: FakeKubeAPI, clock, tmp_path
):
    seed_cluster(api)
    gate = api.gate("GET", r"^/api/v1/pods$")
    calls: list[tuple[bool, bool]] = []
    runtime = ClusterRuntime(
        dataclasses.replace(TEST_SETTINGS, kubeconfig=api.kubeconfig(tmp_path)),
        clock=clock,
        on_synced=lambda: calls.append((runtime.informers.synced, runtime.ready())),
    )
    await runtime.start()
    try:
        await eventually(lambda: runtime.not_ready() == ["Pod"])
        await asyncio.sleep(0.05)
        assert calls == []
        gate.set()
        await eventually(lambda: calls)
        assert runtime.ready()
        api.add("Pod", pod(NS, "later", []))
        await eventually(lambda: runtime.state.get("Pod", f"{NS}/later") is not None)
        assert calls == [(True, False)]  # after every informer's list, before the runtime is ready
    finally:
        await runtime.stop()


async def test_a_failing_on_synced_is_logged_and_the_runtime_becomes_ready(api, clock, tmp_path, caplog):
    seed_cluster(api)

    def fail() -> None:
        raise RuntimeError("the hook failed")

    runtime = ClusterRuntime(
        dataclasses.replace(TEST_SETTINGS, kubeconfig=api.kubeconfig(tmp_path)), clock=clock, on_synced=fail
    )
    await runtime.start()
    try:
        await eventually(runtime.ready)
        assert any("the hook failed" in (r.exc_text or "") for r in caplog.records if r.levelname == "ERROR")
        api.add("Pod", pod(NS, "later", []))  # the informers still run
        await eventually(lambda: runtime.state.get("Pod", f"{NS}/later") is not None)
    finally:
        await runtime.stop()


async def test_background_runtime_serves_filter_and_bind_like_serve_does(api: FakeKubeAPI, tmp_path):
    seed_cluster(api)
    api.add("ResourceClaim", claim(NS, "c", [request("gpu", "gpu")]))
    p = api.add("Pod", pod(NS, "p", ["c"]))
    runtime = ClusterRuntime(dataclasses.replace(TEST_SETTINGS, kubeconfig=api.kubeconfig(tmp_path)))
    background = BackgroundRuntime(runtime)
    await asyncio.to_thread(background.start)
    try:
        await eventually(runtime.ready, timeout=5)
        app = create_app(runtime.service, Settings(None, cluster=runtime.settings), ready=runtime.ready)
        async with _http(app) as http:
            args = orjson.dumps({"Pod": p, "NodeNames": ["n1", "n2"]})
            assert (await http.post("/scheduler/filter", content=args)).json()["NodeNames"] == ["n1", "n2"]
            binding = {"PodName": "p", "PodNamespace": NS, "PodUID": p["metadata"]["uid"], "Node": "n2"}
            answer = await http.post("/scheduler/bind", content=orjson.dumps(binding))
            assert answer.json() == {"Error": ""}
        assert api.get("Pod", NS, "p")["spec"]["nodeName"] == "n2"
    finally:
        await asyncio.to_thread(background.stop)


async def test_background_runtime_reports_an_unusable_kubeconfig(tmp_path):
    missing = ClusterSettings(kubeconfig=tmp_path / "nope")
    with pytest.raises(Exception, match=r"nope|kube"):
        await asyncio.to_thread(BackgroundRuntime(ClusterRuntime(missing)).start)


def _serve_args(*argv: str):
    return parser().parse_args(["serve", *argv])


def test_serve_flags_choose_cluster_mode(monkeypatch, tmp_path):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    kubeconfig = tmp_path / "config"
    settings = cluster_settings(
        _serve_args(
            "--kubeconfig",
            str(kubeconfig),
            "--scheduler-lease",
            "ns/lease",
            "--orphan-grace-period",
            "60",
            "--binding-timeout",
            "120",
            "--scheduler-name",
            "dra-scheduler, gpu-scheduler",
            "--kube-api-qps",
            "500",
            "--kube-api-burst",
            "1000",
        )
    )
    assert settings == ClusterSettings(
        kubeconfig=kubeconfig,
        scheduler_lease="ns/lease",
        scheduler_names=("dra-scheduler", "gpu-scheduler"),
        orphan_grace_period_seconds=60.0,
        binding_timeout_seconds=120.0,
        api_qps=500.0,
        api_burst=1000,
    )
    assert cluster_settings(_serve_args("--in-cluster")).in_cluster
    assert cluster_settings(_serve_args("--state", str(tmp_path))) is None
    with pytest.raises(StartupError, match="exclude each other"):
        cluster_settings(_serve_args("--state", str(tmp_path), "--in-cluster"))
    with pytest.raises(StartupError, match="serve needs --state DIR"):
        cluster_settings(_serve_args())
    with pytest.raises(StartupError, match="scheduler_lease"):
        cluster_settings(_serve_args("--in-cluster", "--scheduler-lease", "no-slash"))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert cluster_settings(_serve_args()) == ClusterSettings()


def test_serve_without_state_or_cluster_exits_2(monkeypatch, capsys):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert cli.main(["serve"]) == 2
    assert "serve needs --state DIR" in capsys.readouterr().err


def test_tls_options_for_uvicorn(tmp_path):
    assert _ssl_options(ServerSettings()) == {}
    cert, key, ca = tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "ca.pem"
    assert _ssl_options(ServerSettings(ssl_certfile=cert, ssl_keyfile=key, ssl_ca_certs=ca)) == {
        "ssl_certfile": str(cert),
        "ssl_keyfile": str(key),
        "ssl_ca_certs": str(ca),
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
    }
    with pytest.raises(ValueError, match="both or neither"):
        ServerSettings(ssl_certfile=cert)
    with pytest.raises(ValueError, match="need HTTPS"):
        ServerSettings(ssl_ca_certs=ca)


@pytest.mark.parametrize(
    ("field", "value"),
    [("watch_idle_seconds", 0), ("backoff_jitter", 1.5), ("orphan_grace_period_seconds", -1)],
)
def test_cluster_settings_reject_values_that_cannot_work(field, value):
    with pytest.raises(ValueError, match=field):
        ClusterSettings(**{field: value})


def test_kubeconfig_paths_are_the_flag_else_every_kubeconfig_entry(monkeypatch):
    from app.kube.client import kubeconfig_paths

    monkeypatch.setenv("KUBECONFIG", "/a/config::/b/config")
    assert kubeconfig_paths(None) == (Path("/a/config"), Path("/b/config"))
    assert kubeconfig_paths(Path("/x")) == (Path("/x"),)
    monkeypatch.delenv("KUBECONFIG")
    assert kubeconfig_paths(None) == ()


_OTHER_KUBECONFIG = (
    "apiVersion: v1\nkind: Config\n"
    "clusters:\n- name: other\n  cluster:\n    server: https://other.invalid:6443\n"
    "users:\n- name: other\n  user:\n    token: other-token\n"
    "contexts:\n- name: other\n  context:\n    cluster: other\n    user: other\n"
)
"""A kubeconfig without a current-context whose only context is not the fake API server's."""


@pytest.mark.parametrize(
    ("first_current", "context"), [(None, None), (None, "fake"), ("fake", None), ("other", "fake")]
)
async def test_a_merged_kubeconfig_resolves_a_context_of_its_second_file(
    api, tmp_path, monkeypatch, first_current, context
):
    """As kubectl: the files are merged, the first file's current-context wins over a later one's."""
    from app.kube.client import CORE_NODES, KubeClient

    first = tmp_path / "a.yaml"
    current = f"current-context: {first_current}\n" if first_current else ""
    first.write_text(_OTHER_KUBECONFIG + current)
    second = api.kubeconfig(tmp_path)  # current-context: fake, the fake API server
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'absent.yaml'}:{second}")
    client = await KubeClient.connect(context=context)
    try:
        assert client.host == api.url
        await client.list(CORE_NODES)  # the token of the second file's user is accepted
    finally:
        await client.close()
    assert any(r.path == "/api/v1/nodes" for r in api.requests)


async def test_the_first_current_context_of_a_merged_kubeconfig_wins(api, tmp_path, monkeypatch):
    from app.kube.client import KubeClient

    first = tmp_path / "a.yaml"
    first.write_text(_OTHER_KUBECONFIG + "current-context: other\n")
    monkeypatch.setenv("KUBECONFIG", f"{first}:{api.kubeconfig(tmp_path)}")  # the second: fake
    client = await KubeClient.connect()
    try:
        assert client.host == "https://other.invalid:6443"
    finally:
        await client.close()


async def test_a_kubeconfig_list_without_a_usable_file_names_each(tmp_path, monkeypatch):
    from kubernetes_asyncio.config import ConfigException

    from app.kube.client import KubeClient

    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    missing = tmp_path / "missing.yaml"
    monkeypatch.setenv("KUBECONFIG", f"{empty}:{missing}")
    with pytest.raises(ConfigException) as raised:
        await KubeClient.connect()
    assert str(raised.value) == (
        f"no usable kubeconfig in $KUBECONFIG: {empty}: the kubeconfig file is empty; {missing}: no such file"
    )


def test_serve_in_cluster_mode_reports_an_unusable_config_file(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    missing = tmp_path / "missing.yaml"
    assert cli.main(["serve", "--kubeconfig", str(tmp_path / "kubeconfig"), "--config", str(missing)]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_serve_in_cluster_mode_passes_the_freeze_as_on_synced(api, monkeypatch, tmp_path, capsys):
    import app.kube.runtime
    from app.cli.runtime import freeze_long_lived

    given: dict[str, Any] = {}

    def runtime(*args: Any, **kwargs: Any) -> None:
        given.update(kwargs)
        raise StartupError("runtime made")

    monkeypatch.setattr(app.kube.runtime, "ClusterRuntime", runtime)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert cli.main(["serve", "--kubeconfig", str(api.kubeconfig(tmp_path))]) == 2
    assert "runtime made" in capsys.readouterr().err
    assert given["on_synced"] is freeze_long_lived


@pytest.mark.parametrize(
    ("current", "context", "message"),
    [
        ("", "zzz", 'context "zzz" is not in the kubeconfig {files} (its contexts: other, fake)'),
        (
            "current-context: ghost\n",
            None,
            'context "ghost" is not in the kubeconfig {files} (its contexts: other, fake)',
        ),
    ],
)
async def test_a_context_none_of_the_merged_files_has_is_named_with_the_files(
    api, tmp_path, monkeypatch, current, context, message
):
    """As kubectl's ``context "zzz" does not exist``, not the library's ``Expected object with name zzz in
    <first file>/contexts list``, which names only the first file."""
    from kubernetes_asyncio.config import ConfigException

    from app.kube.client import KubeClient

    first = tmp_path / "a.yaml"
    first.write_text(_OTHER_KUBECONFIG + current)
    files = f"{first}:{api.kubeconfig(tmp_path)}"
    monkeypatch.setenv("KUBECONFIG", files)
    with pytest.raises(ConfigException) as raised:
        await KubeClient.connect(context=context)
    assert str(raised.value) == message.format(files=files)


async def test_a_context_whose_cluster_is_missing_or_no_context_at_all_is_said_plainly(tmp_path):
    from kubernetes_asyncio.config import ConfigException

    from app.kube.client import KubeClient

    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(_OTHER_KUBECONFIG.replace("cluster: other", "cluster: gone"))
    with pytest.raises(ConfigException) as raised:
        await KubeClient.connect(kubeconfig, context="other")
    assert str(raised.value) == f'context "other": cluster "gone" is not in the kubeconfig {kubeconfig}'
    with pytest.raises(ConfigException) as raised:
        await KubeClient.connect(kubeconfig)
    assert str(raised.value) == (
        f"the kubeconfig {kubeconfig} has no current-context: name one with --context (its contexts: other)"
    )
    kubeconfig.write_text("contexts:\n- name: other\n  context: just-a-string\n")
    with pytest.raises(ConfigException) as raised:
        await KubeClient.connect(kubeconfig, context="other")
    assert str(raised.value) == (
        f'context "other" in the kubeconfig {kubeconfig}: its context must be a mapping naming a cluster'
    )
