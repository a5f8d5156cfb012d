"""``ExprEngine``: the DRA selector environment on cel-expr-python (Google's C++ CEL runtime).

Environment (upstream ``dynamic-resource-allocation/cel/compile.go``, stored-expressions variant):

* Variables are the qualified names ``device.driver`` (string), ``device.attributes`` (map(string,
  map(string, dyn))), ``device.capacity`` (map(string, map(string, kubernetes.Quantity))) and
  ``device.allowMultipleAllocations`` (bool). The checker resolves ``device.x`` to them, so result types
  are as precise as upstream's object type (``device.driver`` alone fails with "must evaluate to bool").
  ``has(device.<field>)`` is rewritten to ``(!false)`` before checking (the C++ checker would fold it into
  the field's value). A bare ``device`` (not followed by a field) is an undeclared reference here.
* ``kubernetes.Quantity`` and ``kubernetes.Semver`` are small protobuf messages in a private descriptor
  pool: the checker knows them as distinct types (``quantity("1") == semver("1.0.0")`` is a compile error
  as upstream) and CEL's message equality is value equality because the fields are canonical (reduced
  fraction; semver without build metadata). They and the library functions on them are declared in
  ``allocator.cel.expr_env`` and run in Python (``allocator.cel.library``);
  ``quantity("<const>")`` / ``semver("<const>")`` are turned into message literals at compile time.
* The rest of upstream's base environment (``k8s.io/apiserver/pkg/cel/environment/base.go`` v0.37.2,
  StoredExpressions): ext.Strings v2, ``cel.bind``, optional types, ext.Sets, two-variable comprehensions,
  the lists extension (cel-cpp's version 2 = cel-go's v3), cross-type numeric comparisons, Kubernetes'
  quantity, semver, regex ``find``/``findAll``, typed lists ``isSorted``/``sum``/``min``/``max`` and
  ``includes``, URL, IP, CIDR and format libraries (``allocator.cel.expr_libs``). The checker's gaps are
  closed around it: homogeneous aggregate literals and constant ``string.format`` calls are checked on the
  checked tree (``allocator.cel.validators``); ``format``, list ``indexOf``, ``transformMap`` and the
  format library's optionals run through hidden ``__dra_...`` functions the expression itself may not
  name (``expr_libs``); a ``quantity("<const>")`` read by ``isInteger``/``asInteger`` keeps how upstream
  holds its text (``DECIMAL_HELD``).

Unknown domains: upstream returns an empty map for a domain the device lacks. A plain map here would
raise "no such key", so each compile rewrites the source text of every direct lookup
``device.attributes[<key>]`` / ``device.attributes.<name>`` (same for ``capacity``) into the optional form
``device.attributes[?<key>].orValue({})``, located via the checker's source positions. Computed keys work
too. Not covered: the maps reached through an alias (``cel.bind(a, device.attributes, a["x"])`` or a
comprehension variable); there a missing domain raises "no such key". ``"x" in device.attributes`` and
iteration see only the device's real domains, as upstream.

Parsing, checking, regex literal validation and the cost estimate live in ``Frontend``
(``allocator.cel.frontend``), which the cel-python engine shares. At run time the
static worst-case bound (``allocator.cel.worst_case``) over the limit and the C++ runtime's own iteration
budget (10,000 comprehension iterations per evaluation) both raise CELEvalError
containing "actual cost limit exceeded". The C++ parser limits nesting to 32 levels (cel-go: 250).

Source scanning and editing live in ``allocator.cel.source``.
"""

from __future__ import annotations

import functools
import re
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel

from allocator.cel import AttributeValue, CELDevice, Version
from allocator.cel.checked import CheckedAst, Expr
from allocator.cel.expr_env import (
    DECIMAL_HELD,
    parsed_quantity,
    parsed_semver,
    quantity_message,
    semver_message,
    semver_value,
)
from allocator.cel.expr_guards import semver_guard
from allocator.cel.expr_libs import (
    without_map_inserts,
)
from allocator.cel.frontend import (
    Analysis,
    CompiledProgram,
    Frontend,
    runtime_message,
    strip_status,
    type_name,
)
from allocator.cel.library import (
    LibraryError,
    SemverValue,
    UnsupportedValue,
    convert_attributes,
    plain_attribute,
    quantity_int64,
)
from allocator.cel.source import apply_edits, matching_bracket
from allocator.cel.validators import (
    HIDDEN_FORMAT,
)
from allocator.errors import CELEvalError

__all__ = [
    "Analysis",
    "CompiledProgram",
    "ExprEngine",
    "ExprProgram",
    "ExprValueProgram",
    "Frontend",
]

ACTIVATION_REUSE = 256
"""Evaluations per cached activation. cel-expr-python allocates each evaluation's values in the
activation's arena and frees them only with the activation, so a cached activation is rebuilt after this
many uses: memory stays bounded and the rebuild (~2-5 us) costs < 2 % per evaluation."""

MAX_ACTIVATIONS_PER_THREAD = 4096
"""Activations kept per thread (each holds a C++ arena, several KiB): selector results are cached per
device by ``SelectorCache``, so activations only matter while a device is first evaluated."""

MAX_CONVERTED_DEVICES = 16384
"""Devices kept in CEL value form (shared by threads); beyond it the table starts over."""

ITERATION_BUDGET = 10_000
"""cel-cpp's default ``comprehension_max_iterations`` (not configurable through cel-expr-python)."""

_DOMAIN_MAPS = frozenset({"device.attributes", "device.capacity"})

# ----------------------------------------------------------------------------------- source rewrites


_FIELD = re.compile(r"\.\s*([A-Za-z_][A-Za-z0-9_]*)")


def _source_edits(ast: CheckedAst, src: str) -> list[tuple[int, int, str]]:
    """Edits (start, end, replacement): direct domain lookups become ``[?key].orValue({})`` and constant
    quantity/semver calls become message literals."""
    edits: list[tuple[int, int, str]] = []
    decimal_held: set[int] = set()  # quantity literals read by isInteger/asInteger (_literal_edit)
    for node in ast.root.walk():
        if node.kind == "call" and node.name in ("isInteger", "asInteger") and node.operand is not None:
            decimal_held.add(node.operand.id)
        pos = ast.positions.get(node.id, -1)
        if not 0 <= pos < len(src):
            continue
        index = node.kind == "call" and node.name == "_[_]" and bool(node.args)
        target = node.args[0] if index and node.args else node.operand
        if target is not None and _refers_to(ast, target, _DOMAIN_MAPS):
            if index and src[pos] == "[":
                close = matching_bracket(src, pos)
                edits += [(pos + 1, pos + 1, "?"), (close + 1, close + 1, ".orValue({})")]
            elif node.kind == "select" and not node.test_only and src[pos] == ".":
                field = _FIELD.match(src, pos)
                if field and field.group(1) == node.name:
                    edits.append((pos, field.end(), f'[?"{node.name}"].orValue({{}})'))
        elif node.kind == "call" and src[pos] == "(":
            edits += _literal_edit(node, src, pos, node.id in decimal_held) + _format_edit(node, src, pos)
    return edits


_FORMAT_NAME = re.compile(r"format\s*$")


def _format_edit(node: Expr, src: str, pos: int) -> list[tuple[int, int, str]]:
    """``x.format(args)`` runs Kubernetes' formatter (``allocator.cel.lib_strformat``), not cel-cpp's."""
    if node.name != "format" or node.operand is None:
        return []
    name = _FORMAT_NAME.search(src, 0, pos)
    return [] if name is None else [(name.start(), name.end(), HIDDEN_FORMAT)]


def _literal_edit(node: Expr, src: str, pos: int, integer_read: bool = False) -> list[tuple[int, int, str]]:
    """``quantity("40Gi")`` / ``semver("1.2.3"[, true])`` with constant, valid arguments become message
    literals the runtime builds natively (no Python call per evaluation). Invalid constants stay calls, so
    their error still happens at evaluation time as upstream.

    ``integer_read``: the quantity is the receiver of ``isInteger``/``asInteger``, which upstream answers
    from how ``ParseQuantity`` holds the text (``quantity_int64``): when that is not an int64, the literal's
    denominator is spelled ``"01"`` (``DECIMAL_HELD``), which the two functions read as "not an integer"."""
    args = node.args or []
    if node.operand is not None or node.name not in ("quantity", "semver") or not args:
        return []
    if any(a.kind != "const" for a in args) or not isinstance(args[0].value, str):
        return []
    name = re.compile(node.name + r"\s*$").search(src, 0, pos)
    if name is None or (
        name.start() > 0 and (src[name.start() - 1].isalnum() or src[name.start() - 1] in "._")
    ):
        return []
    try:
        if node.name == "quantity":
            value = parsed_quantity(args[0].value)
            den = str(value.denominator)
            if integer_read and den == "1" and quantity_int64(args[0].value) is None:
                den = DECIMAL_HELD
            literal = f'kubernetes.Quantity{{num: "{value.numerator}", den: "{den}"}}'
        else:
            version = parsed_semver(args[0].value, len(args) > 1 and args[1].value is True)
            pre = ".".join(str(p) for p in version.pre)
            literal = (
                f"kubernetes.Semver{{major: {version.major}u, minor: {version.minor}u, "
                f'patch: {version.patch}u, pre: "{pre}"}}'
            )
    except LibraryError:
        return []
    return [(name.start(), matching_bracket(src, pos) + 1, literal)]


def _refers_to(ast: CheckedAst, node: Expr, names: frozenset[str]) -> bool:
    return node.kind == "ident" and ast.references.get(node.id, node.name) in names


# ---------------------------------------------------------------------------------------- the device


class _DeviceEntry:
    """A device converted for the runtime (shared by all threads), or why it cannot be converted."""

    __slots__ = ("data", "error")

    def __init__(self, data: dict[str, Any] | None, error: str | None) -> None:
        self.data, self.error = data, error


def _attribute_value(value: AttributeValue) -> Any:
    """The runtime form of one attribute value. Raises LibraryError (bad version, int beyond int64)."""
    if isinstance(value, tuple):
        return [_attribute_value(v) for v in value]
    plain = plain_attribute(value)
    return semver_message(plain) if isinstance(plain, SemverValue) else plain


def device_data(device: CELDevice) -> dict[str, Any]:
    """The activation contents. Raises LibraryError for an attribute that cannot be converted (a version
    that is not semver, an int outside int64; ``convert_attributes``)."""
    capacity = {
        domain: {name: quantity_message(q.value) for name, q in values.items()}
        for domain, values in device.capacity.items()
    }
    return {
        "device.driver": device.driver,
        "device.attributes": convert_attributes(device.attributes, _attribute_value),
        "device.capacity": capacity,
        "device.allowMultipleAllocations": bool(device.allow_multiple_allocations),
    }


# ------------------------------------------------------------------------------------------- program


@dataclass(frozen=True, slots=True)
class _Runnable:
    """The program to run, and how to compile the guarded one for devices with a version at one of
    ``guard_keys`` (compiled on first use: most clusters never need it)."""

    program: Any
    guard_keys: tuple[tuple[str, str], ...]
    guarded: Callable[[], Any] | None


class ExprProgram(CompiledProgram):
    """A compiled selector. ``evaluate`` raises CELEvalError; safe to call from several threads."""

    __slots__ = ("_engine", "_guard_keys", "_guarded", "_guarded_program", "_program")

    def __init__(self, engine: ExprEngine, expression: str, runnable: _Runnable, analysis: Analysis) -> None:
        super().__init__(expression, analysis)
        self._engine = engine
        self._program = runnable.program
        self._guard_keys = runnable.guard_keys
        self._guarded = runnable.guarded
        self._guarded_program: Any = None

    def _run(self, device: CELDevice) -> Any:
        self._check_cost()
        activation = self._engine.activation(device)
        program = self._program
        if self._guard_keys and _has_version(device, self._guard_keys):
            if self._guarded_program is None and self._guarded is not None:
                self._guarded_program = self._guarded()  # two threads may both compile: same program
            program = self._guarded_program
        try:
            return program.eval(activation)
        except RuntimeError as err:
            raise CELEvalError(_exception_message(err)) from None

    def evaluate(self, device: CELDevice) -> bool:
        result = self._run(device)
        value = _python_value(result)
        if value is True or value is False:
            return value
        kind = result.type()
        if kind == cel.Type.ERROR and value is not None:
            raise CELEvalError(runtime_message(str(value)))
        raise CELEvalError(
            f"CEL result of type {type_name(kind.name(), bare=True)} could not be converted to bool"
        )


class ExprValueProgram(ExprProgram):
    """A compiled derived attribute expression; ``evaluate`` returns an ``AttributeValue``."""

    __slots__ = ()

    # A value program shares the selector program's machinery; its result is an attribute value
    # (``ValueProgram``), not the selector's bool.
    def evaluate(self, device: CELDevice) -> AttributeValue:  # type: ignore[override]
        result = self._run(device)
        if result.type() == cel.Type.ERROR and (error := _python_value(result)) is not None:
            raise CELEvalError(runtime_message(str(error)))
        return self._attribute(_plain_result(result))


def _has_version(device: CELDevice, keys: tuple[tuple[str, str], ...]) -> bool:
    # A plain loop: this runs on every evaluation of an expression with guard keys.
    attributes = device.attributes
    for domain, ident in keys:
        values = attributes.get(domain)
        if values is not None and type(values.get(ident)) is Version:
            return True
    return False


def _python_value(result: Any) -> Any:
    """The result's Python value, or None for values that have no Python form (optionals)."""
    try:
        return result.value()
    except TypeError:
        return None


def _plain_result(value: Any) -> Any:
    """A cel-expr-python value (or list element accessor) as the plain Python value the library expects;
    values of other CEL types become ``UnsupportedValue`` naming the type."""
    kind = value.type()
    name = kind.name()
    if name in ("BOOL", "INT", "STRING"):
        return value.value()
    if name == "kubernetes.Semver":
        return semver_value(value.value())
    if name.startswith("LIST"):
        return [_plain_result(item) for item in value.value()]
    return UnsupportedValue(type_name(name, bare=True))


def _exception_message(err: RuntimeError) -> str:
    text = strip_status(str(err))
    if "Iteration budget exceeded" in text:
        return (
            "operation cancelled: actual cost limit exceeded (more than the runtime's "
            f"{ITERATION_BUDGET} comprehension iterations per evaluation)"
        )
    return runtime_message(text)


# -------------------------------------------------------------------------------------------- engine


class ExprEngine:
    """``CELEngine`` on cel-expr-python. Compiled programs and per-device activations are cached by the
    caller and by this engine respectively; all methods are thread-safe."""

    name = "cel-expr"
    program_bytes_per_char = 126

    def __init__(self, frontend: Frontend | None = None) -> None:
        self._frontend = frontend or Frontend()
        self._env = self._frontend.env
        self._lock = threading.Lock()
        self._devices: weakref.WeakKeyDictionary[CELDevice, _DeviceEntry] = weakref.WeakKeyDictionary()
        self._local = threading.local()

    def compile(self, expression: str) -> ExprProgram:
        """Raises CELCompileError (syntax, types, non-bool result, regex literal, > 10 Ki)."""
        analysis = self._frontend.analyze(expression)
        return ExprProgram(self, expression, self._runnable(analysis), analysis)

    def compile_value(self, expression: str) -> ExprValueProgram:
        """A derived attribute expression (KEP-6080). Raises CELCompileError (as ``compile``, but the result
        may be string, int, bool, semver or a list of those)."""
        analysis = self._frontend.analyze(expression, value=True)
        return ExprValueProgram(self, expression, self._runnable(analysis), analysis)

    def _runnable(self, analysis: Analysis) -> _Runnable:
        """The programs actually run: the source with domain lookups and literals rewritten (module doc),
        and, where a version attribute's equality may be refused, the guarded variant
        (``allocator.cel.expr_guards``)."""
        try:
            edits = _source_edits(analysis.ast, analysis.source)
            guard_keys, guard_edits = semver_guard(analysis.ast, analysis.source)
        except ValueError:
            edits, guard_keys, guard_edits = [], (), []
        program = self._program(analysis, edits)
        guarded = functools.partial(self._program, analysis, edits + guard_edits) if guard_keys else None
        return _Runnable(program, guard_keys, guarded)

    def _program(self, analysis: Analysis, edits: list[tuple[int, int, str]]) -> Any:
        source = analysis.source
        if "transformMap" in source:
            source = without_map_inserts(apply_edits(source, edits))
        elif not edits:
            return analysis.checked
        else:
            source = apply_edits(source, edits)
        try:
            return self._env.compile(source)
        except RuntimeError:
            return analysis.checked  # not expected; keep the original (missing domains then raise)

    def activation(self, device: CELDevice) -> Any:
        """The device's activation for the calling thread, rebuilt every ACTIVATION_REUSE uses.

        Activations are per thread: cel-expr-python finds the Python wrapper of an activation's arena in
        thread-local state when it calls a Python function, so an activation built in another thread fails
        with "No PyCelArena found". Raises CELEvalError for devices whose attributes cannot be converted.
        """
        slots = getattr(self._local, "slots", None)
        if slots is None:
            slots = self._local.slots = weakref.WeakKeyDictionary()
        slot = slots.get(device)
        if slot is None or slot[1] <= 0:
            if len(slots) >= MAX_ACTIVATIONS_PER_THREAD:
                slots.clear()  # bound memory: each activation holds a C++ arena
            slot = [self._env.Activation(self._device_data(device)), ACTIVATION_REUSE]
            slots[device] = slot
        slot[1] -= 1
        return slot[0]

    def _device_data(self, device: CELDevice) -> dict[str, Any]:
        with self._lock:
            entry = self._devices.get(device)
            if entry is None:
                if len(self._devices) >= MAX_CONVERTED_DEVICES:
                    self._devices.clear()  # bound memory; a device is converted again when next evaluated
                entry = self._devices[device] = self._new_entry(device)
        if entry.error is not None:
            raise CELEvalError(entry.error)
        assert entry.data is not None
        return entry.data

    @staticmethod
    def _new_entry(device: CELDevice) -> _DeviceEntry:
        try:
            return _DeviceEntry(device_data(device), None)
        except LibraryError as err:
            return _DeviceEntry(None, str(err))
