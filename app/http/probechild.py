"""The process answering the probe port (``app.http.probes`` starts it): stdlib only, run as a script with
``python -I -S``, so it shares neither the extender's GIL nor its imports.

    probechild.py LISTEN_FD TICK_FD STALL_SECONDS IDLE_SECONDS READY

``LISTEN_FD`` is the probe port's socket, bound and listening (the extender bound it, so a port in use is
its startup error). ``TICK_FD`` is the read end of a pipe into which the extender's event loop writes one
byte per tick: ``1`` ready, ``0`` not ready (``READY``: the same, until the first tick). Answers come from
the last tick received: ``/livez`` and ``/healthz`` 200, or 500 once no tick came for ``STALL_SECONDS``;
``/readyz`` the same, and 503 while the last tick said not ready; any other path 404. End of file on the
pipe (the extender exited, however it died) ends this process, so it never outlives the extender.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROBE_PATHS = ("/livez", "/healthz", "/readyz")


class _Heartbeat:
    """The last tick: when it came and whether the extender was ready then."""

    def __init__(self, ready: bool) -> None:
        self.last = time.monotonic()  # the extender ticks as soon as its loop runs: no stall before that
        self.ready = ready

    def follow(self, fd: int) -> None:
        """Record the ticks read from ``fd`` until end of file."""
        while chunk := os.read(fd, 64):
            self.last = time.monotonic()
            self.ready = chunk[-1:] == b"1"


def answer(path: str, stalled_for: float, ready: bool, stall_seconds: float) -> tuple[int, bytes]:
    """(status, JSON body) for a request path, given the time since the last tick and its readiness."""
    if path not in PROBE_PATHS:
        status, text = 404, "not found"
    elif stalled_for > stall_seconds:
        status, text = 500, f"event loop stalled for {stalled_for:.0f} s"
    elif path == "/readyz" and not ready:
        status, text = 503, "syncing"
    else:
        status, text = 200, "ok"
    return status, json.dumps({"status": text}, separators=(",", ":")).encode()


def _server(
    sock: socket.socket, heartbeat: _Heartbeat, stall_seconds: float, idle_seconds: float
) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        timeout = idle_seconds  # a connection that sends nothing is closed: each one holds a thread
        disable_nagle_algorithm = True  # the body, written after the headers, goes out at once

        def do_GET(self) -> None:
            stalled = time.monotonic() - heartbeat.last
            status, body = answer(self.path.split("?", 1)[0], stalled, heartbeat.ready, stall_seconds)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a probe every few seconds, or a client's garbage, is not worth a log line

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(
            self, request: socket.socket | tuple[bytes, socket.socket], client_address: object
        ) -> None:
            if not isinstance(sys.exc_info()[1], OSError):  # a client that went away is no error of ours
                super().handle_error(request, client_address)

    server = Server(sock.getsockname()[:2], Handler, bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    return server


def main(argv: list[str]) -> int:
    listen_fd, tick_fd = int(argv[0]), int(argv[1])
    stall_seconds, idle_seconds = float(argv[2]), float(argv[3])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the extender, which ends us by exiting
    heartbeat = _Heartbeat(argv[4] == "1")
    sock = socket.socket(fileno=listen_fd)
    server = _server(sock, heartbeat, stall_seconds, idle_seconds)
    threading.Thread(target=server.serve_forever, name="probes", daemon=True).start()
    heartbeat.follow(tick_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
