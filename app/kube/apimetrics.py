"""Metrics of the extender's calls to the Kubernetes API, shaped like client-go's ``rest_client_*`` that
kube-scheduler exposes (``k8s.io/component-base/metrics/prometheus/restclient``), with the verb and
resource kube-apiserver's own ``apiserver_request_total`` uses instead of client-go's host:

* ``dra_extender_rest_client_requests_total{verb, resource, code}``: requests by answer; ``code`` the HTTP
  status, or ``<error>`` without an answer (client-go's spelling);
* ``dra_extender_rest_client_request_duration_seconds{verb, resource}``: time to the answer's headers
  (a watch: until its stream opens), client-go's buckets (5 ms .. 60 s);
* ``dra_extender_rest_client_conflict_retries_total{resource}``: writes to an object whose previous write
  was answered 409 Conflict (the binder re-reads and writes again, client-go's ``retry.RetryOnConflict``);
* ``dra_extender_rest_client_watch_restarts_total{resource}``: watches opened after the first one of their
  resource (the server's timeout, a silent or broken stream, 410 Gone).

``verb`` is kube-apiserver's: ``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``, ``delete``;
``resource`` the plural with its subresource (``resourceclaims/status``, ``pods/binding``), or
``discovery`` for ``/apis/{group}[/{version}]``. ``app.kube.client`` reports every request to ``observe``
on its event loop's thread (the only writer of the bookkeeping here); the prometheus-client metrics are
read by scrapes from any thread.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from prometheus_client import Counter, Histogram
from prometheus_client.registry import Collector

__all__ = ["DURATION_BUCKETS", "ERROR_CODE", "APIMetrics", "request_labels"]

DURATION_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
"""client-go's ``rest_client_request_duration_seconds`` buckets."""

ERROR_CODE = "<error>"
"""``code`` of a request without an HTTP answer (client-go's label value)."""

MAX_CONFLICTED_OBJECTS = 1024
"""Objects whose last write was a conflict, remembered to count the write that retries it; beyond that the
oldest is forgotten (its retry then goes uncounted). Conflicts are retried at once, a few at a time."""

_WRITE_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def request_labels(method: str, path: str, query: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """(verb, resource) of a request to ``path``, a path ``app.kube.client.Resource.path`` builds:
    ``/api/v1/[namespaces/{ns}/]{plural}[/{name}[/{subresource}]]`` or the same under
    ``/apis/{group}/{version}``."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["apis"]:
        rest = parts[3:]
        if not rest:
            return "get", "discovery"
    else:
        rest = parts[2:]
    if len(rest) > 2 and rest[0] == "namespaces":
        rest = rest[2:]  # a namespaced resource (``namespaces/{name}`` alone is a Namespace)
    resource = "/".join(rest[:1] + rest[2:3])
    if method != "GET":
        return _WRITE_VERBS.get(method, method.lower()), resource
    if len(rest) > 1:
        return "get", resource
    return ("watch" if ("watch", "true") in query else "list"), resource


class APIMetrics:
    """The client metrics (module docstring); register ``collectors()`` with a registry to expose them."""

    def __init__(self) -> None:
        prefix = "dra_extender_rest_client_"
        self.requests = Counter(
            prefix + "requests",
            "Kubernetes API requests, by verb, resource and HTTP status code (<error>: no answer).",
            ["verb", "resource", "code"],
            registry=None,
        )
        self.durations = Histogram(
            prefix + "request_duration_seconds",
            "Kubernetes API request latency to the answer's headers, by verb and resource.",
            ["verb", "resource"],
            buckets=DURATION_BUCKETS,
            registry=None,
        )
        self.conflict_retries = Counter(
            prefix + "conflict_retries",
            "Writes retrying an object whose previous write was answered 409 Conflict, by resource.",
            ["resource"],
            registry=None,
        )
        self.watch_restarts = Counter(
            prefix + "watch_restarts",
            "Watches opened again after the first one of their resource, by resource.",
            ["resource"],
            registry=None,
        )
        self._conflicted: OrderedDict[str, None] = OrderedDict()
        """Object paths whose last write was answered 409, oldest first."""
        self._watched: set[str] = set()
        """Resources a watch has been opened for (a handful)."""

    def collectors(self) -> tuple[Collector, ...]:
        return (self.requests, self.durations, self.conflict_retries, self.watch_restarts)

    def observe(
        self, method: str, path: str, query: Sequence[tuple[str, str]], code: str, seconds: float
    ) -> None:
        """One request: ``code`` the HTTP status as text, or ``ERROR_CODE``."""
        verb, resource = request_labels(method, path, query)
        self.requests.labels(verb, resource, code).inc()
        self.durations.labels(verb, resource).observe(seconds)
        if verb == "watch":
            if resource in self._watched:
                self.watch_restarts.labels(resource).inc()
            self._watched.add(resource)
        elif method in _WRITE_VERBS:
            if path in self._conflicted:
                del self._conflicted[path]
                self.conflict_retries.labels(resource).inc()
            if code == "409":
                self._conflicted[path] = None
                while len(self._conflicted) > MAX_CONFLICTED_OBJECTS:
                    self._conflicted.popitem(last=False)
