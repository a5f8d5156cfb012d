"""Health probes on their own listener (``app.http.probes``, ``serve --health-probe-bind-address``): a child
process answers them from the ticks of the extender's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.cli.main import main
from app.http import server as httpserver
from app.http.probechild import answer
from app.http.probes import ProbeListener
from tests.ports import free_ports, serve_example_argv

ROOT = Path(__file__).resolve().parents[2]


def get(url: str, timeout: float = 5) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def eventually(check: Callable[[], bool], seconds: float = 10) -> None:
    """``check`` holds within ``seconds`` (the child reads ticks on its own time)."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.05)


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.fixture
def listen() -> Iterator[Callable[..., ProbeListener]]:
    def start(ready: Callable[[], bool] = lambda: True, **limits: float) -> ProbeListener:
        probes = ProbeListener(httpserver.listen("127.0.0.1", 0), ready, **limits)
        started.append(probes)
        return probes

    started: list[ProbeListener] = []
    yield start
    for probes in started:
        if probes.sock.fileno() != -1:
            probes.close()


def url(probes: ProbeListener, path: str = "/livez") -> str:
    return f"http://127.0.0.1:{probes.sock.getsockname()[1]}{path}"


def test_answers_by_path_time_since_the_last_tick_and_readiness():
    assert answer("/livez", 0.5, False, 30) == (200, b'{"status":"ok"}')
    assert answer("/healthz", 29.9, False, 30)[0] == 200
    assert answer("/readyz", 0.5, False, 30) == (503, b'{"status":"syncing"}')
    assert answer("/readyz", 0.5, True, 30)[0] == 200
    assert answer("/scheduler/filter", 0.5, True, 30) == (404, b'{"status":"not found"}')
    assert answer("/livez", 31.2, True, 30) == (500, b'{"status":"event loop stalled for 31 s"}')
    assert answer("/readyz", 31.2, True, 30)[0] == 500


def test_liveness_fails_once_the_ticks_stop_and_recovers_with_the_next(listen):
    probes = listen(stall_seconds=1.0)
    probes.tick()
    assert get(url(probes)) == (200, {"status": "ok"})
    eventually(lambda: get(url(probes))[0] == 500)
    assert get(url(probes))[1]["status"].startswith("event loop stalled for ")
    probes.tick()
    eventually(lambda: get(url(probes)) == (200, {"status": "ok"}))


def test_readiness_follows_what_the_last_tick_said(listen):
    ready = [False]
    probes = listen(lambda: ready[0])
    probes.tick()
    eventually(lambda: get(url(probes, "/readyz")) == (503, {"status": "syncing"}))
    assert get(url(probes, "/livez")) == (200, {"status": "ok"})
    ready[0] = True
    probes.tick()
    eventually(lambda: get(url(probes, "/readyz")) == (200, {"status": "ok"}))


def test_the_loop_ticks_at_once_when_started(listen):
    probes = listen()

    async def run() -> None:
        probes.start()

    asyncio.run(run())
    eventually(lambda: get(url(probes, "/readyz"))[0] == 200)


def test_a_child_that_died_is_started_again_on_the_next_tick(listen):
    probes = listen()
    first = probes.process
    first.kill()
    first.wait()
    probes.tick()
    assert probes.process.pid != first.pid
    eventually(lambda: get(url(probes, "/readyz"))[0] == 200)


CLIENT = textwrap.dedent(
    """
    import sys, urllib.request
    with urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])) as response:
        print(response.status)
    """
)


def test_probes_answer_while_the_extenders_main_thread_holds_the_gil(listen):
    probes = listen()
    probes.tick()
    eventually(lambda: get(url(probes))[0] == 200)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(60)  # no other thread of this process gets the GIL while the loop below runs
    try:
        client = subprocess.Popen(
            [sys.executable, "-c", CLIENT, url(probes), "4"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        busy_until = time.monotonic() + 6
        while time.monotonic() < busy_until:
            pass
    finally:
        sys.setswitchinterval(switch)
    out, err = client.communicate(timeout=30)
    assert (client.returncode, out.strip()) == (0, b"200"), err.decode()[-500:]


PARENT = textwrap.dedent(
    """
    import sys, time
    from app.http.probes import ProbeListener
    from app.http.server import listen
    probes = ProbeListener(listen("127.0.0.1", 0), lambda: True)
    probes.tick()
    print(probes.sock.getsockname()[1], flush=True)
    time.sleep(60)
    """
)


def test_the_child_exits_when_the_extender_is_killed():
    with subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, cwd=ROOT) as parent:
        try:
            port = int(parent.stdout.readline())
            eventually(lambda: get(f"http://127.0.0.1:{port}/livez")[0] == 200)
        finally:
            parent.send_signal(signal.SIGKILL)  # nothing of the extender runs: only the pipe's end tells
    # The port closes once the child, its last holder, has exited.
    eventually(lambda: refused(port))


def test_a_silent_connection_is_closed_and_probes_still_answer(listen):
    probes = listen(idle_seconds=0.2)
    with socket.create_connection(probes.sock.getsockname()) as silent:
        silent.settimeout(5)
        assert silent.recv(1) == b""  # closed by the server, not by the client
    assert get(url(probes))[0] == 200


GARBAGE = (
    b"GET /livez\r\n",  # HTTP/0.9
    b"PUT /livez\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)) + b"\r\n\r\n",  # a TLS hello
    b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n",
    b"GET /livez HTTP/9.9\r\n\r\n",
    b"\r\n\r\n",
)


def test_garbage_gets_an_answer_or_a_close_and_nothing_is_logged(listen, capfd):
    probes = listen()
    for payload in GARBAGE:
        with socket.create_connection(probes.sock.getsockname()) as conn:
            conn.settimeout(5)
            conn.sendall(payload)
            conn.shutdown(socket.SHUT_WR)
            with contextlib.suppress(ConnectionResetError):  # closed with the rest of a long line unread
                while conn.recv(65536):
                    pass
    assert get(url(probes))[0] == 200
    probes.close()  # the child has written all it ever will
    assert capfd.readouterr().err == ""


def test_a_probe_address_in_use_exits_2_naming_the_flag(capsys, monkeypatch):
    monkeypatch.setattr(httpserver, "serve", lambda *args, **kwargs: pytest.fail("served despite the error"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        assert main(serve_example_argv("--health-probe-bind-address", address)) == 2
    assert f"--health-probe-bind-address {address}: Address already in use" in capsys.readouterr().err


def test_serve_answers_probes_until_it_stops(monkeypatch):
    port, serve_port = free_ports(2)
    answers = []

    def record(app, sock, **options):
        sock.close()

        async def run() -> None:
            async with app.router.lifespan_context(app):  # the app's loop starts ticking
                answers.append(get(f"http://127.0.0.1:{port}/readyz"))

        asyncio.run(run())

    monkeypatch.setattr(httpserver, "serve", record)
    argv = ["serve", "--state", str(ROOT / "examples/cluster"), "--port", str(serve_port)]
    assert main([*argv, "--health-probe-bind-address", f"127.0.0.1:{port}"]) == 0
    assert answers == [(200, {"status": "ok"})]
    assert refused(port)  # serve returned: the listener is gone with it
