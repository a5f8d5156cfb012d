"""The API client's session: the environment is read once when connecting, never per request.

kubernetes-asyncio's own session reads ``~/.netrc`` and the proxy variables in a worker thread before every
request; the extender's resolves the API server's proxy at ``connect`` (``app.kube.proxy``) and then only
sends. And the watch read timeout: a silent watch is ``WatchIdle``, not any other ``TransportError``."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from app.kube.apimetrics import APIMetrics
from app.kube.client import (
    CORE_NAMESPACES,
    CORE_NODES,
    CORE_PODS,
    KubeAPIError,
    KubeClient,
    TransportError,
    WatchIdle,
)
from app.kube.ratelimit import TokenBucket
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


@asynccontextmanager
async def serving(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> AsyncIterator[str]:
    """A local HTTP server answering every request with ``handler``; yields its URL."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_a_request_carries_the_token_the_query_and_the_body_as_sent(tmp_path: Path) -> None:
    """What reaches the API server: the kubeconfig's bearer token, the library's User-Agent, the query
    encoded, and the body as JSON that decodes to the object given (non-ASCII text included)."""
    seen: list[tuple[str, str, dict[str, str], bytes]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append((request.method, request.path_qs, dict(request.headers), await request.read()))
        return web.json_response({"metadata": {"name": "ns-é"}})

    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns-é", "labels": {"a": "b c"}}}
    async with serving(record) as url:
        client = await KubeClient.connect(write_kubeconfig(tmp_path, url))
        try:
            answer = await client.replace(CORE_NAMESPACES, body)
            await client.list(CORE_NAMESPACES, limit=7, continue_="next token")
        finally:
            await client.close()
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


NODE_EVENT = {"type": "ADDED", "object": {"metadata": {"name": "n1", "resourceVersion": "2"}}}
BOOKMARK = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "3"}}}
READ_TIMEOUT = 0.3

Handler = Callable[[web.Request, asyncio.Event], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def watch_server(tmp_path: Path, handler: Handler) -> AsyncIterator[KubeClient]:
    """A client with a ``READ_TIMEOUT`` watch read timeout, on a server answering every request with
    ``handler(request, release)``; ``release`` is set before the server stops."""
    release = asyncio.Event()

    async def handle(request: web.Request) -> web.StreamResponse:
        return await handler(request, release)

    async with serving(handle) as url:
        client = await KubeClient.connect(write_kubeconfig(tmp_path, url), watch_read_timeout=READ_TIMEOUT)
        try:
            yield client
        finally:
            release.set()
            await client.close()


async def stream(request: web.Request, *events: dict) -> web.StreamResponse:
    response = web.StreamResponse()
    response.content_type = "application/json"
    await response.prepare(request)
    for event in events:
        await response.write(json.dumps(event).encode() + b"\n")
    return response


async def silent_after_one_event(request: web.Request, release: asyncio.Event) -> web.StreamResponse:
    response = await stream(request, NODE_EVENT)
    await release.wait()
    return response


async def silent_before_the_headers(request: web.Request, release: asyncio.Event) -> web.StreamResponse:
    await release.wait()
    return web.Response()


async def reset_after_one_event(request: web.Request, release: asyncio.Event) -> web.StreamResponse:
    response = await stream(request, NODE_EVENT)
    assert request.transport is not None
    request.transport.close()  # the chunked body never ends
    return response


async def bookmarks_then_the_end(request: web.Request, release: asyncio.Event) -> web.StreamResponse:
    response = await stream(request)
    for _ in range(5):  # 0.5 s in all, more than the read timeout
        await asyncio.sleep(READ_TIMEOUT / 3)
        await response.write(json.dumps(BOOKMARK).encode() + b"\n")
    await response.write_eof()
    return response


async def read_watch(client: KubeClient, received: list[dict]) -> None:
    async for event in client.watch(CORE_NODES, resource_version="1", timeout_seconds=300):
        received.append(event)


async def blank_lines_only(request: web.Request, release: asyncio.Event) -> web.StreamResponse:
    """Headers, then a keep-alive newline every 0.1 s (a proxy in front of a dead watch): the socket read
    timeout restarts with every byte, but no event arrives."""
    response = await stream(request)
    with contextlib.suppress(ConnectionError):
        while not release.is_set():
            await response.write(b"\n")
            await asyncio.sleep(0.1)
    return response


@pytest.mark.parametrize(
    ("handler", "events"),
    [(silent_after_one_event, [NODE_EVENT]), (silent_before_the_headers, []), (blank_lines_only, [])],
)
async def test_a_watch_silent_for_the_read_timeout_raises_watch_idle(
    tmp_path: Path, handler: Handler, events: list[dict]
) -> None:
    received: list[dict] = []
    loop = asyncio.get_running_loop()
    async with watch_server(tmp_path, handler) as client:
        started = loop.time()
        with pytest.raises(WatchIdle) as raised:
            await asyncio.wait_for(read_watch(client, received), 5)
        waited = loop.time() - started
    assert received == events
    assert raised.value.sent and raised.value.status == 0
    assert READ_TIMEOUT * 0.9 <= waited < 2


async def test_a_watch_that_breaks_is_a_transport_error_not_watch_idle(tmp_path: Path) -> None:
    received: list[dict] = []
    async with watch_server(tmp_path, reset_after_one_event) as client:
        with pytest.raises(TransportError) as raised:
            await asyncio.wait_for(read_watch(client, received), 5)
    assert received == [NODE_EVENT]
    assert not isinstance(raised.value, WatchIdle)


async def test_bookmarks_keep_a_watch_alive_past_the_read_timeout(tmp_path: Path) -> None:
    """The read timeout counts from the last bytes received, not from the start of the watch."""
    received: list[dict] = []
    async with watch_server(tmp_path, bookmarks_then_the_end) as client:
        await asyncio.wait_for(read_watch(client, received), 5)
    assert received == [BOOKMARK] * 5


@asynccontextmanager
async def answering(
    tmp_path: Path, answers: list[tuple[Any, ...]], **connect: Any
) -> AsyncIterator[tuple[KubeClient, list[str]]]:
    """A client on a server that gives ``answers`` (status, headers) in turn, then 200 to every request
    (a watch: one event); also the paths the server was asked for. An answer may add its body as a third
    element. ``DROP``: the request is read and its connection closed without an answer."""
    left = list(answers)
    asked: list[str] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        asked.append(request.path_qs)
        status, headers, *given = left.pop(0) if left else (200, {})
        if status == DROP:
            assert request.transport is not None
            request.transport.close()  # read, never answered
            return web.Response()
        if status == 200 and request.query.get("watch"):
            return await stream(request, NODE_EVENT)
        body = {"metadata": {"name": "ns1"}} if status == 200 else {"kind": "Status", "code": status}
        return web.json_response(given[0] if given else body, status=status, headers=headers)

    async with serving(answer) as url:
        client = await KubeClient.connect(write_kubeconfig(tmp_path, url), **connect)
        try:
            yield client, asked
        finally:
            await client.close()


NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"}}
NOW = {"Retry-After": "0"}
DROP = 0


@pytest.mark.parametrize(
    "answers",
    [
        [(429, NOW), (429, NOW)],  # priority and fairness turning the request away
        [(429, {"Retry-After": "+0"}), (429, {"Retry-After": "-1"})],  # strconv.Atoi takes a sign
        [(429, NOW)] * 10,  # client-go's ten retries, the last one answered
    ],
)
async def test_a_request_turned_away_with_retry_after_is_sent_again(
    tmp_path: Path, answers: list[tuple[int, dict[str, str]]]
) -> None:
    async with answering(tmp_path, answers) as (client, asked):
        assert await client.replace(CORE_NAMESPACES, NAMESPACE) == {"metadata": {"name": "ns1"}}
    assert len(asked) == len(answers) + 1


@pytest.mark.parametrize(
    ("answers", "status"),
    [
        ([(429, NOW)] * 11, 429),  # an eleventh refusal is the answer
        ([(429, {})], 429),  # no Retry-After: the eviction API's 429 for a disruption budget
        ([(429, {"Retry-After": "1.5"})], 429),  # whole seconds only, as strconv.Atoi reads them
        ([(429, {"Retry-After": "1_0"})], 429),  # Python's int() would take these, Atoi does not
        ([(429, {"Retry-After": "\u0661"})], 429),
        ([(503, NOW)], 503),  # a 5xx may come after the write was stored: the caller reads first
        ([(429, {"Retry-After": "11"})], 429),  # longer than RETRY_AFTER_MAX_SECONDS: the caller's to wait
        ([(500, NOW)], 500),
        ([(504, NOW)], 504),
        ([(409, NOW)], 409),
        ([(404, NOW)], 404),
    ],
)
async def test_other_answers_are_raised_at_once(
    tmp_path: Path, answers: list[tuple[int, dict[str, str]]], status: int
) -> None:
    async with answering(tmp_path, answers) as (client, asked):
        with pytest.raises(KubeAPIError) as raised:
            await client.replace(CORE_NAMESPACES, NAMESPACE)
    assert raised.value.status == status
    assert len(asked) == len(answers)


async def test_the_wait_is_the_retry_after_seconds(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    async with answering(tmp_path, [(429, {"Retry-After": "1"})]) as (client, _):
        started = loop.time()
        await client.replace(CORE_NAMESPACES, NAMESPACE)
        waited = loop.time() - started
    assert 0.9 <= waited < 5


async def test_every_attempt_takes_a_token_steps_aside_and_is_counted(tmp_path: Path) -> None:
    class CountingBucket(TokenBucket):
        taken = 0

        async def take(self) -> None:
            self.taken += 1
            await super().take()

    tokens = CountingBucket(1000, 1000)
    steps: list[str] = []
    metrics = APIMetrics()
    connect = {"rate_limit": tokens, "step_aside": lambda: steps.append("step"), "metrics": metrics}
    async with answering(tmp_path, [(429, NOW)] * 3, **connect) as (client, _):
        await client.replace(CORE_NAMESPACES, NAMESPACE)
    assert tokens.taken == 4
    assert steps == ["step"] * 4
    counted = {
        sample.labels["code"]: sample.value
        for metric in metrics.requests.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    }
    assert counted == {"429": 3, "200": 1}


async def test_a_watch_turned_away_is_sent_again(tmp_path: Path) -> None:
    async with answering(tmp_path, [(429, NOW)]) as (client, asked):
        events = client.watch(CORE_NODES, resource_version="1", timeout_seconds=30)
        assert await anext(events) == NODE_EVENT
        await events.aclose()  # type: ignore[attr-defined]
    assert len(asked) == 2


EVICTION = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p", "namespace": "ns"}}


async def test_an_eviction_is_not_retried_and_names_the_budget_cause(tmp_path: Path) -> None:
    """The preemptor sends evictions with ``retry=False``: a wait inside the client would not see the pod's
    hold end. A PodDisruptionBudget's 429 names a ``DisruptionBudget`` cause (``Retry-After: 10`` while
    the budget's generation is not observed yet)."""
    # As kube-apiserver sends it: metav1.StatusCause's Type is the JSON field "reason".
    refusal = {
        "kind": "Status",
        "code": 429,
        "reason": "TooManyRequests",
        "details": {
            "causes": [{"reason": "DisruptionBudget", "message": "The disruption budget pdb needs 1"}]
        },
    }
    async with answering(tmp_path, [(429, {"Retry-After": "0"}, refusal)]) as (client, asked):
        with pytest.raises(KubeAPIError) as raised:
            await client.create(CORE_PODS, "ns", EVICTION, name="p", subresource="eviction", retry=False)
    assert (raised.value.status, raised.value.causes) == (429, ("DisruptionBudget",))
    assert len(asked) == 1


@pytest.mark.parametrize("status", [429, 404, 422])
async def test_an_error_answering_a_write_sent_again_may_have_been_carried_out(
    tmp_path: Path, status: int
) -> None:
    """aiohttp sends a PUT again, on a new connection, when the one it went out on closes before the answer:
    the server may have carried out the first. So the answer to the second is no proof that nothing was
    written (``maybe_done``), and a 429 is not retried on its ``Retry-After``."""
    async with answering(tmp_path, [(DROP, {}), (status, NOW)] + [(status, NOW)] * 11) as (client, asked):
        with pytest.raises(KubeAPIError) as raised:
            await client.replace(CORE_NAMESPACES, NAMESPACE)
    assert (raised.value.status, raised.value.maybe_done) == (status, True)
    assert len(asked) == 2


@pytest.mark.parametrize("status", [429, 404, 422, 409])
async def test_an_error_answering_a_write_sent_once_was_not_carried_out(tmp_path: Path, status: int) -> None:
    async with answering(tmp_path, [(status, {})]) as (client, asked):
        with pytest.raises(KubeAPIError) as raised:
            await client.replace(CORE_NAMESPACES, NAMESPACE)
    assert (raised.value.status, raised.value.maybe_done) == (status, False)
    assert len(asked) == 1


async def test_a_write_whose_second_try_cannot_connect_is_taken_as_not_sent(tmp_path: Path) -> None:
    """The server takes the PUT and goes away before answering; aiohttp's second try finds nothing to
    connect to. The first may have been carried out, but a failed connect is taken at its word: while
    kube-apiserver is down every write fails so, and holding each one's devices stalls binds after it is
    back (``KubeClient._send_once``)."""
    received: list[bytes] = []

    async def take_then_go_away(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(
            next(
                line.split(b":")[1]
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
        )
        received.append(await reader.readexactly(length))
        server.close()  # no more connections
        writer.close()

    server = await asyncio.start_server(take_then_go_away, "127.0.0.1", 0)
    failed = await failed_write(tmp_path, server.sockets[0].getsockname()[1])
    assert [json.loads(body) for body in received] == [NAMESPACE]
    assert not failed.sent and not failed.maybe_done


async def test_a_write_that_cannot_connect_at_all_was_not_sent(tmp_path: Path) -> None:
    server = await asyncio.start_server(lambda reader, writer: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    failed = await failed_write(tmp_path, port)
    assert not failed.sent and not failed.maybe_done


async def failed_write(tmp_path: Path, port: int) -> TransportError:
    """The TransportError of a PUT to ``port`` on the loopback."""
    client = await KubeClient.connect(write_kubeconfig(tmp_path, f"http://127.0.0.1:{port}"))
    try:
        with pytest.raises(TransportError) as raised:
            await client.replace(CORE_NAMESPACES, NAMESPACE)
    finally:
        await client.close()
    return raised.value


async def test_a_read_whose_second_try_is_turned_away_is_sent_again(tmp_path: Path) -> None:
    """aiohttp tries a GET twice too; a GET carries nothing out, so its 429 is waited out as any."""
    async with answering(tmp_path, [(DROP, {}), (429, NOW)]) as (client, asked):
        assert await client.get(CORE_NAMESPACES, None, "ns1") == {"metadata": {"name": "ns1"}}
    assert len(asked) == 3
