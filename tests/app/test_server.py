"""The extender's listening socket (``app.http.server.listen``) and the probe child's connections."""

from __future__ import annotations

import asyncio
import socket

from app.http.probechild import _server
from app.http.server import listen


async def test_connections_of_the_extenders_socket_send_without_delay():
    # asyncio sets TCP_NODELAY only when the listening socket says IPPROTO_TCP; with Nagle's algorithm an
    # answer's body waits for the client's delayed ACK of its headers (~40 ms per call, measured on
    # kube-scheduler's kept-alive connections by bench-k8s).
    sock = listen("127.0.0.1", 0)
    accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    class Connection(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            option = transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            accepted.set_result(option)

    server = await asyncio.get_running_loop().create_server(Connection, sock=sock)
    _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
    try:
        assert await asyncio.wait_for(accepted, 10) == 1
    finally:
        writer.close()
        server.close()


def test_the_probe_childs_connections_send_without_delay():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        server = _server(sock, heartbeat=None, stall_seconds=1, idle_seconds=1)  # type: ignore[arg-type]
        assert server.RequestHandlerClass.disable_nagle_algorithm is True
        server.server_close()
