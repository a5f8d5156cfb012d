"""The Kubernetes API client's metrics (``app.kube.apimetrics``): every request of a runtime against the fake
API server is counted by verb, resource and code; a conflict's retry and a watch reopened are counted."""

from __future__ import annotations

import pytest

from app.http.metrics import Metrics
from app.kube.apimetrics import request_labels
from tests.app.kube.conftest import add_pod, bind, eventually, seed_cluster
from tests.app.metrics_support import samples


@pytest.mark.parametrize(
    ("method", "path", "query", "labels"),
    [
        ("GET", "/api/v1/pods", [("limit", "500")], ("list", "pods")),
        ("GET", "/api/v1/pods", [("watch", "true")], ("watch", "pods")),
        ("GET", "/api/v1/namespaces", [], ("list", "namespaces")),
        ("GET", "/api/v1/namespaces/ml", [], ("get", "namespaces")),
        ("GET", "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/c", [], ("get", "resourceclaims")),
        (
            "PUT",
            "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/c/status",
            [],
            ("update", "resourceclaims/status"),
        ),
        ("POST", "/api/v1/namespaces/ml/pods/p/binding", [], ("create", "pods/binding")),
        ("PATCH", "/api/v1/namespaces/ml/pods/p/status", [], ("patch", "pods/status")),
        (
            "DELETE",
            "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/c",
            [],
            ("delete", "resourceclaims"),
        ),
        ("POST", "/apis/authentication.k8s.io/v1/tokenreviews", [], ("create", "tokenreviews")),
        ("GET", "/apis/resource.k8s.io", [], ("get", "discovery")),
        ("GET", "/apis/resource.k8s.io/v1", [], ("get", "discovery")),
    ],
)
def test_verb_and_resource_are_kube_apiservers(method, path, query, labels):
    assert request_labels(method, path, query) == labels


async def test_a_runtime_counts_its_requests_conflict_retries_and_watch_restarts(api, start_runtime):
    seed_cluster(api)
    add_pod(api, "p")
    runtime = await start_runtime()
    metrics = Metrics(runtime.service, runtime.informers, collectors=runtime.api_metrics.collectors())
    api.fail("PUT", r"resourceclaims/p-gpu/status$", 409, times=2, reason="Conflict", message="modified")
    assert await bind(runtime, "p", "n1") is None
    await eventually(lambda: api.open_watches("Node") == 1)
    api.drop_watches()
    await eventually(lambda: api.count("GET", r"^/api/v1/nodes$", "watch") == 2)
    # The server sees the new watch before the client has its answer, and so before it counts it.
    watch_key = ("dra_extender_rest_client_watch_restarts_total", frozenset({("resource", "nodes")}))
    await eventually(lambda: samples(metrics.render().decode()).get(watch_key, 0) == 1)
    values = samples(metrics.render().decode())

    def sample(name: str, **labels: str) -> float:
        return values.get((f"dra_extender_rest_client_{name}", frozenset(labels.items())), 0)

    def sent(method: str, pattern: str, **query: str) -> int:
        return sum(
            1
            for r in api.requests
            if r.method == method and r.path == pattern and all(r.query.get(k) == v for k, v in query.items())
        )

    status = "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/p-gpu/status"
    # Three status writes: two answered 409, the third 200; two of them retry a conflict.
    assert sample("requests_total", verb="update", resource="resourceclaims/status", code="409") == 2
    assert sample("requests_total", verb="update", resource="resourceclaims/status", code="200") == 1
    assert sent("PUT", status) == 3
    assert sample("conflict_retries_total", resource="resourceclaims/status") == 2
    assert (
        sample("requests_total", verb="create", resource="pods/binding", code="201")
        + sample("requests_total", verb="create", resource="pods/binding", code="200")
        == 1
    )
    lists = sent("GET", "/api/v1/nodes", limit="500")
    assert lists >= 1 and sample("requests_total", verb="list", resource="nodes", code="200") == lists
    watches = sent("GET", "/api/v1/nodes", watch="true")
    assert watches >= 2
    assert sample("requests_total", verb="watch", resource="nodes", code="200") == watches
    assert sample("watch_restarts_total", resource="nodes") == watches - 1
    assert sample("request_duration_seconds_count", verb="watch", resource="nodes") == watches
