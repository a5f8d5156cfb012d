"""The ``dra-extender`` command line: ``serve``, ``simulate``, ``explain``, ``validate``, ``completion``.

``main`` parses the flags and runs a command; the offline runtime (``runtime``) builds the scheduling
service from a state directory, cluster mode (``app.kube``) from a live API server. ``run`` is the entry
point: ``main``, with Ctrl-C at any moment, or a reader of stdout that left (``| head``), an exit without a
traceback.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence

__all__ = ["EXIT_BROKEN_PIPE", "EXIT_INTERRUPTED", "run"]

EXIT_INTERRUPTED = 128 + signal.SIGINT
"""130, as a shell reports a command Ctrl-C ended."""

EXIT_BROKEN_PIPE = 1
"""stdout's reader has gone (``| head``): 1, as rich's console exits when a table's write fails so."""


def run(argv: Sequence[str] | None = None) -> int:
    """Run the command line (``app.cli.main.main``); returns the exit code, 130 when interrupted, 1 when
    stdout's reader has gone."""
    interrupted: list[int] = []
    deferring = signal.getsignal(signal.SIGINT) is signal.default_int_handler  # not when ignored
    if deferring:
        # Interrupted while they initialise, extension modules crash (orjson) or turn the interrupt into
        # errors of their own (pydantic-core): a Ctrl-C waits for the imports, about a second.
        signal.signal(signal.SIGINT, lambda number, frame: interrupted.append(number))
    try:
        from app.cli.main import main
    finally:
        if deferring:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if interrupted:
        return EXIT_INTERRUPTED
    try:
        return main(argv)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # What is still buffered would fail again when the interpreter flushes stdout at exit, with a
        # message on stderr: it goes nowhere instead.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
