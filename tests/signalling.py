"""Thread helpers for tests, so a test acts only once another thread is where it must be (no sleeps, no
timed assertions): a threading.Condition that says when someone starts waiting on it, and a lock held by
another thread for the length of a block."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class SignallingCondition(threading.Condition):
    def __init__(self, lock: Any) -> None:
        super().__init__(lock)
        self.waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting.set()
        return super().wait(timeout)


@contextmanager
def held_by_another_thread(lock: Any, timeout: float = 30.0) -> Iterator[None]:
    """``lock`` held by a thread of its own from before the block starts until it ends."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(timeout)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(timeout), "the other thread never took the lock"
    try:
        yield
    finally:
        release.set()
        holder.join(timeout)
