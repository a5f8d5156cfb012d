"""Units of the cost estimate (``allocator.cel.cost``): cel-go's size and cost ranges, saturating at 2^64-1,
and the type names of the checked tree read as cel-go's type kinds."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "LIST_CREATE",
    "MAP_CREATE",
    "MAX",
    "ONE",
    "REGEX_FACTOR",
    "STRING_FACTOR",
    "STRUCT_CREATE",
    "UNKNOWN",
    "ZERO",
    "Entries",
    "Range",
    "fixed",
    "is_scalar",
    "kind",
    "params",
]

MAX = 2**64 - 1
"""cel-go's ``math.MaxUint64``: an unknown size or an unbounded cost."""

_TWO_TO_64 = float(2**64)
STRING_FACTOR = 0.1  # common.StringTraversalCostFactor
REGEX_FACTOR = 0.25  # common.RegexStringLengthCostFactor
LIST_CREATE, MAP_CREATE, STRUCT_CREATE = 10, 30, 40  # common.*CreateBaseCost


def _add(x: int, y: int) -> int:
    return min(x + y, MAX)


def _mul(x: int, y: int) -> int:
    return min(x * y, MAX)


def _factor_of(x: int, factor: float) -> int:
    """``multiplyByCostFactor``: ``ceil(x * factor)`` in float64, saturating."""
    xf = float(x)
    if xf > 0 and factor > 0 and xf > float(MAX) / factor:
        return MAX
    product = math.ceil(xf * factor)
    return MAX if product >= _TWO_TO_64 else int(product)


@dataclass(frozen=True, slots=True)
class Range:
    """A size or cost estimate: cel-go's ``SizeEstimate`` / ``CostEstimate`` (min and max)."""

    min: int
    max: int

    def __add__(self, other: Range) -> Range:
        return Range(_add(self.min, other.min), _add(self.max, other.max))

    def __mul__(self, other: Range) -> Range:
        return Range(_mul(self.min, other.min), _mul(self.max, other.max))

    def factor(self, factor: float) -> Range:
        return Range(_factor_of(self.min, factor), _factor_of(self.max, factor))

    def union(self, other: Range) -> Range:
        return Range(min(self.min, other.min), max(self.max, other.max))


def fixed(value: int) -> Range:
    return Range(value, value)


ZERO, ONE = fixed(0), fixed(1)
UNKNOWN = Range(0, MAX)


@dataclass(frozen=True, slots=True)
class Entries:
    """``entrySizeEstimate``: a container's kind and the sizes of its keys (indices) and values."""

    container: str
    key: Range
    value: Range

    def union(self, other: Entries | None) -> Entries | None:
        if other is None:
            return None
        return Entries(self.container, self.key.union(other.key), self.value.union(other.value))


# ------------------------------------------------------------------------------------------- types


def _split_params(text: str) -> list[str]:
    params, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            params.append(text[start:i].strip())
            start = i + 1
    params.append(text[start:].strip())
    return [p for p in params if p]


def params(type_name: str) -> list[str]:
    """The type parameters: ``list(int)`` -> [int], ``map(string, dyn)`` -> [string, dyn]."""
    if "(" not in type_name or not type_name.endswith(")"):
        return []
    return _split_params(type_name[type_name.index("(") + 1 : -1])


_SCALARS = frozenset(
    {"bool", "int", "uint", "double", "google.protobuf.Duration", "google.protobuf.Timestamp"}
)
_PRIMITIVES = _SCALARS | {"string", "bytes", "dyn", "null", "any"}


def kind(type_name: str) -> str:
    """cel-go's ``Kind`` of a type: list, map, optional, type, a primitive, or struct (a message)."""
    outer = type_name.split("(", 1)[0]
    if outer in ("list", "map", "type", "optional_type"):
        return outer
    if outer in _PRIMITIVES:
        return outer
    if outer == "wrapper":
        return "struct"
    return "struct" if "." in outer else "dyn"


def is_scalar(type_name: str) -> bool:
    if type_name in _SCALARS:
        return True
    if type_name.startswith("optional_type("):
        ps = params(type_name)
        return bool(ps) and is_scalar(ps[0])
    return False
