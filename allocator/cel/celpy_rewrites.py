"""Source rewrites that let cel-python run what its parser and macros lack (``allocator.cel.celpy_engine``).

Each edit touches only the construct's own tokens (its name, brackets and commas), so nested constructs
are rewritten independently, and works on the front-end's checked tree and source:

* ``cel.bind(v, init, body)`` -> ``[init].map(v, body)[0]``;
* ``x.__dra_validate__(s)[?0]`` / ``format.__dra_named__(s)[?0]`` (the front-end's spellings) ->
  ``x.validate(s)`` / ``format.named(s)``, which celpy runs as optional-valued functions;
* two-variable comprehensions (cel-go's ``ext.TwoVarComprehensions``) -> one-variable macros over the
  receiver's ``[index or key, value]`` pairs (``__dra_pairs__``), each pair bound to the two variables:
  ``r.all(i, v, p)`` -> ``r.__dra_pairs__().all(__dra_pair__, BIND(p))``, likewise ``exists``,
  ``existsOne`` (``exists_one``), ``transformList`` (``map``, after ``filter`` for a filter), and
  ``transformMap`` / ``transformMapEntry`` (the mapped pairs or entries made a map by ``__dra_map_of__`` /
  ``__dra_map_merge__``), where ``BIND(e)`` is ``[__dra_pair__[0]].map(i, [__dra_pair__[1]].map(v,
  e)[0])[0]``.

* ``r.sortBy(e, key)`` -> ``r.map(e, [key, e]).__dra_sort_pairs__()`` (the elements in their keys'
  order).

``unsupported`` names what stays refused: the optional syntax (``[?``, ``.?``, ``{?``), ``optMap`` and
``optFlatMap``.
"""

from __future__ import annotations

import re

from allocator.cel.checked import CheckedAst, Expr, is_bind
from allocator.cel.expr_libs import HIDDEN_NAMED, HIDDEN_VALIDATE
from allocator.cel.source import matching_bracket, top_level_commas
from allocator.errors import CELCompileError

__all__ = ["celpy_edits", "unsupported"]

_OPTIONAL_SYNTAX = frozenset({"_?._", "_[?_]"})
_OPTIONAL_MACROS = re.compile(r"\.\s*opt(?:Flat)?Map\s*\(")
_SORT_BY = re.compile(r"sortBy\s*$")
_BIND = re.compile(r"cel\s*\.\s*bind\s*$")
_FORMAT_LIBRARY = {HIDDEN_VALIDATE: "validate", f"format.{HIDDEN_NAMED}": "named"}
"""The front-end's spellings of the format library's optional-valued functions (``expr_libs``)."""


def _format_read(node: Expr) -> Expr | None:
    """The hidden format-library call of ``<call>[?0]`` (the front-end's spelling of ``validate`` and
    ``named``), else None."""
    if node.kind != "call" or node.name != "_[?_]" or not node.args:
        return None
    inner = node.args[0]
    return inner if inner.kind == "call" and inner.name in _FORMAT_LIBRARY else None


def unsupported(ast: CheckedAst, src: str) -> str | None:
    """What of the expression celpy cannot parse or run: the optional syntax (``[?``, ``.?``, ``{?``,
    ``[?x]`` list entries) and ``optMap``/``optFlatMap``."""
    for node in ast.root.walk():
        optional_syntax = node.kind == "call" and node.name in _OPTIONAL_SYNTAX and _format_read(node) is None
        if optional_syntax or (node.kind in ("list", "map") and node.optional):
            return "optional syntax ([?, .?, {?)"
    if _OPTIONAL_MACROS.search(src):
        return "optMap/optFlatMap"
    return None


def _format_edits(ast: CheckedAst, src: str) -> list[tuple[int, int, str]]:
    """``x.__dra_validate__(s)[?0]`` -> ``x.validate(s)``, ``format.__dra_named__(s)[?0]`` ->
    ``format.named(s)``: celpy runs the optional-valued functions themselves (``celpy_libs``)."""
    edits = []
    for node in ast.root.walk():
        inner = _format_read(node)
        pos = ast.positions.get(node.id, -1)
        call = ast.positions.get(inner.id, -1) if inner is not None else -1
        if inner is None or not 0 <= pos < len(src) or src[pos] != "[" or not 0 <= call < len(src):
            continue
        hidden = inner.name.removeprefix("format.")
        name = re.compile(re.escape(hidden) + r"\s*$").search(src, 0, call)
        if name is None:
            raise CELCompileError("the format library could not be translated for the cel-python engine")
        edits += [
            (name.start(), name.end(), _FORMAT_LIBRARY[inner.name]),
            (pos, matching_bracket(src, pos) + 1, ""),
        ]
    return edits


def _bind_edits(ast: CheckedAst, src: str) -> list[tuple[int, int, str]]:
    """``cel.bind(v, init, body)`` -> ``[init].map(v, body)[0]``, edited only at the bind's own tokens so
    nested binds inside ``init``/``body`` are rewritten independently."""
    edits = []
    for node in ast.root.walk():
        pos = ast.positions.get(node.id, -1)
        if node.kind != "comprehension" or not is_bind(node) or not 0 <= pos < len(src) or src[pos] != "(":
            continue
        if node.vars[2].startswith("@"):
            continue  # a macro's own binding (sortBy's input), rewritten with the macro
        name = _BIND.search(src, 0, pos)
        close = matching_bracket(src, pos)
        commas = top_level_commas(src, pos + 1, close)
        if name is None or len(commas) != 2:
            raise CELCompileError("cel.bind could not be translated for the cel-python engine")
        variable = node.vars[2]
        edits += [
            (name.start(), commas[0] + 1, "["),
            (commas[1], commas[1] + 1, f"].map({variable},"),
            (close, close + 1, ")[0]"),
        ]
    return edits


_PAIR = "__dra_pair__"
_TWO_VARIABLE = re.compile(r"(all|exists|existsOne|transformList|transformMapEntry|transformMap)\s*$")


def _two_variable_edits(ast: CheckedAst, src: str) -> list[tuple[int, int, str]]:
    """Two-variable comprehensions as one-variable macros over ``[key, value]`` pairs (module doc)."""
    edits: list[tuple[int, int, str]] = []
    for node in ast.root.walk():
        pos = ast.positions.get(node.id, -1)
        if node.kind != "comprehension" or not node.vars[1] or not 0 <= pos < len(src) or src[pos] != "(":
            continue
        name = _TWO_VARIABLE.search(src, 0, pos)
        close = matching_bracket(src, pos)
        commas = top_level_commas(src, pos + 1, close)
        if name is None or len(commas) not in (2, 3):
            raise CELCompileError("a two-variable comprehension could not be translated for cel-python")
        first, second = src[pos + 1 : commas[0]].strip(), src[commas[0] + 1 : commas[1]].strip()
        macro = name.group(1)
        open_bind = f"[{_PAIR}[0]].map({first}, [{_PAIR}[1]].map({second},"
        close_bind = ")[0])[0]"
        start = f"__dra_pairs__().{_ONE_VARIABLE.get(macro, 'map')}({_PAIR},"
        last = commas[-1]
        if len(commas) == 3:  # a filter before the transform
            edits += [
                (name.start(), commas[1] + 1, f"__dra_pairs__().filter({_PAIR}, {open_bind}"),
                (commas[2], commas[2] + 1, f"{close_bind}).map({_PAIR},"),
            ]
        else:
            edits.append((name.start(), commas[1] + 1, start))
        value = f" {open_bind}"
        if macro == "transformMap":
            value = f" [{_PAIR}[0], {open_bind}"
        edits.append((last + 1, last + 1, value))
        end = close_bind + ("]" if macro == "transformMap" else "") + ")" + _TO_MAP.get(macro, "")
        edits.append((close, close + 1, end))
    return edits


_ONE_VARIABLE = {"all": "all", "exists": "exists", "existsOne": "exists_one"}
_TO_MAP = {"transformMap": ".__dra_map_of__()", "transformMapEntry": ".__dra_map_merge__()"}


def _sort_by_edits(ast: CheckedAst, src: str) -> list[tuple[int, int, str]]:
    """``r.sortBy(e, key)`` -> ``r.map(e, [key, e]).__dra_sort_pairs__()`` (module doc)."""
    edits: list[tuple[int, int, str]] = []
    for node in ast.root.walk():
        pos = ast.positions.get(node.id, -1)
        if node.kind != "call" or node.name != "@sortByAssociatedKeys" or not 0 <= pos < len(src):
            continue
        name = _SORT_BY.search(src, 0, pos) if src[pos] == "(" else None
        close = matching_bracket(src, pos) if name is not None else -1
        commas = top_level_commas(src, pos + 1, close) if name is not None else []
        if name is None or len(commas) != 1:
            raise CELCompileError("sortBy could not be translated for the cel-python engine")
        variable = src[pos + 1 : commas[0]].strip()
        edits += [
            (name.start(), name.end(), "map"),
            (commas[0] + 1, commas[0] + 1, " ["),
            (close, close + 1, f", {variable}]).__dra_sort_pairs__()"),
        ]
    return edits


def celpy_edits(ast: CheckedAst, src: str) -> list[tuple[int, int, str]]:
    """Every rewrite of the module doc, as edits of ``src``."""
    edits = _bind_edits(ast, src) + _format_edits(ast, src) + _two_variable_edits(ast, src)
    return edits + _sort_by_edits(ast, src)
