"""The DRA selector environment of cel-expr-python (``allocator.cel.expr_engine``): the value types
``kubernetes.Quantity``, ``kubernetes.Semver`` (and the IP, CIDR, URL and named-format messages) in a
private descriptor pool, the Kubernetes library functions declared on them, and ``new_env``.

Quantity and semver are small protobuf messages: the checker knows them as distinct types and CEL's message
equality is value equality because the fields are canonical (reduced fraction; semver without build
metadata). Library functions run in Python (``allocator.cel.library``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from allocator.cel.expr_guards import HIDDEN_NOT_SEMVER, not_semver
from allocator.cel.expr_libs import (
    STDLIB_CONFIG,
    library_declarations,
)
from allocator.cel.lib_strformat import string_format
from allocator.cel.library import (
    LibraryError,
    SemverValue,
    compare_semver,
    includes,
    parse_cel_quantity,
    parse_semver,
    quantity_as_integer,
    quantity_compare,
    quantity_is_integer,
    quantity_sign,
    quantity_to_float,
    regex_find,
    regex_find_all,
)
from allocator.cel.validators import (
    HIDDEN_FORMAT,
)

# --------------------------------------------------------------------------------------- value types


def _message_pool() -> tuple[Any, ...]:
    """A private pool with ``kubernetes.Quantity{num, den}`` and ``kubernetes.Semver{major, minor, patch,
    pre}`` (decimal strings / uint64s; ``pre`` is the dot-joined prerelease) and the text-valued types
    below; the pool, then the message class of each of ``_MESSAGES``."""
    proto = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="dra_extender/cel_values.proto", package="kubernetes", syntax="proto3"
    )
    quantity = file.message_type.add(name="Quantity")
    for number, name in enumerate(("num", "den"), start=1):
        quantity.field.add(name=name, number=number, type=proto.TYPE_STRING, label=proto.LABEL_OPTIONAL)
    semver = file.message_type.add(name="Semver")
    for number, name in enumerate(("major", "minor", "patch"), start=1):
        semver.field.add(name=name, number=number, type=proto.TYPE_UINT64, label=proto.LABEL_OPTIONAL)
    semver.field.add(name="pre", number=4, type=proto.TYPE_STRING, label=proto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    # IP, CIDR and URL values hold their canonical text, a named format its name (allocator.cel.expr_libs);
    # nothing builds an Unconstructible (it carries the list functions' implementations).
    texts = [("net", "IP", "text"), ("net", "CIDR", "text"), ("kubernetes", "URL", "text")]
    texts += [("kubernetes", "NamedFormat", "name"), ("dra_extender", "Unconstructible", "text")]
    for package, name, field in texts:
        one = descriptor_pb2.FileDescriptorProto(
            name=f"dra_extender/cel_{name.lower()}.proto", package=package, syntax="proto3"
        )
        one.message_type.add(name=name).field.add(
            name=field, number=1, type=proto.TYPE_STRING, label=proto.LABEL_OPTIONAL
        )
        pool.Add(one)
    make = message_factory.GetMessageClass
    return (
        pool,
        *(make(pool.FindMessageTypeByName(n)) for n in _MESSAGES),
    )


_MESSAGES: tuple[str, ...] = (
    "kubernetes.Quantity",
    "kubernetes.Semver",
    "net.IP",
    "net.CIDR",
    "kubernetes.URL",
)
_MESSAGES += ("kubernetes.NamedFormat",)
_POOL, QuantityMsg, SemverMsg, IPMsg, CIDRMsg, URLMsg, FormatMsg = _message_pool()
_QUANTITY = cel.Type("kubernetes.Quantity")
_SEMVER = cel.Type("kubernetes.Semver")


def quantity_message(value: Fraction) -> Any:
    return QuantityMsg(num=str(value.numerator), den=str(value.denominator))


@functools.lru_cache(maxsize=4096)
def _ratio_of(num: str, den: str) -> Fraction:
    try:
        return Fraction(int(num), int(den))
    except (ValueError, ZeroDivisionError):
        raise LibraryError(f"invalid kubernetes.Quantity {num}/{den}") from None


def _fraction(message: Any) -> Fraction:
    # Cached: the same capacity values and literals recur on every evaluation.
    return _ratio_of(message.num, message.den)


def semver_message(value: SemverValue) -> Any:
    pre = ".".join(str(p) for p in value.pre)
    return SemverMsg(major=value.major, minor=value.minor, patch=value.patch, pre=pre)


@functools.lru_cache(maxsize=4096)
def _semver_of(major: int, minor: int, patch: int, pre: str) -> SemverValue:
    parts = tuple(int(p) if p.isdigit() else p for p in pre.split(".")) if pre else ()
    return SemverValue(major, minor, patch, parts)


def semver_value(message: Any) -> SemverValue:
    return _semver_of(message.major, message.minor, message.patch, message.pre)


# ------------------------------------------------------------------------------- library functions


@functools.lru_cache(maxsize=4096)
def parsed_quantity(text: str) -> Fraction:
    return parse_cel_quantity(text)


@functools.lru_cache(maxsize=4096)
def parsed_semver(text: str, relaxed: bool) -> SemverValue:
    return parse_semver(text, relaxed)


DECIMAL_HELD = "01"
"""Denominator spelling of an integral quantity literal that upstream holds as a decimal (``_literal_edit``);
such a message is only ever read by ``isInteger``/``asInteger``."""


def _is_integer(message: Any) -> bool:
    return message.den != DECIMAL_HELD and quantity_is_integer(_fraction(message))


def _as_integer(message: Any) -> int:
    if message.den == DECIMAL_HELD:
        raise LibraryError("cannot convert value to integer")
    return quantity_as_integer(_fraction(message))


def _fn_quantity(text: str) -> Any:
    return quantity_message(parsed_quantity(text))


def _fn_is_quantity(text: str) -> bool:
    try:
        parsed_quantity(text)
    except LibraryError:
        return False
    return True


def _fn_semver(text: str, relaxed: bool = False) -> Any:
    return semver_message(parsed_semver(text, relaxed))


def _fn_is_semver(text: str, relaxed: bool = False) -> bool:
    try:
        parsed_semver(text, relaxed)
    except LibraryError:
        return False
    return True


def _ordering(a: Any, b: Any) -> int:
    """compareTo for two quantities or two semvers (one runtime overload serves both declarations)."""
    if isinstance(a, QuantityMsg) and isinstance(b, QuantityMsg):
        return quantity_compare(_fraction(a), _fraction(b)) if a != b else 0
    if isinstance(a, SemverMsg) and isinstance(b, SemverMsg):
        return compare_semver(semver_value(a), semver_value(b))
    raise LibraryError(f"no such overload: compare {type(a).__name__} with {type(b).__name__}")


def _fn_add(a: Any, b: Any) -> Any:
    other = b if isinstance(b, int) else _fraction(b)
    return quantity_message(_fraction(a) + other)


def _fn_sub(a: Any, b: Any) -> Any:
    other = b if isinstance(b, int) else _fraction(b)
    return quantity_message(_fraction(a) - other)


def _overload(
    oid: str, result: cel.Type, params: list[cel.Type], impl: Callable[..., Any] | None, member: bool = True
) -> cel.Overload:
    if impl is None:
        # Checker-only declaration: the runtime dispatches on argument kinds, and both message types are
        # one kind there, so the sibling overload's implementation serves this one too.
        return cel.Overload(oid, result, params, is_member=member)
    return cel.Overload(oid, result, params, is_member=member, impl=impl)


def _library() -> list[cel.FunctionDecl]:
    """Declarations of the Kubernetes/DRA functions (upstream overload ids where they exist)."""
    s, b, i, d = cel.Type.STRING, cel.Type.BOOL, cel.Type.INT, cel.Type.DOUBLE
    # A parameter declared dyn never matches at run time in cel-expr-python (it registers kind "dyn", which
    # no value has); google.protobuf.Any is the wildcard both for the checker and for runtime dispatch.
    anything = cel.Type("google.protobuf.Any")
    q, v = _QUANTITY, _SEMVER
    return [
        cel.FunctionDecl("quantity", [_overload("string_to_quantity", q, [s], _fn_quantity, False)]),
        cel.FunctionDecl("isQuantity", [_overload("is_quantity_string", b, [s], _fn_is_quantity, False)]),
        cel.FunctionDecl(
            "semver",
            [
                _overload("string_to_semver", v, [s], _fn_semver, False),
                _overload("string_bool_to_semver", v, [s, b], _fn_semver, False),
            ],
        ),
        cel.FunctionDecl(
            "isSemver",
            [
                _overload("is_semver_string", b, [s], _fn_is_semver, False),
                _overload("is_semver_string_bool", b, [s, b], _fn_is_semver, False),
            ],
        ),
        _compare_decl("isGreaterThan", b, lambda x, y: _ordering(x, y) == 1),
        _compare_decl("isLessThan", b, lambda x, y: _ordering(x, y) == -1),
        _compare_decl("compareTo", i, _ordering),
        cel.FunctionDecl("major", [_overload("semver_major", i, [v], lambda m: m.major)]),
        cel.FunctionDecl("minor", [_overload("semver_minor", i, [v], lambda m: m.minor)]),
        cel.FunctionDecl("patch", [_overload("semver_patch", i, [v], lambda m: m.patch)]),
        cel.FunctionDecl(
            "sign",
            [
                # Only the global function: upstream has no q.sign().
                _overload("quantity_sign", i, [q], lambda m: quantity_sign(_fraction(m)), False),
            ],
        ),
        cel.FunctionDecl("asInteger", [_overload("quantity_get_int", i, [q], _as_integer)]),
        cel.FunctionDecl(
            "isInteger",
            [_overload("quantity_is_integer", b, [q], _is_integer)],
        ),
        cel.FunctionDecl(
            "asApproximateFloat",
            [_overload("quantity_get_float", d, [q], lambda m: quantity_to_float(_fraction(m)))],
        ),
        cel.FunctionDecl(
            "add",
            [
                _overload("quantity_add", q, [q, q], _fn_add),
                _overload("quantity_add_int", q, [q, i], _fn_add),
            ],
        ),
        cel.FunctionDecl(
            "sub",
            [
                _overload("quantity_sub", q, [q, q], _fn_sub),
                _overload("quantity_sub_int", q, [q, i], _fn_sub),
            ],
        ),
        cel.FunctionDecl("includes", [_overload("dyn_includes_dyn", b, [anything, anything], includes)]),
        cel.FunctionDecl(
            HIDDEN_NOT_SEMVER,
            [
                _overload(
                    "dra_not_semver", cel.Type.DYN, [anything], lambda x: not_semver(x, SemverMsg), False
                )
            ],
        ),
        cel.FunctionDecl(
            HIDDEN_FORMAT,
            [_overload("string_dra_format", s, [s, cel.Type.List(cel.Type.DYN)], string_format)],
        ),
        *library_declarations(IPMsg, CIDRMsg, URLMsg, FormatMsg),
        cel.FunctionDecl("find", [_overload("string_find_string", s, [s, s], regex_find)]),
        cel.FunctionDecl(
            "findAll",
            [
                _overload("string_find_all_string", cel.Type.List(s), [s, s], regex_find_all),
                _overload("string_find_all_string_int", cel.Type.List(s), [s, s, i], regex_find_all),
            ],
        ),
    ]


def _compare_decl(name: str, result: cel.Type, impl: Callable[[Any, Any], Any]) -> cel.FunctionDecl:
    prefix = "quantity_" + re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    return cel.FunctionDecl(
        name,
        [
            _overload(prefix, result, [_QUANTITY, _QUANTITY], impl),
            _overload(prefix.replace("quantity_", "semver_"), result, [_SEMVER, _SEMVER], None),
        ],
    )


# cel-cpp's lists extension version 2 has the functions of cel-go's ext.Lists v3 (which only adds costs).
_CONFIG = (
    "extensions:\n  - name: sets\n  - name: two-var-comprehensions\n  - name: lists\n    version: 2\n"
    + STDLIB_CONFIG
)


def new_env() -> cel.Env:
    """The DRA selector environment (thread-safe to share: compiled expressions only read it)."""
    attributes = cel.Type.Map(cel.Type.STRING, cel.Type.Map(cel.Type.STRING, cel.Type.DYN))
    capacity = cel.Type.Map(cel.Type.STRING, cel.Type.Map(cel.Type.STRING, _QUANTITY))
    return cel.NewEnv(
        descriptor_pool=_POOL,
        config=cel.NewEnvConfigFromYaml(_CONFIG),
        extensions=[
            ext_strings.ExtStrings(version=2),
            ext_bindings.ExtBindings(),
            ext_optional.ExtOptional(),
        ],
        variables={
            "device.driver": cel.Type.STRING,
            "device.attributes": attributes,
            "device.capacity": capacity,
            "device.allowMultipleAllocations": cel.Type.BOOL,
        },
        functions=_library(),
    )
