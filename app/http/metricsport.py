"""The ``--metrics-bind-address`` listener: ``GET /metrics`` and nothing else.

prometheus-client's own server answers the metrics on every path, so a probe or a scanner pointed at the
port (``/healthz``) reads metrics and takes them for health. Here prometheus-client's WSGI app (content
negotiation, gzip, ``name[]`` filters) answers ``/metrics`` only, every other path gets 404, on threads
of a stdlib server in the background: a scrape never waits for the extender's event loop.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

__all__ = ["METRICS_PATH", "MetricsListener"]

METRICS_PATH = "/metrics"

_NOT_FOUND = b"404 page not found\n"
"""Go's ``http.NotFound`` body, as kube-scheduler's metrics port answers an unknown path."""


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # a scrape every 30 s is not worth a log line


def _only_metrics(registry: CollectorRegistry) -> Any:
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == METRICS_PATH:
            result: Iterable[bytes] = metrics(environ, start_response)
            return result
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [_NOT_FOUND]

    return app


class MetricsListener:
    """Serves ``registry`` at ``host:port`` from a daemon thread until ``close()`` (or the ``with`` block's
    end). Raises OSError when the address cannot be bound."""

    def __init__(self, host: str, port: int, registry: CollectorRegistry) -> None:
        class Server(ThreadingMixIn, WSGIServer):
            daemon_threads = True
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        self._server = make_server(host, port, _only_metrics(registry), Server, _QuietHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> MetricsListener:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
