"""Selector evaluation with caches: compiled programs per expression, results per (expression, device).

Devices are immutable per slice revision, so a result keyed by the device object stays valid until the
slice is replaced; the weak keys drop results of replaced devices automatically. Errors are cached too,
so a broken selector fails every time in the same way (upstream: fatal for the pod).

Error texts follow upstream (allocator-semantics §7):
``class <name>: selector #<i>: CEL compile error: <msg>`` and
``claim <ns/name>: selector #<i> on device <driver>/<pool>/<device>: CEL runtime error: <msg>``.
"""

from __future__ import annotations

import threading
from weakref import WeakKeyDictionary

from allocator.cel import CELEngine, SelectorProgram
from allocator.errors import CELCompileError, CELEvalError
from allocator.model import Device

__all__ = ["SelectorCache"]


class _Entry:
    __slots__ = ("error", "program", "results")

    def __init__(self, program: SelectorProgram | None, error: CELCompileError | None) -> None:
        self.program = program
        self.error = error
        self.results: WeakKeyDictionary[Device, bool | CELEvalError] = WeakKeyDictionary()


class SelectorCache:
    """Compiles each expression once and remembers each (expression, device) outcome.

    ``stats`` counts compiles, evaluations and hits (reported by benchmarks and explanations).
    """

    def __init__(self, engine: CELEngine, max_expressions: int = 10_000) -> None:
        self.engine = engine
        self._entries: dict[str, _Entry] = {}
        self._max = max_expressions
        self._lock = threading.Lock()
        self.stats = {"compiles": 0, "evaluations": 0, "hits": 0}

    def _entry(self, expression: str) -> _Entry:
        entry = self._entries.get(expression)
        if entry is not None:
            return entry
        with self._lock:
            entry = self._entries.get(expression)
            if entry is None:
                try:
                    entry = _Entry(self.engine.compile(expression), None)
                except CELCompileError as e:
                    entry = _Entry(None, e)
                self.stats["compiles"] += 1
                if len(self._entries) >= self._max:
                    # Bound memory: drop the oldest expression (dicts keep insertion order).
                    del self._entries[next(iter(self._entries))]
                self._entries[expression] = entry
        return entry

    def matches(self, expression: str, device: Device, owner: str, index: int) -> bool:
        """Evaluate one selector on one device.

        ``owner`` is ``class <name>`` or ``claim <ns/name>`` and ``index`` the selector's position, both
        for the error message. Raises CELCompileError or CELEvalError (fatal for the pod).
        """
        entry = self._entry(expression)
        if entry.error is not None:
            raise CELCompileError(f"{owner}: selector #{index}: CEL compile error: {entry.error}")
        cached = entry.results.get(device)
        if cached is None:
            self.stats["evaluations"] += 1
            try:
                cached = entry.program.evaluate(device.cel)  # type: ignore[union-attr]
            except CELEvalError as e:
                cached = e
            entry.results[device] = cached
        else:
            self.stats["hits"] += 1
        if isinstance(cached, CELEvalError):
            driver, pool, name = device.id
            raise CELEvalError(
                f"{owner}: selector #{index} on device {driver}/{pool}/{name}: CEL runtime error: {cached}"
            )
        return cached
