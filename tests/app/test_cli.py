"""``dra-extender simulate`` on a small state directory: output shape, placements, exit codes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from app.cli.main import main
from app.http import server as httpserver
from app.http.server import IdleClosingHttpToolsProtocol
from tests.builders import (
    claim,
    claim_template,
    device,
    device_class,
    node,
    pod,
    request,
    resource_slice,
    write_state,
)
from tests.ports import free_ports

DRIVER = "gpu.example.com"
NS = "ml"
REPO = Path(__file__).resolve().parents[2]


def _objects() -> list[dict[str, Any]]:
    return [
        node("n1"),
        node("n2"),
        node("n3"),
        device_class("gpu", f'device.driver == "{DRIVER}"'),
        resource_slice("n1-gpus", DRIVER, "n1", [device("gpu-0"), device("gpu-1")]),
        resource_slice("n2-gpus", DRIVER, "n2", [device("gpu-0")]),
        claim_template(NS, "one-gpu", [request("gpu", "gpu")]),
        claim(NS, "pair", [request("gpus", "gpu", 2)]),
        claim(NS, "late", [request("gpu", "gpu")]),
        claim(NS, "broken", [request("gpu", "no-such-class")]),
        # Listed out of order on purpose: scheduling order is creationTimestamp.
        pod(NS, "d-free", created="2026-01-01T00:04:00Z"),
        pod(NS, "a-template", templates={"gpu": "one-gpu"}, created="2026-01-01T00:01:00Z"),
        pod(NS, "b-pair", ["pair"], created="2026-01-01T00:02:00Z"),
        pod(NS, "c-late", ["late"], created="2026-01-01T00:03:00Z"),
        pod(NS, "e-broken", ["broken"], created="2026-01-01T00:05:00Z"),
    ]


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return write_state(tmp_path, _objects())


def _simulate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    code = main(["simulate", "-o", "json", *argv])
    out, err = capsys.readouterr()
    return code, (orjson.loads(out) if code == 0 else {}), err


def _by_name(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in document["pods"]}


def _devices(entry: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (r["request"], r["pool"], r["device"])
        for c in entry["claims"]
        if c["allocation"]
        for r in c["allocation"]["devices"]["results"]
    ]


def test_simulate_output_shape_and_placements(capsys, state_dir):
    code, document, _ = _simulate(capsys, "--state", str(state_dir))
    assert code == 0
    assert list(document) == ["pods"]
    assert [(p["namespace"], p["name"]) for p in document["pods"]] == [
        (NS, "a-template"),
        (NS, "b-pair"),
        (NS, "c-late"),
        (NS, "d-free"),
        (NS, "e-broken"),
    ]
    for entry in document["pods"]:
        assert list(entry) == ["namespace", "name", "node", "claims", "reasons", "error"]
    pods = _by_name(document)

    # Fits n1 and n2: prioritize prefers the node it fills (n2's only GPU).
    a = pods["a-template"]
    assert (a["node"], a["error"]) == ("n2", None)
    assert len(a["claims"]) == 1 and a["claims"][0]["name"].startswith("a-template-gpu-")
    assert _devices(a) == [("gpu", "n2", "gpu-0")]
    assert a["claims"][0]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0][
        "values"
    ] == ["n2"]
    assert set(a["reasons"]) == {"n3"}

    b = pods["b-pair"]
    assert (b["node"], b["error"]) == ("n1", None)
    assert b["claims"][0]["name"] == "pair"
    assert _devices(b) == [("gpus", "n1", "gpu-0"), ("gpus", "n1", "gpu-1")]
    assert set(b["reasons"]) == {"n2", "n3"}

    # Every GPU is taken now: pending, with a reason per node, in candidate order.
    c = pods["c-late"]
    assert (c["node"], c["error"]) == (None, None)
    assert c["claims"] == [{"name": "late", "allocation": None}]
    assert list(c["reasons"]) == ["n1", "n2", "n3"] and all(c["reasons"].values())

    # No claims: every node passes with the same score; the first candidate wins the tie.
    d = pods["d-free"]
    assert (d["node"], d["claims"], d["reasons"], d["error"]) == ("n1", [], {}, None)

    e = pods["e-broken"]
    assert e["node"] is None
    assert "no-such-class" in e["error"]
    assert e["claims"] == [{"name": "broken", "allocation": None}]


def test_simulate_is_deterministic(capsys, state_dir):
    main(["simulate", "-o", "json", "--state", str(state_dir)])
    first = capsys.readouterr().out
    main(["simulate", "-o", "json", "--state", str(state_dir)])
    assert capsys.readouterr().out == first
    assert first.startswith('{\n  "pods": [\n')  # orjson, indent 2


def test_simulate_nodes_restricts_and_orders_candidates(capsys, state_dir):
    code, document, _ = _simulate(capsys, "--state", str(state_dir), "--nodes", "n3,n1")
    assert code == 0
    pods = _by_name(document)
    assert pods["a-template"]["node"] == "n1"
    assert _devices(pods["a-template"]) == [("gpu", "n1", "gpu-0")]
    assert list(pods["a-template"]["reasons"]) == ["n3"]
    assert pods["b-pair"]["node"] is None  # one GPU left on n1; n2 is not a candidate
    assert pods["d-free"]["node"] == "n3"  # tie → first candidate


def test_simulate_feature_gates_reach_the_allocator(capsys, tmp_path):
    directory = tmp_path / "state"
    directory.mkdir()
    first_available = claim(NS, "alt", [])
    first_available["spec"]["devices"]["requests"] = [
        {"name": "gpu", "firstAvailable": [{"name": "one", "deviceClassName": "gpu"}]}
    ]
    objects = [
        node("n1"),
        device_class("gpu", f'device.driver == "{DRIVER}"'),
        resource_slice("n1-gpus", DRIVER, "n1", [device("gpu-0")]),
        first_available,
        pod(NS, "p", ["alt"]),
    ]
    (directory / "cluster.yaml").write_text(yaml.safe_dump_all(objects))

    code, document, _ = _simulate(capsys, "--state", str(directory))
    assert code == 0 and document["pods"][0]["node"] == "n1"
    code, document, _ = _simulate(
        capsys, "--state", str(directory), "--feature-gates", "DRAPrioritizedList=false"
    )
    assert code == 0
    # kube-scheduler's PreFilter: unschedulable on every node, not an error.
    assert (document["pods"][0]["node"], document["pods"][0]["error"]) == (None, None)
    assert "the DRAPrioritizedList feature is disabled" in document["pods"][0]["reasons"]["n1"]


def test_missing_state_dir_exits_2(capsys, tmp_path):
    code, _, err = _simulate(capsys, "--state", str(tmp_path / "nope"))
    assert code == 2
    assert "nope" in err and "no such file or directory" in err


def test_invalid_manifest_exits_2(capsys, tmp_path):
    (tmp_path / "bad.yaml").write_text("apiVersion: v1\nmetadata: {name: x}\n")
    code, _, err = _simulate(capsys, "--state", str(tmp_path))
    assert code == 2
    assert "bad.yaml" in err and "kind" in err


def test_invalid_dra_object_exits_2_naming_object_and_field(capsys, tmp_path):
    broken = claim(NS, "x", [request("gpu", "gpu")])
    broken["status"] = {"allocation": {"devices": {"results": [{"request": "gpu", "driver": DRIVER}]}}}
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump(broken))
    code, _, err = _simulate(capsys, "--state", str(tmp_path))
    assert code == 2
    assert "claims.yaml: ResourceClaim ml/x" in err and "status.allocation.devices.results[0]" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["--feature-gates", "NoSuchGate=true"],
        ["--feature-gates", "DRAPrioritizedList=maybe"],
        ["--device-selection", "best-fit"],
        ["--nodes", ","],
    ],
)
def test_bad_flags_exit_2(capsys, state_dir, argv):
    code, _, err = _simulate(capsys, "--state", str(state_dir), *argv)
    assert code == 2
    assert err


def test_help_exits_0(capsys):
    assert main(["--help"]) == 0
    assert "simulate" in capsys.readouterr().out


def test_python_dash_m_app_runs_simulate(state_dir):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "app", "simulate", "-o", "json", "--state", str(state_dir)],
        capture_output=True,
        cwd=REPO,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert len(orjson.loads(done.stdout)["pods"]) == 5


@pytest.fixture
def free_port() -> int:
    return free_ports(1)[0]


@pytest.fixture
def served(monkeypatch) -> list[tuple[Any, socket.socket, dict[str, Any]]]:
    """What ``serve`` would run uvicorn with: (app, the bound socket, uvicorn options); nothing is served."""
    calls: list[tuple[Any, socket.socket, dict[str, Any]]] = []

    def record(app: Any, sock: socket.socket, **options: Any) -> None:
        calls.append((app, sock, options))
        sock.close()

    monkeypatch.setattr(httpserver, "serve", record)
    return calls


def test_serve_prints_a_banner_and_runs_one_uvicorn_worker(capsys, served, state_dir, free_port):
    from fastapi import FastAPI

    port = str(free_port)
    flags = ["--port", port, "--log-level", "warning", "--max-body-bytes", "1234"]
    code = main(["serve", "--state", str(state_dir), *flags])
    err = capsys.readouterr().err
    assert code == 0
    [(app, sock, kwargs)] = served
    assert isinstance(app, FastAPI)
    assert sock.family == socket.AF_INET
    assert kwargs == {
        "host": "127.0.0.1",
        "port": free_port,
        "log_level": "warning",
        "log_config": None,
        "workers": 1,
        "http": IdleClosingHttpToolsProtocol,
        "timeout_keep_alive": 5,
    }
    assert "3 nodes, 2 ResourceSlices (3 devices), 4 ResourceClaims, 5 pending pods" in err
    assert f"http://127.0.0.1:{port}/scheduler" in err
    assert f"curl -s http://127.0.0.1:{port}/healthz" in err
    # The bind example names the first pending pod and a node it fits on.
    assert '"PodName":"a-template"' in err and '"Node":"n1"' in err
    assert "device scoring in filter" not in err


def test_serve_says_when_it_ranks_in_filter(capsys, served, state_dir, free_port):
    flags = ["--port", str(free_port), "--device-scoring", "filter"]
    assert main(["serve", "--state", str(state_dir), *flags]) == 0
    assert "device scoring in filter: only the best-scored nodes are passed on" in capsys.readouterr().err


def tls_files(directory: Path) -> tuple[Path, Path, Path, Path]:
    """A server certificate, its key, the CA that issued it, and the key of another certificate."""
    import trustme

    authority = trustme.CA()
    issued, other = authority.issue_cert("127.0.0.1"), authority.issue_cert("127.0.0.1")
    paths = [directory / name for name in ("c.pem", "k.pem", "ca.pem", "other-k.pem")]
    issued.cert_chain_pems[0].write_to_path(str(paths[0]))
    issued.private_key_pem.write_to_path(str(paths[1]))
    authority.cert_pem.write_to_path(str(paths[2]))
    other.private_key_pem.write_to_path(str(paths[3]))
    return paths[0], paths[1], paths[2], paths[3]


def test_serve_passes_the_tls_flags_to_uvicorn(capsys, served, state_dir, tmp_path, free_port):
    import ssl

    cert, key, ca, _ = tls_files(tmp_path)
    argv = ["--ssl-certfile", str(cert), "--ssl-keyfile", str(key), "--ssl-ca-certs", str(ca)]
    assert main(["serve", "--state", str(state_dir), "--port", str(free_port), *argv]) == 0
    [(_, _, kwargs)] = served
    assert kwargs["ssl_certfile"] == str(cert) and kwargs["ssl_keyfile"] == str(key)
    assert kwargs["ssl_ca_certs"] == str(ca) and kwargs["ssl_cert_reqs"] == ssl.CERT_REQUIRED
    err = capsys.readouterr().err
    assert f"https://127.0.0.1:{free_port}/scheduler" in err
    assert main(["serve", "--state", str(state_dir), "--ssl-certfile", str(cert)]) == 2
    assert "both or neither" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "problem"),
    [
        ("--ssl-certfile", "missing"),
        ("--ssl-keyfile", "missing"),
        ("--ssl-ca-certs", "missing"),
        ("--ssl-keyfile", "mismatched"),
        ("--ssl-ca-certs", "not PEM"),
        ("--ssl-certfile", "not PEM"),
    ],
)
def test_serve_with_an_unusable_tls_file_exits_2_naming_the_flag_before_loading_the_state(
    capsys, monkeypatch, state_dir, tmp_path, flag, problem
):
    from app.cli import serve

    monkeypatch.setattr(httpserver, "serve", lambda *args, **kwargs: pytest.fail("must not serve"))
    monkeypatch.setattr(serve, "load_runtime", lambda settings: pytest.fail("must not load the state first"))
    cert, key, ca, other_key = tls_files(tmp_path)
    files = {"--ssl-certfile": cert, "--ssl-keyfile": key, "--ssl-ca-certs": ca}
    bad = {"missing": tmp_path / "absent.pem", "mismatched": other_key, "not PEM": state_dir / "cluster.yaml"}
    files[flag] = bad[problem]
    argv = [part for name, path in files.items() for part in (name, str(path))]
    assert main(["serve", "--state", str(state_dir), *argv]) == 2
    err = capsys.readouterr().err
    assert f"{flag} {files[flag]}" in err
    assert "Traceback" not in err


def _special_file(tmp_path: Path, kind: str) -> Path:
    if kind == "fifo":
        os.mkfifo(tmp_path / "fifo.pem")
        return tmp_path / "fifo.pem"
    if kind == "device":
        (tmp_path / "zero.pem").symlink_to("/dev/zero")
        return tmp_path / "zero.pem"
    sparse = tmp_path / "huge.pem"
    with sparse.open("wb") as handle:
        handle.truncate(5 << 30)
    return sparse


@pytest.mark.parametrize(
    ("kind", "problem"),
    [
        # A FIFO hung the command in open(); /dev/zero and a 5 GiB sparse file were read whole into memory.
        ("fifo", "not a regular file"),
        ("device", "not a regular file"),
        ("sparse", "larger than 4 MiB (5368709120 bytes): not a PEM file"),
    ],
)
@pytest.mark.parametrize("flag", ["--ssl-certfile", "--ssl-keyfile", "--ssl-ca-certs"])
def test_serve_with_a_tls_file_that_is_not_a_small_regular_file_exits_2_at_once(
    capsys, monkeypatch, state_dir, tmp_path, flag, kind, problem
):
    monkeypatch.setattr(httpserver, "serve", lambda *args, **kwargs: pytest.fail("must not serve"))
    cert, key, ca, _ = tls_files(tmp_path)
    files = {"--ssl-certfile": cert, "--ssl-keyfile": key, "--ssl-ca-certs": ca}
    files[flag] = _special_file(tmp_path, kind)
    argv = [part for name, path in files.items() for part in (name, str(path))]

    def hung(*_: object) -> None:
        raise TimeoutError(f"serve waited on {files[flag]}")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        code = main(["serve", "--state", str(state_dir), *argv])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert code == 2
    assert f"{flag} {files[flag]}: {problem}" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--port", "0"], ["--max-body-bytes", "0"], ["--log-level", "loud"]])
def test_serve_bad_flags_exit_2(capsys, monkeypatch, state_dir, argv):
    monkeypatch.setattr(httpserver, "serve", lambda *args, **kwargs: pytest.fail("must not serve"))
    assert main(["serve", "--state", str(state_dir), *argv]) == 2
    assert capsys.readouterr().err


def test_delegated_auth_needs_cluster_mode_and_makes_client_certificates_optional(
    capsys, monkeypatch, state_dir, tmp_path
):
    import ssl

    from app.cli.serve import _ssl_options
    from app.config.settings import ServerSettings

    monkeypatch.setattr(httpserver, "serve", lambda *args, **kwargs: pytest.fail("must not serve"))
    assert main(["serve", "--state", str(state_dir), "--delegated-auth"]) == 2
    assert "--delegated-auth needs cluster mode" in capsys.readouterr().err
    cert, key, ca, _ = tls_files(tmp_path)
    tls = {"ssl_certfile": cert, "ssl_keyfile": key, "ssl_ca_certs": ca}
    assert _ssl_options(ServerSettings(**tls))["ssl_cert_reqs"] == ssl.CERT_REQUIRED
    assert _ssl_options(ServerSettings(**tls, delegated_auth=True))["ssl_cert_reqs"] == ssl.CERT_OPTIONAL


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["simulate", "--stat", "x"], "--stat"),  # an abbreviation of --state is a typo, not --state
        (["explain", "--stat", "x", "ns/pod"], "--stat"),
        (["simulate", "--state", "x", "--bogus"], "--bogus"),
    ],
)
def test_an_unknown_or_abbreviated_flag_is_refused_with_the_command_s_usage(capsys, argv, named):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: dra-extender {argv[0]} ")  # the command's usage, not the top level's
    assert f"unrecognized arguments: {named}" in err
