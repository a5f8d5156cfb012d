"""How the extender's HTTP server treats connections (uvicorn settings and its h11 protocol).

uvicorn closes a keep-alive connection only after a response: a connection that never sends a request,
or sends its headers a byte at a time, stays open for good, and a thousand of them starve the server
(file descriptors, the event loop's bookkeeping). ``IdleClosingH11Protocol`` also closes a connection
that has not sent complete request headers ``idle_seconds`` after it opened or after the last response.
Bodies have their own read time (``app.http.bodies``). With client certificates (``--ssl-ca-certs``) the
verified certificate goes into the request's scope (``extensions.tls.client_cert``) for ``app.http.auth``.

``listen`` binds the listening socket before anything is printed or loaded into the server (a port in use
fails at once, naming the address), and ``serve`` runs uvicorn on it."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["IDLE_SECONDS", "IdleClosingH11Protocol", "listen", "serve", "server_config"]

IDLE_SECONDS = 5
"""uvicorn's keep-alive default, also the time a connection gets to send complete request headers."""


class IdleClosingH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing connections without complete request headers in time."""

    _headers_deadline: float | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_headers()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # cancels the keep-alive timer; may start a request (self.scope)
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self._await_headers()  # headers still incomplete: the deadline stands, more bytes or not
            return
        self._headers_deadline = None
        cert = self.transport.get_extra_info("peercert")
        scope = getattr(self, "scope", None)
        if cert and scope is not None:
            # The verified client certificate, for delegated authentication (app.http.auth); the request's
            # task has been created but not run yet, so the app sees it.
            scope.setdefault("extensions", {}).setdefault("tls", {})["client_cert"] = cert

    def on_response_complete(self) -> None:
        self._headers_deadline = None  # the keep-alive timer runs; the next request's headers start anew
        super().on_response_complete()

    def _await_headers(self) -> None:
        if self._headers_deadline is None:
            self._headers_deadline = self.loop.time() + self.timeout_keep_alive
        self._unset_keepalive_if_required()
        self.timeout_keep_alive_task = self.loop.call_at(
            self._headers_deadline, self.timeout_keep_alive_handler
        )


def server_config(idle_seconds: int = IDLE_SECONDS) -> dict[str, Any]:
    """uvicorn arguments for the extender's connections."""
    return {"http": IdleClosingH11Protocol, "timeout_keep_alive": idle_seconds}


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening. Raises OSError (address in use, no such
    interface, permission denied)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY only on connections of a socket that says
    # so. Without it an answer's body, written after its headers, waits for the client's delayed ACK of
    # the headers (about 40 ms on Linux) on kube-scheduler's kept-alive connections.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        # As uvicorn does: a restart need not wait for the previous process's TIME_WAIT connections.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)  # uvicorn's default backlog
    except OSError:
        sock.close()
        raise
    return sock


def serve(app: Any, sock: socket.socket, **options: Any) -> None:
    """Run uvicorn with ``options`` (``uvicorn.Config`` arguments) on the bound socket ``sock``."""
    uvicorn.Server(uvicorn.Config(app, **options)).run(sockets=[sock])
