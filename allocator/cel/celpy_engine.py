"""``CelpyEngine``: the DRA selector environment evaluated by cel-python (``celpy``, pure Python).

A second, independent evaluator used to cross-check ``ExprEngine`` (the test corpus runs on both). Only
evaluation is independent: parsing, type checking, the result-type rule, regex literal checks and the
cost estimate come from the shared ``Frontend`` (the C++ checker), because celpy has no checker;
so compile errors and cost-limit errors are identical by construction.

How the environment maps onto celpy:

* ``device`` is a celpy map; ``device.attributes`` / ``device.capacity`` are maps whose lookup of a missing
  domain returns an empty map (upstream's ``mapper.Find``), so unknown domains are empty even through
  aliases, while ``in`` and iteration see only real domains.
* Quantities and semvers are the Python value classes ``CelQuantity`` / ``CelSemver``; all library
  functions are the shared ones of ``allocator.cel.library``; the URL, IP, CIDR, lists-extension,
  ``string.format`` and cross-type comparison functions come from ``allocator.cel.celpy_libs``.
* ``==``, ``!=`` and ``in`` are replaced by CEL heterogeneous equality (celpy raises on ``1 == "1"``),
  except that a semver, quantity, IP, CIDR or URL on the left of ``==`` refuses another type, as
  upstream's ``Equal`` does.
* ``cel.bind(v, init, body)`` is rewritten to ``[init].map(v, body)[0]`` (celpy has no bind macro).
* Not supported (compile error naming this engine): optional syntax and functions (``?.``, ``[?``,
  ``orValue`` ..., hence the format library's ``validate`` and ``format.named``), two-variable
  comprehensions and ``sortBy``, which celpy cannot parse or evaluate.

Requires the ``cel-python`` distribution (not a declared project dependency; import fails without it).

"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import celpy
from celpy import celtypes
from celpy.evaluation import CELEvalError as CelpyEvalError

from allocator.cel import AttributeValue, CELDevice
from allocator.cel.celpy_libs import NAMESPACES, CelCIDR, CelIP, CelURL, library_functions, plain, wrap
from allocator.cel.celpy_rewrites import celpy_edits, unsupported
from allocator.cel.frontend import Analysis, CompiledProgram, Frontend
from allocator.cel.library import (
    LibraryError,
    SemverValue,
    UnsupportedValue,
    cel_equal,
    compare_semver,
    convert_attributes,
    includes,
    list_is_sorted,
    list_max,
    list_sum,
    parse_cel_quantity,
    parse_semver,
    plain_attribute,
    quantity_as_integer,
    quantity_compare,
    quantity_int64,
    quantity_is_integer,
    quantity_sign,
    quantity_to_float,
    regex_find,
    regex_find_all,
)
from allocator.cel.source import apply_edits
from allocator.errors import CELCompileError, CELEvalError

__all__ = ["CelQuantity", "CelSemver", "CelpyEngine", "CelpyProgram", "CelpyValueProgram"]

# ------------------------------------------------------------------------------------------ values


class CelQuantity:
    """A ``kubernetes.Quantity`` value: an exact Fraction; equal when the values are equal.
    ``decimal_held``: upstream's parse of the text holds it as a decimal, so ``isInteger`` is false
    (``quantity_int64``)."""

    __slots__ = ("decimal_held", "value")
    type_name = "kubernetes.Quantity"

    def __init__(self, value: Fraction, decimal_held: bool = False) -> None:
        self.value = value
        self.decimal_held = decimal_held

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CelQuantity) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"CelQuantity({self.value})"


class CelSemver:
    """A ``kubernetes.Semver`` value; equal when semver precedence is equal (build metadata ignored)."""

    __slots__ = ("value",)
    type_name = "kubernetes.Semver"

    def __init__(self, value: SemverValue) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CelSemver) and compare_semver(self.value, other.value) == 0

    def __hash__(self) -> int:
        return hash(self.value.canonical())

    def __repr__(self) -> str:
        return f"CelSemver({self.value.canonical()})"


class DomainMap(celtypes.MapType):
    """``device.attributes`` / ``device.capacity``: a missing domain reads as an empty map."""

    def __getitem__(self, key: Any) -> Any:
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        return celtypes.MapType()


class _SetsNamespace:
    """The value of the identifier ``sets``, so ``sets.contains(a, b)`` reaches ``contains(sets, a, b)``."""


_SETS = _SetsNamespace()


def _type_name(value: Any) -> str:
    """cel-go ``TypeName()`` of a celpy value."""
    names = [
        (celtypes.BoolType, "bool"),
        (celtypes.UintType, "uint"),
        (celtypes.IntType, "int"),
        (celtypes.DoubleType, "double"),
        (celtypes.StringType, "string"),
        (celtypes.BytesType, "bytes"),
        (celtypes.ListType, "list"),
        (celtypes.MapType, "map"),
        (type(None), "null_type"),
    ]
    for kind, name in names:
        if isinstance(value, kind):
            return name
    return getattr(value, "type_name", type(value).__name__)


# -------------------------------------------------------------------------------------- functions


def _errors_pass_through(function: Callable[..., Any]) -> Callable[..., Any]:
    """Operators receive error values as operands (celpy evaluates errors lazily); return the first."""

    def checked(*args: Any) -> Any:
        for arg in args:
            if isinstance(arg, CelpyEvalError):
                return arg
        return function(*args)

    checked.__name__ = function.__name__
    return checked


def _library_call(function: Callable[..., Any]) -> Callable[..., Any]:
    """Run a shared library function on plain values; its LibraryError becomes a celpy error value."""

    def call(*args: Any) -> Any:
        try:
            return wrap(function(*(plain(a) for a in args)))
        except LibraryError as err:
            return CelpyEvalError(str(err))

    call.__name__ = function.__name__
    return call


def _eq(a: Any, b: Any) -> Any:
    if isinstance(a, _TYPED_EQUALITY) and type(b) is not type(a):
        # Upstream's Semver/Quantity/IP/CIDR/URL ``Equal`` refuses another type.
        return CelpyEvalError("no such overload")
    return celtypes.BoolType(cel_equal(plain(a), plain(b)))


_TYPED_EQUALITY = (CelSemver, CelQuantity, CelIP, CelCIDR, CelURL)


def _ne(a: Any, b: Any) -> Any:
    return celtypes.BoolType(not cel_equal(plain(a), plain(b)))


def _in(item: Any, container: Any) -> Any:
    needle = plain(item)
    if isinstance(container, dict):
        return celtypes.BoolType(any(cel_equal(plain(k), needle) for k in dict.keys(container)))
    return celtypes.BoolType(any(cel_equal(plain(v), needle) for v in container))


def _contains(target: Any, *args: Any) -> Any:
    if target is _SETS:
        superset, subset = plain(args[0]), plain(args[1])
        return celtypes.BoolType(all(any(cel_equal(x, y) for y in superset) for x in subset))
    return celtypes.BoolType(str(args[0]) in str(target))


def _intersects(target: Any, a: Any, b: Any) -> Any:
    left, right = plain(a), plain(b)
    return celtypes.BoolType(any(cel_equal(x, y) for x in left for y in right))


def _equivalent(target: Any, a: Any, b: Any) -> Any:
    left, right = plain(a), plain(b)
    inside = all(any(cel_equal(x, y) for y in right) for x in left)
    return celtypes.BoolType(inside and all(any(cel_equal(x, y) for y in left) for x in right))


def _quantity(text: Any) -> Any:
    try:
        value = parse_cel_quantity(str(text))
    except LibraryError as err:
        return CelpyEvalError(str(err))
    return CelQuantity(value, quantity_int64(str(text)) is None)


def _is_integer(value: Any) -> bool:
    return not getattr(value, "decimal_held", False) and quantity_is_integer(_quantity_arg(value))


def _as_integer(value: Any) -> int:
    if getattr(value, "decimal_held", False):
        raise LibraryError("cannot convert value to integer")
    return quantity_as_integer(_quantity_arg(value))


def _semver(text: Any, relaxed: Any = False) -> Any:
    try:
        return CelSemver(parse_semver(str(text), bool(relaxed)))
    except LibraryError as err:
        return CelpyEvalError(str(err))


def _ordering(a: Any, b: Any) -> int:
    if isinstance(a, CelQuantity) and isinstance(b, CelQuantity):
        return quantity_compare(a.value, b.value)
    if isinstance(a, CelSemver) and isinstance(b, CelSemver):
        return compare_semver(a.value, b.value)
    raise LibraryError(f"no such overload: compare {_type_name(a)} with {_type_name(b)}")


def _quantity_arg(value: Any) -> Fraction:
    if isinstance(value, CelQuantity):
        return value.value
    if isinstance(value, int) and not isinstance(value, celtypes.BoolType):
        return Fraction(int(value))
    raise LibraryError(f"no such overload: quantity arithmetic with {_type_name(value)}")


def _quantity_fn(function: Callable[[Fraction], Any]) -> Callable[[Any], Any]:
    return lambda q: function(_quantity_arg(q))


def _semver_field(name: str) -> Callable[[Any], Any]:
    def field(value: Any) -> int:
        if not isinstance(value, CelSemver):
            raise LibraryError(f"no such overload: {name} on {_type_name(value)}")
        return int(getattr(value.value, name))

    return field


def _is_valid(parse: Callable[..., Any]) -> Callable[..., bool]:
    def check(*args: Any) -> bool:
        try:
            parse(*args)
        except LibraryError:
            return False
        return True

    return check


def _substring(text: str, start: int, end: int | None = None) -> str:
    stop = len(text) if end is None else end
    if not 0 <= start <= stop <= len(text):
        raise LibraryError(f"substring: index out of range: {start}, {stop}")
    return text[start:stop]


def _index_of(text: str, sub: str, start: int = 0) -> int:
    return text.find(sub, start)


def _last_index_of(text: str, sub: str, end: int | None = None) -> int:
    return text.rfind(sub, 0, None if end is None else end + len(sub))


def _split(text: str, sep: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    if sep == "":
        parts = list(text)
        return (
            parts if limit < 0 or limit >= len(parts) else [*parts[: limit - 1], "".join(parts[limit - 1 :])]
        )
    return text.split(sep, limit - 1 if limit > 0 else -1)


def _replace(text: str, old: str, new: str, limit: int = -1) -> str:
    return text.replace(old, new, limit)


def _join(items: list[str], sep: str = "") -> str:
    return sep.join(items)


def _functions() -> dict[str, Callable[..., Any]]:
    lib = _library_call
    return library_functions() | {
        "_==_": _errors_pass_through(_eq),
        "_!=_": _errors_pass_through(_ne),
        "_in_": _errors_pass_through(_in),
        "contains": _contains,
        "intersects": _intersects,
        "equivalent": _equivalent,
        "split": lib(_split),
        "join": lib(_join),
        "replace": lib(_replace),
        "trim": lib(str.strip),
        "substring": lib(_substring),
        "indexOf": lib(_index_of),
        "lastIndexOf": lib(_last_index_of),
        "lowerAscii": lib(lambda s: "".join(c.lower() if c.isascii() else c for c in s)),
        "upperAscii": lib(lambda s: "".join(c.upper() if c.isascii() else c for c in s)),
        "charAt": lib(lambda s, i: s[i] if 0 <= i < len(s) else ""),
        "find": lib(regex_find),
        "findAll": lib(regex_find_all),
        "includes": lib(includes),
        "isSorted": lib(list_is_sorted),
        "sum": lib(list_sum),
        "max": lib(list_max),
        "quantity": _quantity,
        "isQuantity": lib(_is_valid(parse_cel_quantity)),
        "semver": _semver,
        "isSemver": lib(_is_valid(parse_semver)),
        "isGreaterThan": lib(lambda a, b: _ordering(a, b) == 1),
        "isLessThan": lib(lambda a, b: _ordering(a, b) == -1),
        "compareTo": lib(_ordering),
        "major": lib(_semver_field("major")),
        "minor": lib(_semver_field("minor")),
        "patch": lib(_semver_field("patch")),
        "sign": lib(_quantity_fn(quantity_sign)),
        "asInteger": lib(_as_integer),
        "isInteger": lib(_is_integer),
        "asApproximateFloat": lib(_quantity_fn(quantity_to_float)),
        "add": lib(lambda a, b: CelQuantity(_quantity_arg(a) + _quantity_arg(b))),
        "sub": lib(lambda a, b: CelQuantity(_quantity_arg(a) - _quantity_arg(b))),
    }


# ----------------------------------------------------------------------------------------- device


def _attribute(value: AttributeValue) -> Any:
    """The celpy form of one attribute value. Raises LibraryError (bad version, int beyond int64)."""
    if isinstance(value, tuple):
        return celtypes.ListType([_attribute(v) for v in value])
    plain = plain_attribute(value)
    return CelSemver(plain) if isinstance(plain, SemverValue) else wrap(plain)


def device_context(device: CELDevice) -> dict[str, Any]:
    """The celpy activation. Raises LibraryError for an attribute that cannot be converted (a version that
    is not semver, an int outside int64; ``convert_attributes``)."""
    attributes = DomainMap()
    for domain, values in convert_attributes(device.attributes, _attribute).items():
        attributes[celtypes.StringType(domain)] = celtypes.MapType(
            {celtypes.StringType(name): value for name, value in values.items()}
        )
    capacity = DomainMap()
    for domain, quantities in device.capacity.items():
        capacity[celtypes.StringType(domain)] = celtypes.MapType(
            {celtypes.StringType(name): CelQuantity(q.value) for name, q in quantities.items()}
        )
    fields = {
        "driver": celtypes.StringType(device.driver),
        "attributes": attributes,
        "capacity": capacity,
        "allowMultipleAllocations": celtypes.BoolType(device.allow_multiple_allocations),
    }
    device_map = celtypes.MapType({celtypes.StringType(k): v for k, v in fields.items()})
    return {"device": device_map, "sets": _SETS, **NAMESPACES}


def _message(err: CelpyEvalError) -> str:
    """Upstream-style wording for celpy's error values."""
    text = str(err.args[0]) if err.args else "evaluation error"
    detail = err.args[2] if len(err.args) > 2 and isinstance(err.args[2], tuple) else ()
    member = re.match(r"no such member in mapping: '(.*)'$", text)
    if member:
        return f"no such key: {member.group(1)}"
    if text == "no such key" and detail:
        return f"no such key: {detail[0]}"
    if text.startswith("found no matching overload"):
        return "no such overload: " + text.removeprefix("found no matching overload").strip()
    if text in ("no such overload", "invalid_argument") and detail:
        return f"{text}: {detail[0]}"
    return text


# ---------------------------------------------------------------------------------------- program


class CelpyProgram(CompiledProgram):
    """A compiled selector on celpy. Evaluation is serialized per program (celpy's runner is not
    documented as thread-safe)."""

    __slots__ = ("_engine", "_lock", "_runner")

    def __init__(self, engine: CelpyEngine, expression: str, runner: Any, analysis: Analysis) -> None:
        super().__init__(expression, analysis)
        self._engine = engine
        self._runner = runner
        self._lock = threading.Lock()

    def _run(self, device: CELDevice) -> Any:
        self._check_cost()
        context = self._engine.context(device)
        try:
            with self._lock:
                result = self._runner.evaluate(context)
        except CelpyEvalError as err:
            raise CELEvalError(_message(err)) from None
        except RecursionError:
            raise CELEvalError("operation cancelled: expression nesting too deep") from None
        if isinstance(result, CelpyEvalError):
            raise CELEvalError(_message(result))
        return result

    def evaluate(self, device: CELDevice) -> bool:
        result = self._run(device)
        if isinstance(result, celtypes.BoolType):
            return bool(result)
        raise CELEvalError(f"CEL result of type {_type_name(result)} could not be converted to bool")


class CelpyValueProgram(CelpyProgram):
    """A compiled derived attribute expression; ``evaluate`` returns an ``AttributeValue``."""

    __slots__ = ()

    # A value program shares the selector program's machinery; its result is an attribute value
    # (``ValueProgram``), not the selector's bool.
    def evaluate(self, device: CELDevice) -> AttributeValue:  # type: ignore[override]
        return self._attribute(_plain_result(self._run(device)))


def _plain_result(value: Any) -> Any:
    """A celpy result as the plain value ``derived_attribute_value`` expects (other CEL types become
    ``UnsupportedValue`` naming the type; celpy's uint is an int subclass, so it is tested first)."""
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.UintType):
        return UnsupportedValue("uint")
    if isinstance(value, celtypes.IntType):
        return int(value)
    if isinstance(value, str):  # celtypes.StringType, or a plain str (celpy's string concatenation)
        return str(value)
    if isinstance(value, CelSemver):
        return value.value
    if isinstance(value, celtypes.ListType):
        return [_plain_result(item) for item in value]
    return UnsupportedValue(_type_name(value))


class CelpyEngine:
    """``CELEngine`` evaluating with cel-python; compile checks come from the shared ``Frontend``."""

    name = "cel-python"
    program_bytes_per_char = 635

    def __init__(self, frontend: Frontend | None = None) -> None:
        self._frontend = frontend or Frontend()
        self._env = celpy.Environment()
        self._functions = _functions()
        self._lock = threading.Lock()
        self._contexts: weakref.WeakKeyDictionary[CELDevice, dict[str, Any] | str] = (
            weakref.WeakKeyDictionary()
        )

    def compile(self, expression: str) -> CelpyProgram:
        """Raises CELCompileError: the Frontend's errors, or constructs celpy cannot evaluate."""
        return CelpyProgram(self, expression, *self._runner(expression, value=False))

    def compile_value(self, expression: str) -> CelpyValueProgram:
        """A derived attribute expression (KEP-6080); errors as ``compile``."""
        return CelpyValueProgram(self, expression, *self._runner(expression, value=True))

    def _runner(self, expression: str, *, value: bool) -> tuple[Any, Analysis]:
        analysis = self._frontend.analyze(expression, value=value)
        missing = unsupported(analysis.ast, analysis.source)
        if missing:
            raise CELCompileError(f"{missing} are not supported by the cel-python engine")
        source = apply_edits(analysis.source, celpy_edits(analysis.ast, analysis.source))
        with self._lock:  # celpy's Environment keeps the last program in a field
            try:
                runner = self._env.program(self._env.compile(source), functions=self._functions)
            except Exception as err:  # celpy raises lark and its own parse errors
                raise CELCompileError(f"cel-python cannot parse the expression: {err}") from None
        return runner, analysis

    def context(self, device: CELDevice) -> dict[str, Any]:
        """The device's converted activation (cached per device, shared read-only by all threads)."""
        with self._lock:
            cached = self._contexts.get(device)
            if cached is None:
                try:
                    cached = device_context(device)
                except LibraryError as err:
                    cached = str(err)
                self._contexts[device] = cached
        if isinstance(cached, str):
            raise CELEvalError(cached)
        return cached
