"""Checks upstream runs on a checked expression after type checking (cel-go AST validators).

``string_format_errors`` is ext.Strings' ``stringFormatValidator`` (``allocator.cel.lib_strformat``):
a constant format string applied to a list literal is checked against the elements' static types.

Kubernetes' base environment (``k8s.io/apiserver/pkg/cel/environment/base.go`` v0.37.2) turns on
``cel.ValidateHomogeneousAggregateLiterals``: every element of a list literal, every key and every value of
a map literal must have the same type, and ``dyn`` is a type of its own there (``[attr, 5]`` is refused,
``[attr, attr]`` is not). Literals anywhere inside a ``format`` call (ext.Strings) or ``cel.@block``
(ext.Bindings) are exempt. An optional element (``[?x]``, ``{?k: v}``) counts with its value type.

The C++ checker joins mixed element types into ``dyn`` instead, so the same rule is applied here on its
checked tree, with upstream's message (``expected type 'int' but found 'string'``).
"""

from __future__ import annotations

from allocator.cel.checked import CheckedAst, Expr
from allocator.cel.lib_strformat import format_errors

__all__ = [
    "HIDDEN_FORMAT",
    "hidden_name_errors",
    "homogeneous_literal_errors",
    "location",
    "string_format_errors",
]

HIDDEN_FORMAT = "__dra_format__"
"""The function an engine may run in place of ``string.format`` (declared, but not for expressions)."""

_EXEMPT = frozenset({"format", "cel.@block"})


def location(src: str, pos: int) -> str:
    """``<input>:line:column`` (1-based) of an offset in the source, as cel-go prints it."""
    line = src.count("\n", 0, pos) + 1
    column = pos - (src.rfind("\n", 0, pos) + 1) + 1
    return f"<input>:{line}:{column}"


def homogeneous_literal_errors(ast: CheckedAst, src: str) -> list[str]:
    """One ``ERROR: <where>: expected type ... but found ...`` line per mixed literal (list: the first
    mismatch only, as upstream; map: each mismatching key and value)."""
    errors: list[str] = []
    names = ast.type_names
    for node in _checked_literals(ast.root):
        if node.kind == "list":
            first: str | None = None
            for index, element in enumerate(node.args or []):
                found = _value_type(names.get(element.id, "dyn"), index in node.optional)
                if first is None:
                    first = found
                elif found != first:
                    errors.append(_mismatch(ast, src, element, first, found))
                    break
        else:
            key_type = value_type = None
            for index, (key, value) in enumerate(zip(node.keys or [], node.args or [], strict=True)):
                kt = names.get(key.id, "dyn")
                vt = _value_type(names.get(value.id, "dyn"), index in node.optional)
                if key_type is None or value_type is None:
                    key_type, value_type = kt, vt
                    continue
                if kt != key_type:
                    errors.append(_mismatch(ast, src, key, key_type, kt))
                if vt != value_type:
                    errors.append(_mismatch(ast, src, value, value_type, vt))
    return errors


def _checked_literals(root: Expr) -> list[Expr]:
    """List and map literals not inside an exempt call."""
    out: list[Expr] = []
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        node, exempt = stack.pop()
        if node.kind == "call" and node.name in _EXEMPT:
            exempt = True
        if node.kind in ("list", "map") and not exempt:
            out.append(node)
        stack.extend((child, exempt) for child in node.children())
    return out


def _value_type(name: str, optional: bool) -> str:
    if optional and name.startswith("optional_type(") and name.endswith(")"):
        return name[len("optional_type(") : -1]
    return name


def _mismatch(ast: CheckedAst, src: str, node: Expr, expected: str, found: str) -> str:
    where = location(src, ast.positions.get(node.id, 0))
    return f"ERROR: {where}: expected type '{expected}' but found '{found}'"


def string_format_errors(ast: CheckedAst, src: str) -> list[str]:
    """One error line per ``"<constant>".format([<literal>])`` whose clauses do not fit the elements."""
    errors = []
    for node in ast.root.walk():
        operand, args = node.operand, node.args or []
        if not (node.kind == "call" and node.name == "format" and operand is not None and len(args) == 1):
            continue
        if operand.kind != "const" or not isinstance(operand.value, str) or args[0].kind != "list":
            continue
        types = [ast.type_names.get(e.id, "dyn") for e in args[0].args or []]
        problem = format_errors(operand.value, types)
        if problem:
            errors.append(f"ERROR: {location(src, ast.positions.get(node.id, 0))}: {problem}")
    return errors


def hidden_name_errors(parsed: CheckedAst, src: str) -> list[str]:
    """Expressions may not call the functions engines use in place of upstream's (named ``__dra_...``,
    e.g. ``HIDDEN_FORMAT``): upstream has no such function. ``parsed``: the expression as written."""
    return [
        f"ERROR: {location(src, parsed.positions.get(node.id, 0))}: undeclared reference to '{node.name}'"
        for node in parsed.root.walk()
        if node.kind == "call" and "__dra_" in node.name
    ]


def list_index_errors(ast: CheckedAst, src: str, hidden: dict[str, str]) -> list[str]:
    """``library.Lists``' ``indexOf``/``lastIndexOf`` take ``list(A)`` and ``A``: a list of a known element
    type searched for a value of another known type does not compile. ``hidden`` maps the upstream names to
    the functions an engine runs in their place."""
    names = {v: k for k, v in hidden.items()}
    errors = []
    for node in ast.root.walk():
        if node.kind != "call" or node.name not in names or node.operand is None or not node.args:
            continue
        receiver = ast.type_names.get(node.operand.id, "dyn")
        value = ast.type_names.get(node.args[0].id, "dyn")
        element = receiver[5:-1] if receiver.startswith("list(") else None
        if element not in (None, "dyn") and value != "dyn" and value != element:
            where = location(src, ast.positions.get(node.id, 0))
            errors.append(
                f"ERROR: {where}: found no matching overload for '{names[node.name]}' applied to "
                f"'{receiver}.({value})'"
            )
    return errors
