"""One log format for the extender and uvicorn (``app.config.logs``): records captured and parsed."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.config.logs import configure
from tests.app.metrics_support import samples
from tests.ports import free_ports

REPO = Path(__file__).resolve().parents[2]
ACCESS = ("127.0.0.1:50000", "GET", "/readyz", "1.1", 200)
"""The arguments uvicorn's access logger formats: client, method, path, HTTP version, status."""


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """A stream ``configure`` may take over; the root and uvicorn loggers are put back afterwards."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    names = ("uvicorn", "uvicorn.error", "uvicorn.access")
    loggers = {n: (list(logging.getLogger(n).handlers), logging.getLogger(n).propagate) for n in names}
    yield io.StringIO()
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    for name, (handlers, propagate) in loggers.items():
        logging.getLogger(name).handlers[:] = handlers
        logging.getLogger(name).propagate = propagate
        logging.getLogger(name).filters.clear()


def test_json_records_have_klog_keys(stream: io.StringIO):
    configure("info", "json", stream)
    extra = {"pod": "ml/p", "node": "n1", "devices": ["ml/c: gpu.example.com/n1/gpu-0"]}
    logging.getLogger("app.http.api").info("bound: %s", "ml/c: gpu.example.com/n1/gpu-0", extra=extra)
    logging.getLogger("app.http.api").debug("not shown at info")
    [line] = stream.getvalue().splitlines()
    record = json.loads(line)
    assert record["level"] == "info" and record["logger"] == "app.http.api"
    assert record["msg"] == "bound: ml/c: gpu.example.com/n1/gpu-0"
    assert record["pod"] == "ml/p" and record["node"] == "n1"
    assert record["devices"] == ["ml/c: gpu.example.com/n1/gpu-0"]
    assert abs(record["ts"] - time.time()) < 60


def test_json_carries_the_traceback(stream: io.StringIO):
    configure("info", "json", stream)
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("app.http.api").exception("filter: internal error")
    record = json.loads(stream.getvalue())
    assert record["level"] == "error" and "ValueError: boom" in record["exc_info"]


def test_text_puts_the_keys_after_the_message(stream: io.StringIO):
    configure("info", "text", stream)
    logging.getLogger("app.http.api").info("bind failed: no", extra={"pod": "ml/p", "node": "n 1"})
    line = stream.getvalue().rstrip("\n")
    assert line.endswith(' INFO app.http.api: bind failed: no pod=ml/p node="n 1"')


def test_uvicorn_records_share_the_format_and_probes_and_answered_verbs_are_debug(stream: io.StringIO):
    configure("info", "json", stream)
    access = logging.getLogger("uvicorn.access")
    access.info('%s - "%s %s HTTP/%s" %d', *ACCESS)
    for path in ("/livez", "/healthz", "/metrics", "/readyz?verbose"):
        access.info('%s - "%s %s HTTP/%s" %d', ACCESS[0], "GET", path, "1.1", 200)
    # kube-scheduler calls the verbs several times per pod; a bind is logged by the extender with what it
    # did, so only a verb refused (not 2xx) gets an access line at info.
    for verb in ("filter", "prioritize", "bind", "preempt"):
        access.info('%s - "%s %s HTTP/%s" %d', ACCESS[0], "POST", f"/scheduler/{verb}", "1.1", 200)
    assert stream.getvalue() == ""
    access.info('%s - "%s %s HTTP/%s" %d', ACCESS[0], "POST", "/scheduler/bind", "1.1", 413)
    logging.getLogger("uvicorn.error").info("Uvicorn running")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["logger"] == "uvicorn.access" and "POST /scheduler/bind" in first["msg"]
    assert first["level"] == "info" and first["msg"].endswith(" 413")
    assert second == {**second, "logger": "uvicorn.error", "level": "info", "msg": "Uvicorn running"}
    configure("debug", "json", stream)
    access.info('%s - "%s %s HTTP/%s" %d', *ACCESS)
    probe = json.loads(stream.getvalue().splitlines()[-1])
    assert probe["level"] == "debug" and "GET /readyz" in probe["msg"]


def test_unknown_format_is_refused(stream: io.StringIO):
    with pytest.raises(ValueError, match="log_format: must be one of text, json"):
        configure("info", "yaml", stream)


def test_serve_logs_only_json_for_the_banner_the_app_and_uvicorn_and_serves_metrics_apart():
    port, metrics_port = free_ports(2)
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "app", "serve", "--state", "examples/cluster", "--port", str(port)]
    argv += ["--log-format", "json", "--metrics-bind-address", f"127.0.0.1:{metrics_port}"]
    server = subprocess.Popen(argv, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and server.poll() is None, "serve did not start"
            time.sleep(0.2)
        bind = (REPO / "examples/requests/bind-two-gpus.json").read_bytes()
        assert httpx.post(f"{url}/scheduler/bind", content=bind).json() == {"Error": ""}
        elsewhere = json.loads(bind) | {"Node": "no-such-node"}
        assert httpx.post(f"{url}/scheduler/bind", json=elsewhere).json()["Error"]
        assert httpx.post(f"{url}/scheduler/bind", content=b"{").status_code == 400  # an access line
        httpx.get(f"{url}/metrics")
        # The metrics listener shows the same registry as the extender's port.
        apart = samples(httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text)
        assert apart[("dra_extender_binds_total", frozenset({("result", "success")}))] == 1
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    records = [json.loads(line) for line in err.splitlines()]  # every line, the banner's too
    loggers = {r["logger"] for r in records}
    assert {"uvicorn.error", "uvicorn.access", "app.http.api", "app.cli.serve"} <= loggers, err
    [banner] = [r for r in records if r["logger"] == "app.cli.serve"]
    assert banner["level"] == "info" and f"serving {url} " in banner["msg"]
    lifecycle = [r["msg"] for r in records if r["logger"] == "uvicorn.error"]
    assert any(m.startswith("Started server process") for m in lifecycle), lifecycle
    assert "Application startup complete." in lifecycle and "Application shutdown complete." in lifecycle
    [failed] = [r for r in records if r["msg"] == "bind failed"]
    assert failed["level"] == "warning" and failed["node"] == "no-such-node"
    assert (
        failed["pod"] == "demo/two-gpus"
        and failed["reason"] == "node no-such-node is not known to dra-extender"
    )
    [bound] = [r for r in records if r["msg"].startswith("bound:")]
    assert bound["pod"] == "demo/two-gpus" and bound["node"] == "gpu-node-1"
    assert len(bound["devices"]) == 2 and all("gpu.nvidia.com" in d for d in bound["devices"])
    access = [r["msg"] for r in records if r["logger"] == "uvicorn.access"]
    assert any("/scheduler/bind" in m for m in access)
    assert not any(p in m for m in access for p in ("/readyz", "/metrics"))
    assert not [r for r in records if "color_message" in r]


def _bind_service():
    """n1: gpu-0, gpu-1. ml/kept is allocated gpu-0 and reserved for ml/p (an earlier attempt of p's bind
    wrote it; the binding did not happen); ml/fresh is not allocated; ml/q has no claims."""
    from allocator.cel.expr_engine import ExprEngine
    from allocator.selectors import SelectorCache
    from app.scheduling.service import SchedulingService
    from app.state.cluster import ClusterState
    from tests.builders import claim, device, device_class, node, pod, request, resource_slice

    driver = "gpu.example.com"
    kept = claim("ml", "kept", [request("gpu", "gpu")])
    result = {"request": "gpu", "driver": driver, "pool": "n1", "device": "gpu-0"}
    kept["status"] = {
        "allocation": {"devices": {"results": [result]}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "uid-pod-ml-p"}],
    }
    state = ClusterState.from_objects(
        [
            ("Node", node("n1")),
            ("DeviceClass", device_class("gpu", f'device.driver == "{driver}"')),
            ("ResourceSlice", resource_slice("n1", driver, "n1", [device("gpu-0"), device("gpu-1")])),
            ("ResourceClaim", kept),
            ("ResourceClaim", claim("ml", "fresh", [request("gpu", "gpu")])),
            ("Pod", pod("ml", "p", ["kept"])),
            ("Pod", pod("ml", "r", ["kept", "fresh"])),
            ("Pod", pod("ml", "q")),
        ]
    )
    return SchedulingService(state, SelectorCache(ExprEngine()), device_selection="first-fit")


async def test_binds_log_what_they_did_and_failures_at_warning_with_pod_node_and_reason(stream):
    from pathlib import Path as _Path

    import orjson

    from app.config.settings import Settings
    from app.http.api import create_app

    configure("info", "json", stream)
    app = create_app(_bind_service(), Settings(_Path("unused")))

    async def bind(name: str, node_name: str) -> dict:
        body = {"PodName": name, "PodNamespace": "ml", "PodUID": f"uid-pod-ml-{name}", "Node": node_name}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as http:
            return (await http.post("/scheduler/bind", content=orjson.dumps(body))).json()

    assert (await bind("p", "n9"))["Error"]  # no such node
    assert await bind("p", "n1") == {"Error": ""}  # its only claim is allocated already
    assert await bind("p", "n1") == {"Error": ""}  # kube-scheduler retries a bind that succeeded
    assert await bind("q", "n1") == {"Error": ""}
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    binds = [r for r in records if r["logger"] == "app.http.api"]
    failed, kept, again, no_claims = binds
    assert failed["level"] == "warning"
    assert (failed["pod"], failed["node"]) == ("ml/p", "n9")
    assert failed["reason"] == "node n9 is not known to dra-extender"
    assert failed["msg"] == "bind failed"  # the reason is a key of its own, as klog puts it
    assert kept["level"] == "info" and kept["devices"] == []
    assert kept["msg"] == "bound: claims allocated already: ml/kept"
    assert again["msg"] == "bound: the pod is on the node already (a retried bind); nothing written"
    assert no_claims["msg"] == "bound: the pod has no ResourceClaims; only the binding written"
    assert not [r for r in binds if "no devices" in r["msg"]]


async def test_a_bind_names_the_devices_it_allocated_and_the_claims_it_kept(stream):
    configure("info", "text", stream)
    service = _bind_service()
    bound = service.bind_outcome("ml", "r", "uid-pod-ml-r", "n1")
    assert bound.devices == ["ml/fresh: gpu.example.com/n1/gpu-1"]
    assert bound.summary() == "ml/fresh: gpu.example.com/n1/gpu-1; claims allocated already: ml/kept"


@pytest.mark.parametrize(
    ("flags", "level"),
    [
        ([], "info"),
        (["-v", "0"], "info"),
        (["-v", "1"], "debug"),
        (["--v=4"], "debug"),
        (["--log-level", "warning"], "warning"),
        (["--log-level", "warning", "-v2"], "debug"),
        (["--log-level", "debug", "-v", "0"], "debug"),
    ],
)
def test_klog_verbosity_and_the_log_level_combine_the_more_verbose_wins(flags, level):
    from app.cli.flags import parser, settings_from_args

    args = parser().parse_args(["serve", "--state", str(REPO / "examples/cluster"), *flags])
    assert settings_from_args(args).server.effective_log_level == level


def test_a_verbosity_out_of_range_exits_2_naming_it(capsys):
    from app.cli.main import main

    assert main(["serve", "--state", str(REPO / "examples/cluster"), "-v", "11"]) == 2
    assert "verbosity: must be in 0..10, got 11" in capsys.readouterr().err


def test_a_startup_error_in_json_mode_is_a_json_record(stream, capsys, tmp_path):
    from app.cli.main import main

    missing = tmp_path / "missing.pem"
    tls = ["--ssl-certfile", str(missing), "--ssl-keyfile", str(missing)]
    assert main(["serve", "--state", str(REPO / "examples/cluster"), "--log-format", "json", *tls]) == 2
    [record] = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert record["level"] == "error" and record["logger"] == "app.cli.main"
    assert record["msg"].startswith(f"--ssl-certfile {missing}: cannot read it")


@pytest.mark.parametrize("config_text", [None, "apiVersion: dra-extender.io/v1alpha1\nkind: Nope\n"])
def test_an_unusable_config_file_in_json_mode_is_a_json_record(stream, capsys, tmp_path, config_text):
    from app.cli.main import main

    config = tmp_path / "extender.yaml"
    if config_text is not None:
        config.write_text(config_text)
    argv = [
        "serve",
        "--state",
        str(REPO / "examples/cluster"),
        "--log-format",
        "json",
        "--config",
        str(config),
    ]
    assert main(argv) == 2
    [record] = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert record["level"] == "error" and record["msg"].startswith(f"{config}: ")


def test_the_config_files_own_log_format_reports_a_file_it_names_that_cannot_be_used(
    stream, capsys, tmp_path
):
    """``server: {logFormat: json}`` as the README's example config has it, no flag: JSON too."""
    from app.cli.main import main

    missing = tmp_path / "tls.crt"
    config = tmp_path / "extender.yaml"
    config.write_text(
        "apiVersion: dra-extender.io/v1alpha1\nkind: ExtenderConfiguration\n"
        f"server: {{logFormat: json, sslCertFile: {missing}, sslKeyFile: {missing}}}\n"
    )
    assert main(["serve", "--state", str(REPO / "examples/cluster"), "--config", str(config)]) == 2
    [record] = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert (
        record["msg"] == f"{config}: server.sslCertFile: {missing}: cannot read it: No such file or directory"
    )


def test_the_error_that_stops_serve_is_shown_at_any_log_level(stream, capsys):
    from app.cli.main import main

    # A free port: serve checks it can listen before it reads the state (another serve may hold 8888).
    port = str(free_ports(1)[0])
    argv = [
        "serve",
        "--state",
        "/nonexistent",
        "--port",
        port,
        "--log-format",
        "json",
        "--log-level",
        "critical",
    ]
    assert main(argv) == 2
    [record] = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert (record["level"], record["msg"]) == ("error", "/nonexistent: no such file or directory")


def test_a_python_warning_is_a_record_of_the_stream_too(stream):
    """A library's ``warnings.warn`` went to stderr as plain text, between the JSON lines."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        logging.captureWarnings(False)  # an earlier test's configure captured pytest's showwarning
        configure("info", "json", stream)
        try:
            warnings.warn("a library's warning", UserWarning, stacklevel=1)
        finally:
            logging.captureWarnings(False)
    [record] = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert (record["level"], record["logger"]) == ("warning", "py.warnings")
    assert "UserWarning: a library's warning" in record["msg"]
