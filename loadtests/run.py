"""``make loadtest``: the synthetic-cluster extender (``bench.server``) on a free loopback port, then the
documented locust command against it, headless; the server is stopped afterwards, whatever happens.

    python -m loadtests.run --locust .cache/loadtest-venv/bin/locust [--seconds 30] [--users 1]
        [--nodes 500] [--gpus 10] [--csv .cache/loadtest/load]

Exit status: locust's (1 when a request failed), 2 when the server did not come up. locust prints its
summary (requests, failures, latency percentiles per route) to stdout and writes the CSV files.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

__all__ = ["locust_command", "main"]

ROOT = Path(__file__).resolve().parents[1]
READY_SECONDS = 120
"""Building a large synthetic cluster takes a while on a busy 2-core machine."""


def locust_command(locust: str, host: str, seconds: int, users: int, csv: Path) -> list[str]:
    """The command docs/performance.md documents, with this run's values."""
    return [
        locust,
        "-f",
        "loadtests/locustfile.py",
        "--headless",
        "-u",
        str(users),
        "-r",
        str(users),
        "-t",
        f"{seconds}s",
        "--host",
        host,
        "--csv",
        str(csv),
        "--only-summary",
    ]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(url: str, server: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--locust", required=True, help="the locust executable (its own environment)")
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--users", type=int, default=1, help="1: one scheduling cycle at a time")
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--gpus", type=int, default=10)
    parser.add_argument("--csv", type=Path, default=ROOT / ".cache/loadtest/load")
    args = parser.parse_args(argv)
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server_argv = [sys.executable, "-m", "bench.server", "extender", "--port", str(port)]
    server_argv += ["--nodes", str(args.nodes), "--gpus", str(args.gpus)]
    server = subprocess.Popen(server_argv, cwd=ROOT)
    try:
        if not _wait_ready(url, server):
            print(f"loadtest: the extender on {url} did not become ready", file=sys.stderr)
            return 2
        command = locust_command(args.locust, url, args.seconds, args.users, args.csv)
        print("loadtest:", " ".join(command), file=sys.stderr, flush=True)
        env = {**os.environ, "DRA_LOAD_NODES": str(args.nodes)}
        return subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


if __name__ == "__main__":
    sys.exit(main())
