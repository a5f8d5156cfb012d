"""Health probes on a listener of their own (``serve --health-probe-bind-address``, as controller-runtime
components such as Kueue and cert-manager offer): ``/livez``, ``/healthz`` and ``/readyz`` answered by a
thread of their own, so a busy event loop (a flood of connections, large bodies being read, explanations
being rendered) does not make the kubelet wait on a probe and restart a healthy extender.

Answering from another thread must not hide a wedged process: the event loop ticks a heartbeat every
second (``LoopHeartbeat``), and liveness fails once it has not ticked for ``STALL_SECONDS``. Readiness also
needs the state to be complete (cluster mode: every informer listed once).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson

__all__ = ["STALL_SECONDS", "LoopHeartbeat", "start_probe_server"]

STALL_SECONDS = 30.0
"""Event-loop silence after which liveness fails (the longest a healthy loop is busy is far below it)."""

TICK_SECONDS = 1.0

IDLE_SECONDS = 5.0
"""How long a probe connection may stay silent (the kubelet sends its request at once)."""


class LoopHeartbeat:
    """When the event loop last ran a callback of ours: ``start`` it from the loop."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last = clock()

    def start(self) -> None:
        """Tick now and every ``TICK_SECONDS`` on the running loop."""
        loop = asyncio.get_running_loop()

        def tick() -> None:
            self._last = self._clock()
            loop.call_later(TICK_SECONDS, tick)

        tick()

    def stalled_for(self) -> float:
        return self._clock() - self._last


def probe_answer(path: str, heartbeat: LoopHeartbeat, ready: Callable[[], bool]) -> tuple[int, bytes]:
    """(status, JSON body) for a probe path; 404 for any other path."""
    if path not in ("/livez", "/healthz", "/readyz"):
        return 404, orjson.dumps({"status": "not found"})
    stalled = heartbeat.stalled_for()
    if stalled > STALL_SECONDS:
        return 500, orjson.dumps({"status": f"event loop stalled for {stalled:.0f} s"})
    if path == "/readyz" and not ready():
        return 503, orjson.dumps({"status": "syncing"})
    return 200, orjson.dumps({"status": "ok"})


def start_probe_server(
    host: str, port: int, heartbeat: LoopHeartbeat, ready: Callable[[], bool]
) -> ThreadingHTTPServer:
    """Bind ``host:port`` and answer probes on a daemon thread. Raises OSError when it cannot bind."""

    class Handler(BaseHTTPRequestHandler):
        # A connection that sends nothing is closed after this long: each one holds a thread.
        timeout = IDLE_SECONDS

        def do_GET(self) -> None:
            status, body = probe_answer(self.path.split("?", 1)[0], heartbeat, ready)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a probe every few seconds is not worth a log line

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="probes", daemon=True).start()
    return server
