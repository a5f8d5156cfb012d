"""cel-expr declarations of the parts of Kubernetes' base CEL environment that cel-cpp does not bring.

Upstream (``k8s.io/apiserver/pkg/cel/environment/base.go`` v0.37.2, StoredExpressions) adds to CEL's
standard library: the URL, IP and CIDR libraries, the typed list functions of ``library.Lists`` v1
(``isSorted``/``sum``/``min``/``max`` per element type), and
``CrossTypeNumericComparisons(true)``. cel-cpp's checker has no option for the latter and refuses a second
declaration of a standard function, so the environment leaves ``_<_``, ``_<=_``, ``_>_``, ``_>=_`` and
``string`` out of the standard library (``STDLIB_CONFIG``) and declares them here with every standard
overload plus the cross-type numeric ones (cel-cpp's runtime already compares int, uint and double) and
``string(ip)`` / ``string(cidr)``. A declaration without an implementation is for the checker only: the
runtime dispatches on argument kinds, and one implementation serves every overload of the same kinds.

IP, CIDR and URL values are messages of the engine's private pool holding their canonical text
(``allocator.cel.lib_net``, ``allocator.cel.lib_url``); a named format is ``kubernetes.NamedFormat{name}``
(``allocator.cel.lib_formats``). Upstream's ``<format>.validate(s)`` and ``format.named(s)`` return
optionals, which a Python function cannot build here; so ``format_library_edits`` rewrites them, before
checking, into hidden functions returning a list of at most one element followed by ``[?0]``, the
optional of that element: same type and value as upstream's.

Two more spellings work around what cel-expr-python cannot register: ``library.Lists``' ``indexOf`` /
``lastIndexOf`` on lists (the strings extension owns the names; ``list_index_edits`` renames the calls to
hidden functions serving strings and lists when the checker refuses a list receiver), and the
``cel.@mapInsert`` the two-variable ``transformMap`` / ``transformMapEntry`` macros expand to (missing at run
time; ``without_map_inserts`` runs them as ``transformList`` of entries and builds the map in Python).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from cel_expr_python import cel

from allocator.cel import lib_formats, lib_net, lib_url
from allocator.cel.checked import CheckedAst
from allocator.cel.library import (
    index_of,
    list_is_sorted,
    list_max,
    list_min,
    list_sum,
    map_of_pairs,
    merge_maps,
)
from allocator.cel.source import matching_bracket, skip_literal, top_level_commas

__all__ = [
    "HIDDEN_INDEX_OF",
    "HIDDEN_NAMED",
    "HIDDEN_VALIDATE",
    "STDLIB_CONFIG",
    "format_library_edits",
    "library_declarations",
    "list_index_edits",
    "without_map_inserts",
]

HIDDEN_VALIDATE = "__dra_validate__"
HIDDEN_NAMED = "__dra_named__"
HIDDEN_INDEX_OF = {"indexOf": "__dra_index_of__", "lastIndexOf": "__dra_last_index_of__"}
HIDDEN_MAP_OF = "__dra_map_of__"
HIDDEN_MAP_MERGE = "__dra_map_merge__"

_COMPARISONS = {"_<_": "less", "_<=_": "less_equals", "_>_": "greater", "_>=_": "greater_equals"}

STDLIB_CONFIG = "stdlib:\n  exclude_functions:\n" + "".join(
    f'    - name: "{name}"\n' for name in [*_COMPARISONS, "string"]
)
"""Standard functions re-declared by ``library_declarations`` (module docstring)."""


def _overload(
    oid: str, result: cel.Type, params: list[cel.Type], impl: Callable[..., Any] | None, member: bool
) -> cel.Overload:
    if impl is None:
        return cel.Overload(oid, result, params, is_member=member)
    return cel.Overload(oid, result, params, is_member=member, impl=impl)


def _comparisons() -> list[cel.FunctionDecl]:
    t = cel.Type
    numbers = [(t.INT, "int64"), (t.UINT, "uint64"), (t.DOUBLE, "double")]
    others = [(t.BOOL, "bool"), (t.STRING, "string"), (t.BYTES, "bytes")]
    others += [(t.TIMESTAMP, "timestamp"), (t.DURATION, "duration")]
    decls = []
    for function, prefix in _COMPARISONS.items():
        overloads = [cel.Overload(f"{prefix}_{name}", t.BOOL, [kind, kind]) for kind, name in others]
        for left, lname in numbers:
            for right, rname in numbers:
                oid = f"{prefix}_{lname}" if lname == rname else f"{prefix}_{lname}_{rname}"
                overloads.append(cel.Overload(oid, t.BOOL, [left, right]))
        decls.append(cel.FunctionDecl(function, overloads))
    return decls


def _to_string(ip_type: cel.Type, cidr_type: cel.Type) -> cel.FunctionDecl:
    t = cel.Type
    standard = [(t.INT, "int64"), (t.UINT, "uint64"), (t.DOUBLE, "double"), (t.BYTES, "bytes")]
    standard += [(t.STRING, "string"), (t.TIMESTAMP, "timestamp"), (t.DURATION, "duration"), (t.BOOL, "bool")]
    overloads = [cel.Overload(f"{name}_to_string", t.STRING, [kind]) for kind, name in standard]
    overloads += [
        cel.Overload("ip_to_string", t.STRING, [ip_type], impl=lambda m: m.text),
        cel.Overload("cidr_to_string", t.STRING, [cidr_type]),  # served by ip_to_string (same kind)
    ]
    return cel.FunctionDecl("string", overloads)


def _typed_lists() -> list[cel.FunctionDecl]:
    """``library.Lists`` v1: one overload per element type (a list of dyn matches them all)."""
    t = cel.Type
    comparable = [(t.INT, "int"), (t.UINT, "uint"), (t.DOUBLE, "double"), (t.BOOL, "bool")]
    comparable += [
        (t.DURATION, "duration"),
        (t.TIMESTAMP, "timestamp"),
        (t.STRING, "string"),
        (t.BYTES, "bytes"),
    ]
    summable = {"int", "uint", "double", "duration"}
    impls = {"isSorted": list_is_sorted, "sum": list_sum, "min": list_min, "max": list_max}
    # The runtime calls one implementation per function for every list; it is registered on an overload
    # no checked expression selects (a list of a message type nothing can build), returning dyn.
    never = t.List(t("dra_extender.Unconstructible"))
    decls = []
    for function, impl in impls.items():
        overloads = [_overload(f"list_unconstructible_{function}", t.DYN, [never], impl, True)]
        for kind, name in comparable:
            if function == "sum" and name not in summable:
                continue
            oid = (
                f"list_{name}_is_sorted_bool" if function == "isSorted" else f"list_{name}_{function}_{name}"
            )
            result = t.BOOL if function == "isSorted" else kind
            overloads.append(_overload(oid, result, [t.List(kind)], None, True))
        decls.append(cel.FunctionDecl(function, overloads))
    return decls


def _format_library(format_msg: Any) -> list[cel.FunctionDecl]:
    t = cel.Type
    named = t("kubernetes.NamedFormat")
    decls = [
        cel.FunctionDecl(
            f"format.{name}",
            [_overload(f"format-{name}", named, [], (lambda n=name: format_msg(name=n)), False)],
        )
        for name in lib_formats.FORMAT_NAMES
    ]

    def validate(fmt: Any, text: str) -> list[list[str]]:
        problems = lib_formats.validate(fmt.name, text)
        return [problems] if problems else []

    def named_format(name: str) -> list[Any]:
        return [format_msg(name=name)] if name in lib_formats.FORMAT_NAMES else []

    decls.append(
        cel.FunctionDecl(
            HIDDEN_VALIDATE,
            [_overload("format-validate", t.List(t.List(t.STRING)), [named, t.STRING], validate, True)],
        )
    )
    decls.append(
        cel.FunctionDecl(
            f"format.{HIDDEN_NAMED}",
            [_overload("format-named", t.List(named), [t.STRING], named_format, False)],
        )
    )
    return decls


_VALIDATE_NAME = re.compile(r"validate\s*$")
_NAMED_NAME = re.compile(r"named\s*$")


def format_library_edits(parsed: CheckedAst, src: str) -> list[tuple[int, int, str]]:
    """Edits of the parsed source: ``x.validate(s)`` -> ``x.__dra_validate__(s)[?0]`` and
    ``format.named(s)`` -> ``format.__dra_named__(s)[?0]`` (module docstring)."""
    edits = []
    for node in parsed.root.walk():
        pos = parsed.positions.get(node.id, -1)
        if node.kind != "call" or not 0 <= pos < len(src) or src[pos] != "(" or len(node.args or []) != 1:
            continue
        operand = node.operand
        if node.name == "validate" and operand is not None:
            name, hidden = _VALIDATE_NAME.search(src, 0, pos), HIDDEN_VALIDATE
        elif (
            node.name == "named"
            and operand is not None
            and operand.kind == "ident"
            and operand.name == "format"
        ):
            name, hidden = _NAMED_NAME.search(src, 0, pos), HIDDEN_NAMED
        else:
            continue
        if name is not None:
            end = matching_bracket(src, pos) + 1
            edits += [(name.start(), name.end(), hidden), (end, end, "[?0]")]
    return edits


_INDEX_NAME = re.compile(r"(lastIndexOf|indexOf)\s*$")


def list_index_edits(parsed: CheckedAst, src: str, offsets_only: bool = False) -> list[tuple[int, int, str]]:
    """Edits renaming every member ``indexOf`` / ``lastIndexOf`` call (``offsets_only``: every call with an
    offset, whose string semantics cel-cpp does not share with upstream) to its hidden function."""
    edits = []
    for node in parsed.root.walk():
        pos = parsed.positions.get(node.id, -1)
        if node.kind != "call" or node.operand is None or node.name not in HIDDEN_INDEX_OF:
            continue
        if offsets_only and len(node.args or []) != 2:
            continue
        name = _INDEX_NAME.search(src, 0, pos) if 0 <= pos < len(src) and src[pos] == "(" else None
        if name is not None:
            edits.append((name.start(), name.end(), HIDDEN_INDEX_OF[name.group(1)]))
    return edits


_TRANSFORM = re.compile(r"\.\s*(transformMap|transformMapEntry)\s*\(")


def without_map_inserts(src: str) -> str:
    """``x.transformMap(k, v, [cond,] f)`` -> ``x.transformList(k, v, [cond,] [k, f]).__dra_map_of__()`` and
    ``x.transformMapEntry(k, v, [cond,] e)`` -> ``x.transformList(k, v, [cond,] e).__dra_map_merge__()``."""
    while True:
        found = None
        i = 0
        while i < len(src):
            after = skip_literal(src, i)
            if after != i:
                i = after
                continue
            match = _TRANSFORM.match(src, i)
            if match:
                found = match  # the rightmost one has no other inside its arguments
            i += 1
        if found is None:
            return src
        open_at = found.end() - 1
        close = matching_bracket(src, open_at)
        cuts = top_level_commas(src, open_at + 1, close)
        if len(cuts) < 2:
            return src
        last = src[cuts[-1] + 1 : close]
        if found.group(1) == "transformMap":
            key = src[open_at + 1 : cuts[0]].strip()
            last, hidden = f" [{key}, {last.strip()}]", HIDDEN_MAP_OF
        else:
            hidden = HIDDEN_MAP_MERGE
        call = f".transformList({src[open_at + 1 : cuts[-1] + 1]}{last}).{hidden}()"
        src = src[: found.start()] + call + src[close + 1 :]


def _hidden_helpers() -> list[cel.FunctionDecl]:
    t = cel.Type
    anything = t("google.protobuf.Any")
    decls = []
    for function, hidden in HIDDEN_INDEX_OF.items():
        last = function == "lastIndexOf"
        overloads = [
            _overload(
                f"{hidden}_string",
                t.INT,
                [t.STRING, t.STRING],
                lambda s, v, last=last: index_of(s, v, None, last),
                True,
            ),
            _overload(
                f"{hidden}_string_int",
                t.INT,
                [t.STRING, t.STRING, t.INT],
                lambda s, v, i, last=last: index_of(s, v, i, last),
                True,
            ),
            _overload(
                f"{hidden}_list",
                t.INT,
                [t.List(t.DYN), anything],
                lambda s, v, last=last: index_of(s, v, None, last),
                True,
            ),
        ]
        decls.append(cel.FunctionDecl(hidden, overloads))
    dyn_map = t.Map(t.DYN, t.DYN)
    decls.append(
        cel.FunctionDecl(
            HIDDEN_MAP_OF, [_overload("dra_map_of", dyn_map, [t.List(t.DYN)], map_of_pairs, True)]
        )
    )
    decls.append(
        cel.FunctionDecl(
            HIDDEN_MAP_MERGE, [_overload("dra_map_merge", dyn_map, [t.List(t.DYN)], merge_maps, True)]
        )
    )
    return decls


def library_declarations(ip_msg: Any, cidr_msg: Any, url_msg: Any, format_msg: Any) -> list[cel.FunctionDecl]:
    """Every declaration of this module; ``*_msg`` are the message classes of the engine's pool."""
    t = cel.Type
    s, b, i = t.STRING, t.BOOL, t.INT
    ip, cidr, url = t("net.IP"), t("net.CIDR"), t("kubernetes.URL")

    def make_ip(text: str) -> Any:
        return ip_msg(text=lib_net.parse_ip(text))

    def make_cidr(text: str) -> Any:
        return cidr_msg(text=lib_net.parse_cidr(text))

    def on_ip(function: Callable[[str], Any]) -> Callable[[Any], Any]:
        return lambda m: function(m.text)

    def member(
        name: str, oid: str, result: cel.Type, target: cel.Type, impl: Callable[..., Any]
    ) -> cel.FunctionDecl:
        return cel.FunctionDecl(name, [_overload(oid, result, [target], impl, True)])

    def contains(function: Callable[[str, str], bool]) -> Callable[[Any, Any], bool]:
        return lambda c, other: function(c.text, other if isinstance(other, str) else other.text)

    return [
        *_comparisons(),
        *_format_library(format_msg),
        *_hidden_helpers(),
        _to_string(ip, cidr),
        *_typed_lists(),
        # IP
        cel.FunctionDecl(
            "ip",
            [
                _overload("string_to_ip", ip, [s], make_ip, False),
                _overload("cidr_ip", ip, [cidr], lambda c: ip_msg(text=lib_net.cidr_ip(c.text)), True),
            ],
        ),
        cel.FunctionDecl("isIP", [_overload("is_ip", b, [s], lib_net.is_ip, False)]),
        cel.FunctionDecl(
            "ip.isCanonical", [_overload("ip_is_canonical", b, [s], lib_net.ip_is_canonical, False)]
        ),
        member("family", "ip_family", i, ip, on_ip(lib_net.ip_family)),
        member("isUnspecified", "ip_is_unspecified", b, ip, on_ip(lib_net.ip_is_unspecified)),
        member("isLoopback", "ip_is_loopback", b, ip, on_ip(lib_net.ip_is_loopback)),
        member(
            "isLinkLocalMulticast",
            "ip_is_link_local_multicast",
            b,
            ip,
            on_ip(lib_net.ip_is_link_local_multicast),
        ),
        member(
            "isLinkLocalUnicast", "ip_is_link_local_unicast", b, ip, on_ip(lib_net.ip_is_link_local_unicast)
        ),
        member("isGlobalUnicast", "ip_is_global_unicast", b, ip, on_ip(lib_net.ip_is_global_unicast)),
        # CIDR
        cel.FunctionDecl("cidr", [_overload("string_to_cidr", cidr, [s], make_cidr, False)]),
        cel.FunctionDecl("isCIDR", [_overload("is_cidr", b, [s], lib_net.is_cidr, False)]),
        cel.FunctionDecl(
            "containsIP",
            [
                _overload("cidr_contains_ip_string", b, [cidr, s], contains(lib_net.cidr_contains_ip), True),
                _overload("cidr_contains_ip_ip", b, [cidr, ip], contains(lib_net.cidr_contains_ip), True),
            ],
        ),
        cel.FunctionDecl(
            "containsCIDR",
            [
                _overload(
                    "cidr_contains_cidr_string", b, [cidr, s], contains(lib_net.cidr_contains_cidr), True
                ),
                _overload("cidr_contains_cidr", b, [cidr, cidr], contains(lib_net.cidr_contains_cidr), True),
            ],
        ),
        member("prefixLength", "cidr_prefix_length", i, cidr, on_ip(lib_net.cidr_prefix_length)),
        member("masked", "cidr_masked", cidr, cidr, lambda c: cidr_msg(text=lib_net.cidr_masked(c.text))),
        # URL
        cel.FunctionDecl(
            "url", [_overload("string_to_url", url, [s], lambda x: url_msg(text=lib_url.parse_url(x)), False)]
        ),
        cel.FunctionDecl("isURL", [_overload("is_url_string", b, [s], lib_url.is_url, False)]),
        member("getScheme", "url_get_scheme", s, url, on_ip(lib_url.url_scheme)),
        member("getHost", "url_get_host", s, url, on_ip(lib_url.url_host)),
        member("getHostname", "url_get_hostname", s, url, on_ip(lib_url.url_hostname)),
        member("getPort", "url_get_port", s, url, on_ip(lib_url.url_port)),
        member("getEscapedPath", "url_get_escaped_path", s, url, on_ip(lib_url.url_escaped_path)),
        member("getQuery", "url_get_query", t.Map(s, t.List(s)), url, on_ip(lib_url.url_query)),
    ]
