"""``string.format(list)`` as Kubernetes' environment has it: cel-go ext.Strings version 2, whose formatter
is the first one (``ext/formatting.go``, not ``formatting_v2.go``), with the en_US locale of
``golang.org/x/text/message``.

Behaviour (described, not copied): clauses are ``%%`` and ``%[.N]<verb>`` with verb ``s d f e b x X o``.
``%f`` groups the integer part with commas (``1,234.500000``); ``%e`` ignores the precision (the clause is
passed to the printer as a width) and prints six decimals, the multiplication sign and a power of ten in
superscript digits (1234.5 gives ``1.234500``, U+00D7, ``10``, then superscript ``03``). ``%d``/``%o`` take
ints, ``%b`` ints and bools, ``%x``/``%X`` ints, strings and bytes,
``%f``/``%e`` doubles (and the strings "NaN", "Infinity", "-Infinity"), ``%s`` scalars, lists and maps.

``format_errors`` is cel-go's ``stringFormatValidator``: a constant format string applied to a list literal
is checked at compile time against the static element types (``dyn`` passes every clause).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Sequence
from decimal import Decimal

from allocator.cel.library import LibraryError

__all__ = ["format_errors", "string_format"]

_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}

# Static types each clause accepts (cel-go kind names); "dyn" always passes.
_ACCEPTS = {
    "d": ("int", "uint"),
    "o": ("int", "uint"),
    "b": ("int", "uint", "bool"),
    "x": ("int", "uint", "string", "bytes"),
    "X": ("int", "uint", "string", "bytes"),
    "f": ("double", "string"),
    "e": ("double", "string"),
}
_STRING_KINDS: tuple[str, ...] = ("list", "map", "int", "uint", "double", "bool", "string")
_STRING_KINDS += ("google.protobuf.Timestamp", "bytes", "google.protobuf.Duration", "type", "null")
_CLAUSE_NAMES = {"d": "decimal", "o": "octal", "b": "binary", "x": "hex", "X": "hex"}
_CLAUSE_NAMES |= {"f": "fixed-point", "e": "scientific"}


def _clauses(template: str) -> list[tuple[str, int | None] | str]:
    """The template split into literal text and (verb, precision) clauses. Raises LibraryError."""
    out: list[tuple[str, int | None] | str] = []
    i, text = 0, []
    while i < len(template):
        char = template[i]
        if char != "%":
            text.append(char)
            i += 1
            continue
        if template.startswith("%%", i):
            text.append("%")
            i += 2
            continue
        if i + 1 >= len(template):
            raise LibraryError("unexpected end of string")
        i += 1
        precision = None
        if template[i] == ".":
            j = i + 1
            while j < len(template) and template[j].isdigit():
                j += 1
            if j >= len(template):
                raise LibraryError(
                    "could not parse formatting clause: could not find end of precision specifier"
                )
            precision = int(template[i + 1 : j] or "0")
            i = j
        verb = template[i]
        if verb not in "sdfebxXo":
            raise LibraryError(f'could not parse formatting clause: unrecognized formatting clause "{verb}"')
        out += ["".join(text), (verb, precision)]
        text = []
        i += 1
    out.append("".join(text))
    return out


def string_format(template: str, args: Sequence[object]) -> str:
    """``template.format(args)`` on plain values (int, float, str, bytes, bool, None, list, dict,
    datetime, timedelta). Raises LibraryError."""
    out, index = [], 0
    for part in _clauses(template):
        if isinstance(part, str):
            out.append(part)
            continue
        if index >= len(args):
            raise LibraryError(f"index {index} out of range")
        verb, precision = part
        try:
            out.append(_format_one(verb, precision, args[index]))
        except LibraryError as err:
            raise LibraryError(f"error during formatting: {err}") from None
        index += 1
    return "".join(out)


def _kind(value: object) -> str:
    kinds: list[tuple[type | tuple[type, ...], str]] = [(bool, "bool"), (int, "int"), (float, "double")]
    kinds += [(str, "string"), ((bytes, bytearray), "bytes")]
    kinds += [(list, "list"), (tuple, "list"), (dict, "map"), (type(None), "null_type")]
    kinds += [
        (datetime.datetime, "google.protobuf.Timestamp"),
        (datetime.timedelta, "google.protobuf.Duration"),
    ]
    return next((name for kind, name in kinds if isinstance(value, kind)), type(value).__name__)


def _format_one(verb: str, precision: int | None, value: object) -> str:
    kind = _kind(value)
    if verb == "s":
        return _as_string(value)
    if kind not in _ACCEPTS[verb] or (kind == "string" and verb in "fe" and value not in _SPECIAL_FLOATS):
        given = "uint" if kind == "int" and verb in "fe" and isinstance(value, int) and value < 0 else kind
        raise LibraryError(
            f"{_CLAUSE_NAMES[verb]} clause can only be used on {_plural(verb)}, was given {given}"
        )
    if verb in "fe":
        # _ACCEPTS let only numbers and the special float names through.
        number = _SPECIAL_FLOATS[value] if isinstance(value, str) else float(value)  # type: ignore[arg-type]
        return _fixed(number, 6 if precision is None else precision) if verb == "f" else _scientific(number)
    if verb == "b":
        return ("1" if value else "0") if isinstance(value, bool) else format(value, "b")
    if verb in "xX":
        data = value.encode() if isinstance(value, str) else value
        text = data.hex() if isinstance(data, (bytes, bytearray)) else format(data, "x")
        return text.upper() if verb == "X" else text
    return str(value) if verb == "d" else format(value, "o")


def _plural(verb: str) -> str:
    return {"d": "integers", "o": "integers", "b": "integers and bools", "f": "doubles", "e": "doubles"}.get(
        verb, "integers, byte buffers, and strings"
    )


def _fixed(number: float, precision: int) -> str:
    if math.isnan(number) or math.isinf(number):
        return "NaN" if math.isnan(number) else ("∞" if number > 0 else "-∞")
    return f"{number:,.{precision}f}"


def _scientific(number: float) -> str:
    if math.isnan(number) or math.isinf(number):
        return "NaN" if math.isnan(number) else ("∞" if number > 0 else "-∞")
    mantissa, exponent = f"{number:.6e}".split("e")
    power = int(exponent)
    digits = f"{'-' if power < 0 else ''}{abs(power):02d}"
    return f"{mantissa}\u00d710{digits.translate(_SUPERSCRIPT)}"


def _as_string(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _double_text(value)
    if isinstance(value, (bytes, bytearray)):
        return value.decode(errors="replace")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_quoted(v) for v in value) + "]"
    if isinstance(value, dict):
        pairs = sorted((_quoted(k), _quoted(v)) for k, v in value.items())
        return "{" + ", ".join(f"{k}:{v}" for k, v in pairs) + "}"
    return str(value)


def _quoted(value: object) -> str:
    """A list element or map entry as the formatter writes it: strings and bytes in Go's ``%q`` quotes."""
    if isinstance(value, str):
        return _go_quote(value)
    if isinstance(value, (bytes, bytearray)):
        return "b" + _go_quote(value.decode(errors="replace"))
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return _go_quote(_as_string(value))
    return _as_string(value)


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
_GO_ESCAPES |= {"\\": "\\\\", '"': '\\"'}


def _go_quote(text: str) -> str:
    """Go's ``strconv.Quote``: printable characters as they are, the usual escapes, others as hex."""
    out = []
    for char in text:
        if char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return '"' + "".join(out) + '"'


def _double_text(number: float) -> str:
    """CEL's ``string(double)``: Go's ``FormatFloat(x, 'g', -1, 64)`` (shortest digits; exponent form below
    1e-4 and from 1e6 on)."""
    if math.isnan(number) or math.isinf(number):
        return "NaN" if math.isnan(number) else ("+Inf" if number > 0 else "-Inf")
    sign = "-" if math.copysign(1.0, number) < 0 else ""
    if number == 0:
        return sign + "0"
    _, digits, exponent = Decimal(repr(abs(number))).as_tuple()
    text = "".join(map(str, digits))
    stripped = text.rstrip("0")
    point = len(text) + int(exponent)  # value = 0.<text> * 10**point
    power = point - 1
    if power < -4 or power >= 6:
        mantissa = stripped[0] + ("." + stripped[1:] if len(stripped) > 1 else "")
        return f"{sign}{mantissa}e{'-' if power < 0 else '+'}{abs(power):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{stripped}"
    if point >= len(stripped):
        return sign + stripped + "0" * (point - len(stripped))
    return f"{sign}{stripped[:point]}.{stripped[point:]}"


def format_errors(template: str, element_types: Sequence[str]) -> str | None:
    """The compile-time error of ``template.format([...])`` given the list literal's element types (cel-go
    spelling), or None."""
    try:
        parts = _clauses(template)
    except LibraryError as err:
        return str(err)
    clauses = [p for p in parts if not isinstance(p, str)]
    for index, (verb, _) in enumerate(clauses):
        if index >= len(element_types):
            return f"index {index} out of range"
        static = element_types[index].split("(", 1)[0]
        if static == "dyn":
            continue
        accepted = _STRING_KINDS if verb == "s" else _ACCEPTS[verb]
        if static not in accepted:
            clause = "string" if verb == "s" else _CLAUSE_NAMES[verb]
            kinds = _plural(verb)
            return f"error during formatting: {clause} clause can only be used on {kinds}, was given {static}"
    if len(element_types) > len(clauses):
        counts = f"expected {len(clauses)}, got {len(element_types)}"
        return f"too many arguments supplied to string.format ({counts})"
    return None
