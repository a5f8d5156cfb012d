"""The ``dra-extender`` command line: ``serve``, ``simulate``, ``explain``, ``validate``, ``completion``.

``main`` parses the flags and runs a command; the offline runtime (``runtime``) builds the scheduling
service from a state directory, cluster mode (``app.kube``) from a live API server. ``run`` is the entry
point: ``main``, with Ctrl-C at any moment an exit without a traceback.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence

__all__ = ["EXIT_INTERRUPTED", "run"]

EXIT_INTERRUPTED = 128 + signal.SIGINT
"""130, as a shell reports a command Ctrl-C ended."""


def run(argv: Sequence[str] | None = None) -> int:
    """Run the command line (``app.cli.main.main``); returns the exit code, 130 when interrupted."""
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
