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

The checked-expression reader is ``allocator.cel.checked``, the cost estimate ``allocator.cel.cost``.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from allocator.cel import AttributeValue, Version
from allocator.quantity import QuantityError, parse_quantity

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "LibraryError",
    "SemverError",
    "SemverValue",
    "UnsupportedValue",
    "cel_equal",
    "check_int64",
    "compare_semver",
    "convert_attributes",
    "derived_attribute_value",
    "includes",
    "index_of",
    "list_is_sorted",
    "list_max",
    "list_min",
    "list_sum",
    "map_of_pairs",
    "merge_maps",
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
    if (no_digits := _NO_DIGITS.fullmatch(text)) is not None:
        # ParseQuantity reads a missing number as 0: "Mi", "-", ".", "+.e2" are all zero quantities.
        suffix = no_digits.group(1)
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
    value = value * int(10**scale)  # scale >= 0 here; int ** int is typed as possibly float
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
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(cel_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(cel_equal(a[k], b[k]) for k in a)
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


def _ordered(items: Sequence[object], function: str) -> Sequence[Any]:
    """The items once ``_comparable`` found them of one ordered kind (so ``<=``, ``sum``, ``min`` apply)."""
    _comparable(items, function)
    return items


def list_is_sorted(items: Sequence[object]) -> bool:
    ordered = _ordered(items, "isSorted")
    return all(a <= b for a, b in itertools.pairwise(ordered))


def list_sum(items: Sequence[object]) -> int | float:
    """Sum of a numeric list; an empty list sums to int 0 (upstream: the zero of the element type)."""
    if _comparable(items, "sum") != "number":
        raise LibraryError("no such overload: sum on a non-numeric list")
    total: int | float = sum(_ordered(items, "sum"))
    return check_int64(total) if isinstance(total, int) else total


def list_min(items: Sequence[object]) -> object:
    ordered = _ordered(items, "min")
    if not ordered:
        raise LibraryError("min called on empty list")
    return min(ordered)


def list_max(items: Sequence[object]) -> object:
    ordered = _ordered(items, "max")
    if not ordered:
        raise LibraryError("max called on empty list")
    return max(ordered)


def map_of_pairs(pairs: Sequence[Sequence[object]]) -> dict[object, object]:
    """``transformMap``'s result from its ``[key, value]`` pairs (keys are the receiver's, so distinct)."""
    return {pair[0]: pair[1] for pair in pairs}


def merge_maps(entries: Sequence[Mapping[object, object]]) -> dict[object, object]:
    """``transformMapEntry``'s result: the entries' union; a key given twice is an error."""
    merged: dict[object, object] = {}
    for entry in entries:
        for key, value in entry.items():
            if key in merged:
                raise LibraryError(f"insert failed: key {key} already exists")
            merged[key] = value
    return merged


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
        # One element kind (checked above): the tuple is one of AttributeValue's homogeneous tuples.
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
    if isinstance(value, (bool, int, str)):
        return value
    raise LibraryError(f"result of type {_cel_type_name(value)} is not a valid attribute value")


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
