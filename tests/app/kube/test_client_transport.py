"""The API client's session: the environment is read once when connecting, never per request.

kubernetes-asyncio's own session reads ``~/.netrc`` and the proxy variables in a worker thread before every
request; the extender's resolves the API server's proxy at ``connect`` (``app.kube.proxy``) and then only
sends."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp import web

from app.kube.client import CORE_NAMESPACES, KubeAPIError, KubeClient
from tests.app.kube.fakeapi import FakeKubeAPI, write_kubeconfig


@pytest.fixture(autouse=True)
def _no_proxy_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


async def test_requests_do_not_consult_the_environment(api: FakeKubeAPI, tmp_path: Path) -> None:
    client = await KubeClient.connect(api.kubeconfig(tmp_path))
    try:
        assert client._api.rest_client.pool_manager.trust_env is False
        listed = await client.list(CORE_NAMESPACES)  # the replaced session still carries requests
        assert "items" in listed
    finally:
        await client.close()


@pytest.mark.parametrize("server", ["http://10.0.0.1:8080", "https://10.0.0.1:6443"])
async def test_an_environment_proxy_gets_its_credentials(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    heads: list[str] = []

    async def refusing_proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append((await reader.readuntil(b"\r\n\r\n")).decode())
        writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    proxy = await asyncio.start_server(refusing_proxy, "127.0.0.1", 0)
    port = proxy.sockets[0].getsockname()[1]
    variable = "HTTPS_PROXY" if server.startswith("https") else "HTTP_PROXY"
    monkeypatch.setenv(variable, f"http://ops:s3cret@127.0.0.1:{port}")
    client = await KubeClient.connect(write_kubeconfig(tmp_path, server))
    try:
        with pytest.raises(KubeAPIError):  # only the proxy is reached, and it refuses
            await client.list(CORE_NAMESPACES)
    finally:
        await client.close()
        proxy.close()
    # base64("ops:s3cret"), worked out by hand
    assert "Proxy-Authorization: Basic b3BzOnMzY3JldA==" in heads[0]


async def test_a_kubeconfig_proxy_url_comes_before_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://environment.example:3128")
    path = write_kubeconfig(tmp_path, "https://10.0.0.1:6443", proxy_url="http://kubeconfig.example:8080")
    client = await KubeClient.connect(path)
    try:
        assert client._api.rest_client.proxy == "http://kubeconfig.example:8080"
    finally:
        await client.close()


async def test_every_request_steps_aside_first(api: FakeKubeAPI, tmp_path: Path) -> None:
    """Each API request is a step of background work (``app.scheduling.answerfirst``)."""
    steps: list[str] = []
    client = await KubeClient.connect(api.kubeconfig(tmp_path), step_aside=lambda: steps.append("step"))
    try:
        await client.list(CORE_NAMESPACES)
        with pytest.raises(KubeAPIError):
            await client.get(CORE_NAMESPACES, None, "no-such-namespace")
    finally:
        await client.close()
    assert steps == ["step", "step"]


async def test_a_request_carries_the_token_the_query_and_the_body_as_sent(tmp_path: Path) -> None:
    """What reaches the API server: the kubeconfig's bearer token, the library's User-Agent, the query
    encoded, and the body as JSON that decodes to the object given (non-ASCII text included)."""
    seen: list[tuple[str, str, dict[str, str], bytes]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append((request.method, request.path_qs, dict(request.headers), await request.read()))
        return web.json_response({"metadata": {"name": "ns-é"}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = await KubeClient.connect(write_kubeconfig(tmp_path, f"http://127.0.0.1:{port}"))
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns-é", "labels": {"a": "b c"}}}
    try:
        answer = await client.replace(CORE_NAMESPACES, body)
        await client.list(CORE_NAMESPACES, limit=7, continue_="next token")
    finally:
        await client.close()
        await runner.cleanup()
    assert answer == {"metadata": {"name": "ns-é"}}
    (put, put_path, put_headers, put_body), (get, get_path, get_headers, get_body) = seen
    assert (put, put_path) == ("PUT", "/api/v1/namespaces/ns-%C3%A9")
    assert json.loads(put_body) == body
    assert put_headers["Content-Type"] == "application/json"
    assert (get, get_path, get_body) == ("GET", "/api/v1/namespaces?limit=7&continue=next+token", b"")
    for headers in (put_headers, get_headers):
        assert headers["Authorization"] == "Bearer fake-token"
        assert headers["Accept"] == "application/json"
        assert headers["User-Agent"].startswith("OpenAPI-Generator/")
