"""CEL evaluation with caches: compiled programs per expression, results per (expression, values read).

Two kinds of programs share the cache: selectors (``matches``, bool) and derived attribute expressions
(``value``, an ``AttributeValue``, KEP-6080). An expression whose reads are known (``allocator.cel.reads``:
constant attribute and capacity keys) keeps its results by the values it reads, so it is evaluated once per
distinct value tuple across the cluster (every H100 shares one ``productName == "H100"`` result), also for
the class-match index (``evaluate``) and cluster-wide derived attributes (``evaluate_value``), which keep
their own per-device results on top. Other expressions keep results per device object: devices are
immutable per slice revision, so such a result stays valid until the slice is replaced; the weak keys drop
results of replaced devices automatically. Results are per expression text, so a changed DeviceClass or
claim selector is a new entry. Errors are cached too, so a broken expression fails every time in the same
way (upstream: fatal for the pod).

Memory bounds (``SelectorCache.__init__``): at most ``max_expressions`` compiled programs and about
``max_program_bytes`` of them (the oldest compiled is dropped first; a program's size is estimated from
its text, ``CELEngine.program_bytes_per_char``: a 10 Ki expression compiles to about 1.2 MiB on cel-expr,
6 MiB on cel-python) and about ``max_results`` cached results in total; past that, the results of
the oldest expressions are dropped until three quarters of the bound are left (they are recomputed on
demand). One cached result costs about 150-200 bytes (weak reference plus dict slot), so the default bound
of 1,000,000 results is roughly 200 MB in the worst case; a cluster of 40,000 devices holds 25 request
expressions evaluated on every device before the bound is reached.

Error texts follow upstream (allocator-semantics §7):
``class <name>: selector #<i>: CEL compile error: <msg>`` and
``claim <ns/name>: selector #<i> on device <driver>/<pool>/<device>: CEL runtime error: <msg>``.
"""

from __future__ import annotations

import threading
from typing import Any
from weakref import WeakKeyDictionary

from allocator.cel import AttributeValue, CELDevice, CELEngine, SelectorProgram, ValueProgram
from allocator.cel.reads import Reads, value_key
from allocator.errors import CELCompileError, CELError, CELEvalError, detached
from allocator.model import Device

__all__ = [
    "DEFAULT_MAX_EXPRESSIONS",
    "DEFAULT_MAX_PROGRAM_BYTES",
    "DEFAULT_MAX_RESULTS",
    "PROGRAM_BASE_BYTES",
    "SelectorCache",
    "selector_error",
]

DEFAULT_MAX_EXPRESSIONS = 10_000
"""Compiled programs kept (selectors and derived attribute expressions counted separately)."""

DEFAULT_MAX_PROGRAM_BYTES = 128 << 20
"""Estimated bytes of compiled programs kept: 128 MiB, about 100 of the longest expressions on cel-expr,
within the 2 GiB memory limit of the manifests beside the result cache (200 MB) and the index."""

PROGRAM_BASE_BYTES = 4096
"""Estimated bytes of a compiled program beyond those proportional to its text."""

DEFAULT_MAX_RESULTS = 1_000_000
"""Cached (expression, device) results kept, about 200 MB at most (module docstring)."""


def selector_error(owner: str, index: int, device: Device, cause: CELError) -> CELError:
    """The pod-fatal error for selector #``index`` of ``owner`` (``class <name>`` / ``claim <ns/name>``),
    worded as upstream (module doc); a compile error names no device."""
    if isinstance(cause, CELCompileError):
        return CELCompileError(f"{owner}: selector #{index}: CEL compile error: {cause}")
    driver, pool, name = device.id
    return CELEvalError(
        f"{owner}: selector #{index} on device {driver}/{pool}/{name}: CEL runtime error: {cause}"
    )


class _Entry:
    __slots__ = ("by_value", "cost", "error", "program", "reads", "results")

    def __init__(self, program: Any, error: CELCompileError | None, cost: int) -> None:
        self.program = program
        self.error = error
        self.cost = cost
        self.reads: Reads | None = program.reads if program is not None else None
        self.results: WeakKeyDictionary[Device, Any] = WeakKeyDictionary()
        """Per device, for expressions whose reads are not known."""
        self.by_value: dict[tuple[object, ...], Any] = {}
        """Per value tuple read (``value_key``), for expressions whose reads are known."""

    def size(self) -> int:
        return len(self.results) + len(self.by_value)


class SelectorCache:
    """Compiles each expression once and remembers each (expression, device) outcome.

    ``stats`` counts compiles, ``evaluations`` (cache misses), ``hits``, ``uncached`` evaluations (for the
    class-match index and cluster-wide derived attributes, which keep their own results) and ``evictions``
    (expressions whose results were dropped to stay within ``max_results``); ``report()`` adds entry
    counts and the hit rate (benchmarks and explanations print them).
    """

    def __init__(
        self,
        engine: CELEngine,
        max_expressions: int = DEFAULT_MAX_EXPRESSIONS,
        max_results: int = DEFAULT_MAX_RESULTS,
        max_program_bytes: int = DEFAULT_MAX_PROGRAM_BYTES,
    ) -> None:
        self.engine = engine
        self._entries: dict[str, _Entry] = {}
        self._values: dict[str, _Entry] = {}
        self._max = max_expressions
        self._max_results = max_results
        self._max_program_bytes = max_program_bytes
        self._program_bytes = 0
        self._stored = 0
        self._lock = threading.Lock()
        self.stats = {"compiles": 0, "evaluations": 0, "hits": 0, "uncached": 0, "evictions": 0}

    # --- programs ---------------------------------------------------------------------------------

    def _entry(self, expression: str, value: bool) -> _Entry:
        """The compiled selector (``value`` False) or derived attribute expression (True), compiled once."""
        table = self._values if value else self._entries
        entry = table.get(expression)
        if entry is not None:
            return entry
        with self._lock:
            entry = table.get(expression)
            if entry is None:
                try:
                    program = (
                        self.engine.compile_value(expression) if value else self.engine.compile(expression)
                    )
                    cost = PROGRAM_BASE_BYTES + len(expression) * self.engine.program_bytes_per_char
                    entry = _Entry(program, None, cost)
                except CELCompileError as e:
                    entry = _Entry(None, detached(e), PROGRAM_BASE_BYTES + len(expression))
                self.stats["compiles"] += 1
                # Bound memory: drop the oldest expressions (dicts keep insertion order) while over a bound.
                while table and (
                    len(table) >= self._max or self._program_bytes + entry.cost > self._max_program_bytes
                ):
                    dropped = table.pop(next(iter(table)))
                    self._stored -= dropped.size()
                    self._program_bytes -= dropped.cost
                table[expression] = entry
                self._program_bytes += entry.cost
        return entry

    def program(self, expression: str) -> SelectorProgram:
        """The compiled selector. Raises CELCompileError (message without owner)."""
        entry = self._entry(expression, False)
        if entry.error is not None:
            raise CELCompileError(str(entry.error))
        return entry.program  # type: ignore[no-any-return]

    def value_program(self, expression: str) -> ValueProgram:
        """The compiled derived attribute expression. Raises CELCompileError (message without owner)."""
        entry = self._entry(expression, True)
        if entry.error is not None:
            raise CELCompileError(str(entry.error))
        return entry.program  # type: ignore[no-any-return]

    # --- selectors --------------------------------------------------------------------------------

    def matches(self, expression: str, device: Device, owner: str, index: int) -> bool:
        """Evaluate one selector on one device (cached).

        ``owner`` is ``class <name>`` or ``claim <ns/name>`` and ``index`` the selector's position, both
        for the error message. Raises CELCompileError or CELEvalError (fatal for the pod).
        """
        entry = self._entry(expression, False)
        if entry.error is not None:
            raise selector_error(owner, index, device, entry.error)
        cached = self._result(entry, device)
        if isinstance(cached, CELEvalError):
            raise selector_error(owner, index, device, cached)
        return cached  # type: ignore[no-any-return]

    def _result(self, entry: _Entry, device: Device) -> Any:
        """The cached outcome of ``entry``'s program on ``device`` (a value or the CELEvalError), evaluated
        and stored on first use."""
        if entry.reads is not None:
            return self._by_value(entry, device.cel)
        cached = entry.results.get(device)
        if cached is None:
            cached = self._run(entry, device.cel)
            self._store(entry, device, cached)
        else:
            self.stats["hits"] += 1
        return cached

    def _by_value(self, entry: _Entry, device: CELDevice) -> Any:
        """The outcome for the values ``device`` has at the keys ``entry`` reads (evaluated on the first
        device with those values)."""
        assert entry.reads is not None
        key = value_key(device, entry.reads)
        cached = entry.by_value.get(key)
        if cached is None:
            cached = self._run(entry, device)
            entry.by_value[key] = cached
            self._count_stored()
        else:
            self.stats["hits"] += 1
        return cached

    def _run(self, entry: _Entry, device: CELDevice) -> Any:
        self.stats["evaluations"] += 1
        try:
            return entry.program.evaluate(device)
        except CELEvalError as e:
            return e

    def _shared(self, expression: str, device: CELDevice, value: bool) -> Any:
        """``expression`` on ``device`` for callers that keep per-device results themselves: from the
        value cache when its reads are known, else evaluated. Raises CELCompileError or CELEvalError with
        the engine's message (no owner, no device)."""
        entry = self._entry(expression, value)
        if entry.error is not None:
            raise CELCompileError(str(entry.error))
        if entry.reads is None:
            self.stats["uncached"] += 1
            return entry.program.evaluate(device)
        cached = self._by_value(entry, device)
        if isinstance(cached, CELEvalError):
            raise CELEvalError(str(cached))  # a fresh exception: re-raising one object grows its traceback
        return cached

    def evaluate(self, expression: str, device: CELDevice) -> bool:
        """Evaluate one selector for the class-match index (which keeps its own per-device results).
        Raises CELCompileError or CELEvalError with the engine's message (no owner, no device)."""
        return self._shared(expression, device, False)  # type: ignore[no-any-return]

    def reads(self, expression: str) -> Reads | None:
        """The device keys the selector reads; None when they cannot be told or it does not compile."""
        return self._entry(expression, False).reads

    def value_reads(self, expression: str) -> Reads | None:
        """``reads`` for a derived attribute expression."""
        return self._entry(expression, True).reads

    # --- derived attributes -----------------------------------------------------------------------

    def value(self, expression: str, device: Device) -> AttributeValue:
        """A derived attribute expression's value on one device (cached per expression and device).
        Raises CELCompileError or CELEvalError with the engine's message (the caller names the owner)."""
        entry = self._entry(expression, True)
        if entry.error is not None:
            raise CELCompileError(str(entry.error))
        cached = self._result(entry, device)
        if isinstance(cached, CELEvalError):
            raise CELEvalError(str(cached))  # a fresh exception: re-raising one object grows its traceback
        return cached  # type: ignore[no-any-return]

    def evaluate_value(self, expression: str, device: CELDevice) -> AttributeValue:
        """A derived attribute expression's value, not cached (cluster-wide attributes are computed once
        per device revision by the inventory). Raises CELCompileError or CELEvalError."""
        return self._shared(expression, device, True)  # type: ignore[no-any-return]

    # --- bounds and reporting ---------------------------------------------------------------------

    def _store(self, entry: _Entry, device: Device, result: Any) -> None:
        entry.results[device] = result
        self._count_stored()

    def _count_stored(self) -> None:
        self._stored += 1
        if self._stored > self._max_results:
            self._shrink()

    def _shrink(self) -> None:
        """Drop the results of the oldest expressions until 3/4 of ``max_results`` are left."""
        with self._lock:
            entries = [*self._entries.values(), *self._values.values()]
            total = sum(e.size() for e in entries)  # the live count: dead weak keys are gone
            target = self._max_results * 3 // 4
            for entry in entries:
                if total <= target:
                    break
                total -= entry.size()
                entry.results = WeakKeyDictionary()
                entry.by_value = {}
                self.stats["evictions"] += 1
            self._stored = total

    def report(self) -> dict[str, Any]:
        """Counters plus sizes: ``selector_expressions``, ``value_expressions``, ``results`` (live cached
        results) and ``hit_rate`` (hits / (hits + evaluations), 0.0 before any lookup)."""
        stats: dict[str, Any] = dict(self.stats)
        lookups = stats["hits"] + stats["evaluations"]
        stats["hit_rate"] = stats["hits"] / lookups if lookups else 0.0
        stats["selector_expressions"] = len(self._entries)
        stats["value_expressions"] = len(self._values)
        stats["program_bytes"] = self._program_bytes
        stats["results"] = sum(e.size() for e in [*self._entries.values(), *self._values.values()])
        return stats
