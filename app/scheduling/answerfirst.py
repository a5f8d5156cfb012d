"""Filter and prioritize answers before the extender's background work.

kube-scheduler's scheduling cycle is serial: while it waits on the extender's filter or prioritize answer,
no other pod is scheduled, so the time of those answers bounds the pods placed per second. The rest of the
extender's work can wait a few milliseconds without slowing anything: the informers' watch events, the
binder's API writes (kube-scheduler binds in the background) and the bind verb's planning on worker
threads. One interpreter runs all of them, and its GIL hands the CPU round-robin among the threads that
want it (every ``sys.getswitchinterval()``), so on a busy node an answer that needs 1 ms of CPU took
3 ms while the watch thread and a bind worker took their turns.

``AnswerFirst`` lets that background work step aside: the HTTP layer marks the time it spends on
filter and prioritize requests, from reading them to writing the answer (``answering``), but not the
time such an answer waits for a worker thread (``waiting_on_background``; the thread marks its own
deciding), and the background work calls ``step_aside`` at its step
boundaries (before each watch event, each API request, each bind), which waits while an answer is being
decided, but only during the first ``longest_wait`` of it: a warm answer takes a few milliseconds and is
waited out, a cold one (a new claims shape over thousands of nodes, up to seconds) only delays the
background work by that much, so the index does not fall behind while it runs. A step boundary is never
inside the service lock, so an answer waiting for that lock never waits on a thread that waits on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["LONGEST_WAIT_SECONDS", "AnswerFirst"]

LONGEST_WAIT_SECONDS = 0.02
"""How long into an answer background work waits for it: a warm answer takes 1 to 3 ms at 500 nodes and up
to about 10 ms at 5000 on a busy 2-core node."""


class AnswerFirst:
    """Whether a filter or prioritize answer is being given, and a wait for background work."""

    def __init__(
        self, longest_wait: float = LONGEST_WAIT_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.longest_wait = longest_wait
        self._clock = clock
        self._answers = 0
        self._since = 0.0
        """When the answers in flight began (the first of them, if they overlap)."""
        self._count_lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()

    @property
    def answering_now(self) -> bool:
        return not self._idle.is_set()

    @contextmanager
    def answering(self) -> Iterator[None]:
        """Around one answer (any thread; answers may overlap)."""
        self._begin()
        try:
            yield
        finally:
            self._end()

    @contextmanager
    def waiting_on_background(self) -> Iterator[None]:
        """Inside ``answering``, around work the answer waits on that is itself background work (its own
        API request: PostFilter's delete or release of a claim), or that takes a turn of its own (the
        answer handed to a worker thread, which marks its deciding): the answer has no priority
        meanwhile, else that work would step aside for the answer that waits on it."""
        self._end()
        try:
            yield
        finally:
            self._begin()

    def _begin(self) -> None:
        with self._count_lock:
            if not self._answers:
                self._since = self._clock()
            self._answers += 1
            self._idle.clear()

    def _end(self) -> None:
        with self._count_lock:
            self._answers -= 1
            if not self._answers:
                self._idle.set()

    def step_aside(self) -> None:
        """Background work, between two steps: wait until no answer is being decided, or until the
        answers in flight began ``longest_wait`` ago. Never call it holding the service lock."""
        if self._idle.is_set():
            return
        left = self._since + self.longest_wait - self._clock()
        if left > 0:
            self._idle.wait(left)
