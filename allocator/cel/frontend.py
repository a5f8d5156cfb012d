"""``Frontend``: parsing, type checking and the compile-time checks every engine shares, and
``CompiledProgram``, what every engine's programs share.

The C++ checker (cel-expr-python) checks each selector in the DRA environment (``allocator.cel.expr_env``);
the checker's gaps are closed on the checked tree (``allocator.cel.validators``); regex literals are
validated with the runtime's RE2. ``Analysis`` carries API validation's cost estimate
(``allocator.cel.cost``) and the run-time worst-case bound (``allocator.cel.worst_case``). A compile error
or a cost refusal is therefore the same on every engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel

from allocator.cel import CEL_MAX_COST, CEL_MAX_EXPRESSION_LENGTH, AttributeValue
from allocator.cel.checked import CheckedAst, decode_checked
from allocator.cel.cost import estimate_cost
from allocator.cel.expr_env import new_env
from allocator.cel.expr_libs import (
    HIDDEN_INDEX_OF,
    format_library_edits,
    list_index_edits,
)
from allocator.cel.library import (
    LibraryError,
    derived_attribute_value,
)
from allocator.cel.reads import device_reads
from allocator.cel.source import apply_edits, matching_bracket
from allocator.cel.validators import (
    hidden_name_errors,
    homogeneous_literal_errors,
    list_index_errors,
    location,
    string_format_errors,
)
from allocator.cel.worst_case import worst_case_cost
from allocator.errors import CELCompileError, CELEvalError

_DEVICE_VARS = ("device.driver", "device.attributes", "device.capacity", "device.allowMultipleAllocations")

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


def strip_status(text: str) -> str:
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
    text = strip_status(raw)
    key = re.match(r'Key not found in map\s*:\s*"?(.*?)"?$', text)
    if key:
        return f"no such key: {key.group(1)}"
    if text.startswith("No matching overloads found"):
        return "no such overload: " + text.split(":", 1)[-1].strip()
    return text


def _compile_message(err: Exception) -> str:
    return "compilation failed: " + strip_status(str(err))


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


# ------------------------------------------------------------------------------------------- compile


class _RegexProbe:
    """Validates constant regex arguments with the runtime's own RE2 (upstream ``ValidateRegexLiterals``)."""

    def __init__(self) -> None:
        env = cel.NewEnv(variables={"pattern": cel.Type.STRING})
        self._program = env.compile('"".matches(pattern)')

    def error(self, pattern: str) -> str | None:
        result = self._program.eval(data={"pattern": pattern})
        return None if result.type() == cel.Type.BOOL else strip_status(str(result.value()))


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
