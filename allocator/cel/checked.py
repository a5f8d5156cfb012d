"""Checked CEL expressions as plain trees: a reader for cel-spec's serialized ``CheckedExpr``.

The C++ engine serializes a compiled expression as ``google.protobuf.Any`` holding ``cel.expr.CheckedExpr``
(cel-spec ``proto/cel/expr/checked.proto`` and ``syntax.proto``). The few fields the analyses need (the
tree, the checker's references, overload ids and types, source positions) are read with a minimal
wire-format reader, so no generated proto module is required. Every analysis of a selector (cost, reads,
validators, source rewrites) works on these trees.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

__all__ = ["CheckedAst", "Expr", "decode_checked", "is_bind"]


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
        out: list[Expr] = []
        stack = [self]
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(reversed(node.children()))
        return out


@dataclass(slots=True)
class CheckedAst:
    """A decoded ``CheckedExpr``: the tree plus the checker's side tables (by expression id): ``types``
    holds each node's outer kind (``_type_kind``), ``type_names`` its full type in cel-go's spelling
    (``list(int)``, ``map(string, dyn)``, ``kubernetes.Quantity``); ``overloads`` the overload ids the checker
    found for each call (several when an operand is dyn)."""

    root: Expr
    references: dict[int, str]
    types: dict[int, str]
    positions: dict[int, int]
    type_names: dict[int, str] = field(default_factory=dict)
    overloads: dict[int, tuple[str, ...]] = field(default_factory=dict)


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
    overloads: dict[int, tuple[str, ...]] = {}
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
                fields = _fields(ref)
                references[key] = next((_text(v) for n, v in fields if n == 1), "")
                ids = tuple(_text(v) for n, v in fields if n == 3)
                if ids:
                    overloads[key] = ids
        elif number == 3:
            key, typ = _map_entries(value)
            types[key] = _type_kind(typ) if isinstance(typ, bytes) else "dyn"
            type_names[key] = _type_name(typ) if isinstance(typ, bytes) else "dyn"
    return CheckedAst(root, references, types, positions, type_names, overloads)


def is_bind(node: Expr) -> bool:
    """``cel.bind(v, init, result)`` expands to a comprehension over ``[]`` with a false condition whose
    accumulator is the bound variable, never a macro's (``@result``; ``__result__`` in older parsers): the
    test cel-go's cost estimator (``isBind``) and both engines' bounds use."""
    parts = node.parts or {}
    rng, cond = parts.get("iter_range"), parts.get("loop_condition")
    return (
        rng is not None
        and rng.kind == "list"
        and not rng.args
        and cond is not None
        and cond.kind == "const"
        and cond.value is False
        and node.vars[2] not in ("@result", "__result__")
    )
