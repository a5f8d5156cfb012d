"""Engine-neutral semantics of the DRA selector library: semver, quantity, ``includes``, list helpers.

Each engine wraps these plain-Python functions in its own value representation, so both engines agree by
construction. Errors are raised as ``LibraryError`` whose message becomes the CEL runtime error text.

Sources (behaviour described, not copied):

* ``k8s.io/apiserver/pkg/cel/library/semverlib.go`` and ``github.com/blang/semver/v4`` ``Parse``: the strict
  grammar, the relaxed ("normalize") form, and ``Compare`` (build metadata ignored).
* ``k8s.io/apiserver/pkg/cel/library/quantity.go``: ``quantity``/``isQuantity``, ``isInteger``/``asInteger``
  (int64 range), ``asApproximateFloat``, ``sign``, ``add``/``sub`` with a quantity or an int, comparisons.
* ``k8s.io/apiserver/pkg/cel/library/lists.go``: ``isSorted``, ``sum``, ``min``, ``max`` on lists.
* ``dynamic-resource-allocation/cel`` (DRAListTypeAttributes): ``includes`` on a list or a scalar.
* ``dynamic-resource-allocation/cel`` ``getAttributeValue``: ``convert_attributes`` / ``plain_attribute`` turn
  a device's attributes into CEL values (a version must parse as semver, an int must fit int64).
* KEP-6080 (DRADerivedAttributes): ``derived_attribute_value`` turns an expression's result into an
  attribute value (string, int, bool, semver, or a list of one of those).

Also here, because both engines use them: a reader for serialized checked expressions (``decode_checked``,
cel-spec ``checked.proto``) and the static worst-case cost bound (``worst_case_cost``) that stands in for
cel-go's runtime cost tracking.

One module, about 1,000 lines, on purpose: it is the single definition of the library that both engines
wrap, so that they agree by construction; split by function family, the engines' wrappers would have several
sources to drift from.
"""

from __future__ import annotations

import itertools
import math
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from allocator.cel import AttributeValue, Version
from allocator.quantity import QuantityError, parse_quantity

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "CheckedAst",
    "CostBound",
    "Expr",
    "LibraryError",
    "SemverError",
    "SemverValue",
    "Shape",
    "UnsupportedValue",
    "cel_equal",
    "check_int64",
    "compare_semver",
    "convert_attributes",
    "decode_checked",
    "derived_attribute_value",
    "includes",
    "index_of",
    "is_bind",
    "list_is_sorted",
    "list_max",
    "list_min",
    "list_sum",
    "parse_cel_quantity",
    "parse_semver",
    "plain_attribute",
    "quantity_as_integer",
    "quantity_compare",
    "quantity_int64",
    "quantity_is_integer",
    "quantity_sign",
    "quantity_to_float",
    "regex_find",
    "regex_find_all",
    "worst_case_cost",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1

_NANO = Fraction(1, 10**9)


class LibraryError(ValueError):
    """A library function failed; the message is the CEL runtime error text."""


class SemverError(LibraryError):
    """The text is not a semantic version (blang/semver wording where it matters)."""


# --------------------------------------------------------------------------------------------- semver


@dataclass(frozen=True, slots=True)
class SemverValue:
    """A parsed semver 2.0.0 version. ``pre`` holds int (numeric) or str identifiers; build metadata is
    dropped because it takes no part in comparison or equality (blang ``EQ`` is ``Compare == 0``)."""

    major: int
    minor: int
    patch: int
    pre: tuple[int | str, ...] = ()

    def canonical(self) -> str:
        """``M.m.p[-pre]``: equal texts exactly when the versions compare equal."""
        core = f"{self.major}.{self.minor}.{self.patch}"
        return core + ("-" + ".".join(str(p) for p in self.pre) if self.pre else "")


_DIGITS = frozenset("0123456789")
_ALNUM = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-")


def _numeric_part(text: str, what: str) -> int:
    """A major/minor/patch number: digits only, no leading zero, fits uint64."""
    if not text or not set(text) <= _DIGITS:
        raise SemverError(f"Invalid character(s) found in {what} number {text!r}")
    if len(text) > 1 and text[0] == "0":
        raise SemverError(f"{what.capitalize()} number must not contain leading zeroes {text!r}")
    value = int(text)
    if value > UINT64_MAX:
        raise SemverError(f"{what.capitalize()} number {text!r} out of range")
    return value


def _prerelease_part(text: str) -> int | str:
    """One prerelease identifier: numeric without leading zero, or [0-9A-Za-z-]+."""
    if not text:
        raise SemverError("Prerelease is empty")
    if set(text) <= _DIGITS:
        if len(text) > 1 and text[0] == "0":
            raise SemverError(f"Numeric PreRelease version must not contain leading zeroes {text!r}")
        return int(text)
    if not set(text) <= _ALNUM:
        raise SemverError(f"Invalid character(s) found in prerelease {text!r}")
    return text


def _check_build(text: str) -> None:
    for part in text.split("."):
        if not part:
            raise SemverError("Build meta data is empty")
        if not set(part) <= _ALNUM:
            raise SemverError(f"Invalid character(s) found in build meta data {part!r}")


def _parse_strict(text: str) -> SemverValue:
    """blang/semver ``Parse``: exactly ``MAJOR.MINOR.PATCH[-PRE][+BUILD]``, nothing trimmed."""
    if not text:
        raise SemverError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    major = _numeric_part(parts[0], "major")
    minor = _numeric_part(parts[1], "minor")
    rest = parts[2]
    if "+" in rest:
        rest, build = rest.split("+", 1)
        _check_build(build)
    pre: tuple[int | str, ...] = ()
    if "-" in rest:
        rest, pre_text = rest.split("-", 1)
        pre = tuple(_prerelease_part(p) for p in pre_text.split("."))
    patch = _numeric_part(rest, "patch")
    return SemverValue(major, minor, patch, pre)


def _normalize(text: str) -> str:
    """The relaxed form of semverlib ``normalizeAndParse``: drop one ``v``, strip leading zeros of each of the
    first three dot parts, pad ``1`` / ``1.2`` with ``.0``; short forms may not carry ``-``/``+``."""
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            part = part.lstrip("0")
            if not part or part[0] not in _DIGITS:
                part = "0" + part
            parts[i] = part
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise SemverError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def parse_semver(text: str, relaxed: bool = False) -> SemverValue:
    """Parse ``text`` as ``semver(text)`` or, with ``relaxed``, ``semver(text, true)``. Raises SemverError."""
    return _parse_strict(_normalize(text) if relaxed else text)


def _compare_pre(a: tuple[int | str, ...], b: tuple[int | str, ...]) -> int:
    if not a or not b:
        # A version without prerelease ranks above one with a prerelease.
        return (not a) - (not b)
    for x, y in zip(a, b, strict=False):
        if x == y:
            continue
        if isinstance(x, int) and isinstance(y, int):
            return -1 if x < y else 1
        if isinstance(x, int) or isinstance(y, int):
            return -1 if isinstance(x, int) else 1  # numeric identifiers rank below alphanumeric ones
        return -1 if x.encode() < y.encode() else 1
    return (len(a) > len(b)) - (len(a) < len(b))


def compare_semver(a: SemverValue, b: SemverValue) -> int:
    """-1, 0 or 1 by semver precedence (blang ``Compare``)."""
    core_a, core_b = (a.major, a.minor, a.patch), (b.major, b.minor, b.patch)
    if core_a != core_b:
        return -1 if core_a < core_b else 1
    return _compare_pre(a.pre, b.pre)


# ------------------------------------------------------------------------------------------- quantity


def parse_cel_quantity(text: str) -> Fraction:
    """``quantity(text)``: the exact value. Raises LibraryError.

    Like ``resource.ParseQuantity`` the text is not trimmed, and values finer than 1n are rounded up to the
    next nano unit (Kubernetes quantities carry at most nano precision).
    """
    if text != text.strip() or not text:
        raise LibraryError(f"quantities must match the regular expression: {text!r}")
    if _NO_DIGITS.fullmatch(text):
        # ParseQuantity reads a missing number as 0: "Mi", "-", ".", "+.e2" are all zero quantities.
        suffix = _NO_DIGITS.fullmatch(text).group(1)  # type: ignore[union-attr]
        if (
            suffix in _BINARY_EXPONENTS
            or suffix in _DECIMAL_EXPONENTS
            or re.fullmatch(r"[eE][+-]?[0-9]+", suffix)
        ):
            return Fraction(0)
        raise LibraryError(f"unable to parse quantity's suffix: {text!r}")
    try:
        value = parse_quantity(text).value
    except QuantityError as err:
        raise LibraryError(str(err)) from None
    if (value / _NANO).denominator != 1:
        value = Fraction(math.ceil(value / _NANO)) * _NANO
    return value


def quantity_compare(a: Fraction, b: Fraction) -> int:
    """-1, 0 or 1 (``Quantity.Cmp``)."""
    return (a > b) - (a < b)


def quantity_sign(value: Fraction) -> int:
    return (value > 0) - (value < 0)


def quantity_is_integer(value: Fraction) -> bool:
    """True when ``asInteger`` succeeds: an integral value inside the int64 range."""
    return value.denominator == 1 and INT64_MIN <= value.numerator <= INT64_MAX


_BINARY_EXPONENTS = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_EXPONENTS = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_NO_DIGITS = re.compile(r"[+-]?\.?([^0-9.+-].*|)")
"""A quantity text without any digit before its suffix (group 1)."""
_QUANTITY_TEXT = re.compile(r"([+-]?)0*([0-9]*)(?:\.([0-9]*))?(.*)")


def quantity_int64(text: str) -> int | None:
    """What upstream's ``Quantity.AsInt64`` gives for ``resource.ParseQuantity(text)``: the value when the
    parse keeps it as an int64 mantissa with a non-negative decimal scale, else None (also for an invalid
    text). ``ParseQuantity`` takes that fast path only when the digits leave enough precision: at most 18
    digits for a decimal suffix, fewer for a large binary suffix (``1Ei``, none with a fraction:
    ``1.5Gi``); and a text with fractional digits (``1.0``, ``1000m``) keeps a negative scale. Everything
    else is held as an arbitrary-precision decimal, which ``asInteger`` refuses even when integral."""
    if text == "0":
        return 0
    match = _QUANTITY_TEXT.fullmatch(text)
    if match is None:
        return None
    sign, num, denom, suffix = match.group(1), match.group(2) or "0", match.group(3) or "", match.group(4)
    mantissa = 1
    if suffix in _BINARY_EXPONENTS:
        exponent = _BINARY_EXPONENTS[suffix]
        if denom:
            return None
        mantissa = 1 << exponent
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1
        scale = 0
    else:
        if suffix in _DECIMAL_EXPONENTS:
            scale = _DECIMAL_EXPONENTS[suffix]
        elif suffix[:1] in ("e", "E") and re.fullmatch(r"[+-]?[0-9]+", suffix[1:]):
            scale = int(suffix[1:])
        else:
            return None
        precision = 18 - len(num) - len(denom)
    scale -= len(denom)
    if precision < 0 or scale < -9:
        return None
    value = int(num + denom) * mantissa
    if value > INT64_MAX or scale < 0:
        return None
    value = value * 10**scale
    if value > INT64_MAX:
        return None
    return -value if sign == "-" else value


def quantity_as_integer(value: Fraction) -> int:
    if not quantity_is_integer(value):
        raise LibraryError("cannot convert value to integer")
    return value.numerator


def quantity_to_float(value: Fraction) -> float:
    """Nearest float; beyond the float range +Inf/-Inf (``AsApproximateFloat64``)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def check_int64(value: int) -> int:
    """CEL ints are int64: arithmetic outside the range is an overflow error."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise LibraryError("integer overflow")
    return value


# --------------------------------------------------------------------------------- equality and lists


def _kind(value: object) -> str:
    # bool before int: Python's bool is an int, CEL's is not a number.
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, dict):
        return "map"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    return type(value).__name__


def cel_equal(a: object, b: object) -> bool:
    """CEL heterogeneous equality on plain values: bool only equals bool, int/uint/double compare by numeric
    value, lists element-wise, maps by key set and values; other values (strings, messages) by ``==``."""
    kind = _kind(a)
    if kind != _kind(b):
        return False
    if kind == "list":
        return len(a) == len(b) and all(cel_equal(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[arg-type]
    if kind == "map":
        return a.keys() == b.keys() and all(cel_equal(a[k], b[k]) for k in a)  # type: ignore[union-attr,index]
    return a == b


def includes(receiver: object, value: object) -> bool:
    """``x.includes(v)``: a list contains ``v``; any other ``x`` acts as the one-element list ``[x]``
    (``library.Lists`` v1 ``includes``: no length limit)."""
    if isinstance(receiver, (list, tuple)):
        return any(cel_equal(item, value) for item in receiver)
    return cel_equal(receiver, value)


def index_of(target: object, value: object, start: int | None = None, last: bool = False) -> int:
    """``indexOf`` / ``lastIndexOf`` of strings (ext.Strings: code points; an offset past the end finds
    nothing, a negative one is an error) and of lists (library.Lists: element equality)."""
    if isinstance(target, str) and isinstance(value, str):
        if start is None:
            return target.rfind(value) if last else target.find(value)
        if start < 0:
            raise LibraryError(f"index out of range: {start}")
        if not value:
            return min(start, len(target))
        if start >= len(target):
            return -1
        if last:
            return target.rfind(value, 0, min(start, len(target) - len(value)) + len(value))
        return target.find(value, start)
    if not isinstance(target, (list, tuple)) or start is not None:
        raise LibraryError("no such overload: indexOf")
    positions = range(len(target) - 1, -1, -1) if last else range(len(target))
    return next((i for i in positions if cel_equal(target[i], value)), -1)


def _comparable(items: Sequence[object], function: str) -> str:
    """The common kind of list elements that have an order (numbers, strings, bytes, bools)."""
    kinds = {_kind(item) for item in items}
    if len(kinds) > 1 or kinds - {"number", "str", "bytes", "bool"}:
        raise LibraryError(f"no such overload: {function} on a list of {', '.join(sorted(kinds))}")
    return kinds.pop() if kinds else "number"


def list_is_sorted(items: Sequence[object]) -> bool:
    _comparable(items, "isSorted")
    return all(a <= b for a, b in itertools.pairwise(items))  # type: ignore[operator]


def list_sum(items: Sequence[object]) -> int | float:
    """Sum of a numeric list; an empty list sums to int 0 (upstream: the zero of the element type)."""
    if _comparable(items, "sum") != "number":
        raise LibraryError("no such overload: sum on a non-numeric list")
    total = sum(items)  # type: ignore[arg-type]
    return check_int64(total) if isinstance(total, int) else total


def list_min(items: Sequence[object]) -> object:
    _comparable(items, "min")
    if not items:
        raise LibraryError("min called on empty list")
    return min(items)  # type: ignore[type-var]


def list_max(items: Sequence[object]) -> object:
    _comparable(items, "max")
    if not items:
        raise LibraryError("max called on empty list")
    return max(items)  # type: ignore[type-var]


# ------------------------------------------------------------------------------ device attribute values


def plain_attribute(value: bool | int | str | Version) -> bool | int | str | SemverValue:
    """One scalar device attribute as a library value: a ``Version`` parsed, an int checked against int64.
    Raises LibraryError (``parse semantic version: ...``, ``integer overflow``)."""
    if isinstance(value, Version):
        try:
            return parse_semver(value.text)
        except LibraryError as err:
            raise LibraryError(f"parse semantic version: {err}") from None
    if isinstance(value, int) and not isinstance(value, bool):
        check_int64(value)
    return value


def convert_attributes(
    attributes: Mapping[str, Mapping[str, AttributeValue]], convert: Callable[[AttributeValue], object]
) -> dict[str, dict[str, object]]:
    """``device.attributes`` with every value in an engine's form (``convert``, built on ``plain_attribute``).
    Raises LibraryError naming the attribute: ``attribute <domain>/<id>: <msg>``."""
    converted: dict[str, dict[str, object]] = {}
    for domain, values in attributes.items():
        target = converted[domain] = {}
        for name, value in values.items():
            try:
                target[name] = convert(value)
            except LibraryError as err:
                raise LibraryError(f"attribute {domain}/{name}: {err}") from None
    return converted


# ------------------------------------------------------------------------------ derived attribute values


class UnsupportedValue:
    """Stands for an engine value of a CEL type no attribute can hold (uint, double, map, ...), so that
    ``derived_attribute_value`` reports it by its CEL type name."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name


def _scalar_kind(value: object) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, str):
        return "string"
    if isinstance(value, SemverValue):
        return "semver"
    return None


def _cel_type_name(value: object) -> str:
    if isinstance(value, UnsupportedValue):
        return value.type_name
    return _scalar_kind(value) or {"list": "list", "number": "double", "map": "map"}.get(
        _kind(value), _kind(value)
    )


def derived_attribute_value(value: object) -> AttributeValue:
    """A derived attribute (KEP-6080) from an expression's plain result: bool, int, str, ``SemverValue``
    or a list of one of them (a version becomes ``Version`` with its canonical text, so equal versions
    compare equal). Raises LibraryError for any other type, a nested or mixed-type list, or an int outside
    int64."""
    kind = _scalar_kind(value)
    if kind is not None:
        return _attribute_scalar(value)
    if isinstance(value, (list, tuple)):
        kinds = {_scalar_kind(item) for item in value}
        if None in kinds:
            bad = next(item for item in value if _scalar_kind(item) is None)
            raise LibraryError(
                f"list element of type {_cel_type_name(bad)} is not a valid attribute value "
                "(string, int, bool or semver)"
            )
        if len(kinds) > 1:
            raise LibraryError(f"list mixes element types {', '.join(sorted(k for k in kinds if k))}")
        return tuple(_attribute_scalar(item) for item in value)  # type: ignore[return-value]
    raise LibraryError(
        f"result of type {_cel_type_name(value)} is not a valid attribute value "
        "(string, int, bool, semver or a list of those)"
    )


def _attribute_scalar(value: object) -> bool | int | str | Version:
    if isinstance(value, SemverValue):
        return Version(value.canonical())
    if isinstance(value, int) and not isinstance(value, bool):
        check_int64(value)
    return value  # type: ignore[return-value]


# -------------------------------------------------------------------------------------------- regexes


def _compile_regex(pattern: str) -> re.Pattern[str]:
    # Python's re stands in for RE2 here; the common syntax (classes, groups, anchors, repetition) agrees.
    try:
        return re.compile(pattern)
    except re.error as err:
        raise LibraryError(f"invalid regular expression {pattern!r}: {err}") from None


def regex_find(text: str, pattern: str) -> str:
    """``s.find(re)``: the first match, or "" (k8s regex library)."""
    match = _compile_regex(pattern).search(text)
    return match.group(0) if match else ""


def regex_find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    """``s.findAll(re[, n])``: all matches, at most ``n`` when ``n >= 0``."""
    if limit == 0:
        return []
    found = [m.group(0) for m in _compile_regex(pattern).finditer(text)]
    return found if limit < 0 else found[:limit]


# ------------------------------------------------------------------------ checked AST (cel.expr protos)
#
# The C++ engine serializes a compiled expression as ``google.protobuf.Any`` holding ``cel.expr.CheckedExpr``
# (cel-spec ``proto/cel/expr/checked.proto`` and ``syntax.proto``). The few fields needed for analysis are
# read with a minimal wire-format reader, so no generated proto module is required.


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs: varints as int, length-delimited and fixed fields as bytes."""
    out: list[tuple[int, int | bytes]] = []
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            length, pos = _varint(data, pos)
            out.append((number, data[pos : pos + length]))
            pos += length
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            out.append((number, data[pos : pos + width]))
            pos += width
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return out


def _text(value: int | bytes) -> str:
    return bytes(value).decode() if isinstance(value, bytes) else ""


@dataclass(slots=True)
class Expr:
    """One node of a checked CEL expression.

    ``kind`` is const, ident, select, call, list, map, struct or comprehension. ``name`` is the identifier,
    the selected field or the function. ``operand`` is a select operand or a call target; ``args`` are call
    arguments, list elements, or map/struct values (``keys`` holds map keys). Comprehension parts are in
    ``parts`` (iter_range, accu_init, loop_condition, loop_step, result) and ``vars`` (iter_var, iter_var2,
    accu_var).
    """

    id: int
    kind: str
    name: str = ""
    value: object = None
    operand: Expr | None = None
    args: list[Expr] | None = None
    keys: list[Expr] | None = None
    test_only: bool = False
    parts: dict[str, Expr] | None = None
    vars: tuple[str, str, str] = ("", "", "")
    optional: frozenset[int] = frozenset()
    """Positions of optional list elements (``[?x]``) or optional map entries (``{?k: v}``)."""

    def children(self) -> list[Expr]:
        out = [self.operand] if self.operand is not None else []
        out += (self.keys or []) + (self.args or []) + list((self.parts or {}).values())
        return out

    def walk(self) -> list[Expr]:
        """This node and all nodes below it, parents first."""
        out, stack = [], [self]
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(reversed(node.children()))
        return out


@dataclass(slots=True)
class CheckedAst:
    """A decoded ``CheckedExpr``: the tree plus the checker's side tables (by expression id): ``types``
    holds each node's outer kind (``_type_kind``), ``type_names`` its full type in cel-go's spelling
    (``list(int)``, ``map(string, dyn)``, ``kubernetes.Quantity``)."""

    root: Expr
    references: dict[int, str]
    types: dict[int, str]
    positions: dict[int, int]
    type_names: dict[int, str] = field(default_factory=dict)


_PRIMITIVES = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}
_COMPREHENSION_PARTS = {2: "iter_range", 4: "accu_init", 5: "loop_condition", 6: "loop_step", 7: "result"}


def _constant(data: bytes) -> object:
    for number, value in _fields(data):
        if number == 1:
            return None
        if number == 2:
            return bool(value)
        if number == 3:
            return value - 2**64 if isinstance(value, int) and value >= 2**63 else value
        if number == 4:
            return value
        if number == 5:
            return struct.unpack("<d", bytes(value))[0] if isinstance(value, bytes) else 0.0
        if number == 6:
            return _text(value)
        if number == 7:
            return bytes(value) if isinstance(value, bytes) else b""
    return None


def _decode_expr(data: bytes) -> Expr:
    node = Expr(id=0, kind="const")
    for number, value in _fields(data):
        if number == 2 and isinstance(value, int):
            node.id = value
        elif isinstance(value, bytes):
            _fill_expr(node, number, value)
    return node


def _fill_expr(node: Expr, number: int, data: bytes) -> None:
    fields = _fields(data)
    if number == 3:
        node.kind, node.value = "const", _constant(data)
    elif number == 4:
        node.kind, node.name = "ident", next((_text(v) for n, v in fields if n == 1), "")
    elif number == 5:
        node.kind = "select"
        for n, v in fields:
            if n == 1 and isinstance(v, bytes):
                node.operand = _decode_expr(v)
            elif n == 2:
                node.name = _text(v)
            elif n == 3:
                node.test_only = bool(v)
    elif number == 6:
        node.kind, node.args = "call", []
        for n, v in fields:
            if n == 1 and isinstance(v, bytes):
                node.operand = _decode_expr(v)
            elif n == 2:
                node.name = _text(v)
            elif n == 3 and isinstance(v, bytes):
                node.args.append(_decode_expr(v))
    elif number == 7:
        node.kind = "list"
        node.args = [_decode_expr(v) for n, v in fields if n == 1 and isinstance(v, bytes)]
        node.optional = frozenset(_int32s(fields, 2))
    elif number == 8:
        _fill_struct(node, fields)
    elif number == 9:
        _fill_comprehension(node, fields)


def _int32s(fields: list[tuple[int, int | bytes]], number: int) -> list[int]:
    """A repeated int32 field, packed or not."""
    out: list[int] = []
    for n, v in fields:
        if n != number:
            continue
        if isinstance(v, int):
            out.append(v)
            continue
        pos = 0
        while pos < len(v):
            value, pos = _varint(v, pos)
            out.append(value)
    return out


def _fill_struct(node: Expr, fields: list[tuple[int, int | bytes]]) -> None:
    name = next((_text(v) for n, v in fields if n == 1), "")
    node.kind, node.name, node.args, node.keys = ("struct" if name else "map"), name, [], []
    optional = set()
    for n, v in fields:
        if n != 2 or not isinstance(v, bytes):
            continue
        entry = _fields(v)
        if any(en == 5 and ev for en, ev in entry):
            optional.add(len(node.args))
        for en, ev in entry:
            if en == 3 and isinstance(ev, bytes):
                node.keys.append(_decode_expr(ev))
            elif en == 4 and isinstance(ev, bytes):
                node.args.append(_decode_expr(ev))
    node.optional = frozenset(optional)


def _fill_comprehension(node: Expr, fields: list[tuple[int, int | bytes]]) -> None:
    node.kind, node.parts = "comprehension", {}
    names = {1: "", 8: "", 3: ""}
    for n, v in fields:
        if n in names:
            names[n] = _text(v)
        elif n in _COMPREHENSION_PARTS and isinstance(v, bytes):
            node.parts[_COMPREHENSION_PARTS[n]] = _decode_expr(v)
    node.vars = (names[1], names[8], names[3])


def _type_kind(data: bytes) -> str:
    """The outer kind of a ``cel.expr.Type``: bool int uint double string bytes list map message null dyn."""
    for number, value in _fields(data):
        if number in (3, 4) and isinstance(value, int):
            return _PRIMITIVES.get(value, "dyn")
        if number == 6:
            return "list"
        if number == 7:
            return "map"
        if number == 9:
            return "message"
        if number == 2:
            return "null"
        if number == 5:
            return "message"  # well-known types (Any, Timestamp, Duration)
        if number == 11:
            return "type"
        if number == 14:
            return "opaque"
    return "dyn"


_PRIMITIVE_NAMES = {0: "dyn", 1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}
_WELL_KNOWN = {1: "any", 2: "google.protobuf.Timestamp", 3: "google.protobuf.Duration"}


def _type_name(data: bytes) -> str:
    """A ``cel.expr.Type`` in cel-go's spelling (``FormatCELType``)."""
    for number, value in _fields(data):
        if number == 1:
            return "dyn"
        if number == 2:
            return "null"
        if number == 3 and isinstance(value, int):
            return _PRIMITIVE_NAMES.get(value, "dyn")
        if number == 4 and isinstance(value, int):
            return f"wrapper({_PRIMITIVE_NAMES.get(value, 'dyn')})"
        if number == 5 and isinstance(value, int):
            return _WELL_KNOWN.get(value, "dyn")
        if not isinstance(value, bytes):
            continue
        if number == 6:
            elem = next((_type_name(v) for n, v in _fields(value) if n == 1 and isinstance(v, bytes)), "dyn")
            return f"list({elem})"
        if number == 7:
            parts = {n: _type_name(v) for n, v in _fields(value) if isinstance(v, bytes)}
            return f"map({parts.get(1, 'dyn')}, {parts.get(2, 'dyn')})"
        if number in (9, 10):
            return _text(value)
        if number == 11:
            return f"type({_type_name(value)})"
        if number == 12:
            return "*error*"
        if number == 14:
            inner = _fields(value)
            name = next((_text(v) for n, v in inner if n == 1), "")
            params = [_type_name(v) for n, v in inner if n == 2 and isinstance(v, bytes)]
            return f"{name}({', '.join(params)})" if params else name
    return "dyn"


def _map_entries(data: bytes) -> tuple[int, bytes | int]:
    key: int = 0
    val: bytes | int = b""
    for n, v in _fields(data):
        if n == 1 and isinstance(v, int):
            key = v
        elif n == 2:
            val = v
    return key, val


def decode_checked(serialized: bytes) -> CheckedAst:
    """Decode a serialized ``CheckedExpr`` or ``ParsedExpr`` (optionally wrapped in ``google.protobuf.Any``).
    A parsed expression has no references or types."""
    expr_field, info_field = 4, 5
    top = _fields(serialized)
    if top and top[0][0] == 1:
        if _text(top[0][1]).endswith("cel.expr.ParsedExpr"):
            expr_field, info_field = 2, 3
        serialized = next(bytes(v) for n, v in top if n == 2 and isinstance(v, bytes))
    references: dict[int, str] = {}
    types: dict[int, str] = {}
    type_names: dict[int, str] = {}
    positions: dict[int, int] = {}
    root = Expr(id=0, kind="const")
    for number, value in _fields(serialized):
        if not isinstance(value, bytes):
            continue
        if number == expr_field:
            root = _decode_expr(value)
        elif number == info_field:
            for n, v in _fields(value):
                if n == 4 and isinstance(v, bytes):
                    key, offset = _map_entries(v)
                    positions[key] = offset if isinstance(offset, int) else 0
        elif number == 2:
            key, ref = _map_entries(value)
            if isinstance(ref, bytes):
                references[key] = next((_text(v) for n, v in _fields(ref) if n == 1), "")
        elif number == 3:
            key, typ = _map_entries(value)
            types[key] = _type_kind(typ) if isinstance(typ, bytes) else "dyn"
            type_names[key] = _type_name(typ) if isinstance(typ, bytes) else "dyn"
    return CheckedAst(root, references, types, positions, type_names)


# ------------------------------------------------------------------------------ worst-case cost bound
#
# Upstream evaluates with cel-go's runtime cost tracking and aborts above CELSelectorExpressionMaxCost; API
# validation rejects expressions whose *estimated* worst case is above the same limit. Neither runtime here
# tracks cost, so the engines compute that worst case statically, with cel-go's cost units (checker/cost.go
# and the Kubernetes library estimator): constants 0; identifiers, field selections, indexing and most
# calls 1; list/map/message literals 10/30/40; string work 0.1 per character; ``matches`` length x pattern/4;
# ``in`` on a list its length; comprehensions their range size times the loop body. Sizes of device values
# are bounded by the API limits, exactly as upstream's DRA size estimator does (DeviceAttributeMaxValueLength
# 64, ResourceSliceMaxAttributesAndCapacitiesPerDevice 32, DeviceMaxDomainLength 63, DeviceMaxIDLength 32,
# DriverNameMaxLength 63). One C++-specific term is added: ``map``/``filter``-style comprehensions copy their
# list accumulator each step in cel-cpp, so they are charged n(n+1)/2 element copies.

INF = 2**63
"""Saturation value of sizes and costs ("unbounded")."""


@dataclass(frozen=True, slots=True)
class Shape:
    """Upper bound of a value's size: characters, bytes, or entries; ``elem``/``key`` bound the entries.
    ``None`` for ``elem``/``key`` means "no entries known" and is neutral in unions."""

    size: int
    elem: Shape | None = None
    key: Shape | None = None


SCALAR = Shape(1)
UNKNOWN = Shape(INF)
_ATTRIBUTE = Shape(64, elem=Shape(64))  # a string of <= 64 characters or a list of <= 64 short values
DEVICE_SHAPES = {
    "device.driver": Shape(63),
    "device.attributes": Shape(32, key=Shape(63), elem=Shape(32, key=Shape(32), elem=_ATTRIBUTE)),
    "device.capacity": Shape(32, key=Shape(63), elem=Shape(32, key=Shape(32), elem=SCALAR)),
    "device.allowMultipleAllocations": SCALAR,
}
_SIZED_KINDS = frozenset({"string", "bytes", "list", "map", "dyn"})


_LIST_PRESERVING = frozenset({"sort", "reverse", "distinct", "slice", "@sortByAssociatedKeys"})
_URL_STRINGS = frozenset({"url", "getScheme", "getHost", "getHostname", "getPort", "getEscapedPath"})


def _cap(value: int) -> int:
    return min(value, INF)


def _tenth(size: int, factor: float = 0.1) -> int:
    """``ceil(size * factor)`` as cel-go's ``MultiplyByCostFactor``."""
    return INF if size >= INF else math.ceil(size * factor)


def _union(a: Shape | None, b: Shape | None) -> Shape | None:
    if a is None or b is None:
        return a if b is None else b
    return Shape(max(a.size, b.size), _union(a.elem, b.elem), _union(a.key, b.key))


def _elem(shape: Shape) -> Shape:
    return shape.elem if shape.elem is not None else UNKNOWN


class CostBound:
    """Compute the worst-case cost of a checked expression (see the section comment)."""

    def __init__(self, ast: CheckedAst) -> None:
        self._ast = ast
        self._scope: dict[str, list[Shape]] = {}

    def total(self) -> int:
        return self._cost(self._ast.root)[0]

    def _kind(self, node: Expr) -> str:
        return self._ast.types.get(node.id, "dyn")

    def _cost(self, node: Expr) -> tuple[int, Shape]:
        handler = getattr(self, "_" + node.kind)
        cost, shape = handler(node)
        return _cap(cost), shape

    def _const(self, node: Expr) -> tuple[int, Shape]:
        value = node.value
        return 0, Shape(len(value)) if isinstance(value, (str, bytes)) else SCALAR

    def _ident(self, node: Expr) -> tuple[int, Shape]:
        local = self._scope.get(node.name)
        if local:
            return 1, local[-1]
        name = self._ast.references.get(node.id, node.name)
        if name in DEVICE_SHAPES:
            # cel-go charges the variable and each field selection; the C++ checker folds them into one name.
            return 1 + name.count("."), DEVICE_SHAPES[name]
        return 1, UNKNOWN if self._kind(node) in _SIZED_KINDS else SCALAR

    def _select(self, node: Expr) -> tuple[int, Shape]:
        assert node.operand is not None
        cost, shape = self._cost(node.operand)
        if node.test_only:
            return cost, SCALAR  # Kubernetes sets PresenceTestHasCost(false)
        return cost + 1, _elem(shape)

    def _list(self, node: Expr) -> tuple[int, Shape]:
        items = [self._cost(e) for e in node.args or []]
        elem: Shape | None = None
        for _, shape in items:
            elem = _union(elem, shape)
        return 10 + sum(c for c, _ in items), Shape(len(items), elem=elem)

    def _map(self, node: Expr) -> tuple[int, Shape]:
        keys = [self._cost(e) for e in node.keys or []]
        values = [self._cost(e) for e in node.args or []]
        key = elem = None
        for (_, ks), (_, vs) in zip(keys, values, strict=True):
            key, elem = _union(key, ks), _union(elem, vs)
        return 30 + sum(c for c, _ in keys + values), Shape(len(values), elem=elem, key=key)

    def _struct(self, node: Expr) -> tuple[int, Shape]:
        # Messages (kubernetes.Quantity/Semver) compare with a unit cost, like upstream's Quantity/Semver.
        return 40 + sum(self._cost(e)[0] for e in node.args or []), SCALAR

    # -- comprehensions ------------------------------------------------------------------------------

    def _comprehension(self, node: Expr) -> tuple[int, Shape]:
        parts = node.parts or {}
        iter_var, iter_var2, accu_var = node.vars
        range_cost, range_shape = self._cost(parts["iter_range"])
        init_cost, init_shape = self._cost(parts["accu_init"])
        if is_bind(node):
            self._push(accu_var, init_shape)
            result_cost, result_shape = self._cost(parts["result"])
            self._pop(accu_var)
            return range_cost + init_cost + result_cost, result_shape
        count = range_shape.size
        first, second = self._iteration_shapes(self._kind(parts["iter_range"]), range_shape, bool(iter_var2))
        accumulates = parts["accu_init"].kind in ("list", "map")
        self._push(
            accu_var, Shape(count, key=init_shape.key, elem=init_shape.elem) if accumulates else init_shape
        )
        self._push(iter_var, first)
        if iter_var2:
            self._push(iter_var2, second)
        cond_cost, _ = self._cost(parts["loop_condition"])
        step_cost, step_shape = self._cost(parts["loop_step"])
        self._pop(iter_var)
        if iter_var2:
            self._pop(iter_var2)
        result_cost, result_shape = self._cost(parts["result"])
        self._pop(accu_var)
        cost = range_cost + init_cost + result_cost + _cap(count * (cond_cost + step_cost))
        if accumulates:
            cost += _cap(count * (count + 1) // 2)  # cel-cpp copies the accumulated list on every step
            result_shape = Shape(count, elem=step_shape.elem, key=step_shape.key)
        return cost, result_shape

    @staticmethod
    def _iteration_shapes(kind: str, shape: Shape, two: bool) -> tuple[Shape, Shape]:
        """Shapes of the iteration variables: a map yields keys (and values), a list its elements (or the
        index and the element); a dyn range may be either."""
        if kind == "map":
            first = shape.key
        elif kind == "list":
            first = SCALAR if two else shape.elem
        else:
            first = _union(shape.key, shape.elem)
        return first or UNKNOWN, shape.elem or UNKNOWN

    def _push(self, name: str, shape: Shape) -> None:
        self._scope.setdefault(name, []).append(shape)

    def _pop(self, name: str) -> None:
        self._scope[name].pop()

    # -- calls -----------------------------------------------------------------------------------------

    def _call(self, node: Expr) -> tuple[int, Shape]:
        operands = ([node.operand] if node.operand is not None else []) + list(node.args or [])
        if node.name in ("_&&_", "_||_"):
            return sum(self._cost(e)[0] for e in operands), SCALAR
        if node.name == "_?_:_":
            (c0, _), (c1, s1), (c2, s2) = (self._cost(e) for e in operands)
            return c0 + max(c1, c2), _union(s1, s2) or UNKNOWN
        costed = [self._cost(e) for e in operands]
        base = sum(c for c, _ in costed)
        shapes = [s for _, s in costed]
        cost, shape = self._call_cost(node, operands, shapes)
        return base + cost, shape

    def _call_cost(self, node: Expr, operands: list[Expr], shapes: list[Shape]) -> tuple[int, Shape]:
        """The function's own cost and result shape, given its operands' shapes (target first)."""
        name = node.name.removeprefix("strings.")
        first = shapes[0] if shapes else SCALAR
        size = first.size
        if name in ("_[_]", "_[?_]", "_?._", "value", "optional.of", "optional.ofNonZeroValue"):
            return 1, (_elem(first) if name in ("_[_]", "_[?_]", "_?._") else first)
        if name in ("orValue", "or"):
            return 1, _union(first, shapes[1]) or UNKNOWN
        if name in ("_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"):
            return max(1, _tenth(min(first.size, shapes[1].size))), SCALAR
        if name == "@in":
            return (shapes[1].size if self._kind(operands[1]) != "map" else 1), SCALAR
        if name == "_+_":
            return self._add(node, shapes)
        if name in ("matches", "find", "findAll"):
            cost = _cap(_tenth(size + 1) * _tenth(shapes[1].size, 0.25))
            result = {"matches": SCALAR, "find": Shape(size), "findAll": Shape(size, elem=Shape(size))}
            return cost, result[name]
        if name == "contains":
            return _cap(_tenth(size) * _tenth(shapes[1].size)), SCALAR
        if name in ("startsWith", "endsWith"):
            return _tenth(shapes[1].size), SCALAR
        if name in ("lowerAscii", "upperAscii", "trim", "reverse", "substring"):
            return _tenth(size), Shape(size)
        if name in ("charAt", "indexOf", "lastIndexOf", "quantity", "isQuantity", "semver", "isSemver"):
            return _tenth(size), SCALAR if name != "charAt" else Shape(1)
        if name == "quote":
            return _tenth(size), Shape(_cap(2 * size + 2))
        if name == "replace":
            # Worst case: an empty needle inserts the replacement around every character.
            return _tenth(size, 0.2), Shape(_cap(size + (size + 1) * shapes[2].size))
        if name == "split":
            return _tenth(size, 0.2), Shape(_cap(size + 1), elem=Shape(size))
        if name == "join":
            separator = shapes[1].size if len(shapes) > 1 else 0
            result = _cap(size * (_elem(first).size + separator))
            return _tenth(result, 0.2), Shape(result)
        if name == "format":
            result = _cap(size + shapes[1].size * max(_elem(shapes[1]).size, 64))
            return _tenth(size), Shape(result)
        if name in ("isSorted", "sum", "min", "max"):
            return _cap(size * (1 + _tenth(_elem(first).size))), _elem(first)
        if name == "includes":
            return max(1, size), SCALAR
        if name in ("sets.contains", "sets.intersects", "sets.equivalent"):
            return _cap(size * shapes[1].size), SCALAR
        if name in ("string", "bytes"):
            text = first.size if self._kind(operands[0]) in ("string", "bytes") else 64
            return max(1, _tenth(text)), Shape(_cap(text * (4 if name == "bytes" else 1)))
        if name in _LIST_PRESERVING:
            # sort / sortBy: n log n comparisons (bounded by n^2 here); distinct: n^2 equality tests.
            cost = (
                _cap(first.size * first.size) if name in ("distinct", "sort", "@sortByAssociatedKeys") else 1
            )
            return max(1, cost), Shape(first.size, elem=first.elem, key=first.key)
        if name == "flatten":
            depth = operands[1].value if len(operands) > 1 and isinstance(operands[1].value, int) else 1
            shape = first
            for _ in range(max(1, min(depth, 8))):
                inner = _elem(shape)
                shape = Shape(_cap(shape.size * inner.size), elem=inner.elem)
            return max(1, shape.size), shape
        if node.name == "lists.range":
            count = (
                operands[0].value
                if operands[0].kind == "const" and isinstance(operands[0].value, int)
                else INF
            )
            return max(1, _cap(max(count, 0))), Shape(max(count, 0), elem=SCALAR)
        if name in _URL_STRINGS:
            # A URL keeps its text's length; every part of it is at most that long.
            return 1, Shape(first.size)
        if name == "getQuery":
            return 1, Shape(first.size, key=Shape(first.size), elem=Shape(first.size, elem=Shape(first.size)))
        if name == "__dra_validate__":
            return 1, Shape(1, elem=Shape(16, elem=Shape(512)))  # at most one list of a few messages
        if name == "dyn":
            return 1, first
        if name == "cel.@mapInsert":
            return 1, Shape(
                _cap(size + 1), elem=_union(first.elem, shapes[-1]), key=_union(first.key, shapes[1])
            )
        return 1, UNKNOWN if self._kind(node) in _SIZED_KINDS else SCALAR

    def _add(self, node: Expr, shapes: list[Shape]) -> tuple[int, Shape]:
        kind = self._kind(node)
        total = _cap(shapes[0].size + shapes[1].size)
        if kind in ("string", "bytes"):
            return _tenth(total), Shape(total)
        if kind == "list":
            elem = _union(shapes[0].elem, shapes[1].elem)
            return 1, Shape(total, elem=elem)
        return 1, SCALAR


def is_bind(node: Expr) -> bool:
    """``cel.bind(v, init, result)`` expands to a comprehension over ``[]`` with a false condition."""
    parts = node.parts or {}
    rng, cond = parts.get("iter_range"), parts.get("loop_condition")
    return (
        rng is not None
        and rng.kind == "list"
        and not rng.args
        and cond is not None
        and cond.kind == "const"
        and cond.value is False
        and node.vars[2] != "@result"
    )


def worst_case_cost(ast: CheckedAst) -> int:
    """Upper bound of one evaluation's cost in cel-go units (INF when unbounded)."""
    return CostBound(ast).total()
