"""The API client's session: the environment is read once when connecting, never per request.

kubernetes-asyncio's own session reads ``~/.netrc`` and the proxy variables in a worker thread before every
request; the extender's resolves the API server's proxy at ``connect`` (``HTTPS_PROXY`` / ``NO_PROXY``, as
client-go) and then only sends."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.kube.client import CORE_NAMESPACES, KubeClient
from tests.app.kube.fakeapi import FakeKubeAPI


def _proxy_env(monkeypatch: pytest.MonkeyPatch, api: FakeKubeAPI, proxy: str, no_proxy: str = "") -> None:
    """Only ``proxy`` for the fake API server's scheme in the environment (and ``no_proxy``)."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(f"{api.url.split(':', 1)[0]}_proxy", proxy)
    if no_proxy:
        monkeypatch.setenv("no_proxy", no_proxy)


async def _proxy_settings(api: FakeKubeAPI, tmp_path: Path) -> tuple[str | None, dict[str, str] | None]:
    """The proxy URL and headers a client connected to ``api`` sends its requests with."""
    client = await KubeClient.connect(api.kubeconfig(tmp_path))
    try:
        rest = client._api.rest_client
        return rest.proxy, rest.proxy_headers
    finally:
        await client.close()


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
    _proxy_env(monkeypatch, api, "http://ops:s3cret@proxy.example:3128")
    # base64("ops:s3cret"), worked out by hand
    expected = ("http://proxy.example:3128", {"Proxy-Authorization": "Basic b3BzOnMzY3JldA=="})
    assert await _proxy_settings(api, tmp_path) == expected


async def test_no_proxy_for_a_bypassed_server(
    api: FakeKubeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _proxy_env(monkeypatch, api, "http://proxy.example:3128", no_proxy="127.0.0.1,localhost")
    assert await _proxy_settings(api, tmp_path) == (None, None)
