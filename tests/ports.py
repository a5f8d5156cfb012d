"""Free loopback ports for tests that start the extender's listeners, and its arguments for them."""

from __future__ import annotations

import socket
from pathlib import Path

EXAMPLE_CLUSTER = Path(__file__).resolve().parents[1] / "examples" / "cluster"


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports nothing listens on now (each held until all are found)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def serve_example_argv(*flags: str) -> list[str]:
    """``dra-extender serve`` arguments for the example cluster on a free port, plus ``flags``."""
    return ["serve", "--state", str(EXAMPLE_CLUSTER), "--port", str(free_ports(1)[0]), *flags]
