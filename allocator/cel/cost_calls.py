"""The estimated cost of one function call (the table of ``allocator.cel.cost``).

cel-go asks, for each overload the checker found, in this order (``checker/cost.go`` ``functionCost``):
the extension libraries' overload estimators (ext.Lists v3 ``list_*``, ext.Sets ``list_sets_*``; ext.Strings
v2 registers none), then Kubernetes' estimator by function name (``k8s.io/apiserver/pkg/cel/library/cost.go``
``EstimateCallCost``), then cel-go's own rules by overload id; any other call costs 1. Every answer but the
logical operators' and the conditional's adds the arguments' costs (the target's is added by the caller).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from allocator.cel.checked import Expr
from allocator.cel.cost_units import (
    LIST_CREATE,
    MAX,
    ONE,
    REGEX_FACTOR,
    STRING_FACTOR,
    ZERO,
    Entries,
    Range,
    fixed,
    kind,
)

__all__ = ["Call", "Sizes", "estimate"]

MAX_NAME_FORMAT_REGEX = 128
"""``MaxNameFormatRegexSize`` (``k8s.io/apiserver/pkg/cel/limits.go``)."""
MAX_FORMAT = 64
"""``MaxFormatSize``: the longest named format."""


class Sizes(Protocol):
    """What the estimator knows about the operands (``allocator.cel.cost``'s coster)."""

    def size(self, node: Expr) -> Range | None: ...

    def size_or_unknown(self, node: Expr) -> Range: ...

    def entries(self, node: Expr) -> Entries | None: ...

    def set_entries(self, node: Expr, entries: Entries | None) -> None: ...

    def type_of(self, node: Expr) -> str: ...

    def element(self, target: Expr) -> tuple[str, Range] | None: ...


@dataclass(slots=True)
class Call:
    """One overload of a call: upstream's function name, the overload id, target and arguments."""

    node: Expr
    name: str
    overload: str
    target: Expr | None
    args: list[Expr]
    arg_costs: list[Range]

    def arg_sum(self) -> Range:
        total = ZERO
        for cost in self.arg_costs:
            total += cost
        return total


Estimate = tuple[Range, Range | None]
"""The call's cost (arguments included) and its result's size, if known."""


def estimate(sizes: Sizes, call: Call) -> Estimate:
    for rule in (_extension, _kubernetes, _builtin):
        found = rule(sizes, call)
        if found is not None:
            return found
    return ONE + call.arg_sum(), None


# ------------------------------------------------------------------------- ext.Lists v3, ext.Sets


def _allocating_list(factor: float, size: Range) -> tuple[Range, Range]:
    """``estimateAllocatingListCall``: the list's size times the factor, the call and the allocation."""
    return size.factor(factor) + ONE + fixed(LIST_CREATE), size


def _literal_uint(node: Expr, default: int) -> int:
    """``nodeAsUintValue``: an int literal (negative as 0), else the default."""
    value = node.value
    if node.kind != "const" or not isinstance(value, int) or isinstance(value, bool):
        return default
    return max(value, 0)


def _extension(sizes: Sizes, call: Call) -> Estimate | None:
    target, args, overload = call.target, call.args, call.overload
    found: tuple[Range, Range | None] | None = None
    if overload == "list_slice" and target is not None and len(args) == 2:
        size = sizes.size_or_unknown(target)
        start, end = _literal_uint(args[0], 0), _literal_uint(args[1], size.max)
        found = _allocating_list(1, fixed(max(end - start, 0) if end >= start else MAX))
    elif overload in ("list_flatten", "list_flatten_int") and target is not None and len(args) <= 1:
        depth = _literal_uint(args[0], MAX) if args else 1
        found = _allocating_list(float(depth), sizes.size_or_unknown(target))
    elif overload in ("lists_range", "list_range") and target is None and len(args) == 1:
        found = _allocating_list(1, fixed(_literal_uint(args[0], MAX)))
    elif overload == "list_reverse" and target is not None and not args:
        found = _allocating_list(1, sizes.size_or_unknown(target))
    elif overload == "list_distinct" and target is not None and not args:
        size = sizes.size_or_unknown(target)
        found = _allocating_list(2.0, size * size)
    elif overload.startswith("list_") and overload.endswith("_sort") and target is not None and not args:
        found = _sort(sizes, target, overload)
    elif overload.startswith("list_") and overload.endswith("_sortByAssociatedKeys") and len(args) == 1:
        found = _sort(sizes, args[0], overload)
    elif overload in _SETS and len(args) == 2:
        product = sizes.size_or_unknown(args[0]) * sizes.size_or_unknown(args[1])
        found = product.factor(_SETS[overload]) + ONE, None
    if found is None:
        return None
    return found[0] + call.arg_sum(), found[1]


_SETS = {"list_sets_contains_list": 1.0, "list_sets_intersects_list": 1.0, "list_sets_equivalent_list": 2.0}


def _sort(sizes: Sizes, node: Expr, overload: str) -> tuple[Range, Range]:
    size = sizes.size_or_unknown(node)
    factor = 2.0 + (STRING_FACTOR if overload.split("_")[1] in ("string", "bytes") else 0.0)
    return _allocating_list(factor, size * size)


# ------------------------------------------------------------------------------ Kubernetes' library

_UNIT = frozenset(
    {
        "masked",
        "prefixLength",
        "family",
        "isUnspecified",
        "isLoopback",
        "isLinkLocalMulticast",
        "isLinkLocalUnicast",
        "isGlobalUnicast",
        "format.named",
        "sign",
        "asInteger",
        "isInteger",
        "asApproximateFloat",
        "isGreaterThan",
        "isLessThan",
        "compareTo",
        "add",
        "sub",
        "major",
        "minor",
        "patch",
        "getScheme",
        "getHostname",
        "getHost",
        "getPort",
        "getEscapedPath",
        "getQuery",
    }
)
_TRAVERSALS = frozenset({"isSorted", "sum", "max", "min", "indexOf", "lastIndexOf", "includes"})
_STRING_SCANS = frozenset({"cidr", "isIP", "isCIDR", "quantity", "isQuantity", "semver", "isSemver"})
_UNIT_EQUALITY = ("kubernetes.Quantity", "kubernetes.Semver", "net.IP", "net.CIDR")


def _kubernetes(sizes: Sizes, call: Call) -> Estimate | None:
    found = _kubernetes_call(sizes, call)
    if found is None:
        return None
    return found[0] + call.arg_sum(), found[1]


def _kubernetes_call(sizes: Sizes, call: Call) -> Estimate | None:
    name, target, args = call.name, call.target, call.args
    size = sizes.size_or_unknown
    if name in _UNIT:
        return ONE, None
    if name in _TRAVERSALS and target is not None:
        element = sizes.element(target)
        if element is not None:
            each = ONE
            if kind(element[0]) in ("string", "bytes"):
                each = each + element[1].factor(STRING_FACTOR)
            return size(target) * each, None
        if name == "includes":
            return size(target) * ONE, None
        return size(target).factor(STRING_FACTOR), None
    if name == "url" and target is None and len(args) == 1:
        found = size(args[0])
        return found.factor(STRING_FACTOR), found
    if name in ("lowerAscii", "upperAscii", "substring", "trim") and target is not None:
        found = size(target)
        return found.factor(STRING_FACTOR), found
    if name == "replace" and target is not None and len(args) >= 2:
        return _replace(size(target), size(args[0]), size(args[1]))
    if name == "split" and target is not None:
        found = size(target)
        most = found.max
        if len(args) > 1 and args[1].kind == "const" and type(args[1].value) is int:
            most = args[1].value % 2**64  # uint64(i)
        return found.factor(2 * STRING_FACTOR), Range(0, most)
    if name == "join" and target is not None:
        return _join(sizes, call, target)
    if name in ("find", "findAll") and target is not None and args:
        found = size(target)
        text = (found + ONE).factor(STRING_FACTOR)
        return text * size(args[0]).factor(REGEX_FACTOR), Range(0, found.max)
    if name in _STRING_SCANS and target is None and args:
        return size(args[0]).factor(STRING_FACTOR), None
    if name == "ip":
        if call.overload == "cidr_ip" or target is not None:
            return ONE, None
        if args:
            return size(args[0]).factor(STRING_FACTOR), None
    if name == "ip.isCanonical" and args:
        return size(args[0]).factor(2 * STRING_FACTOR), None
    if name in ("containsIP", "containsCIDR") and args:
        return _contains_net(sizes, call), None
    if name == "validate" and args:
        return size(args[0]).factor(STRING_FACTOR).factor(MAX_NAME_FORMAT_REGEX * REGEX_FACTOR), None
    if name == "_==_" and len(args) == 2:
        return _kubernetes_equality(sizes, args[0], args[1])
    return None


def _replace(text: Range, needle: Range, replacement: Range) -> Estimate:
    """Kubernetes' ``replace``: how many replacements fit, and what is left of the text."""
    count_max = retained_max = count_min = retained_min = 0
    if needle.min == 0:
        count_max = text.max + 1 if text.max < MAX else text.max
        retained_max = text.max
    elif replacement.max <= needle.min:
        retained_max = text.max
    else:
        count_max = _ceil_div(text.max, needle.min)
    if needle.max == 0:
        count_min = text.min + 1 if text.min < MAX else text.min
        retained_min = text.min
    elif needle.max <= replacement.min:
        retained_min = text.min
    else:
        count_min = _ceil_div(text.min, needle.max)
    result = Range(count_min, count_max) * replacement + Range(retained_min, retained_max)
    return text.factor(2 * STRING_FACTOR), result


def _ceil_div(x: int, y: int) -> int:
    """``uint64(math.Ceil(float64(x) / float64(y)))``."""
    value = math.ceil(float(x) / float(y))
    return MAX if value >= float(2**64) else int(value)


def _join(sizes: Sizes, call: Call, target: Expr) -> Estimate:
    count = sizes.size_or_unknown(target)
    element = sizes.element(target)
    result = count * element[1] if element is not None else ZERO
    if call.args:
        separators = Range(max(count.min - 1, 0), max(count.max - 1, 0))
        result = result + sizes.size_or_unknown(call.args[0]) * separators
    return result.factor(STRING_FACTOR), result


def _contains_net(sizes: Sizes, call: Call) -> Range:
    address = Range(4, 16)
    cost = (address + address).factor(STRING_FACTOR)
    if call.name == "containsCIDR":
        cost = cost + address.factor(STRING_FACTOR) + ONE
    if call.overload in ("cidr_contains_ip_string", "cidr_contains_cidr_string"):
        cost = cost + sizes.size_or_unknown(call.args[0]).factor(STRING_FACTOR)
    return cost


def _kubernetes_equality(sizes: Sizes, lhs: Expr, rhs: Expr) -> Estimate | None:
    left, right = sizes.type_of(lhs), sizes.type_of(rhs)
    if left != right:
        return None
    if left in _UNIT_EQUALITY:
        return ONE, None
    if left == "kubernetes.NamedFormat":
        return Range(1, MAX_FORMAT).factor(STRING_FACTOR), None
    if left == "kubernetes.URL":
        size = ONE
        computed = sizes.size(rhs)  # upstream reads the right operand's size for both sides
        if computed is not None:
            size = computed
        return Range(1, size.max).factor(STRING_FACTOR), None
    return None


# ---------------------------------------------------------------------------------------- cel-go's

_ORDERINGS = frozenset(
    f"{op}_{t}" for op in ("less", "greater", "less_equals", "greater_equals") for t in ("string", "bytes")
)


def _builtin(sizes: Sizes, call: Call) -> Estimate | None:
    overload, target, args = call.overload, call.target, call.args
    size = sizes.size_or_unknown
    arg_sum = call.arg_sum()
    if overload == "string_format" and target is not None:
        return size(target).factor(STRING_FACTOR) + arg_sum, None
    if overload == "string_to_bytes" and len(args) == 1:
        found = size(args[0])
        return found.factor(STRING_FACTOR) + arg_sum, Range(found.min, _clamp(found.max * 4))
    if overload == "bytes_to_string" and len(args) == 1:
        found = size(args[0])
        return found.factor(STRING_FACTOR) + arg_sum, Range(found.min // 4, found.max)
    if overload == "strings_quote" and len(args) == 1:
        found = size(args[0])
        return found.factor(STRING_FACTOR) + arg_sum, Range(found.min + 2, _clamp(found.max * 2 + 2))
    if overload in ("starts_with_string", "ends_with_string") and len(args) == 1:
        return size(args[0]).factor(STRING_FACTOR) + arg_sum, None
    if overload == "in_list" and len(args) == 2:
        return size(args[1]).factor(1) + arg_sum, None
    if overload in ("matches", "matches_string"):
        return _matches(sizes, call)
    if overload == "contains_string" and target is not None and len(args) == 1:
        found = size(target).factor(STRING_FACTOR) * size(args[0]).factor(STRING_FACTOR)
        return found + arg_sum, None
    if overload in ("logical_or", "logical_and"):
        lhs, rhs = call.arg_costs[0], call.arg_costs[1]
        return Range(lhs.min, (lhs + rhs).max), None
    if overload == "conditional":
        result = size(args[1]).union(size(args[2]))
        entries = sizes.entries(args[1])
        sizes.set_entries(call.node, entries.union(sizes.entries(args[2])) if entries else None)
        cond, yes, no = call.arg_costs
        return cond + yes.union(no), result
    if overload in ("add_string", "add_bytes", "add_list") and len(args) == 2:
        result = size(args[0]) + size(args[1])
        entries = sizes.entries(args[0])
        if entries is not None:
            sizes.set_entries(call.node, entries.union(sizes.entries(args[1])))
        if overload == "add_list":
            return ONE + arg_sum, result
        return result.factor(STRING_FACTOR) + arg_sum, result
    if overload in _ORDERINGS or overload in ("equals", "not_equals"):
        smallest = min(size(args[0]).max, size(args[1]).max)
        return Range(1 if smallest > 0 else 0, smallest).factor(STRING_FACTOR) + arg_sum, None
    return None


def _clamp(value: int) -> int:
    return min(value, MAX)


def _matches(sizes: Sizes, call: Call) -> Estimate | None:
    if call.overload == "matches_string" and call.target is not None and len(call.args) == 1:
        text, regex = call.target, call.args[0]
    elif call.overload == "matches" and call.target is None and len(call.args) == 2:
        text, regex = call.args
    else:
        return None
    text_cost = (sizes.size_or_unknown(text) + ONE).factor(STRING_FACTOR)
    regex_cost = sizes.size_or_unknown(regex).factor(REGEX_FACTOR)
    return text_cost * regex_cost + call.arg_sum(), None
