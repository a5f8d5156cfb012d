"""``ExprEngine``: the DRA selector environment on cel-expr-python (Google's C++ CEL runtime).

Environment (upstream ``dynamic-resource-allocation/cel/compile.go``, stored-expressions variant):

* Variables are the qualified names ``device.driver`` (string), ``device.attributes`` (map(string,
  map(string, dyn))), ``device.capacity`` (map(string, map(string, kubernetes.Quantity))) and
  ``device.allowMultipleAllocations`` (bool). The checker resolves ``device.x`` to them, so result types
  are as precise as upstream's object type (``device.driver`` alone fails with "must evaluate to bool").
  ``has(device.<field>)`` is rewritten to ``(!false)`` before checking (the C++ checker would fold it into
  the field's value). A bare ``device`` (not followed by a field) is an undeclared reference here.
* ``kubernetes.Quantity`` and ``kubernetes.Semver`` are small protobuf messages in a private descriptor
  pool: the checker knows them as distinct types (``quantity("1") == semver("1.0.0")`` is a compile error
  as upstream) and CEL's message equality is value equality because the fields are canonical (reduced
  fraction; semver without build metadata). Library functions run in Python (``allocator.cel.library``);
  ``quantity("<const>")`` / ``semver("<const>")`` are turned into message literals at compile time.
* The rest of upstream's base environment (``k8s.io/apiserver/pkg/cel/environment/base.go`` v0.37.2,
  StoredExpressions): ext.Strings v2, ``cel.bind``, optional types, ext.Sets, two-variable comprehensions,
  the lists extension (cel-cpp's version 2 = cel-go's v3), cross-type numeric comparisons, Kubernetes'
  quantity, semver, regex ``find``/``findAll``, typed lists ``isSorted``/``sum``/``min``/``max`` and
  ``includes``, URL, IP, CIDR and format libraries (``allocator.cel.expr_libs``). The checker's gaps are
  closed around it: homogeneous aggregate literals and constant ``string.format`` calls are checked on the
  checked tree (``allocator.cel.validators``); ``format``, list ``indexOf``, ``transformMap`` and the
  format library's optionals run through hidden ``__dra_...`` functions the expression itself may not
  name (``expr_libs``); a ``quantity("<const>")`` read by ``isInteger``/``asInteger`` keeps how upstream
  holds its text (``DECIMAL_HELD``).

Unknown domains: upstream returns an empty map for a domain the device lacks. A plain map here would
raise "no such key", so each compile rewrites the source text of every direct lookup
``device.attributes[<key>]`` / ``device.attributes.<name>`` (same for ``capacity``) into the optional form
``device.attributes[?<key>].orValue({})``, located via the checker's source positions. Computed keys work
too. Not covered: the maps reached through an alias (``cel.bind(a, device.attributes, a["x"])`` or a
comprehension variable); there a missing domain raises "no such key". ``"x" in device.attributes`` and
iteration see only the device's real domains, as upstream.

Parsing, checking, regex literal validation and the cost estimate live in ``Frontend``, which the
cel-python engine shares, with API validation's cost estimate (``allocator.cel.cost``). At run time the
static worst-case bound (``allocator.cel.worst_case``) over the limit and the C++ runtime's own iteration
budget (10,000 comprehension iterations per evaluation) both raise CELEvalError
containing "actual cost limit exceeded". The C++ parser limits nesting to 32 levels (cel-go: 250).

Source scanning and editing live in ``allocator.cel.source``.
"""

from __future__ import annotations

import functools
import re
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from allocator.cel import CEL_MAX_COST, CEL_MAX_EXPRESSION_LENGTH, AttributeValue, CELDevice, Version
from allocator.cel.checked import CheckedAst, Expr, decode_checked
from allocator.cel.cost import estimate_cost
from allocator.cel.expr_guards import HIDDEN_NOT_SEMVER, not_semver, semver_guard
from allocator.cel.expr_libs import (
    HIDDEN_INDEX_OF,
    STDLIB_CONFIG,
    format_library_edits,
    library_declarations,
    list_index_edits,
    without_map_inserts,
)
from allocator.cel.lib_strformat import string_format
from allocator.cel.library import (
    LibraryError,
    SemverValue,
    UnsupportedValue,
    compare_semver,
    convert_attributes,
    derived_attribute_value,
    includes,
    parse_cel_quantity,
    parse_semver,
    plain_attribute,
    quantity_as_integer,
    quantity_compare,
    quantity_int64,
    quantity_is_integer,
    quantity_sign,
    quantity_to_float,
    regex_find,
    regex_find_all,
)
from allocator.cel.reads import device_reads
from allocator.cel.source import apply_edits, matching_bracket
from allocator.cel.validators import (
    HIDDEN_FORMAT,
    hidden_name_errors,
    homogeneous_literal_errors,
    list_index_errors,
    location,
    string_format_errors,
)
from allocator.cel.worst_case import worst_case_cost
from allocator.errors import CELCompileError, CELEvalError

__all__ = [
    "Analysis",
    "CompiledProgram",
    "ExprEngine",
    "ExprProgram",
    "ExprValueProgram",
    "Frontend",
]

ACTIVATION_REUSE = 256
"""Evaluations per cached activation. cel-expr-python allocates each evaluation's values in the
activation's arena and frees them only with the activation, so a cached activation is rebuilt after this
many uses: memory stays bounded and the rebuild (~2-5 us) costs < 2 % per evaluation."""

MAX_ACTIVATIONS_PER_THREAD = 4096
"""Activations kept per thread (each holds a C++ arena, several KiB): selector results are cached per
device by ``SelectorCache``, so activations only matter while a device is first evaluated."""

MAX_CONVERTED_DEVICES = 16384
"""Devices kept in CEL value form (shared by threads); beyond it the table starts over."""

ITERATION_BUDGET = 10_000
"""cel-cpp's default ``comprehension_max_iterations`` (not configurable through cel-expr-python)."""

_DEVICE_VARS = ("device.driver", "device.attributes", "device.capacity", "device.allowMultipleAllocations")
_DOMAIN_MAPS = frozenset({"device.attributes", "device.capacity"})

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


_MESSAGES = ("kubernetes.Quantity", "kubernetes.Semver", "net.IP", "net.CIDR", "kubernetes.URL")
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


def _semver(message: Any) -> SemverValue:
    return _semver_of(message.major, message.minor, message.patch, message.pre)


# ------------------------------------------------------------------------------- library functions


@functools.lru_cache(maxsize=4096)
def _parsed_quantity(text: str) -> Fraction:
    return parse_cel_quantity(text)


@functools.lru_cache(maxsize=4096)
def _parsed_semver(text: str, relaxed: bool) -> SemverValue:
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
    return quantity_message(_parsed_quantity(text))


def _fn_is_quantity(text: str) -> bool:
    try:
        _parsed_quantity(text)
    except LibraryError:
        return False
    return True


def _fn_semver(text: str, relaxed: bool = False) -> Any:
    return semver_message(_parsed_semver(text, relaxed))


def _fn_is_semver(text: str, relaxed: bool = False) -> bool:
    try:
        _parsed_semver(text, relaxed)
    except LibraryError:
        return False
    return True


def _ordering(a: Any, b: Any) -> int:
    """compareTo for two quantities or two semvers (one runtime overload serves both declarations)."""
    if isinstance(a, QuantityMsg) and isinstance(b, QuantityMsg):
        return quantity_compare(_fraction(a), _fraction(b)) if a != b else 0
    if isinstance(a, SemverMsg) and isinstance(b, SemverMsg):
        return compare_semver(_semver(a), _semver(b))
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


# ---------------------------------------------------------------------------- messages and type names

_STATUS_PREFIX = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX = re.compile(r"\s*\[[A-Z_]+\]\s*$")
_TYPE_NAMES = {
    "BOOL": "bool",
    "INT": "int",
    "UINT": "uint",
    "DOUBLE": "double",
    "STRING": "string",
    "BYTES": "bytes",
    "NULL": "null_type",
    "DYN": "dyn",
    "LIST": "list",
    "MAP": "map",
    "TYPE": "type",
    "TIMESTAMP": "google.protobuf.Timestamp",
    "DURATION": "google.protobuf.Duration",
    "ERROR": "error",
}


def _strip_status(text: str) -> str:
    """Drop absl status decorations ("INVALID_ARGUMENT: ...", "... [INVALID_ARGUMENT]")."""
    return _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", text.strip(), count=1))


def type_name(raw: str, bare: bool = False) -> str:
    """cel-go spelling of a cel-expr-python type name: ``MAP<STRING, DYN>`` -> ``map(string, dyn)``;
    ``bare`` keeps only the outer name (``map``), like cel-go's ``TypeName()``."""
    if bare:
        raw = raw.split("<", 1)[0]
    spelled = re.sub(r"[A-Za-z_][A-Za-z0-9_.]*", lambda m: _TYPE_NAMES.get(m.group(0), m.group(0)), raw)
    return spelled.replace("<", "(").replace(">", ")")


def runtime_message(raw: str) -> str:
    """Upstream-style runtime error text from a cel-cpp error value."""
    text = _strip_status(raw)
    key = re.match(r'Key not found in map\s*:\s*"?(.*?)"?$', text)
    if key:
        return f"no such key: {key.group(1)}"
    if text.startswith("No matching overloads found"):
        return "no such overload: " + text.split(":", 1)[-1].strip()
    return text


def _compile_message(err: Exception) -> str:
    return "compilation failed: " + _strip_status(str(err))


# ----------------------------------------------------------------------------------- source rewrites


_FIELD = re.compile(r"\.\s*([A-Za-z_][A-Za-z0-9_]*)")


def _source_edits(ast: CheckedAst, src: str) -> list[tuple[int, int, str]]:
    """Edits (start, end, replacement): direct domain lookups become ``[?key].orValue({})`` and constant
    quantity/semver calls become message literals."""
    edits: list[tuple[int, int, str]] = []
    decimal_held: set[int] = set()  # quantity literals read by isInteger/asInteger (_literal_edit)
    for node in ast.root.walk():
        if node.kind == "call" and node.name in ("isInteger", "asInteger") and node.operand is not None:
            decimal_held.add(node.operand.id)
        pos = ast.positions.get(node.id, -1)
        if not 0 <= pos < len(src):
            continue
        index = node.kind == "call" and node.name == "_[_]" and bool(node.args)
        target = node.args[0] if index and node.args else node.operand
        if target is not None and _refers_to(ast, target, _DOMAIN_MAPS):
            if index and src[pos] == "[":
                close = matching_bracket(src, pos)
                edits += [(pos + 1, pos + 1, "?"), (close + 1, close + 1, ".orValue({})")]
            elif node.kind == "select" and not node.test_only and src[pos] == ".":
                field = _FIELD.match(src, pos)
                if field and field.group(1) == node.name:
                    edits.append((pos, field.end(), f'[?"{node.name}"].orValue({{}})'))
        elif node.kind == "call" and src[pos] == "(":
            edits += _literal_edit(node, src, pos, node.id in decimal_held) + _format_edit(node, src, pos)
    return edits


_FORMAT_NAME = re.compile(r"format\s*$")


def _format_edit(node: Expr, src: str, pos: int) -> list[tuple[int, int, str]]:
    """``x.format(args)`` runs Kubernetes' formatter (``allocator.cel.lib_strformat``), not cel-cpp's."""
    if node.name != "format" or node.operand is None:
        return []
    name = _FORMAT_NAME.search(src, 0, pos)
    return [] if name is None else [(name.start(), name.end(), HIDDEN_FORMAT)]


def _literal_edit(node: Expr, src: str, pos: int, integer_read: bool = False) -> list[tuple[int, int, str]]:
    """``quantity("40Gi")`` / ``semver("1.2.3"[, true])`` with constant, valid arguments become message
    literals the runtime builds natively (no Python call per evaluation). Invalid constants stay calls, so
    their error still happens at evaluation time as upstream.

    ``integer_read``: the quantity is the receiver of ``isInteger``/``asInteger``, which upstream answers
    from how ``ParseQuantity`` holds the text (``quantity_int64``): when that is not an int64, the literal's
    denominator is spelled ``"01"`` (``DECIMAL_HELD``), which the two functions read as "not an integer"."""
    args = node.args or []
    if node.operand is not None or node.name not in ("quantity", "semver") or not args:
        return []
    if any(a.kind != "const" for a in args) or not isinstance(args[0].value, str):
        return []
    name = re.compile(node.name + r"\s*$").search(src, 0, pos)
    if name is None or (
        name.start() > 0 and (src[name.start() - 1].isalnum() or src[name.start() - 1] in "._")
    ):
        return []
    try:
        if node.name == "quantity":
            value = _parsed_quantity(args[0].value)
            den = str(value.denominator)
            if integer_read and den == "1" and quantity_int64(args[0].value) is None:
                den = DECIMAL_HELD
            literal = f'kubernetes.Quantity{{num: "{value.numerator}", den: "{den}"}}'
        else:
            version = _parsed_semver(args[0].value, len(args) > 1 and args[1].value is True)
            pre = ".".join(str(p) for p in version.pre)
            literal = (
                f"kubernetes.Semver{{major: {version.major}u, minor: {version.minor}u, "
                f'patch: {version.patch}u, pre: "{pre}"}}'
            )
    except LibraryError:
        return []
    return [(name.start(), matching_bracket(src, pos) + 1, literal)]


_HAS = re.compile(r"\bhas\s*\(")
_HAS_BEFORE = re.compile(r"\bhas\s*\($")
_DEVICE_FIELDS = frozenset(name.removeprefix("device.") for name in _DEVICE_VARS)


PRESENT = "(!false)"
"""What ``has(device.<field>)`` becomes: true, and with cel-go's estimated cost of the test (1, the read of
``device``; Kubernetes gives the presence test itself no cost)."""


def _presence_edits(parsed: CheckedAst, src: str) -> list[tuple[int, int, str]]:
    """``has(device.<field>)`` becomes ``PRESENT``: the fields always exist (upstream's device object), but
    the C++ checker resolves ``device.<field>`` as a qualified variable and folds the test into its value.
    Works on the parsed (unchecked) tree, where the test-only select is still visible."""
    edits = []
    for node in parsed.root.walk():
        operand = node.operand
        if not (node.kind == "select" and node.test_only and node.name in _DEVICE_FIELDS and operand):
            continue
        pos = parsed.positions.get(node.id, -1)
        macro = _HAS_BEFORE.search(src, 0, pos + 1) if 0 <= pos < len(src) and src[pos] == "(" else None
        if operand.kind == "ident" and operand.name == "device" and macro:
            edits.append((macro.start(), matching_bracket(src, pos) + 1, PRESENT))
    return edits


def _refers_to(ast: CheckedAst, node: Expr, names: frozenset[str]) -> bool:
    return node.kind == "ident" and ast.references.get(node.id, node.name) in names


# ------------------------------------------------------------------------------------------- compile


class _RegexProbe:
    """Validates constant regex arguments with the runtime's own RE2 (upstream ``ValidateRegexLiterals``)."""

    def __init__(self) -> None:
        env = cel.NewEnv(variables={"pattern": cel.Type.STRING})
        self._program = env.compile('"".matches(pattern)')

    def error(self, pattern: str) -> str | None:
        result = self._program.eval(data={"pattern": pattern})
        return None if result.type() == cel.Type.BOOL else _strip_status(str(result.value()))


def _regex_errors(ast: CheckedAst, src: str, probe: _RegexProbe) -> list[str]:
    errors = []
    for node in ast.root.walk():
        if node.kind != "call" or node.name not in ("matches", "find", "findAll"):
            continue
        operands = ([node.operand] if node.operand else []) + list(node.args or [])
        pattern = operands[1] if len(operands) > 1 else None
        if pattern is None or pattern.kind != "const" or not isinstance(pattern.value, str):
            continue
        problem = probe.error(pattern.value)
        if problem is None and node.name != "matches":
            try:
                re.compile(pattern.value)
            except re.error as err:
                problem = f"not supported by this engine's find/findAll: {err}"
        if problem:
            where = location(src, ast.positions.get(pattern.id, 0))
            errors.append(f"ERROR: {where}: invalid {node.name} argument: {problem}")
    return errors


def _check_length(expression: str) -> None:
    # API validation measures the Go string, i.e. UTF-8 bytes.
    size = len(expression.encode())
    if size > CEL_MAX_EXPRESSION_LENGTH:
        raise CELCompileError(
            f"expression is {size} bytes long, more than the limit of {CEL_MAX_EXPRESSION_LENGTH} "
            "(CELSelectorExpressionMaxLength)"
        )


@dataclass(frozen=True, slots=True)
class Analysis:
    """What the front-end established about an accepted expression. ``source`` is the text after the
    ``has(device.<field>)`` rewrite; ``ast`` is its checked tree (positions refer to ``source``);
    ``estimated_cost`` is cel-go's estimated cost, what API validation holds against the limits
    (``allocator.cel.cost``); ``cost_bound`` the static worst case of one evaluation, which stands for
    upstream's run-time cost tracking (``allocator.cel.worst_case``)."""

    source: str
    checked: Any
    ast: CheckedAst
    estimated_cost: int
    cost_bound: int


class Frontend:
    """Parses and type-checks selectors in the DRA environment; shared by every engine, so compile errors
    and cost estimates cannot differ between engines. Thread-safe."""

    def __init__(self) -> None:
        self.env = new_env()
        self._probe = _RegexProbe()

    def analyze(self, expression: str, *, value: bool = False) -> Analysis:
        """Raises CELCompileError (syntax, types, non-bool result, regex literal, > 10 Ki). ``value``: a
        derived attribute expression, whose result may be any attribute type (``VALUE_RESULT_TYPES``)."""
        _check_length(expression)
        source = self._rewritten(expression)
        try:
            checked = self.env.compile(source)
        except RuntimeError as err:
            if not _LIST_INDEX_REFUSED.search(str(err)):
                raise CELCompileError(_compile_message(err)) from None
            source = apply_edits(
                source,
                list_index_edits(
                    decode_checked(self.env.compile(source, disable_check=True).serialize()), source
                ),
            )
            try:
                checked = self.env.compile(source)
            except RuntimeError as again:
                raise CELCompileError(_compile_message(again)) from None
        result = checked.return_type().name()
        if value:
            if not _value_result_type(result):
                raise CELCompileError(
                    "must evaluate to string, int, bool, semver, a list of one of those, or the unknown "
                    f"type, not {type_name(result)}"
                )
        elif result not in ("BOOL", "DYN"):
            raise CELCompileError(f"must evaluate to bool or the unknown type, not {type_name(result)}")
        ast = decode_checked(checked.serialize())
        if _dyn_index_receiver(ast):
            # A dyn receiver may be a list at run time, which cel-cpp's string indexOf cannot serve.
            source = apply_edits(source, list_index_edits(ast, source))
            try:
                checked = self.env.compile(source)
            except RuntimeError as err:
                raise CELCompileError(_compile_message(err)) from None
            ast = decode_checked(checked.serialize())
        problems = homogeneous_literal_errors(ast, source) + list_index_errors(ast, source, HIDDEN_INDEX_OF)
        problems += string_format_errors(ast, source) + _regex_errors(ast, source, self._probe)
        if problems:
            raise CELCompileError("compilation failed: " + "\n".join(problems))
        return Analysis(source, checked, ast, estimate_cost(ast), worst_case_cost(ast))

    def _rewritten(self, expression: str) -> str:
        """The source to check: ``has(device.<field>)`` is ``PRESENT`` (``_presence_edits``), the format
        library's optional results are spelled with hidden functions (``format_library_edits``), and so is
        ``indexOf``/``lastIndexOf`` with an offset (``list_index_edits``). Raises
        CELCompileError for an expression that names a hidden function itself."""
        presence = bool(_HAS.search(expression)) and "device" in expression
        formats = "validate" in expression or "named" in expression
        offsets = "ndexOf" in expression
        if not (presence or formats or offsets or "__dra_" in expression):
            return expression
        try:
            parsed = decode_checked(self.env.compile(expression, disable_check=True).serialize())
        except (RuntimeError, ValueError):
            return expression  # a syntax error: the checked compile reports it
        hidden = hidden_name_errors(parsed, expression)
        if hidden:
            raise CELCompileError("compilation failed: " + "\n".join(hidden))
        edits = _presence_edits(parsed, expression) if presence else []
        if formats:
            edits += format_library_edits(parsed, expression)
        if offsets:
            edits += list_index_edits(parsed, expression, offsets_only=True)
        return apply_edits(expression, edits)


_LIST_INDEX_REFUSED = re.compile(r"no matching overload for '(?:last)?[iI]ndexOf' applied to '\((?:list|dyn)")
"""The checker's refusal of ``library.Lists``' ``indexOf`` on a list (``list_index_edits``)."""


def _dyn_index_receiver(ast: CheckedAst) -> bool:
    return any(
        node.kind == "call"
        and node.name in ("indexOf", "lastIndexOf")
        and node.operand is not None
        and ast.types.get(node.operand.id) == "dyn"
        for node in ast.root.walk()
    )


VALUE_RESULT_TYPES = frozenset({"BOOL", "INT", "STRING", "DYN", "kubernetes.Semver"})
"""Static result types a derived attribute expression may have (also as list elements)."""


def _value_result_type(name: str) -> bool:
    if name.startswith("LIST<") and name.endswith(">"):
        name = name[5:-1]
    return name in VALUE_RESULT_TYPES


def cost_limit_message(cost_bound: int) -> str | None:
    """The CELEvalError text for a program whose worst-case bound is over the limit (None when within)."""
    if cost_bound <= CEL_MAX_COST:
        return None
    return (
        f"operation cancelled: actual cost limit exceeded (worst-case cost {cost_bound} is above the limit "
        f"of {CEL_MAX_COST})"
    )


# ---------------------------------------------------------------------------------------- the device


class _DeviceEntry:
    """A device converted for the runtime (shared by all threads), or why it cannot be converted."""

    __slots__ = ("data", "error")

    def __init__(self, data: dict[str, Any] | None, error: str | None) -> None:
        self.data, self.error = data, error


def _attribute_value(value: AttributeValue) -> Any:
    """The runtime form of one attribute value. Raises LibraryError (bad version, int beyond int64)."""
    if isinstance(value, tuple):
        return [_attribute_value(v) for v in value]
    plain = plain_attribute(value)
    return semver_message(plain) if isinstance(plain, SemverValue) else plain


def device_data(device: CELDevice) -> dict[str, Any]:
    """The activation contents. Raises LibraryError for an attribute that cannot be converted (a version
    that is not semver, an int outside int64; ``convert_attributes``)."""
    capacity = {
        domain: {name: quantity_message(q.value) for name, q in values.items()}
        for domain, values in device.capacity.items()
    }
    return {
        "device.driver": device.driver,
        "device.attributes": convert_attributes(device.attributes, _attribute_value),
        "device.capacity": capacity,
        "device.allowMultipleAllocations": bool(device.allow_multiple_allocations),
    }


# ------------------------------------------------------------------------------------------- program


class CompiledProgram:
    """What every engine's programs share: the expression, its estimated cost (for API validation), its
    worst-case bound with the run-time limit check, and the conversion of a plain result into a derived
    attribute value."""

    __slots__ = ("_cost_error", "cost_bound", "estimated_cost", "expression", "reads")

    def __init__(self, expression: str, analysis: Analysis) -> None:
        self.expression = expression
        self.estimated_cost = analysis.estimated_cost
        self.cost_bound = analysis.cost_bound
        # Upstream's run-time cost never exceeds its estimate, so an expression the API server admits is
        # never aborted; one it refuses runs as far as the worst case of its evaluation allows.
        self._cost_error = cost_limit_message(min(analysis.cost_bound, analysis.estimated_cost))
        self.reads = device_reads(analysis.ast)
        """The device keys the expression reads (``allocator.cel.reads``; None: not keyable)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.expression!r})"

    def _check_cost(self) -> None:
        """Raises CELEvalError when the worst-case bound is over the limit (upstream aborts at run time)."""
        if self._cost_error is not None:
            raise CELEvalError(self._cost_error)

    @staticmethod
    def _attribute(plain: object) -> AttributeValue:
        """``derived_attribute_value`` of a plain result; raises CELEvalError."""
        try:
            return derived_attribute_value(plain)
        except LibraryError as err:
            raise CELEvalError(str(err)) from None


@dataclass(frozen=True, slots=True)
class _Runnable:
    """The program to run, and how to compile the guarded one for devices with a version at one of
    ``guard_keys`` (compiled on first use: most clusters never need it)."""

    program: Any
    guard_keys: tuple[tuple[str, str], ...]
    guarded: Callable[[], Any] | None


class ExprProgram(CompiledProgram):
    """A compiled selector. ``evaluate`` raises CELEvalError; safe to call from several threads."""

    __slots__ = ("_engine", "_guard_keys", "_guarded", "_guarded_program", "_program")

    def __init__(self, engine: ExprEngine, expression: str, runnable: _Runnable, analysis: Analysis) -> None:
        super().__init__(expression, analysis)
        self._engine = engine
        self._program = runnable.program
        self._guard_keys = runnable.guard_keys
        self._guarded = runnable.guarded
        self._guarded_program: Any = None

    def _run(self, device: CELDevice) -> Any:
        self._check_cost()
        activation = self._engine.activation(device)
        program = self._program
        if self._guard_keys and _has_version(device, self._guard_keys):
            if self._guarded_program is None and self._guarded is not None:
                self._guarded_program = self._guarded()  # two threads may both compile: same program
            program = self._guarded_program
        try:
            return program.eval(activation)
        except RuntimeError as err:
            raise CELEvalError(_exception_message(err)) from None

    def evaluate(self, device: CELDevice) -> bool:
        result = self._run(device)
        value = _python_value(result)
        if value is True or value is False:
            return value
        kind = result.type()
        if kind == cel.Type.ERROR and value is not None:
            raise CELEvalError(runtime_message(str(value)))
        raise CELEvalError(
            f"CEL result of type {type_name(kind.name(), bare=True)} could not be converted to bool"
        )


class ExprValueProgram(ExprProgram):
    """A compiled derived attribute expression; ``evaluate`` returns an ``AttributeValue``."""

    __slots__ = ()

    def evaluate(self, device: CELDevice) -> AttributeValue:  # type: ignore[override]
        result = self._run(device)
        if result.type() == cel.Type.ERROR and (error := _python_value(result)) is not None:
            raise CELEvalError(runtime_message(str(error)))
        return self._attribute(_plain_result(result))


def _has_version(device: CELDevice, keys: tuple[tuple[str, str], ...]) -> bool:
    # A plain loop: this runs on every evaluation of an expression with guard keys.
    attributes = device.attributes
    for domain, ident in keys:
        values = attributes.get(domain)
        if values is not None and type(values.get(ident)) is Version:
            return True
    return False


def _python_value(result: Any) -> Any:
    """The result's Python value, or None for values that have no Python form (optionals)."""
    try:
        return result.value()
    except TypeError:
        return None


def _plain_result(value: Any) -> Any:
    """A cel-expr-python value (or list element accessor) as the plain Python value the library expects;
    values of other CEL types become ``UnsupportedValue`` naming the type."""
    kind = value.type()
    name = kind.name()
    if name in ("BOOL", "INT", "STRING"):
        return value.value()
    if name == "kubernetes.Semver":
        return _semver(value.value())
    if name.startswith("LIST"):
        return [_plain_result(item) for item in value.value()]
    return UnsupportedValue(type_name(name, bare=True))


def _exception_message(err: RuntimeError) -> str:
    text = _strip_status(str(err))
    if "Iteration budget exceeded" in text:
        return (
            "operation cancelled: actual cost limit exceeded (more than the runtime's "
            f"{ITERATION_BUDGET} comprehension iterations per evaluation)"
        )
    return runtime_message(text)


# -------------------------------------------------------------------------------------------- engine


class ExprEngine:
    """``CELEngine`` on cel-expr-python. Compiled programs and per-device activations are cached by the
    caller and by this engine respectively; all methods are thread-safe."""

    name = "cel-expr"
    program_bytes_per_char = 126

    def __init__(self, frontend: Frontend | None = None) -> None:
        self._frontend = frontend or Frontend()
        self._env = self._frontend.env
        self._lock = threading.Lock()
        self._devices: weakref.WeakKeyDictionary[CELDevice, _DeviceEntry] = weakref.WeakKeyDictionary()
        self._local = threading.local()

    def compile(self, expression: str) -> ExprProgram:
        """Raises CELCompileError (syntax, types, non-bool result, regex literal, > 10 Ki)."""
        analysis = self._frontend.analyze(expression)
        return ExprProgram(self, expression, self._runnable(analysis), analysis)

    def compile_value(self, expression: str) -> ExprValueProgram:
        """A derived attribute expression (KEP-6080). Raises CELCompileError (as ``compile``, but the result
        may be string, int, bool, semver or a list of those)."""
        analysis = self._frontend.analyze(expression, value=True)
        return ExprValueProgram(self, expression, self._runnable(analysis), analysis)

    def _runnable(self, analysis: Analysis) -> _Runnable:
        """The programs actually run: the source with domain lookups and literals rewritten (module doc),
        and, where a version attribute's equality may be refused, the guarded variant
        (``allocator.cel.expr_guards``)."""
        try:
            edits = _source_edits(analysis.ast, analysis.source)
            guard_keys, guard_edits = semver_guard(analysis.ast, analysis.source)
        except ValueError:
            edits, guard_keys, guard_edits = [], (), []
        program = self._program(analysis, edits)
        guarded = functools.partial(self._program, analysis, edits + guard_edits) if guard_keys else None
        return _Runnable(program, guard_keys, guarded)

    def _program(self, analysis: Analysis, edits: list[tuple[int, int, str]]) -> Any:
        source = analysis.source
        if "transformMap" in source:
            source = without_map_inserts(apply_edits(source, edits))
        elif not edits:
            return analysis.checked
        else:
            source = apply_edits(source, edits)
        try:
            return self._env.compile(source)
        except RuntimeError:
            return analysis.checked  # not expected; keep the original (missing domains then raise)

    def activation(self, device: CELDevice) -> Any:
        """The device's activation for the calling thread, rebuilt every ACTIVATION_REUSE uses.

        Activations are per thread: cel-expr-python finds the Python wrapper of an activation's arena in
        thread-local state when it calls a Python function, so an activation built in another thread fails
        with "No PyCelArena found". Raises CELEvalError for devices whose attributes cannot be converted.
        """
        slots = getattr(self._local, "slots", None)
        if slots is None:
            slots = self._local.slots = weakref.WeakKeyDictionary()
        slot = slots.get(device)
        if slot is None or slot[1] <= 0:
            if len(slots) >= MAX_ACTIVATIONS_PER_THREAD:
                slots.clear()  # bound memory: each activation holds a C++ arena
            slot = [self._env.Activation(self._device_data(device)), ACTIVATION_REUSE]
            slots[device] = slot
        slot[1] -= 1
        return slot[0]

    def _device_data(self, device: CELDevice) -> dict[str, Any]:
        with self._lock:
            entry = self._devices.get(device)
            if entry is None:
                if len(self._devices) >= MAX_CONVERTED_DEVICES:
                    self._devices.clear()  # bound memory; a device is converted again when next evaluated
                entry = self._devices[device] = self._new_entry(device)
        if entry.error is not None:
            raise CELEvalError(entry.error)
        assert entry.data is not None
        return entry.data

    @staticmethod
    def _new_entry(device: CELDevice) -> _DeviceEntry:
        try:
            return _DeviceEntry(device_data(device), None)
        except LibraryError as err:
            return _DeviceEntry(None, str(err))
