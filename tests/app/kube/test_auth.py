"""Delegated authentication and authorization (issue 14, item 13): TokenReview for bearer tokens,
client certificates, the scheduler's identity on /scheduler/*, SubjectAccessReview on /api/*."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.cli.runtime import build_runtime
from app.config.settings import Settings
from app.http.api import create_app
from app.http.auth import DelegatedAuth, DelegatedAuthMiddleware
from app.kube.client import KubeClient, review
from tests.app.kube.fakeapi import FakeKubeAPI

DEMO = Path(__file__).resolve().parents[3] / "examples" / "cluster"
SCHEDULER = "system:kube-scheduler"
FILTER = orjson.dumps({"Pod": {"metadata": {"name": "x", "namespace": "demo"}}, "NodeNames": ["gpu-node-1"]})


@pytest.fixture
async def http(api: FakeKubeAPI, client: KubeClient) -> AsyncIterator[httpx.AsyncClient]:
    api.tokens = {"sched-token": (SCHEDULER, ["system:authenticated"]), "alice-token": ("alice", [])}
    api.allowed = {("alice", "/api/v1/nodes/gpu-node-1/devices", "get")}
    app = create_app(
        build_runtime(DEMO).service,
        Settings(DEMO),
        auth=DelegatedAuth(lambda plural, body: review(client, plural, body), SCHEDULER),
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as c:
        yield c


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_scheduler_routes_answer_only_the_schedulers_identity(http, api):
    assert (
        await http.post("/scheduler/filter", content=FILTER, headers=bearer("sched-token"))
    ).status_code == 200
    denied = await http.post("/scheduler/filter", content=FILTER, headers=bearer("alice-token"))
    assert (denied.status_code, denied.json()) == (
        403,
        {"Error": "user 'alice' may not call the scheduler routes"},
    )
    anonymous = await http.post("/scheduler/bind", content=b"{}")
    assert anonymous.status_code == 401
    assert anonymous.headers["WWW-Authenticate"] == 'Bearer realm="dra-extender"'
    assert (await http.post("/scheduler/filter", content=FILTER, headers=bearer("forged"))).status_code == 401
    # One TokenReview per token while cached, not one per call.
    assert api.count("POST", r"tokenreviews$") == 3


async def test_explanations_need_a_subject_access_review_for_their_path(http, api):
    allowed = await http.get("/api/v1/nodes/gpu-node-1/devices", headers=bearer("alice-token"))
    assert allowed.status_code == 200
    other = await http.get("/api/v1/namespaces/demo/resourceclaims/shared-gpu", headers=bearer("alice-token"))
    assert other.status_code == 403
    assert other.json() == {
        "Error": "user 'alice' may not get \"/api/v1/namespaces/demo/resourceclaims/shared-gpu\""
    }
    sar = [r.body["spec"] for r in api.requests if r.path.endswith("subjectaccessreviews")]
    assert sar[0] == {
        "user": "alice",
        "groups": [],
        "nonResourceAttributes": {"path": "/api/v1/nodes/gpu-node-1/devices", "verb": "get"},
    }
    assert (await http.get("/api/v1/nodes/gpu-node-1/devices")).status_code == 401


async def test_probes_stay_open_and_an_unreachable_api_server_fails_closed(http, api):
    assert (await http.get("/livez")).status_code == 200
    api.down = True
    refused = await http.post("/scheduler/filter", content=FILTER, headers=bearer("new-token"))
    assert refused.status_code == 503
    assert refused.json()["Error"].startswith("cannot check the caller with the API server")


async def test_a_verified_client_certificate_identifies_the_caller():
    async def never(plural: str, body: dict[str, Any]) -> Any:
        raise AssertionError("a certificate needs no TokenReview")

    called: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        called.append(scope["path"])

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    middleware = DelegatedAuthMiddleware(app, DelegatedAuth(never, SCHEDULER))
    for common_name in (SCHEDULER, "someone"):
        cert = {"subject": ((("commonName", common_name),), (("organizationName", "system:masters"),))}
        scope = {
            "type": "http",
            "path": "/scheduler/filter",
            "method": "POST",
            "headers": [],
            "extensions": {"tls": {"client_cert": cert}},
        }
        await middleware(scope, None, send)
    assert called == ["/scheduler/filter"]
    assert sent[0]["status"] == 403


async def test_the_served_client_certificate_reaches_the_check():
    # A real HTTPS server with the extender's connection settings: the certificate TLS verified is the
    # caller's identity; a caller without one (certificates optional) is asked to authenticate.
    import asyncio
    import socket
    import ssl

    import trustme
    import uvicorn

    from app.http.server import server_config

    async def never(plural: str, body: dict[str, Any]) -> Any:
        raise AssertionError("a certificate needs no TokenReview")

    async def ok(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    authority = trustme.CA()
    server_cert = authority.issue_cert("127.0.0.1")
    client_cert = authority.issue_cert("scheduler.example", common_name=SCHEDULER)
    with server_cert.private_key_and_cert_chain_pem.tempfile() as pem, authority.cert_pem.tempfile() as ca:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        config = uvicorn.Config(
            DelegatedAuthMiddleware(ok, DelegatedAuth(never, SCHEDULER)),
            log_level="warning",
            lifespan="off",
            ssl_certfile=pem,
            ssl_ca_certs=ca,
            ssl_cert_reqs=ssl.CERT_OPTIONAL,
            **server_config(),
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        url = f"https://127.0.0.1:{sock.getsockname()[1]}/scheduler/filter"
        try:
            with_cert = ssl.create_default_context()
            authority.configure_trust(with_cert)
            client_cert.configure_cert(with_cert)
            without = ssl.create_default_context()
            authority.configure_trust(without)
            async with httpx.AsyncClient(verify=with_cert) as http:
                assert (await http.post(url, content=b"{}")).status_code == 200
            async with httpx.AsyncClient(verify=without) as http:
                assert (await http.post(url, content=b"{}")).status_code == 401
        finally:
            server.should_exit = True
            await task
