"""Request bodies under hostile clients: many large bodies at once, bodies that never finish, connections
that never send a request (issue 14, item 10)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.requests import Request
from uvicorn.server import ServerState

from allocator.cel.expr_engine import ExprEngine
from allocator.selectors import SelectorCache
from app.config.settings import ServerSettings, Settings
from app.http.api import create_app
from app.http.bodies import BodyBudget, BodyRejected, read_body
from app.http.server import IdleClosingHttpToolsProtocol, server_config
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState


def request(chunks: list[bytes], then_wait: asyncio.Event | None = None) -> Request:
    """A request whose body arrives as ``chunks``; with ``then_wait`` the rest never comes until set."""
    messages = [{"type": "http.request", "body": c, "more_body": True} for c in chunks]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        if then_wait is not None:
            await then_wait.wait()
        return {"type": "http.request", "body": b"", "more_body": False}

    return Request({"type": "http", "method": "POST", "headers": [], "path": "/"}, receive)


async def test_bodies_read_at_once_share_a_byte_budget():
    budget = BodyBudget(max_bytes=1000, read_seconds=30)
    stalled = asyncio.Event()
    first = asyncio.create_task(read_body(request([b"a" * 600], stalled), 800, budget))
    await asyncio.sleep(0)
    while budget.in_use < 600:
        await asyncio.sleep(0.001)
    with pytest.raises(BodyRejected) as refused:
        await read_body(request([b"b" * 300, b"b" * 300]), 800, budget)
    assert refused.value.status == 503
    assert refused.value.message == "too many request bodies being read at once (1000 bytes); retry"
    stalled.set()
    assert await first == b"a" * 600
    assert budget.in_use == 0  # released, the refused one's bytes included
    assert await read_body(request([b"c" * 700]), 800, budget) == b"c" * 700


async def test_a_body_that_stops_arriving_is_refused_after_the_read_time():
    budget = BodyBudget(max_bytes=1000, read_seconds=0.05)
    with pytest.raises(BodyRejected) as refused:
        await read_body(request([b"a" * 10], asyncio.Event()), 800, budget)
    assert refused.value.status == 408
    assert refused.value.message == "request body not received within 0.05 s"
    assert budget.in_use == 0


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[int]:
    """``app`` on a real uvicorn server on 127.0.0.1 with the extender's connection settings (1 s idle
    limit) while the block runs; yields the port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", lifespan="off", **server_config(idle_seconds=1))
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    yield sock.getsockname()[1]
    server.should_exit = True
    await task


@pytest.fixture
async def served() -> AsyncIterator[int]:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async with serving(app) as port:
        yield port


async def _closed_by_server(port: int, send: bytes, drip: bytes = b"") -> bool:
    """Connect, send ``send`` (then ``drip`` a byte at a time), and report whether the server closed."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(send)
    try:
        for byte in drip:  # one byte every 0.2 s, stopping once the server closes
            writer.write(bytes([byte]))
            try:
                return await asyncio.wait_for(reader.read(), 0.2) == b""
            except TimeoutError:
                continue
        async with asyncio.timeout(20):  # a guard against hanging, not a measurement
            return await reader.read() == b""
    except TimeoutError:
        return False
    finally:
        writer.close()


async def test_a_connection_that_never_sends_a_request_is_closed(served):
    assert await _closed_by_server(served, b"")


async def test_a_request_whose_headers_trickle_in_is_closed(served):
    assert await _closed_by_server(served, b"GET / HTTP/1.1\r\n", drip=b"X-A: " + b"a" * 40)


async def test_a_declared_body_without_room_is_refused_before_it_is_read():
    budget = BodyBudget(max_bytes=1000, read_seconds=30)
    budget.in_use = 600  # another body being read

    async def receive() -> dict[str, Any]:
        raise AssertionError("must not read the body")

    scope = {"type": "http", "method": "POST", "headers": [(b"content-length", b"500")], "path": "/"}
    with pytest.raises(BodyRejected) as refused:
        await read_body(Request(scope, receive), 800, budget)
    assert refused.value.status == 503
    assert budget.in_use == 600


@pytest.mark.parametrize("path", ["/scheduler/filter", "/api/v1/explain"])
async def test_a_refused_body_closes_the_connection_instead_of_receiving_the_rest(path):
    # 150 clients sending 7 MB bodies the budget had no room for: each refused body was still received
    # to its end and thrown away, which kept the event loop (and every request on it) busy for seconds.
    service = SchedulingService(ClusterState.from_objects([]), SelectorCache(ExprEngine()))
    app = create_app(service, Settings(Path("unused"), ServerSettings(max_body_bytes=1000)))
    async with serving(app) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n".encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 413 ") and b"connection: close" in head.lower()
        try:
            # The body keeps coming, as the attack's did: the server closes long before its end.
            assert await _closed_while_sending(reader, writer, seconds=4)
        finally:
            writer.close()


async def _closed_while_sending(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seconds: float
) -> bool:
    """Send 100 bytes every 0.2 s for up to ``seconds``; whether the server closed the connection."""
    for _ in range(int(seconds / 0.2)):
        try:
            writer.write(b"x" * 100)
            await writer.drain()
            if await asyncio.wait_for(reader.read(65536), 0.2) == b"":
                return True
        except TimeoutError:
            continue
        except ConnectionError:
            return True
    return False


class _Transport(asyncio.Transport):
    """A connection's transport that keeps what the server writes and whether it closed."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.writes: list[bytes] = []
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8080), "peername": ("127.0.0.1", 40000)}.get(name, default)

    def write(self, data: Any) -> None:
        self.written += data
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _answer_ok(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def _connection(app: Any = _answer_ok) -> tuple[IdleClosingHttpToolsProtocol, _Transport]:
    config = uvicorn.Config(app, log_level="warning", lifespan="off", **server_config())
    protocol = IdleClosingHttpToolsProtocol(config, ServerState(), {}, asyncio.get_running_loop())
    transport = _Transport()
    protocol.connection_made(transport)
    return protocol, transport


def _fed_until_closed(protocol: IdleClosingHttpToolsProtocol, transport: _Transport, start: bytes) -> int:
    """Feed ``start``, then header bytes 64 KiB at a time (up to 16 MiB) until the server closes; how many
    bytes it took."""
    protocol.data_received(start)
    fed = len(start)
    while not transport.closed and fed < 16 << 20:
        protocol.data_received(b"a" * (64 << 10))
        fed += 64 << 10
    return fed


@pytest.mark.parametrize(
    "start",
    [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: ",  # a header that never ends
        b"GET /" + b"a" * 100,  # a request line that never ends
        # A chunked body's trailer that never ends (its body, one byte, long read).
        b"POST /scheduler/filter HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-T: ",
    ],
)
async def test_a_request_head_that_keeps_growing_is_refused_at_h11s_limit(start):
    # h11 answered 400 once 16 KiB of a request's head were incomplete; httptools has no limit, and one
    # connection sending header bytes for its 5 s made the server hold (and copy again, each read) 100 MB.
    protocol, transport = _connection()
    fed = _fed_until_closed(protocol, transport, start)
    assert transport.closed
    assert fed <= len(start) + (16 << 10) + (64 << 10)  # the limit, give or take the read that passed it


async def test_a_refused_request_head_is_answered_400_when_no_request_is_being_answered():
    protocol, transport = _connection()
    _fed_until_closed(protocol, transport, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: ")
    assert transport.written.startswith(b"HTTP/1.1 400 ")


async def test_heads_and_chunk_framing_within_the_limit_are_served():
    protocol, transport = _connection()
    headers = b"".join(b"X-%d: %s\r\n" % (i, b"v" * 100) for i in range(120))  # 12 KiB of headers
    chunks = b"1\r\na\r\n" * 20000  # 120 KB of framing around a 20 kB body, a few bytes per chunk
    request = b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" + headers + b"\r\n" + chunks
    for i in range(0, len(request), 4096):
        protocol.data_received(request[i : i + 4096])
    protocol.data_received(b"0\r\nX-Trailer: t\r\n\r\n")
    assert not transport.closed
    await asyncio.sleep(0.05)  # the app's task runs and answers
    assert transport.written.startswith(b"HTTP/1.1 200 ")


async def test_an_answer_leaves_in_one_write_head_and_body_together():
    protocol, transport = _connection()
    protocol.data_received(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.sleep(0.05)
    protocol.data_received(b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n")  # the next answer on the kept connection
    await asyncio.sleep(0.05)
    assert len(transport.writes) == 2
    for write in transport.writes:
        assert write.startswith(b"HTTP/1.1 200 ") and write.endswith(b"\r\n\r\nok")


async def test_a_streamed_answer_sends_its_head_with_the_first_part_and_the_rest_as_it_comes():
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"one", "more_body": True})
        await send({"type": "http.response.body", "body": b"two"})

    protocol, transport = _connection(app)
    protocol.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.sleep(0.05)
    # Chunked: the head with the first chunk, then the second chunk and the last (empty) one.
    first, rest = transport.writes
    assert first.startswith(b"HTTP/1.1 200 ") and first.endswith(b"\r\n\r\n3\r\none\r\n")
    assert rest == b"3\r\ntwo\r\n0\r\n\r\n"


async def test_an_interim_100_continue_is_written_at_once():
    read: list[bytes] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        read.append((await receive())["body"])
        await _answer_ok(scope, receive, send)

    protocol, transport = _connection(app)
    protocol.data_received(b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n")
    await asyncio.sleep(0.05)
    # The client waits for it before sending the body: held, both would wait.
    assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    protocol.data_received(b"x")
    await asyncio.sleep(0.05)
    assert read == [b"x"] and transport.writes[1].startswith(b"HTTP/1.1 200 ")


async def test_an_answer_that_fails_after_its_head_still_sends_the_head_then_closes():
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        raise RuntimeError("broken after the head")

    protocol, transport = _connection(app)
    protocol.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.sleep(0.05)
    assert transport.closed and transport.written.startswith(b"HTTP/1.1 200 ")
