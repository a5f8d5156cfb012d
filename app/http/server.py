"""How the extender's HTTP server treats connections (uvicorn settings and its httptools protocol).

uvicorn closes a keep-alive connection only after a response: a connection that never sends a request,
or sends its headers a byte at a time, stays open for good, and a thousand of them starve the server
(file descriptors, the event loop's bookkeeping). ``IdleClosingHttpToolsProtocol`` also closes a connection
that has not sent complete request headers ``idle_seconds`` after it opened or after the last response,
and refuses a request whose head (request line and headers), a chunk's framing or its trailers pass
``HEAD_BYTES`` (h11's limit, which uvicorn's h11 protocol enforced; the C parser has none and gathers a header
that never ends in memory, copying it again on each read).
Bodies have their own read time (``app.http.bodies``). With client certificates (``--ssl-ca-certs``) the
verified certificate goes into the request's scope (``extensions.tls.client_cert``) for ``app.http.auth``.
Each answer leaves in one write (``OneWriteAnswer``).

``listen`` binds the listening socket before anything is printed or loaded into the server (a port in use
fails at once, naming the address), and ``serve`` runs uvicorn on it.

With TLS, ``CertificateFiles`` looks at the certificate and key files every ``CERTIFICATE_POLL_SECONDS``
(on uvicorn's tick, in the event loop) and loads a changed pair into the live ``SSLContext``: new
handshakes present the new certificate, open connections keep theirs, so kube-scheduler's extender
connection survives a rotation (cert-manager renewing the Secret) without a restart. A pair that does not
load (a key that does not match yet, half-written files) is logged and the previous one stays; the next
change is tried again."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.config.files import file_problem

__all__ = [
    "CERTIFICATE_POLL_SECONDS",
    "HEAD_BYTES",
    "IDLE_SECONDS",
    "CertificateFiles",
    "IdleClosingHttpToolsProtocol",
    "OneWriteAnswer",
    "ServerThread",
    "listen",
    "serve",
    "server_config",
]

log = logging.getLogger(__name__)

IDLE_SECONDS = 5
"""uvicorn's keep-alive default, also the time a connection gets to send complete request headers."""

HEAD_BYTES = 16 * 1024
"""Bytes of a request that are not its body, between two of its landmarks (its start, the end of its headers,
of a chunk, of the request): h11's default ``max_incomplete_event_size``."""


class IdleClosingHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol (the C parser: about 0.2 ms of CPU less per request than the pure-Python
    h11, on kube-scheduler's three calls per pod), closing connections without complete request headers
    in time."""

    _headers_deadline: float | None = None
    _awaiting_headers = True
    """No request's headers are complete since the connection opened or the last response."""
    _head_bytes = 0
    """Bytes received since the request's last landmark that were not body (``HEAD_BYTES``). Counted a read
    at a time, before the parser sees it: a landmark inside the read resets it, so the count lags by at most
    one read (asyncio reads at most 256 KiB)."""

    # uvicorn declares the base method with asyncio.BaseTransport; a TCP connection always gets a Transport.
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_headers()

    def data_received(self, data: bytes) -> None:
        self._head_bytes += len(data)
        super().data_received(data)  # cancels the keep-alive timer; may complete a request's headers
        if self.transport.is_closing():
            return
        if self._head_bytes > HEAD_BYTES:
            self._refuse_head()
        elif self._awaiting_headers:
            self._await_headers()  # headers still incomplete: the deadline stands, more bytes or not

    def _refuse_head(self) -> None:
        message = f"Request head, chunk framing or trailers longer than {HEAD_BYTES} bytes."
        self.logger.warning(message)
        if self.cycle is None or self.cycle.response_complete:
            self.send_400_response(message)  # closes
        else:
            self.transport.close()  # a request is being answered: no second answer on its connection

    def on_body(self, body: bytes) -> None:
        self._head_bytes -= len(body)
        super().on_body(body)

    def on_chunk_complete(self) -> None:
        self._head_bytes = 0

    def on_message_complete(self) -> None:
        self._head_bytes = 0
        super().on_message_complete()

    def on_headers_complete(self) -> None:
        self._head_bytes = 0
        self._awaiting_headers = False
        self._headers_deadline = None
        cert = self.transport.get_extra_info("peercert")
        if cert:
            # The verified client certificate, for delegated authentication (app.http.auth); the request's
            # task is created below and runs later, so the app sees it.
            extensions: dict[str, Any] = self.scope.setdefault("extensions", {})
            extensions.setdefault("tls", {})["client_cert"] = cert
        super().on_headers_complete()
        if self.cycle is not None:  # made just now for this request; its task has not run yet
            self.cycle.transport = OneWriteAnswer(self.transport, self.cycle)

    def on_response_complete(self) -> None:
        # The keep-alive timer runs; the next request's headers start anew (a pipelined one has them).
        self._awaiting_headers = not self.pipeline
        self._headers_deadline = None
        super().on_response_complete()

    def _await_headers(self) -> None:
        if self._headers_deadline is None:
            self._headers_deadline = self.loop.time() + self.timeout_keep_alive
        self._unset_keepalive_if_required()
        self.timeout_keep_alive_task = self.loop.call_at(
            self._headers_deadline, self.timeout_keep_alive_handler
        )


class OneWriteAnswer(asyncio.Transport):
    """One request's view of its connection: the answer's head (status line and headers) is held until
    the first write of its body and goes out with it.

    uvicorn writes them apart, and with TCP_NODELAY (``listen``) each write is a segment of its own: on
    kube-scheduler's three calls per pod, the second wakes its reader again and each send can hand the
    core to it mid-answer (a sixth of the extender's wall-clock samples on a loaded 2-core machine were
    these sends, though pods/s did not measurably change). An interim ``100 Continue``, written before
    the answer starts, is not held."""

    def __init__(self, transport: asyncio.Transport, cycle: Any) -> None:
        super().__init__()
        self._transport = transport
        self._cycle = cycle
        self._head: bytes | None = None
        self._head_seen = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._head_seen and self._cycle.response_started:
            self._head_seen = True
            self._head = bytes(data)
            return
        if self._head is not None:
            data, self._head = self._head + bytes(data), None
        self._transport.write(data)

    def close(self) -> None:
        # An answer that fails after its head still sends the head, as uvicorn alone does.
        if self._head is not None:
            self._transport.write(self._head)
            self._head = None
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)


def server_config(idle_seconds: int = IDLE_SECONDS) -> dict[str, Any]:
    """uvicorn arguments for the extender's connections."""
    return {"http": IdleClosingHttpToolsProtocol, "timeout_keep_alive": idle_seconds}


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


CERTIFICATE_POLL_SECONDS = 2.0
"""How often the certificate and key files are looked at (two ``stat`` calls): a rotated certificate is
served within 2 s, as a changed config file is applied."""

_TICK_SECONDS = 0.1
"""uvicorn's main loop ticks every 0.1 s (``uvicorn.Server.main_loop``)."""


def _signature(path: str, stat: Callable[[str], os.stat_result]) -> tuple[int, int, int] | None:
    try:
        st = stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class CertificateFiles:
    """The server certificate and key of a live ``SSLContext``, loaded into it again when they change."""

    def __init__(
        self,
        context: ssl.SSLContext,
        certfile: str,
        keyfile: str,
        stat: Callable[[str], os.stat_result] = os.stat,
    ) -> None:
        self.context = context
        self.certfile, self.keyfile = certfile, keyfile
        self._stat = stat
        self._seen = self._signatures()

    def _signatures(self) -> tuple[Any, Any]:
        return _signature(self.certfile, self._stat), _signature(self.keyfile, self._stat)

    def poll(self) -> bool:
        """Load the pair into the context if either file changed since the last look; True when loaded."""
        seen = self._signatures()
        if seen == self._seen:
            return False
        self._seen = seen
        try:
            # Only stat looks at anything but a regular file: OpenSSL opening a FIFO put in its place would
            # wait for a writer here, on the event loop, stopping every connection for good.
            for path in (self.certfile, self.keyfile):
                if problem := file_problem(Path(path)):
                    raise OSError(f"{path}: {problem}")
            # The pair is tried on a scratch context first: loading the certificate into the live one and
            # then failing on the key would leave it unable to complete any handshake.
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(self.certfile, self.keyfile)
            self.context.load_cert_chain(self.certfile, self.keyfile)
        except (OSError, ssl.SSLError) as e:
            log.warning(
                "TLS certificate %s or key %s changed but does not load, keeping the previous pair: %s",
                self.certfile,
                self.keyfile,
                e,
            )
            return False
        log.info(
            "TLS certificate %s and key %s reloaded: new connections get them", self.certfile, self.keyfile
        )
        return True


class _Server(uvicorn.Server):
    """uvicorn's server, reloading its TLS certificate and key when they change (``CertificateFiles``)."""

    certificates: CertificateFiles | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        config = self.config
        if isinstance(config.ssl, ssl.SSLContext) and config.ssl_certfile and config.ssl_keyfile:
            self.certificates = CertificateFiles(
                config.ssl, str(config.ssl_certfile), str(config.ssl_keyfile)
            )
        await super().startup(sockets)

    async def on_tick(self, counter: int) -> bool:
        if self.certificates is not None and counter % round(CERTIFICATE_POLL_SECONDS / _TICK_SECONDS) == 0:
            self.certificates.poll()
        return await super().on_tick(counter)


def serve(app: Any, sock: socket.socket, **options: Any) -> None:
    """Run uvicorn with ``options`` (``uvicorn.Config`` arguments) on the bound socket ``sock``; with
    ``ssl_certfile`` and ``ssl_keyfile``, a changed pair is served without a restart."""
    _Server(uvicorn.Config(app, **options)).run(sockets=[sock])


class ServerThread:
    """``serve`` on a daemon thread of its own (its own event loop) until ``close()`` or the ``with`` block's
    end: a second listener (the admission webhook, ``app.http.webhook``) beside the main one."""

    def __init__(self, name: str, app: Any, sock: socket.socket, **options: Any) -> None:
        self._server = _Server(uvicorn.Config(app, **options))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name=name, daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join()

    def __enter__(self) -> ServerThread:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
