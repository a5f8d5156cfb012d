"""Device scoring in filter (``device_scoring: filter``, ``app.scheduling.besttier``): filter passes on only
the nodes with the best device score, and holds the strictly best node's devices for the bind as
prioritize's answer does. Expected nodes by hand from binpack's definition (docs/features.md "Scoring and
device selection": the node the pod leaves fullest scores highest; nothing else differs between these
nodes, which publish no topology)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from allocator.cel.expr_engine import ExprEngine
from allocator.selectors import SelectorCache
from app.config.settings import SchedulingSettings, Settings
from app.explain.summary import summarize_pod
from app.http.api import create_app
from app.scheduling.besttier import best_tier
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState
from tests.builders import claim, device, device_class, made_for, node, pod, request, resource_slice

DRIVER = "gpu.example.com"
NS = "ml"
USED = {"a": 6, "b": 0, "c": 6, "d": 3}
"""GPUs in use of each node's 8: binpack ranks a and c first (7 of 8 used after one more), then d, b."""


def test_the_best_tier_is_every_node_with_the_top_score_in_order():
    assert best_tier(["a", "b", "c", "d"], [7, 3, 7, 5]) == ["a", "c"]
    assert best_tier(["a"], [0]) == ["a"]
    with pytest.raises(ValueError):
        best_tier(["a", "b"], [1])


def test_nodes_not_scored_in_time_are_passed_on_with_the_best():
    assert best_tier(["a", "b", "c", "d"], [None, 8, 5, 8]) == ["a", "b", "d"]
    assert best_tier(["a", "b"], [None, None]) == ["a", "b"]


def test_ranking_decides_within_the_time_left_and_marks_the_rest_not_scored():
    # Filter passes these nodes by free-device counts; scoring them chooses devices on each, which takes
    # time: with none left, no node is scored (and none is ranked last for it).
    service = _service(USED)
    p1 = service.state.get("Pod", f"{NS}/p1")
    assert p1 is not None
    assert service.filter(p1, list(USED)).passed == list(USED)
    assert service.rank(p1, list(USED), deadline=time.monotonic()) == [None] * len(USED)
    scores = service.rank(p1, list(USED), deadline=time.monotonic() + 60.0)
    assert scores is not None and None not in scores


def _service(used: dict[str, int]) -> SchedulingService:
    objects: list[tuple[str, dict[str, Any]]] = [("Node", node(n)) for n in used]
    gpus = [device(f"gpu-{i}") for i in range(8)]
    objects += [("ResourceSlice", resource_slice(f"{n}-gpus", DRIVER, n, gpus)) for n in used]
    objects.append(("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"')))
    results = [
        {"request": "gpus", "driver": DRIVER, "pool": n, "device": f"gpu-{i}"}
        for n, count in used.items()
        for i in range(count)
    ]
    held = claim(NS, "held", [request("gpus", "gpu", len(results))])
    held["status"] = {"allocation": {"devices": {"results": results}}}
    objects.append(("ResourceClaim", held))
    for name in ("p1", "p2", "p3"):
        objects.append(("ResourceClaim", made_for(claim(NS, name, [request("gpu", "gpu")]), name)))
        objects.append(("Pod", pod(NS, name, [name])))
    objects.append(("Pod", pod(NS, "plain")))
    return SchedulingService(ClusterState.from_objects(objects), SelectorCache(ExprEngine()))


class _Extender:
    def __init__(self, device_scoring: str, used: dict[str, int]) -> None:
        self.service = _service(used)
        scheduling = SchedulingSettings(device_scoring=device_scoring)
        self.app = create_app(self.service, Settings(Path("unused"), scheduling=scheduling))

    async def call(self, client: httpx.AsyncClient, verb: str, name: str, names: list[str]) -> Any:
        sent = dict(self.service.state.get("Pod", f"{NS}/{name}") or {})
        body = orjson.dumps({"Pod": sent, "Nodes": None, "NodeNames": names})
        response = await client.post(f"/scheduler/{verb}", content=body)
        assert response.status_code == 200
        return response.json()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url="http://extender") as plain:
        yield plain


async def _answer(device_scoring: str, used: dict[str, int], *pods: str) -> list[Any]:
    extender = _Extender(device_scoring, used)
    transport = httpx.ASGITransport(app=extender.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://extender") as client:
        return [await extender.call(client, "filter", name, list(used)) for name in pods]


async def test_filter_passes_on_only_the_best_scored_nodes():
    [answer] = await _answer("filter", USED, "p1")
    assert answer["NodeNames"] == ["a", "c"]
    assert answer["FailedNodes"] == {} and answer["Error"] == ""


async def test_nodes_tied_by_the_rounded_score_are_ranked_by_the_fine_score():
    # Binpack with default weights (packing 2, intact 1 at its neutral 0.5, no topology published): one GPU
    # on an empty node: (2 * 1/8 + 0.5) / 3 = 0.25, 10 * 0.25 + 0.5 = 3.0 -> 3; on f, one in use:
    # (2 * 2/8 + 0.5) / 3 = 1/3 -> 3.83 -> 3. Rounded they tie; filter passes on f alone, and
    # prioritize still sends the rounded 0..10 scores.
    used = {"e": 0, "f": 1, "g": 0}
    [answer] = await _answer("filter", used, "p1")
    assert answer["NodeNames"] == ["f"]
    extender = _Extender("prioritize", used)
    transport = httpx.ASGITransport(app=extender.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://extender") as client:
        scores = {e["Host"]: e["Score"] for e in await extender.call(client, "prioritize", "p1", list(used))}
    assert scores == {"e": 3, "f": 3, "g": 3}


def test_explain_ranks_the_best_nodes_by_the_unrounded_score_and_shows_it():
    # As above: f at 3.333 unrounded, the empty e and g at 10 * 0.25 = 2.5; all three round to 3.
    summary = summarize_pod(_service({"e": 0, "f": 1, "g": 0}), NS, "p1", best=3)
    assert [(v.node, v.score.score, v.score.unrounded) for v in summary.best if v.score] == [
        ("f", 3, 3.333),
        ("e", 3, 2.5),
        ("g", 3, 2.5),
    ]


async def test_the_default_passes_on_every_node_that_fits_and_prioritize_ranks_them():
    extender = _Extender("prioritize", USED)
    transport = httpx.ASGITransport(app=extender.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://extender") as client:
        answer = await extender.call(client, "filter", "p1", list(USED))
        assert answer["NodeNames"] == ["a", "b", "c", "d"]
        scores = {e["Host"]: e["Score"] for e in await extender.call(client, "prioritize", "p1", list(USED))}
    assert scores["a"] == scores["c"] > scores["d"] > scores["b"]


async def test_the_strictly_best_nodes_devices_are_held_for_its_pod():
    # a's last two GPUs: p1 is sent only to a (strictly best), and holds one of them until its bind, so
    # p2 still finds a best (its last GPU), and p3 finds a full: d is best for it.
    used = {"a": 6, "b": 0, "d": 3}
    answers = await _answer("filter", used, "p1", "p2", "p3")
    assert [a["NodeNames"] for a in answers] == [["a"], ["a"], ["d"]]


async def test_the_best_node_is_found_among_every_node_that_fits_not_a_sample():
    # 300 nodes: the extender's own sample (kube-scheduler's adaptive share, 144 nodes) would leave the
    # last out; ranked in filter, every node that fits is scored and the last one, 3 in use, is best.
    used = {f"n{i:03d}": 0 for i in range(300)} | {"n299": 3}
    extender = _Extender("filter", used)
    extender.service.filter_time_budget = 60.0  # deciding 300 nodes at once may take a while on CI
    transport = httpx.ASGITransport(app=extender.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://extender") as client:
        answers = [await extender.call(client, "filter", name, list(used)) for name in ("p1", "p2")]
    assert [a["NodeNames"] for a in answers] == [["n299"], ["n299"]]


def _never_scored(*_: Any, **__: Any) -> Any:
    raise AssertionError("scored")


async def _unscored_filter(monkeypatch: pytest.MonkeyPatch, used: dict[str, int], name: str) -> Any:
    """Filter's answer from an extender whose every way of scoring fails the call."""
    extender = _Extender("filter", used)
    for scoring in ("rank", "prioritize", "prioritize_quick"):
        monkeypatch.setattr(extender.service, scoring, _never_scored)
    transport = httpx.ASGITransport(app=extender.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://extender") as client:
        return await extender.call(client, "filter", name, list(used))


async def test_a_single_passing_node_is_passed_on_unscored(monkeypatch: pytest.MonkeyPatch):
    answer = await _unscored_filter(monkeypatch, {"a": 8, "b": 8, "d": 3}, "p1")
    assert answer["NodeNames"] == ["d"]
    assert set(answer["FailedNodes"]) == {"a", "b"}


async def test_a_pod_without_devices_is_passed_on_everywhere_unscored(monkeypatch: pytest.MonkeyPatch):
    answer = await _unscored_filter(monkeypatch, USED, "plain")
    assert answer["NodeNames"] == list(USED)
