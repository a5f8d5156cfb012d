"""The upstream oracle as a long-lived child process: one JSON state in, one JSON answer out.

``tests/oracle`` (Go) is built by ``make`` into ``.cache/oracle/oracle``; ``DRA_ORACLE`` names another
binary. Without one the differential tests skip with ``MISSING`` as the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["MISSING", "Oracle", "oracle_path"]

_DEFAULT = Path(__file__).resolve().parents[2] / ".cache" / "oracle" / "oracle"

MISSING = (
    "upstream oracle not built: install Go and run `make test` (builds .cache/oracle/oracle from "
    "tests/oracle), or set DRA_ORACLE to the binary"
)


def oracle_path() -> Path | None:
    """The oracle binary, or None when it is not built."""
    path = Path(os.environ.get("DRA_ORACLE") or _DEFAULT)
    return path if path.is_file() and os.access(path, os.X_OK) else None


class Oracle:
    """One oracle process; ``ask`` is synchronous (the program answers lines in order)."""

    def __init__(self, path: Path) -> None:
        # stdin closing ends the program, so a test run that dies takes the oracle with it.
        self._process = subprocess.Popen(
            [str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )

    def ask(self, state: dict[str, Any]) -> dict[str, Any]:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps(state) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"oracle exited with {self._process.wait()}")
        return json.loads(line)

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=10)
        if self._process.stdout is not None:
            self._process.stdout.close()

    def __enter__(self) -> Oracle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
