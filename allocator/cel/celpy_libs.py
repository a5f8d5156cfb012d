"""cel-python functions for the parts of Kubernetes' base CEL environment celpy does not bring.

The same libraries as ``allocator.cel.expr_libs`` declares for cel-expr, run on the shared semantics
(``allocator.cel.lib_net``, ``lib_url``, ``lib_strformat``): IP, CIDR and URL values (``CelIP``,
``CelCIDR``, ``CelURL``, compared by their canonical text), the lists extension (``lists.range``,
``slice``, ``flatten``, ``sort``, ``reverse``, ``distinct``), ``strings.quote``, Kubernetes'
``string.format``, ``string(ip)`` / ``string(cidr)`` (celpy's ``string`` uses ``__str__``), cross-type
numeric comparisons (``1 < 1.5``), optional values as functions give them (``CelOptional``: ``optional.of``,
``optional.none``, ``optional.ofNonZeroValue``, ``hasValue``, ``value``, ``orValue``, ``or``; celpy cannot
parse the ``[?``, ``.?`` and ``{?`` syntax) and the format library (``format.<name>()``, ``format.named``,
``<format>.validate``, ``allocator.cel.lib_formats``).
Namespaced functions (``ip.isCanonical``, ``lists.range``, ``strings.quote``, ``optional.of``,
``format.uuid``) are reached through the
activation values ``NAMESPACES``: celpy calls ``f(<namespace>, args...)`` for ``<namespace>.f(args...)``.
Type checking is the shared front-end's; these functions only run checked expressions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celpy import celtypes
from celpy.evaluation import CELEvalError as CelpyEvalError

from allocator.cel import lib_formats, lib_net, lib_url
from allocator.cel.lib_strformat import string_format
from allocator.cel.library import (
    LibraryError,
    cel_equal,
    check_int64,
    index_of,
    map_of_pairs,
    merge_maps,
)

__all__ = [
    "NAMESPACES",
    "CelCIDR",
    "CelFormat",
    "CelIP",
    "CelOptional",
    "CelURL",
    "library_functions",
    "plain",
    "wrap",
]


class _Text:
    """A value held as its canonical text; equal to a value of the same class with the same text."""

    __slots__ = ("text",)
    type_name = ""

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, type(self)) and type(other) is type(self) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.text!r})"

    def __str__(self) -> str:
        # celpy's string() is its StringType constructor: string(ip) and string(cidr) give the text.
        return self.text


class CelIP(_Text):
    __slots__ = ()
    type_name = "net.IP"


class CelCIDR(_Text):
    __slots__ = ()
    type_name = "net.CIDR"


class CelURL(_Text):
    __slots__ = ()
    type_name = "kubernetes.URL"


class CelFormat(_Text):
    """A named format of the format library; ``text`` is its name."""

    __slots__ = ()
    type_name = "kubernetes.NamedFormat"


class CelOptional:
    """An optional value: ``value`` is the celpy value held, or None for ``optional.none()``."""

    __slots__ = ("value",)
    type_name = "optional_type"

    def __init__(self, value: Any = None) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CelOptional):
            return False
        if self.value is None or other.value is None:
            return self.value is None and other.value is None
        return cel_equal(plain(self.value), plain(other.value))

    def __hash__(self) -> int:
        return 0 if self.value is None else hash(self.value)

    def __repr__(self) -> str:
        return f"CelOptional({self.value!r})"


def _has_value(optional: Any) -> Any:
    if not isinstance(optional, CelOptional):
        return CelpyEvalError("no such overload")
    return celtypes.BoolType(optional.value is not None)


def _value(optional: Any) -> Any:
    if not isinstance(optional, CelOptional):
        return CelpyEvalError("no such overload")
    return CelpyEvalError("optional.none() dereference") if optional.value is None else optional.value


def _or_value(optional: Any, default: Any) -> Any:
    if not isinstance(optional, CelOptional):
        return CelpyEvalError("no such overload")
    return default if optional.value is None else optional.value


def _or(optional: Any, other: Any) -> Any:
    if not isinstance(optional, CelOptional) or not isinstance(other, CelOptional):
        return CelpyEvalError("no such overload")
    return other if optional.value is None else optional


def _of_non_zero(value: Any) -> CelOptional:
    """``optional.ofNonZeroValue``: none for the zero value of its type (0, "", false, empty, null)."""
    zero = value is None or (not isinstance(value, _Text) and not value)
    return CelOptional(None if zero else value)


def _named_format(name: Any) -> CelOptional:
    text = str(name)
    return CelOptional(CelFormat(text) if text in lib_formats.FORMAT_NAMES else None)


def _validate(fmt: Any, text: Any) -> Any:
    """``<format>.validate(s)``: none when ``s`` is valid, else the problems."""
    if not isinstance(fmt, CelFormat) or not isinstance(text, str):
        return CelpyEvalError("no such overload")
    problems = lib_formats.validate(fmt.text, str(text))
    return CelOptional(celtypes.ListType([celtypes.StringType(p) for p in problems]) if problems else None)


def _pairs(receiver: Any) -> Any:
    """``[index, element]`` of a list or ``[key, value]`` of a map: what a two-variable comprehension
    iterates (``allocator.cel.celpy_rewrites``)."""
    if isinstance(receiver, dict):
        return celtypes.ListType([celtypes.ListType([k, v]) for k, v in receiver.items()])
    if isinstance(receiver, list):
        return celtypes.ListType(
            [celtypes.ListType([celtypes.IntType(i), v]) for i, v in enumerate(receiver)]
        )
    return CelpyEvalError("no such overload")


def _to_map(build: Callable[[Any], dict[object, object]]) -> Callable[[Any], Any]:
    def call(items: Any) -> Any:
        if isinstance(items, CelpyEvalError):
            return items
        try:
            return celtypes.MapType(build(items))
        except LibraryError as err:
            return CelpyEvalError(str(err))
        except (TypeError, IndexError, AttributeError):
            return CelpyEvalError("no such overload")

    return call


def _format_functions() -> dict[str, Callable[..., Any]]:
    """``format.<name>()`` for every named format, ``format.named(s)`` and ``validate``."""
    functions = {
        name: _namespaced("format", (lambda n=name: CelFormat(n))) for name in lib_formats.FORMAT_NAMES
    }
    return functions | {"named": _namespaced("format", _named_format), "validate": _validate}


class _Namespace:
    """The value of a namespace identifier (``ip``, ``lists``, ``strings``)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


NAMESPACES = {name: _Namespace(name) for name in ("ip", "lists", "strings", "optional", "format")}
"""Activation values standing for the namespaces of namespaced functions."""


def plain(value: Any) -> Any:
    """celtypes -> Python natives (celpy's bool is an int subclass, so it must be unwrapped first)."""
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, (celtypes.IntType, celtypes.UintType)):
        return int(value)
    if isinstance(value, celtypes.DoubleType):
        return float(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    if isinstance(value, celtypes.BytesType):
        return bytes(value)
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    return value


def wrap(value: Any) -> Any:
    """Python natives -> celtypes (library results)."""
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(check_int64(value))
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    if isinstance(value, list):
        return celtypes.ListType([wrap(v) for v in value])
    if isinstance(value, dict):
        return celtypes.MapType({wrap(k): wrap(v) for k, v in value.items()})
    return value


def _call(function: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``function`` on plain values; a LibraryError (or a wrong argument type) becomes an error value."""

    def call(*args: Any) -> Any:
        for arg in args:
            if isinstance(arg, CelpyEvalError):
                return arg
        try:
            return wrap(function(*(plain(a) for a in args)))
        except LibraryError as err:
            return CelpyEvalError(str(err))
        except (AttributeError, TypeError):
            return CelpyEvalError("no such overload")

    call.__name__ = function.__name__
    return call


def _ip(value: Any) -> Any:
    """``ip(string)``, or ``<cidr>.ip()`` (celpy passes the receiver as the only argument)."""
    if isinstance(value, CelCIDR):
        return CelIP(lib_net.cidr_ip(value.text))
    return CelIP(lib_net.parse_ip(value))


def _text_of(value: Any, parse: Callable[[str], str]) -> str:
    return value.text if isinstance(value, _Text) else parse(value)


def _contains_ip(cidr: CelCIDR, other: Any) -> bool:
    return lib_net.cidr_contains_ip(cidr.text, _text_of(other, lib_net.parse_ip))


def _contains_cidr(cidr: CelCIDR, other: Any) -> bool:
    return lib_net.cidr_contains_cidr(cidr.text, _text_of(other, lib_net.parse_cidr))


def _on_text(function: Callable[[str], Any]) -> Callable[[Any], Any]:
    return lambda value: function(value.text)


def _namespaced(name: str, function: Callable[..., Any], fallback: Callable[..., Any] | None = None) -> Any:
    """A function reached as ``<name>.f(...)``; other receivers go to ``fallback`` (a member function of the
    same name) or are no overload."""

    def call(target: Any, *args: Any) -> Any:
        if isinstance(target, _Namespace) and target.name == name:
            return function(*args)
        if fallback is not None:
            return fallback(target, *args)
        return CelpyEvalError("no such overload")

    return call


# --- lists extension ------------------------------------------------------------------------------


def _range(n: int) -> list[int]:
    return list(range(n))


def _slice(items: list[Any], start: int, end: int) -> list[Any]:
    if start < 0 or end < 0:
        raise LibraryError(f"cannot slice({start}, {end}), negative indexes not supported")
    if start > end:
        raise LibraryError(f"cannot slice({start}, {end}), start index must be less than or equal to end")
    if end > len(items):
        raise LibraryError(f"cannot slice({start}, {end}), list is length {len(items)}")
    return items[start:end]


def _flatten(items: list[Any], depth: int = 1) -> list[Any]:
    if depth < 0:
        raise LibraryError("level must be non-negative")
    out: list[Any] = []
    for item in items:
        if isinstance(item, list) and depth > 0:
            out.extend(_flatten(item, depth - 1))
        else:
            out.append(item)
    return out


def _distinct(items: list[Any]) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if not any(cel_equal(item, seen) for seen in out):
            out.append(item)
    return out


def _sort(items: list[Any]) -> list[Any]:
    kinds = {type(i) for i in items}
    if len(kinds) > 1 or kinds & {list, dict}:
        raise LibraryError("no such overload: sort")
    return sorted(items)


def _sort_pairs(pairs: list[list[Any]]) -> list[Any]:
    """``sortBy``'s result from ``[key, element]`` pairs: the elements in their keys' order (keys of one
    ordered type; equal keys keep their order)."""
    kinds = {type(pair[0]) for pair in pairs}
    if len(kinds) > 1:
        raise LibraryError("list elements must have the same type")
    if kinds & {list, dict}:
        raise LibraryError("list elements must be comparable")
    return [pair[1] for pair in sorted(pairs, key=lambda pair: pair[0])]


def _reverse(items: Any) -> Any:
    if not isinstance(items, list):
        raise LibraryError("no such overload: reverse")
    return items[::-1]


# --- comparisons -------------------------------------------------------------------------------------


def _comparison(test: Callable[[Any, Any], bool]) -> Callable[[Any, Any], Any]:
    """``<``-style operators: numbers of any kind compare by value (CrossTypeNumericComparisons); other
    values only with their own type."""
    numbers = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)

    def compare(a: Any, b: Any) -> Any:
        for arg in (a, b):
            if isinstance(arg, CelpyEvalError):
                return arg
        numeric = isinstance(a, numbers) and isinstance(b, numbers)
        numeric = numeric and not isinstance(a, celtypes.BoolType) and not isinstance(b, celtypes.BoolType)
        if numeric:
            return celtypes.BoolType(test(plain(a), plain(b)))
        if type(a) is not type(b) or isinstance(a, (list, dict)):
            return CelpyEvalError("no such overload")
        try:
            return celtypes.BoolType(test(a, b))
        except TypeError:
            return CelpyEvalError("no such overload")

    return compare


def library_functions() -> dict[str, Callable[..., Any]]:
    """The functions of this module by celpy name."""
    return {
        "_<_": _comparison(lambda a, b: a < b),
        "_<=_": _comparison(lambda a, b: a <= b),
        "_>_": _comparison(lambda a, b: a > b),
        "_>=_": _comparison(lambda a, b: a >= b),
        "format": _call(string_format),
        "quote": _namespaced("strings", _call(_quote)),
        # lists extension
        "range": _namespaced("lists", _call(_range)),
        "slice": _call(_slice),
        "flatten": _call(_flatten),
        "distinct": _call(_distinct),
        "sort": _call(_sort),
        "reverse": _call(_reverse),
        # library.Lists indexOf/lastIndexOf, renamed by the front-end when the receiver is a list
        "__dra_index_of__": _call(lambda target, value, start=None: index_of(target, value, start)),
        "__dra_last_index_of__": _call(
            lambda target, value, start=None: index_of(target, value, start, True)
        ),
        # IP and CIDR
        "ip": _call(_ip),
        "isIP": _call(lib_net.is_ip),
        "isCanonical": _namespaced("ip", _call(lib_net.ip_is_canonical)),
        "family": _call(_on_text(lib_net.ip_family)),
        "isUnspecified": _call(_on_text(lib_net.ip_is_unspecified)),
        "isLoopback": _call(_on_text(lib_net.ip_is_loopback)),
        "isLinkLocalMulticast": _call(_on_text(lib_net.ip_is_link_local_multicast)),
        "isLinkLocalUnicast": _call(_on_text(lib_net.ip_is_link_local_unicast)),
        "isGlobalUnicast": _call(_on_text(lib_net.ip_is_global_unicast)),
        "cidr": _call(lambda text: CelCIDR(lib_net.parse_cidr(text))),
        "isCIDR": _call(lib_net.is_cidr),
        "containsIP": _call(_contains_ip),
        "containsCIDR": _call(_contains_cidr),
        "prefixLength": _call(_on_text(lib_net.cidr_prefix_length)),
        "masked": _call(lambda c: CelCIDR(lib_net.cidr_masked(c.text))),
        # URL
        "url": _call(lambda text: CelURL(lib_url.parse_url(text))),
        "isURL": _call(lib_url.is_url),
        "getScheme": _call(_on_text(lib_url.url_scheme)),
        "getHost": _call(_on_text(lib_url.url_host)),
        "getHostname": _call(_on_text(lib_url.url_hostname)),
        "getPort": _call(_on_text(lib_url.url_port)),
        "getEscapedPath": _call(_on_text(lib_url.url_escaped_path)),
        "getQuery": _call(_on_text(lib_url.url_query)),
        # optional values
        "of": _namespaced("optional", CelOptional),
        "none": _namespaced("optional", CelOptional),
        "ofNonZeroValue": _namespaced("optional", _of_non_zero),
        "hasValue": _has_value,
        "value": _value,
        "orValue": _or_value,
        "or": _or,
        **_format_functions(),
        # two-variable comprehensions (allocator.cel.celpy_rewrites)
        "__dra_pairs__": _pairs,
        "__dra_sort_pairs__": _call(_sort_pairs),
        "__dra_map_of__": _to_map(map_of_pairs),
        "__dra_map_merge__": _to_map(merge_maps),
    }


def _quote(text: str) -> str:
    """``strings.quote``: a double-quoted CEL string literal with escapes."""
    escapes = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
    escapes |= {"\\": "\\\\", '"': '\\"'}
    return '"' + "".join(escapes.get(c, c) for c in text) + '"'
