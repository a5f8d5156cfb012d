"""Scanning and editing CEL source text (the engines rewrite an expression's text before running it).

Offsets come from the checker's source positions; these helpers find the extent of what sits there: a
string literal or ``//`` comment, the bracket closing one that opens, the commas between arguments.
"""

from __future__ import annotations

import re

__all__ = ["apply_edits", "matching_bracket", "skip_literal", "top_level_commas"]

# A string or bytes literal: an optional r/b prefix (not the tail of an identifier), then the opening quote.
_LITERAL = re.compile(r'(?:(?<![A-Za-z0-9_])([rR][bB]?|[bB][rR]?))?(\'\'\'|"""|\'|")')


def skip_literal(src: str, pos: int) -> int:
    """Index after the string literal or ``//`` comment starting at ``pos`` (``pos`` itself if none)."""
    if src.startswith("//", pos):
        end = src.find("\n", pos)
        return len(src) if end < 0 else end
    start = _LITERAL.match(src, pos)
    if start is None:
        return pos
    raw = "r" in (start.group(1) or "").lower()
    quote = start.group(2)
    i = start.end()
    while i < len(src):
        if not raw and src[i] == "\\":
            i += 2
        elif src.startswith(quote, i):
            return i + len(quote)
        else:
            i += 1
    return len(src)


def matching_bracket(src: str, pos: int) -> int:
    """Index of the bracket closing the one at ``pos`` (``(``/``[``/``{``), skipping strings and comments."""
    depth, i = 0, pos
    while i < len(src):
        skipped = skip_literal(src, i)
        if skipped != i:
            i = skipped
            continue
        if src[i] in "([{":
            depth += 1
        elif src[i] in ")]}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError("unbalanced brackets")


def top_level_commas(src: str, start: int, end: int) -> list[int]:
    """Offsets of the commas between ``start`` and ``end`` that are not nested or quoted."""
    commas, depth, i = [], 0, start
    while i < end:
        skipped = skip_literal(src, i)
        if skipped != i:
            i = skipped
            continue
        char = src[i]
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            commas.append(i)
        i += 1
    return commas


def apply_edits(src: str, edits: list[tuple[int, int, str]]) -> str:
    for start, end, text in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        src = src[:start] + text + src[end:]
    return src
