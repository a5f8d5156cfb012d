"""Health probes on their own listener (``app.http.probes``, ``serve --health-probe-bind-address``)."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from app.cli.main import main
from app.http import server as httpserver
from app.http.probes import STALL_SECONDS, LoopHeartbeat, probe_answer, start_probe_server

ROOT = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_answers_follow_the_heartbeat_and_readiness():
    clock = Clock()
    heartbeat = LoopHeartbeat(clock)
    ready = [False]
    assert probe_answer("/livez", heartbeat, lambda: ready[0]) == (200, b'{"status":"ok"}')
    assert probe_answer("/healthz", heartbeat, lambda: ready[0])[0] == 200
    assert probe_answer("/readyz", heartbeat, lambda: ready[0]) == (503, b'{"status":"syncing"}')
    ready[0] = True
    assert probe_answer("/readyz", heartbeat, lambda: ready[0])[0] == 200
    assert probe_answer("/scheduler/filter", heartbeat, lambda: True)[0] == 404
    # The event loop has not ticked for longer than the limit: liveness and readiness fail, naming why.
    clock.now += STALL_SECONDS + 1
    stalled = (500, b'{"status":"event loop stalled for 31 s"}')
    assert probe_answer("/livez", heartbeat, lambda: True) == stalled
    assert probe_answer("/readyz", heartbeat, lambda: True)[0] == 500


def test_the_loop_ticks_the_heartbeat():
    clock = Clock()
    heartbeat = LoopHeartbeat(clock)

    async def run() -> None:
        clock.now += 100  # before the loop ticks, it looks stalled
        assert heartbeat.stalled_for() == 100
        heartbeat.start()
        assert heartbeat.stalled_for() == 0

    asyncio.run(run())


def test_the_listener_answers_from_its_own_thread_while_the_loop_is_blocked():
    clock = Clock()
    heartbeat = LoopHeartbeat(clock)
    server = start_probe_server("127.0.0.1", 0, heartbeat, lambda: True)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        # No event loop runs here at all (as if it were blocked): the probe still answers at once...
        assert get(f"{url}/livez") == (200, {"status": "ok"})
        # ... and says so once the loop has been silent too long.
        clock.now += STALL_SECONDS + 5
        assert get(f"{url}/livez") == (500, {"status": "event loop stalled for 35 s"})
    finally:
        server.shutdown()
        server.server_close()


def test_a_silent_connection_is_closed_and_probes_still_answer(monkeypatch):
    monkeypatch.setattr("app.http.probes.IDLE_SECONDS", 0.2)
    server = start_probe_server("127.0.0.1", 0, LoopHeartbeat(), lambda: True)
    address = ("127.0.0.1", server.server_address[1])
    try:
        with socket.create_connection(address) as silent:
            silent.settimeout(5)
            assert silent.recv(1) == b""  # closed by the server, not by the client
        assert get(f"http://127.0.0.1:{address[1]}/livez")[0] == 200
    finally:
        server.shutdown()
        server.server_close()


def test_a_probe_address_in_use_exits_2_naming_the_flag(capsys, monkeypatch):
    monkeypatch.setattr(httpserver, "serve", lambda *args, **kwargs: pytest.fail("served despite the error"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        argv = ["serve", "--state", str(ROOT / "examples/cluster"), "--health-probe-bind-address", address]
        assert main(argv) == 2
    assert f"--health-probe-bind-address {address}: Address already in use" in capsys.readouterr().err


def test_serve_starts_the_probe_listener_and_hands_the_heartbeat_to_the_app(monkeypatch):
    served = []

    def record(app, sock, **options):
        served.append(app)
        sock.close()

    monkeypatch.setattr(httpserver, "serve", record)
    with socket.socket() as free, socket.socket() as other:
        free.bind(("127.0.0.1", 0))
        other.bind(("127.0.0.1", 0))
        port, serve_port = free.getsockname()[1], other.getsockname()[1]
    argv = ["serve", "--state", str(ROOT / "examples/cluster"), "--port", str(serve_port)]
    assert main([*argv, "--health-probe-bind-address", f"127.0.0.1:{port}"]) == 0
    assert get(f"http://127.0.0.1:{port}/readyz") == (200, {"status": "ok"})
    assert len(served) == 1
