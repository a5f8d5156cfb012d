"""Where cel-expr's equality is not upstream's: a version attribute compared with ``==`` to another type.

Upstream's ``Semver.Equal`` refuses a value of another type, so ``device.attributes["d"].version ==
"1.0.0"`` is a "no such overload" error on a device whose ``version`` is a version attribute (a string
attribute of the same name compares as usual). cel-cpp's heterogeneous equality answers false instead, and
has no hook for a message type's equality.

So the engine keeps two programs for an expression that compares a direct constant attribute lookup
(``device.attributes["d"].id`` or ``["d"]["id"]``) with ``==`` to a value whose static type is neither
``dyn`` nor ``kubernetes.Semver``: the fast one, and a guarded one in which that lookup is passed through
``__dra_not_semver__``, which refuses a semver with upstream's error. Evaluation picks the guarded program
only for a device that has a version at one of those keys (``guard_keys``), so the common string
comparisons keep their native speed. Not covered: the same comparison reached through an alias
(``cel.bind``, a comprehension variable) or with the version on the right (upstream's ``String.Equal``
answers false there, as cel-cpp does).
"""

from __future__ import annotations

import re
from typing import Any

from allocator.cel.checked import CheckedAst, Expr
from allocator.cel.library import LibraryError
from allocator.cel.source import matching_bracket

__all__ = ["HIDDEN_NOT_SEMVER", "not_semver", "semver_guard"]

HIDDEN_NOT_SEMVER = "__dra_not_semver__"

_DEVICE_BEFORE = re.compile(r"device\s*$")
_FIELD = re.compile(r"\.\s*([A-Za-z_][A-Za-z0-9_]*)")
_OTHER_TYPES = ("dyn", "kubernetes.Semver")


def not_semver(value: Any, semver_type: type) -> Any:
    """The value itself, unless it is a semver message: then upstream's error."""
    if isinstance(value, semver_type):
        raise LibraryError("no such overload")
    return value


def semver_guard(ast: CheckedAst, src: str) -> tuple[tuple[tuple[str, str], ...], list[tuple[int, int, str]]]:
    """The attribute keys ``(domain, id)`` an equality may refuse, and the edits of the guarded source."""
    keys: list[tuple[str, str]] = []
    edits: list[tuple[int, int, str]] = []
    for node in ast.root.walk():
        args = node.args or []
        if node.kind != "call" or node.name != "_==_" or len(args) != 2:
            continue
        if ast.type_names.get(args[1].id, "dyn") in _OTHER_TYPES:
            continue
        found = _attribute_lookup(ast, src, args[0])
        if found is None:
            continue
        key, start, end = found
        keys.append(key)
        edits += [(start, start, f"{HIDDEN_NOT_SEMVER}("), (end, end, ")")]
    return tuple(dict.fromkeys(keys)), edits


def _attribute_lookup(ast: CheckedAst, src: str, node: Expr) -> tuple[tuple[str, str], int, int] | None:
    """``((domain, id), start, end)`` of a direct constant lookup in ``device.attributes``, else None."""
    ident = _constant_key(node)
    domain_use = node.operand if node.kind == "select" else next(iter(node.args or ()), None)
    if ident is None or domain_use is None:
        return None
    domain = _constant_key(domain_use)
    root = domain_use.args[0] if domain_use.kind == "call" and domain_use.args else domain_use.operand
    if domain is None or root is None or root.kind != "ident":
        return None
    if ast.references.get(root.id, root.name) != "device.attributes":
        return None
    root_pos, pos = ast.positions.get(root.id, -1), ast.positions.get(node.id, -1)
    device = _DEVICE_BEFORE.search(src, 0, root_pos) if 0 <= root_pos <= len(src) else None
    if device is None or not 0 <= pos < len(src):
        return None
    if node.kind == "select":
        field = _FIELD.match(src, pos)
        if field is None or field.group(1) != ident:
            return None
        end = field.end()
    elif src[pos] == "[":
        end = matching_bracket(src, pos) + 1
    else:
        return None
    return (domain, ident), device.start(), end


def _constant_key(node: Expr) -> str | None:
    """The constant key of ``x.<name>`` or ``x["<name>"]``."""
    if node.kind == "select" and not node.test_only:
        return node.name
    args = node.args or []
    if node.kind == "call" and node.name == "_[_]" and len(args) == 2:
        key = args[1]
        if key.kind == "const" and isinstance(key.value, str):
            return key.value
    return None
