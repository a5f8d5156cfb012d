"""The HTTP layer against a small in-memory state: answers, status codes, and no state change on bad input."""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.concurrency import run_in_threadpool

from allocator.cel.expr_engine import ExprEngine
from allocator.selectors import SelectorCache
from app.config.settings import SchedulingSettings, ServerSettings, Settings
from app.http.api import create_app
from app.scheduling.preemptionrequests import PreemptionRequests
from app.scheduling.requeue import RejectedPods
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState
from tests.builders import claim, device, device_class, node, pod, request, resource_slice
from tests.signalling import held_by_another_thread

DRIVER = "gpu.example.com"
NS = "ml"


def _objects() -> list[tuple[str, dict[str, Any]]]:
    return [
        ("Node", node("n1")),
        ("Node", node("n2")),
        ("Node", node("n3")),
        ("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"')),
        ("ResourceSlice", resource_slice("n1-gpus", DRIVER, "n1", [device("gpu-0"), device("gpu-1")])),
        ("ResourceSlice", resource_slice("n2-gpus", DRIVER, "n2", [device("gpu-0")])),
        ("ResourceClaim", claim(NS, "one", [request("gpu", "gpu")])),
        ("ResourceClaim", claim(NS, "two", [request("gpus", "gpu", 2)])),
        ("ResourceClaim", claim(NS, "bad-class", [request("gpu", "no-such-class")])),
        ("Pod", pod(NS, "p-one", ["one"])),
        ("Pod", pod(NS, "p-two", ["two"])),
        ("Pod", pod(NS, "p-bad", ["bad-class"])),
        ("Pod", pod(NS, "p-free")),
    ]


@pytest.fixture
def service() -> SchedulingService:
    state = ClusterState.from_objects(_objects())
    return SchedulingService(state, SelectorCache(ExprEngine()))


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://extender")


@pytest.fixture
async def client(service: SchedulingService) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(create_app(service, Settings(Path("unused")))) as test_client:
        yield test_client


def _pod(service: SchedulingService, name: str) -> dict[str, Any]:
    """The pod as kube-scheduler sends it (an informer copy: no kind/apiVersion)."""
    obj = copy.deepcopy(service.state.get("Pod", f"{NS}/{name}"))
    assert obj is not None
    obj.pop("kind")
    obj.pop("apiVersion")
    return obj


def _args(service: SchedulingService, name: str, nodes: list[str]) -> bytes:
    return orjson.dumps({"Pod": _pod(service, name), "Nodes": None, "NodeNames": nodes})


def _bind(name: str, node_name: str) -> bytes:
    return orjson.dumps(
        {"PodName": name, "PodNamespace": NS, "PodUID": f"uid-pod-{NS}-{name}", "Node": node_name}
    )


def _post_scope(path: str, body: bytes, root_path: str = "") -> dict[str, Any]:
    """The ASGI scope of a JSON POST of ``body`` to ``path``, for calling the app without a client."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": root_path,
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }


async def _post(client: httpx.AsyncClient, verb: str, body: bytes) -> httpx.Response:
    response = await client.post(
        f"/scheduler/{verb}", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.headers["content-type"] == "application/json"
    return response


# --- filter --------------------------------------------------------------------------------------------


async def test_filter_returns_the_nodes_where_the_claim_fits(client, service):
    response = await _post(client, "filter", _args(service, "p-two", ["n1", "n2", "n3"]))
    assert response.status_code == 200
    result = response.json()
    assert list(result) == ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"]
    assert result["Nodes"] is None
    assert result["NodeNames"] == ["n1"]
    assert result["Error"] == ""
    failed = {**result["FailedNodes"], **result["FailedAndUnresolvableNodes"]}
    assert sorted(failed) == ["n2", "n3"]
    assert all(failed.values())


async def test_filter_with_node_objects_returns_them_unmodified(client, service):
    sent = [
        {
            "metadata": {"name": "n2", "labels": {"kubernetes.io/hostname": "n2"}},
            "status": {"capacity": {"cpu": "8"}},
        },
        {"metadata": {"name": "n3", "labels": {}}, "spec": {"podCIDR": "10.0.0.0/24"}},
        {"metadata": {"name": "n1", "uid": "x"}, "spec": {}, "status": {"conditions": [{"type": "Ready"}]}},
    ]
    body = orjson.dumps(
        {"Pod": _pod(service, "p-one"), "Nodes": {"metadata": {}, "items": sent}, "NodeNames": None}
    )
    result = (await _post(client, "filter", body)).json()
    assert result["NodeNames"] is None
    assert result["Nodes"] == {"metadata": {}, "items": [sent[0], sent[2]]}
    assert list({**result["FailedNodes"], **result["FailedAndUnresolvableNodes"]}) == ["n3"]


async def test_filter_pod_without_claims_passes_every_node(client, service):
    result = (await _post(client, "filter", _args(service, "p-free", ["n3", "n1"]))).json()
    assert result["NodeNames"] == ["n3", "n1"]
    assert result["FailedNodes"] == {} and result["FailedAndUnresolvableNodes"] == {}


async def test_filter_unknown_node_names_fail_with_a_reason(client, service):
    result = (await _post(client, "filter", _args(service, "p-one", ["ghost", "n1"]))).json()
    assert result["NodeNames"] == ["n1"]
    reasons = {**result["FailedNodes"], **result["FailedAndUnresolvableNodes"]}
    assert "ghost" in reasons[("ghost")]


async def test_filter_fatal_error_is_a_200_with_error(client, service):
    response = await _post(client, "filter", _args(service, "p-bad", ["n1", "n2"]))
    assert response.status_code == 200
    result = response.json()
    assert "no-such-class" in result["Error"]
    assert result["NodeNames"] == []


async def test_filter_accepts_any_content_type(client, service):
    # curl -d sends application/x-www-form-urlencoded; kube-scheduler sends application/json.
    response = await client.post(
        "/scheduler/filter",
        content=_args(service, "p-one", ["n1"]),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 200
    assert response.json()["NodeNames"] == ["n1"]


# --- prioritize ----------------------------------------------------------------------------------------


async def test_prioritize_returns_a_bare_array_in_input_order(client, service):
    response = await _post(client, "prioritize", _args(service, "p-one", ["n1", "n2", "n3"]))
    assert response.status_code == 200
    scores = response.json()
    assert [entry["Host"] for entry in scores] == ["n1", "n2", "n3"]
    assert all(set(entry) == {"Host", "Score"} and 0 <= entry["Score"] <= 10 for entry in scores)
    by_host = {entry["Host"]: entry["Score"] for entry in scores}
    assert by_host["n3"] == 0
    assert by_host["n2"] > by_host["n1"]  # packing: the pod fills n2's only GPU


async def test_warm_filter_and_prioritize_answer_without_a_worker_thread(client, service, monkeypatch):
    cold = (await _post(client, "filter", _args(service, "p-one", ["n1", "n2", "n3"]))).json()
    assert cold["NodeNames"] == ["n1", "n2"]

    async def no_thread(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a warm answer must not need a worker thread")

    monkeypatch.setattr("app.http.api.run_in_threadpool", no_thread)
    warm = (await _post(client, "filter", _args(service, "p-one", ["n1", "n2", "n3"]))).json()
    assert warm == cold
    scores = (await _post(client, "prioritize", _args(service, "p-one", ["n1", "n2"]))).json()
    by_host = {entry["Host"]: entry["Score"] for entry in scores}
    assert by_host["n2"] > by_host["n1"]  # packing, as in the worker-thread answer above


async def test_filter_and_prioritize_are_answered_first_and_bind_is_not(service, monkeypatch):
    """While kube-scheduler waits on filter or prioritize, background work steps aside
    (``app.scheduling.answerfirst``); a bind is background work itself (kube-scheduler binds apart)."""
    answering: dict[str, list[bool]] = {}
    first = service.answer_first
    for verb, method in (("filter", "filter"), ("prioritize", "prioritize"), ("bind", "bind_outcome")):
        original = getattr(service, method)

        def seen(*args: Any, _verb: str = verb, _original: Any = original, **kwargs: Any) -> Any:
            answering.setdefault(_verb, []).append(first.answering_now)
            return _original(*args, **kwargs)

        monkeypatch.setattr(service, method, seen)
    # Only the worker-thread paths are patched: the quick ones are refused.
    monkeypatch.setattr(service, "filter_quick", lambda *args, **kwargs: None)
    monkeypatch.setattr(service, "prioritize_quick", lambda *args, **kwargs: None)
    async with _client(create_app(service, Settings(Path("unused")))) as client:
        await _post(client, "filter", _args(service, "p-one", ["n1", "n2", "n3"]))
        await _post(client, "prioritize", _args(service, "p-one", ["n1", "n2"]))
        await _post(client, "bind", _bind("p-one", "n2"))
    assert answering == {"filter": [True], "prioritize": [True], "bind": [False]}
    assert not first.answering_now


async def test_a_quick_answer_is_marked_from_reading_its_request_to_writing_it(service):
    """Reading the request and writing the answer are part of kube-scheduler's wait too: background work
    steps aside for all of a filter or prioritize answered on the event loop, not for a bind."""
    app = create_app(service, Settings(Path("unused")))
    first = service.answer_first

    async def marks(verb: str, body: bytes, root_path: str = "") -> list[tuple[str, bool]]:
        seen: list[tuple[str, bool]] = []

        async def receive() -> dict[str, Any]:
            seen.append(("read", first.answering_now))
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            seen.append((message["type"], first.answering_now))

        await app(_post_scope(f"{root_path}/scheduler/{verb}", body, root_path), receive, send)
        return seen

    marked = [("read", True), ("http.response.start", True), ("http.response.body", True)]
    assert await marks("filter", _args(service, "p-one", ["n1", "n2", "n3"])) == marked
    assert await marks("prioritize", _args(service, "p-one", ["n1", "n2"])) == marked
    # Served under a prefix (a proxy's ASGI root_path): the same.
    assert await marks("filter", _args(service, "p-one", ["n1", "n2", "n3"]), "/dra") == marked
    unmarked = [(step, False) for step, _ in marked]
    assert await marks("bind", _bind("p-one", "n2")) == unmarked
    assert not first.answering_now


async def test_filter_waits_for_the_lock_on_a_worker_thread_while_probes_answer(client, service):
    with held_by_another_thread(service.lock, timeout=5):
        pending = asyncio.ensure_future(_post(client, "filter", _args(service, "p-one", ["n1", "n2", "n3"])))
        assert (await client.get("/healthz")).status_code == 200
        assert not pending.done()
    assert (await pending).json()["NodeNames"] == ["n1", "n2"]


# --- bind ----------------------------------------------------------------------------------------------


async def test_bind_writes_allocation_reserved_for_and_node_name(client, service):
    response = await _post(client, "bind", _bind("p-two", "n1"))
    assert response.status_code == 200
    assert response.json() == {"Error": ""}
    claim_obj = service.state.get("ResourceClaim", f"{NS}/two")
    allocation = claim_obj["status"]["allocation"]
    assert [
        (r["request"], r["driver"], r["pool"], r["device"]) for r in allocation["devices"]["results"]
    ] == [("gpus", DRIVER, "n1", "gpu-0"), ("gpus", DRIVER, "n1", "gpu-1")]
    assert allocation["nodeSelector"] == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    }
    assert claim_obj["status"]["reservedFor"] == [
        {"resource": "pods", "name": "p-two", "uid": f"uid-pod-{NS}-p-two"}
    ]
    assert service.state.get("Pod", f"{NS}/p-two")["spec"]["nodeName"] == "n1"

    after_first = copy.deepcopy(service.state.objects)
    again = await _post(client, "bind", _bind("p-two", "n1"))
    assert again.status_code == 200 and again.json() == {"Error": ""}
    assert service.state.objects == after_first


def _with_second_one_gpu_pod() -> SchedulingService:
    """The module's state plus ``p-one-b``, a second pod needing one GPU (n2 has one)."""
    objects = [*_objects(), ("ResourceClaim", claim(NS, "one-b", [request("gpu", "gpu")]))]
    objects.append(("Pod", pod(NS, "p-one-b", ["one-b"])))
    return SchedulingService(ClusterState.from_objects(objects), SelectorCache(ExprEngine()))


def _worker_threads_held(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Worker threads start only once the returned event is set (a busy node: the bind's thread is late)."""
    go = threading.Event()

    async def late(func: Any, *args: Any, **kwargs: Any) -> Any:
        while not go.is_set():
            await asyncio.sleep(0.01)
        return await run_in_threadpool(func, *args, **kwargs)

    monkeypatch.setattr("app.http.api.run_in_threadpool", late)
    return go


async def test_a_bind_reserves_its_devices_as_it_arrives_before_the_next_filter(monkeypatch):
    """kube-scheduler sends the next pod's filter right after a bind: the bind's devices are reserved
    on the event loop as it arrives, so that filter cannot pass a node for the same devices (the next
    pod's bind would be refused), even while the bind's worker thread has not started."""
    service = _with_second_one_gpu_pod()
    async with _client(create_app(service, Settings(Path("unused")))) as client:
        # Filter and prioritize as kube-scheduler calls them before binding p-one to n2 (n2's one GPU).
        await _post(client, "filter", _args(service, "p-one", ["n1", "n2", "n3"]))
        await _post(client, "prioritize", _args(service, "p-one", ["n1", "n2"]))
        go = _worker_threads_held(monkeypatch)
        binding = asyncio.ensure_future(_post(client, "bind", _bind("p-one", "n2")))
        for _ in range(500):  # until the bind was read
            if service.state.inventory.reservations():
                break
            await asyncio.sleep(0.01)
        assert service.state.inventory.reservations(), "the bind reserved nothing before its worker thread"
        assert not binding.done()
        answer = (await _post(client, "filter", _args(service, "p-one-b", ["n1", "n2"]))).json()
        assert answer["NodeNames"] == ["n1"] and "n2" in answer["FailedNodes"]
        go.set()
        assert (await binding).json() == {"Error": ""}
    assert not service.state.inventory.reservations()
    results = service.state.get("ResourceClaim", f"{NS}/one")["status"]["allocation"]["devices"]["results"]
    assert [(r["pool"], r["device"]) for r in results] == [("n2", "gpu-0")]


async def test_a_bind_whose_worker_never_runs_leaves_nothing_reserved(monkeypatch):
    service = _with_second_one_gpu_pod()
    async with _client(create_app(service, Settings(Path("unused")))) as client:
        await _post(client, "filter", _args(service, "p-one", ["n1", "n2", "n3"]))
        await _post(client, "prioritize", _args(service, "p-one", ["n1", "n2"]))

        async def no_threads(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("no worker thread")

        monkeypatch.setattr("app.http.api.run_in_threadpool", no_threads)
        with pytest.raises(RuntimeError, match="no worker thread"):
            await _post(client, "bind", _bind("p-one", "n2"))
    assert not service.state.inventory.reservations()
    assert not (service.state.get("ResourceClaim", f"{NS}/one").get("status") or {}).get("allocation")
    assert service.filter(service.state.get("Pod", f"{NS}/p-one-b"), ["n2"]).passed == ["n2"]


async def test_bind_failures_are_200_with_error_and_change_nothing(client, service):
    before = copy.deepcopy(service.state.objects)
    for body in (
        _bind("p-two", "n2"),
        _bind("p-two", "n3"),
        _bind("nobody", "n1"),
        orjson.dumps({"PodName": "p-one", "PodNamespace": NS, "PodUID": "other-uid", "Node": "n1"}),
    ):
        response = await _post(client, "bind", body)
        assert response.status_code == 200
        assert response.json()["Error"]
    assert service.state.objects == before


async def test_bind_of_a_pod_whose_claim_does_not_exist_yet_says_so():
    state = ClusterState.from_objects([*_objects(), ("Pod", pod(NS, "p-ghost", ["ghost"]))])
    service = SchedulingService(state, SelectorCache(ExprEngine()))
    async with _client(create_app(service, Settings(Path("unused")))) as client:
        response = await _post(client, "bind", _bind("p-ghost", "n1"))
    assert (response.status_code, response.json()) == (
        200,
        {
            "Error": 'pod ml/p-ghost is not ready to bind: pod claim ghost: resourceclaim "ghost" not found; '
            "kube-scheduler will retry the pod"
        },
    )


async def test_bind_to_another_node_after_bind_is_refused(client, service):
    assert (await _post(client, "bind", _bind("p-one", "n1"))).json() == {"Error": ""}
    assert "already assigned" in (await _post(client, "bind", _bind("p-one", "n2"))).json()["Error"]


# --- bad input -----------------------------------------------------------------------------------------

POD_OK = {"metadata": {"name": "p-one", "namespace": NS}}

BAD_ARGS = [
    (b'{"Pod": ', "malformed JSON"),
    (b"", "malformed JSON"),
    (orjson.dumps({"NodeNames": ["n1"]}), "Pod: required"),
    (orjson.dumps({"Pod": POD_OK, "NodeNames": "x"}), "NodeNames: must be an array"),
    (orjson.dumps({"Pod": [], "NodeNames": ["n1"]}), "Pod: must be an object"),
    (
        orjson.dumps({"Pod": {"metadata": {"name": 1}}, "NodeNames": ["n1"]}),
        "Pod.metadata.name: must be a string",
    ),
    (orjson.dumps({"Pod": POD_OK}), "Nodes, NodeNames"),
    # Both sources in one pod claim: the claim name won, where the API and the state loader refuse it.
    (
        orjson.dumps(
            {
                "Pod": {
                    **POD_OK,
                    "spec": {
                        "resourceClaims": [
                            {"name": "a", "resourceClaimName": "one"},
                            {"name": "b", "resourceClaimName": "two", "resourceClaimTemplateName": "t"},
                        ]
                    },
                },
                "NodeNames": ["n1"],
            }
        ),
        "Pod.spec.resourceClaims[1]: exactly one of `resourceClaimName`, `resourceClaimTemplateName` is "
        "required",
    ),
]
BAD_BIND = [
    (b"{", "malformed JSON"),
    (b"[]", "request body: must be a JSON object"),
    (orjson.dumps({"PodNamespace": NS, "Node": "n1"}), "PodName: required"),
    (orjson.dumps({"PodName": ["p-one"], "Node": "n1"}), "PodName: must be a string"),
    (orjson.dumps({"PodName": "p-one", "Node": None}), "Node: required"),
]
CASES = (
    [("filter", *case) for case in BAD_ARGS]
    + [("prioritize", *case) for case in BAD_ARGS]
    + [("bind", *case) for case in BAD_BIND]
)


@pytest.mark.parametrize(("verb", "body", "message"), CASES)
async def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(client, service, verb, body, message):
    before = copy.deepcopy(service.state.objects)
    response = await _post(client, verb, body)
    assert response.status_code == 400
    assert set(response.json()) == {"Error"}
    assert message in response.json()["Error"]
    assert service.state.objects == before


@pytest.mark.parametrize("verb", ["filter", "prioritize", "bind"])
async def test_oversized_body_is_a_413_before_parsing(client, service, verb):
    before = copy.deepcopy(service.state.objects)
    response = await _post(client, verb, b"x" * (10 * 1024 * 1024))
    assert response.status_code == 413
    assert response.json() == {"Error": "request body exceeds 8388608 bytes"}
    assert service.state.objects == before


async def test_oversized_streamed_body_without_content_length_is_a_413(service):
    app = create_app(service, Settings(Path("unused"), ServerSettings(max_body_bytes=1000)))

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b" " * 200

    async with _client(app) as small:
        response = await small.post("/scheduler/filter", content=chunks())
        assert "content-length" not in response.request.headers
        assert response.status_code == 413
        assert response.json() == {"Error": "request body exceeds 1000 bytes"}
        # A body of exactly the limit is read, parsed and answered.
        fits = orjson.dumps({"Pod": POD_OK, "NodeNames": ["n1"]}).ljust(1000)
        assert (await small.post("/scheduler/filter", content=fits)).status_code == 200


async def test_invalid_content_length_is_a_400(client):
    response = await client.post("/scheduler/bind", content=b"{}", headers={"Content-Length": "lots"})
    assert response.status_code == 400


# --- probes and docs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/healthz", "/livez", "/readyz"])
async def test_probes(client, path):
    response = await client.get(path)
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_openapi_documents_the_three_verbs(client):
    spec = (await client.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    for name in (
        "ExtenderArgs",
        "ExtenderFilterResult",
        "HostPriority",
        "ExtenderBindingArgs",
        "ExtenderBindingResult",
        "ErrorBody",
    ):
        assert name in schemas, name
    assert set(schemas["ExtenderArgs"]["properties"]) == {"Pod", "Nodes", "NodeNames"}
    for verb, model in (
        ("filter", "ExtenderArgs"),
        ("prioritize", "ExtenderArgs"),
        ("bind", "ExtenderBindingArgs"),
    ):
        operation = spec["paths"][f"/scheduler/{verb}"]["post"]
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": f"#/components/schemas/{model}"}
        assert {"200", "400", "413"} <= set(operation["responses"])
    prioritize = spec["paths"]["/scheduler/prioritize"]["post"]["responses"]["200"]["content"][
        "application/json"
    ]
    assert prioritize["schema"]["type"] == "array"
    assert (await client.get("/docs")).status_code == 200


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_docs_load_every_asset_from_the_extender(client, page):
    """Offline (air-gapped clusters): every script, stylesheet and icon the page names is served here."""
    import re

    html = (await client.get(page)).text
    urls = re.findall(r"""(?:src|href)=["']([^"']+)["']|url: ?["']([^"']+)["']""", html)
    urls = [u for pair in urls for u in pair if u]
    assert urls and not [u for u in urls if "//" in u], urls  # no CDN, no absolute URL at all
    for url in urls:
        answer = await client.get(url)
        assert answer.status_code == 200 and answer.content, url
    scripts = [u for u in urls if u.endswith(".js")]
    assert scripts, html


async def test_filter_passes_on_as_many_nodes_as_kube_scheduler_would_score(service):
    """300 candidates, every one fits: kube-scheduler's adaptive share of 300 is 48 %, 144 nodes, and
    the next pod gets the next 144, the third the last 12 and the first 132. With 100 % every node."""
    names = [f"n{i}" for i in range(300)]
    async with _client(create_app(service, Settings(Path("unused")))) as client:
        first = (await _post(client, "filter", _args(service, "p-free", names))).json()
        second = (await _post(client, "filter", _args(service, "p-free", names))).json()
        third = (await _post(client, "filter", _args(service, "p-free", names))).json()
    assert first["NodeNames"] == names[:144]
    assert second["NodeNames"] == names[144:288]
    assert third["NodeNames"] == names[:132] + names[288:]
    everything = Settings(Path("unused"), scheduling=SchedulingSettings(percentage_of_nodes_to_score=100))
    async with _client(create_app(service, everything)) as client:
        assert (await _post(client, "filter", _args(service, "p-free", names))).json()["NodeNames"] == names


async def test_filter_answers_are_recorded_for_the_requeuer(service):
    """A pod no node passes is remembered as rejected (cluster mode's requeuer signals it later); one that
    passes somewhere is forgotten."""
    rejected = RejectedPods(service.state, service.selectors, ["default-scheduler"], 100)
    async with _client(create_app(service, Settings(Path("unused")), rejected=rejected)) as client:
        answer = await client.post("/scheduler/filter", content=_args(service, "p-two", ["n2", "n3"]))
        assert answer.json()["NodeNames"] == []
        assert len(rejected) == 1
        answer = await client.post("/scheduler/filter", content=_args(service, "p-two", ["n1"]))
        assert answer.json()["NodeNames"] == ["n1"]
        assert len(rejected) == 0


async def test_filter_rejections_and_preempt_answers_are_recorded_for_the_preemptor(service):
    """A pod no node passes for want of devices in use is a preemption request (cluster mode's preemptor
    tries it once settled); one that could never fit (n2 has one GPU, p-two asks for two) is not; once
    kube-scheduler's own preemption keeps a candidate for a pod, its rejections are left to it."""
    held = claim(NS, "held", [request("gpus", "gpu", 2)])
    results = [{"request": "gpus", "driver": DRIVER, "pool": "n1", "device": d} for d in ("gpu-0", "gpu-1")]
    held["status"] = {"allocation": {"devices": {"results": results}}}
    service.state.apply("ResourceClaim", held)
    requests = PreemptionRequests(["default-scheduler"], settle_seconds=0.0)
    async with _client(create_app(service, Settings(Path("unused")), preemptions=requests)) as client:
        answer = await client.post("/scheduler/filter", content=_args(service, "p-two", ["n2"]))
        assert answer.json()["NodeNames"] == [] and requests.take() == []
        answer = await client.post("/scheduler/filter", content=_args(service, "p-one", ["n1"]))
        assert answer.json()["NodeNames"] == []
        assert [r.key for r in requests.take()] == [f"{NS}/p-one"]
        requests.scheduler_preempting(service.state.get("Pod", f"{NS}/p-one"))
        await client.post("/scheduler/filter", content=_args(service, "p-one", ["n1"]))
        assert requests.take() == []


async def test_the_verbs_are_answered_before_fastapis_router_which_keeps_every_other_request(service):
    # FastAPI's routing and dependency solving cost about as much CPU as a warm filter: kube-scheduler's
    # three calls per pod go straight to the route functions (the same answers), the rest to the router.
    app = create_app(service, Settings(Path("unused")))
    routed: list[tuple[str, str]] = []
    router = app.router

    async def spy(scope: dict[str, Any], receive: Any, send: Any) -> None:
        routed.append((scope["method"], scope["path"]))
        await router(scope, receive, send)

    app.router = spy  # type: ignore[assignment]  # Starlette builds its middleware stack around app.router
    async with _client(app) as client:
        filtered = await client.post("/scheduler/filter", content=_args(service, "p-one", ["n1", "n2", "n3"]))
        prioritized = await client.post("/scheduler/prioritize", content=_args(service, "p-one", ["n1"]))
        wrong_method = await client.get("/scheduler/filter")
        probe = await client.get("/healthz")
    assert filtered.status_code == 200 and filtered.json()["NodeNames"] == ["n1", "n2"]
    assert prioritized.status_code == 200 and [e["Host"] for e in prioritized.json()] == ["n1"]
    assert wrong_method.status_code == 405
    assert probe.status_code == 200
    assert routed == [("GET", "/scheduler/filter"), ("GET", "/healthz")]
