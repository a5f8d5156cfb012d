"""The API client's session: the environment is read once when connecting, never per request.

kubernetes-asyncio's own session reads ``~/.netrc`` and the proxy variables in a worker thread before every
request; the extender's resolves the API server's proxy at ``connect`` (``HTTPS_PROXY`` / ``NO_PROXY``, as
client-go) and then only sends."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.kube.client import CORE_NAMESPACES, KubeClient
from tests.app.kube.fakeapi import FakeKubeAPI


def _clear_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
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


async def test_the_environment_proxy_is_resolved_at_connect(
    api: FakeKubeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _clear_proxies(monkeypatch)
    scheme = api.url.split(":", 1)[0]
    monkeypatch.setenv(f"{scheme}_proxy", "http://ops:s3cret@proxy.example:3128")
    client = await KubeClient.connect(api.kubeconfig(tmp_path))
    try:
        rest = client._api.rest_client
        assert rest.proxy == "http://proxy.example:3128"
        # base64("ops:s3cret"), worked out by hand
        assert rest.proxy_headers == {"Proxy-Authorization": "Basic b3BzOnMzY3JldA=="}
    finally:
        await client.close()


async def test_no_proxy_for_a_bypassed_server(
    api: FakeKubeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _clear_proxies(monkeypatch)
    scheme = api.url.split(":", 1)[0]
    monkeypatch.setenv(f"{scheme}_proxy", "http://proxy.example:3128")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    client = await KubeClient.connect(api.kubeconfig(tmp_path))
    try:
        assert client._api.rest_client.proxy is None
    finally:
        await client.close()
