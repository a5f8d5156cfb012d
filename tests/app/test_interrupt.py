"""Ctrl-C (SIGINT) at any point of ``serve`` or ``simulate``: exit status 130, no traceback."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from app import cli
from app.http import server as httpserver

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "examples/cluster")
INTERRUPTED = 128 + signal.SIGINT


def interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_while_simulating_exits_130_quietly(monkeypatch, capsys):
    monkeypatch.setattr("app.cli.main.run_simulate", interrupt)
    assert cli.run(["simulate", "--state", DEMO]) == INTERRUPTED
    assert capsys.readouterr().err == ""


def test_ctrl_c_while_serving_exits_130_quietly(monkeypatch, capsys):
    monkeypatch.setattr(httpserver, "serve", interrupt)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    assert cli.run(["serve", "--state", DEMO, "--port", str(port)]) == INTERRUPTED
    assert "Traceback" not in capsys.readouterr().err


def _importing_the_app(pid: int) -> bool:
    """Whether the process runs the app's imports (orjson's extension is mapped), past Python's own start
    (an interrupt during which is a fatal error of the interpreter's)."""
    return "orjson" in Path(f"/proc/{pid}/maps").read_text()


def _start(argv: list[str]) -> subprocess.Popen[str]:
    # SIGINT as a terminal delivers it, whatever this test process inherited (a background job ignores it).
    return subprocess.Popen(
        [sys.executable, "-m", "app", *argv],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _port() -> str:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return str(free.getsockname()[1])


def test_ctrl_c_while_the_command_starts_exits_130_quietly():
    """Interrupted while importing or loading: whichever it is doing when the signal comes."""
    with _start(["serve", "--state", DEMO, "--port", _port()]) as process:
        deadline = time.monotonic() + 60
        while not _importing_the_app(process.pid):
            assert time.monotonic() < deadline
            time.sleep(0.001)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    assert process.returncode == INTERRUPTED, err
    assert "Traceback" not in err


def test_ctrl_c_of_a_serving_extender_exits_130_quietly():
    argv = [
        "serve",
        "--state",
        DEMO,
        "--port",
        _port(),
        "--health-probe-bind-address",
        f"127.0.0.1:{_port()}",
    ]
    lines: list[str] = []
    started = threading.Event()
    with _start(argv) as process:

        def read() -> None:
            assert process.stderr is not None
            for line in process.stderr:
                lines.append(line)
                if "Application startup complete" in line:
                    started.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            assert started.wait(60), "".join(lines)
        finally:
            process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == INTERRUPTED
        reader.join(10)
    assert "Traceback" not in "".join(lines), "".join(lines)


@pytest.mark.parametrize("argv", [["--version"], ["completion", "bash"]])
def test_run_is_main_otherwise(argv, capsys):
    assert cli.run(argv) == 0
    assert capsys.readouterr().out
