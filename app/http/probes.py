"""Health probes on a listener of their own (``serve --health-probe-bind-address``, as controller-runtime
components such as Kueue and cert-manager offer): ``/livez``, ``/healthz`` and ``/readyz`` answered by a
small child process (``app.http.probechild``), so a busy extender (a flood of connections, large bodies
being read, explanations being rendered) does not make the kubelet wait on a probe and restart it.

Why a process and not a thread: a thread of the extender needs its GIL to answer, and under load the
request work holds it; probes answered by a thread took 240-390 ms there, against a 100 ms target. The
child has an interpreter of its own (stdlib only, ``python -I -S``: a few MiB) and answers in about a
millisecond however busy the extender is.

Answering from elsewhere must not hide a wedged extender: its event loop writes a tick into a pipe every
``TICK_SECONDS`` (with whether the extender is ready), and the child fails liveness once no tick came for
``STALL_SECONDS``. The extender binds the port (a port in use is its startup error) and keeps the socket:
a child that died is started again on the next tick, on the same socket. The child exits when the pipe
reaches end of file, which happens however the extender ends, killed included.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

__all__ = ["IDLE_SECONDS", "STALL_SECONDS", "TICK_SECONDS", "ProbeListener"]

log = logging.getLogger(__name__)

STALL_SECONDS = 30.0
"""Event-loop silence after which liveness fails (the longest a healthy loop is busy is far below it)."""

TICK_SECONDS = 1.0

IDLE_SECONDS = 5.0
"""How long a probe connection may stay silent (the kubelet sends its request at once)."""

_CHILD = Path(__file__).with_name("probechild.py")


class ProbeListener:
    """The probe port's child process, answering on ``sock`` (bound and listening), and the pipe the
    event loop ticks into. ``ready``: whether the extender is ready, read at each tick. Close it (or use
    it as a context manager) to stop the child; it also stops when this process ends."""

    def __init__(
        self,
        sock: socket.socket,
        ready: Callable[[], bool],
        *,
        stall_seconds: float = STALL_SECONDS,
        idle_seconds: float = IDLE_SECONDS,
    ) -> None:
        self.sock = sock
        self._ready = ready
        self._limits = (str(stall_seconds), str(idle_seconds))
        self._spawn()

    def _spawn(self) -> None:
        read, self._ticks = os.pipe()
        listen = self.sock.fileno()
        # The readiness of now: a child started again must not answer "syncing" until the next tick.
        ready = "1" if self._ready() else "0"
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(_CHILD), str(listen), str(read), *self._limits, ready],
                pass_fds=(listen, read),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
        finally:
            os.close(read)  # the child's copy is the only reader: its death breaks the pipe
        os.set_blocking(self._ticks, False)  # the event loop must never wait on the child

    def start(self) -> None:
        """Tick now and every ``TICK_SECONDS`` on the running loop."""
        loop = asyncio.get_running_loop()

        def tick() -> None:
            self.tick()
            loop.call_later(TICK_SECONDS, tick)

        tick()

    def tick(self) -> None:
        """Tell the child the loop runs, and whether the extender is ready; start it again if it died."""
        try:
            os.write(self._ticks, b"1" if self._ready() else b"0")
        except BlockingIOError:
            pass  # a child that has not read for hours of ticks: the ones in the pipe tell it the loop runs
        except BrokenPipeError:
            os.close(self._ticks)
            log.error("probe listener exited with status %s; starting it again", self.process.wait())
            self._spawn()

    def close(self) -> None:
        """End the child (end of file on its pipe) and wait for it; close the socket."""
        os.close(self._ticks)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.sock.close()

    def __enter__(self) -> ProbeListener:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
