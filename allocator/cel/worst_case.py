"""A static worst-case bound of one evaluation's cost, standing in for cel-go's run-time cost tracking.

Upstream's scheduler evaluates with cel-go's run-time cost tracking and aborts above
CELSelectorExpressionMaxCost. Neither runtime here tracks cost, so the engines bound the worst case
statically, with cel-go's cost units (``interpreter/runtimecost.go`` and the Kubernetes library's
``CallCost``): constants 0; identifiers, field selections, indexing and most calls 1; list/map/message
literals 10/30/40; string work 0.1 per character; ``matches`` length x pattern/4; ``in`` on a list its
length; comprehensions their range size times the loop body. Sizes are those of the values: a literal's
elements are known, device values are bounded by the API limits (DeviceAttributeMaxValueLength 64,
ResourceSliceMaxAttributesAndCapacitiesPerDevice 32, DeviceMaxDomainLength 63, DeviceMaxIDLength 32,
DriverNameMaxLength 63). One C++-specific term is added: ``map``/``filter``-style comprehensions copy their
list accumulator each step in cel-cpp, so they are charged n(n+1)/2 element copies.

This is not API validation's estimate (``allocator.cel.cost``): that one knows no element size of a
literal list (``["a", "b"].join("-")`` is unbounded there, and refused by the API server, but costs a few
units when upstream's scheduler runs it), so it cannot stand for the run-time limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from allocator.cel.checked import CheckedAst, Expr, is_bind

__all__ = ["INF", "CostBound", "Shape", "worst_case_cost"]

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
            found = {"matches": SCALAR, "find": Shape(size), "findAll": Shape(size, elem=Shape(size))}
            return cost, found[name]
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
            length = _cap(size * (_elem(first).size + separator))
            return _tenth(length, 0.2), Shape(length)
        if name == "format":
            length = _cap(size + shapes[1].size * max(_elem(shapes[1]).size, 64))
            return _tenth(size), Shape(length)
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
        if node.name == "format.__dra_named__":
            return 1, Shape(1, elem=SCALAR)  # at most one named format
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


def worst_case_cost(ast: CheckedAst) -> int:
    """Upper bound of one evaluation's cost in cel-go units (INF when unbounded)."""
    return CostBound(ast).total()
