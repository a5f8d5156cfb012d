"""A threading.Condition that says when someone starts waiting on it, so a test can act only then (no
sleeps, no timed assertions)."""

from __future__ import annotations

import threading
from typing import Any


class SignallingCondition(threading.Condition):
    def __init__(self, lock: Any) -> None:
        super().__init__(lock)
        self.waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting.set()
        return super().wait(timeout)
