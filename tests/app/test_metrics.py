"""``GET /metrics`` scraped over HTTP and parsed with prometheus-client's parser; every expected value is
counted by hand from the small state below."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from allocator.cel.expr_engine import ExprEngine
from allocator.deviceuse import AllocatedDevice
from allocator.selectors import SelectorCache
from app.config.derivedconfig import ConfigWatcher
from app.config.settings import Settings
from app.http.api import create_app
from app.http.metrics import REQUEST_BUCKETS, ConfigReloadCollector, Metrics
from app.kube.apimetrics import APIMetrics
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState
from tests.app.metrics_support import names, samples
from tests.builders import claim, device, device_class, node, pod, request, resource_slice
from tests.ports import serve_example_argv

ROOT = Path(__file__).resolve().parents[2]
DRIVER = "gpu.example.com"
NS = "ml"


def _held_claim() -> dict[str, Any]:
    """ml/held: allocated n1's gpu-0 before the extender started."""
    obj = claim(NS, "held", [request("gpu", "gpu")])
    result = {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}
    obj["status"] = {"allocation": {"devices": {"results": [result]}}}
    return obj


def _state() -> ClusterState:
    tainted = device("gpu-2")
    tainted["taints"] = [{"key": "broken", "effect": "NoSchedule"}]
    return ClusterState.from_objects(
        [
            ("Node", node("n1")),
            ("Node", node("n2")),
            ("Node", node("n3")),
            ("DeviceClass", device_class("gpu", f'device.driver == "{DRIVER}"')),
            ("DeviceClass", device_class("other", 'device.driver == "other.example.com"')),
            (
                "ResourceSlice",
                resource_slice("n1", DRIVER, "n1", [device("gpu-0"), device("gpu-1"), tainted]),
            ),
            ("ResourceSlice", resource_slice("n2", DRIVER, "n2", [device("gpu-0")])),
            ("ResourceClaim", _held_claim()),
            ("ResourceClaim", claim(NS, "one", [request("gpu", "gpu")])),
            ("ResourceClaim", claim("team-b", "two", [request("gpus", "gpu", 2)])),
            ("ResourceClaim", claim(NS, "bad", [request("gpu", "no-such-class")])),
            ("Pod", pod(NS, "p-one", ["one"])),
            ("Pod", pod("team-b", "p-two", ["two"])),
            ("Pod", pod(NS, "p-bad", ["bad"])),
        ]
    )


@pytest.fixture
def service() -> SchedulingService:
    return SchedulingService(_state(), SelectorCache(ExprEngine()), device_selection="first-fit")


def _filter_args(service: SchedulingService, key: str) -> bytes:
    obj = dict(service.state.get("Pod", key) or {})
    return orjson.dumps({"Pod": obj, "Nodes": None, "NodeNames": ["n1", "n2", "n3"]})


def _bind_args(ns: str, name: str, node_name: str) -> bytes:
    uid = f"uid-pod-{ns}-{name}"
    return orjson.dumps({"PodName": name, "PodNamespace": ns, "PodUID": uid, "Node": node_name})


def _labels(**labels: str) -> frozenset[tuple[str, str]]:
    return frozenset(labels.items())


async def _scrape(http: httpx.AsyncClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    answer = await http.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    return samples(answer.text)


async def test_metrics_follow_filter_bind_and_the_inventory(service: SchedulingService):
    app = create_app(service, Settings(Path("unused")))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as http:
        before = await _scrape(http)
        # Inventory at start: n1 gpu-0 held by ml/held, gpu-1 free, gpu-2 tainted; n2 gpu-0 free.
        for pool, state, count in [("n1", "allocated", 1), ("n1", "free", 1), ("n1", "tainted", 1)]:
            key = ("dra_extender_devices", _labels(device_class="gpu", driver=DRIVER, pool=pool, state=state))
            assert before[key] == count
        gpu_n2 = _labels(device_class="gpu", driver=DRIVER, pool="n2", state="free")
        assert before[("dra_extender_devices", gpu_n2)] == 1
        # No device matches "other": it has no series; every counter starts at 0.
        assert not any(("device_class", "other") in labels for _, labels in before)
        assert before[("dra_extender_binds_total", _labels(result="success"))] == 0
        for verb in ("filter", "prioritize", "bind", "preempt"):
            for result in ("success", "error"):
                series = ("dra_extender_request_duration_seconds_count", _labels(verb=verb, result=result))
                assert before[series] == 0
        held = _labels(namespace=NS, device_class="gpu", driver=DRIVER)
        assert before[("dra_extender_namespace_allocated_devices", held)] == 1

        # p-one (one GPU): n1 and n2 pass, n3 has no devices (unresolvable). Three nodes decided anew.
        assert (await http.post("/scheduler/filter", content=_filter_args(service, f"{NS}/p-one"))).json()[
            "NodeNames"
        ] == ["n1", "n2"]
        # The same call again: all three answered from the kept decisions.
        await http.post("/scheduler/filter", content=_filter_args(service, f"{NS}/p-one"))
        assert (await http.post("/scheduler/bind", content=_bind_args(NS, "p-one", "n1"))).json() == {
            "Error": ""
        }
        # p-bad names a class that does not exist: a bind error.
        assert (await http.post("/scheduler/bind", content=_bind_args(NS, "p-bad", "n1"))).json()["Error"]
        # p-two (two GPUs) with no time budget left: every node is cut.
        service.filter_time_budget = -1.0
        await http.post("/scheduler/filter", content=_filter_args(service, "team-b/p-two"))
        # A bind in flight elsewhere holds n2's gpu-0.
        device_id = (DRIVER, "n2", "gpu-0")
        with service.lock:
            service.state.inventory.reserve("bind:x", (AllocatedDevice(device_id, False, "", {}),))
        after = await _scrape(http)

    def delta(name: str, labels: frozenset[tuple[str, str]] = frozenset()) -> float:
        return after[(name, labels)] - before.get((name, labels), 0)

    assert delta("dra_extender_filter_nodes_total", _labels(result="passed")) == 4
    assert delta("dra_extender_filter_nodes_total", _labels(result="unresolvable")) == 2
    assert delta("dra_extender_filter_nodes_total", _labels(result="failed")) == 3  # the budget cut
    assert delta("dra_extender_binds_total", _labels(result="success")) == 1
    assert delta("dra_extender_binds_total", _labels(result="error")) == 1
    assert delta("dra_extender_request_duration_seconds_count", _labels(verb="filter", result="success")) == 3
    assert delta("dra_extender_request_duration_seconds_count", _labels(verb="bind", result="success")) == 1
    assert delta("dra_extender_request_duration_seconds_count", _labels(verb="bind", result="error")) == 1
    assert delta("dra_extender_decision_cache_misses_total") >= 3
    assert delta("dra_extender_decision_cache_hits_total") == 3
    assert delta("dra_extender_filter_budget_exhausted_total") == 1
    assert delta("dra_extender_filter_budget_undecided_nodes_total") == 3
    assert after[("dra_extender_reservations_in_flight", frozenset())] == 1
    # n1: gpu-0 (held) and gpu-1 (p-one) allocated, gpu-2 tainted; n2: gpu-0 reserved.
    for pool, state, count in [("n1", "allocated", 2), ("n1", "tainted", 1), ("n2", "reserved", 1)]:
        assert (
            after[
                ("dra_extender_devices", _labels(device_class="gpu", driver=DRIVER, pool=pool, state=state))
            ]
            == count
        )
    assert (
        "dra_extender_devices",
        _labels(device_class="gpu", driver=DRIVER, pool="n1", state="free"),
    ) not in after
    assert after[("dra_extender_namespace_allocated_devices", held)] == 2


def test_request_buckets_are_kube_schedulers():
    # ExponentialBuckets(0.0001, 2, 12): 0.0001 .. 0.2048; then ExponentialBuckets(0.001, 2, 15) above it:
    # 0.256 .. 16.384.
    assert REQUEST_BUCKETS[:3] == (0.0001, 0.0002, 0.0004)
    assert REQUEST_BUCKETS[11] == pytest.approx(0.2048)
    assert REQUEST_BUCKETS[12:] == pytest.approx((0.256, 0.512, 1.024, 2.048, 4.096, 8.192, 16.384))


class _Clock:
    def now(self) -> float:
        return 100.0


class _Stats:
    def __init__(self, events: int, lists: int, last: float | None) -> None:
        self.events, self.lists, self.last_event_at = events, lists, last


class _Informer:
    """What the collector reads of ``app.kube.informers.Informer``."""

    def __init__(self, synced: bool, stats: _Stats) -> None:
        self.synced, self.stats, self.clock = synced, stats, _Clock()


class _Informers:
    informers = {
        "Pod": _Informer(True, _Stats(7, 2, 90.0)),
        "ResourceSlice": _Informer(False, _Stats(0, 1, None)),
    }


def test_informer_state_in_cluster_mode(service: SchedulingService):
    values = samples(Metrics(service, _Informers()).render().decode())
    assert values[("dra_extender_informer_synced", _labels(resource="Pod"))] == 1
    assert values[("dra_extender_informer_synced", _labels(resource="ResourceSlice"))] == 0
    assert values[("dra_extender_informer_events_total", _labels(resource="Pod"))] == 7
    assert values[("dra_extender_informer_relists_total", _labels(resource="Pod"))] == 2
    assert values[("dra_extender_informer_seconds_since_last_event", _labels(resource="Pod"))] == 10
    assert ("dra_extender_informer_seconds_since_last_event", _labels(resource="ResourceSlice")) not in values


def test_every_metric_the_grafana_dashboard_queries_is_exposed(service: SchedulingService, tmp_path: Path):
    dashboard = json.loads((ROOT / "charts/dra-extender/dashboards/dra-extender-dashboard.json").read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\bdra_extender_[a-z_]+", target["expr"])
    }
    client = APIMetrics()
    client.observe("GET", "/api/v1/pods", [("watch", "true")], "200", 0.01)
    client.observe("GET", "/api/v1/pods", [("watch", "true")], "200", 0.01)  # a restart
    client.observe("PUT", "/api/v1/namespaces/ml/pods/p", [], "409", 0.01)
    client.observe("PUT", "/api/v1/namespaces/ml/pods/p", [], "200", 0.01)  # its retry
    config = tmp_path / "extender.yaml"
    config.write_text("derivedAttributes: []\n")
    watcher = ConfigWatcher(config, lambda _: None, digest=hashlib.sha256(config.read_bytes()).hexdigest())
    collectors = [*client.collectors(), ConfigReloadCollector(watcher)]
    exposed = names(Metrics(service, _Informers(), collectors=collectors).render().decode())
    assert len(queried) >= 20 and queried - exposed == set()


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("9090", "metrics_bind_address: expected host:port, got '9090'"),
        ("0.0.0.0:http", "metrics_bind_address: expected host:port, got '0.0.0.0:http'"),
        ("127.0.0.1:70000", "metrics_bind_address: expected host:port, got '127.0.0.1:70000'"),
    ],
)
def test_a_bad_metrics_address_exits_2_naming_it(capsys, address, message):
    from app.cli.main import main

    assert main(["serve", "--state", str(ROOT / "examples/cluster"), "--metrics-bind-address", address]) == 2
    assert message in capsys.readouterr().err


def test_a_metrics_address_in_use_exits_2_naming_the_flag(capsys, monkeypatch):
    import socket

    from app.cli.main import main
    from app.http import server as httpserver

    monkeypatch.setattr(httpserver, "serve", lambda *args, **kwargs: pytest.fail("served despite the error"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        assert main(serve_example_argv("--metrics-bind-address", address)) == 2
    assert f"--metrics-bind-address {address}: " in capsys.readouterr().err


def test_the_page_has_the_process_python_and_build_families_and_no_created_series(service: SchedulingService):
    import platform

    from app.config import buildinfo

    text = Metrics(service).render().decode()
    exposed = names(text)
    # prometheus-client's ProcessCollector (Linux), PlatformCollector and GCCollector.
    for family in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"):
        assert family in exposed
    assert {"python_info", "python_gc_objects_collected_total"} <= exposed
    build = {"version": "0.1.0", "python": platform.python_version(), "git": buildinfo.git_commit()}
    assert samples(text)[("dra_extender_build_info", frozenset(build.items()))] == 1
    assert not [line for line in text.splitlines() if "_created" in line.split(" ")[0]]


def test_the_metrics_port_serves_only_metrics(service: SchedulingService):
    from app.cli.serve import _serve_metrics
    from app.config.settings import ServerSettings
    from tests.ports import free_ports

    [port] = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    with _serve_metrics(ServerSettings(metrics_bind_address=f"127.0.0.1:{port}"), Metrics(service)):
        page = httpx.get(f"{url}/metrics")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert ("dra_extender_binds_total", _labels(result="success")) in samples(page.text)
        for path in ("/", "/healthz", "/metrics/", "/readyz", "/favicon.ico"):
            answer = httpx.get(f"{url}{path}")
            assert (answer.status_code, answer.text) == (404, "404 page not found\n"), path
        only = httpx.get(f"{url}/metrics?name[]=dra_extender_binds_total")
        assert {name for name, _ in samples(only.text)} == {"dra_extender_binds_total"}
