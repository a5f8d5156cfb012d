"""Reading YAML and JSON documents as Kubernetes reads them, within bounds: for state directories
(``app.state.statedir``), request bodies and the files settings name.

YAML is read with string keys only, no duplicate keys, timestamps kept as strings, and no binary data or
sets; a document is refused when it nests deeper than ``MAX_DEPTH``, expands past ``MAX_DOCUMENT_NODES``
values through aliases, refers to itself, or holds a number JSON and the API cannot (beyond int64, .inf,
.nan). Problems are ValueErrors whose text says what and where (a line, a Helm template directive, ``...``
elisions); the callers add the file or body they came from. Files are read only when regular and within
a byte limit (``not_regular``, ``read_at_most``).
"""

from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import orjson
import yaml

__all__ = [
    "MAX_DEPTH",
    "MAX_DOCUMENT_NODES",
    "MAX_ENCODED_DEPTH",
    "TEMPLATE_PROBLEM",
    "check_encodable",
    "load_yaml_document",
    "not_regular",
    "parse_documents",
    "read_at_most",
]

# A Go/Helm template action on a non-comment line: `{{ .Values.x }}`, `{{- if ... }}`, `{{.Index}}`.
_TEMPLATE_LINE = re.compile(r"^(?!\s*#).*?\{\{.*?\}\}", re.MULTILINE)
TEMPLATE_PROBLEM = (
    "Helm/Go template directive `{{ ... }}`: not plain YAML; render the template first "
    "(helm template, or the tool that fills it in)"
)
# A `...` elision as used in KEPs and docs: a line of its own or a value (`pool: ...`).
_ELISION = re.compile(r"^\s*(?:-\s*)?\.\.\.\s*$|:\s*\.\.\.\s*$", re.MULTILINE)


_SPECIAL_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def not_regular(file: Path) -> str:
    """What ``file`` is when not a regular file (nor a link to one), for the warning; "" for a regular file,
    ``directory`` for a directory ``rglob`` walks. Only stat: opening a FIFO nobody writes to would block
    forever, and a device may never end."""
    link = file.is_symlink()
    try:
        mode = file.stat().st_mode
    except OSError as err:  # a dangling or looping link
        return f"a symbolic link to {os.readlink(file)}: {err.strerror}" if link else f"{err.strerror}"
    if stat.S_ISREG(mode):
        return ""
    if stat.S_ISDIR(mode):
        # rglob does not follow a link to a directory: its manifests would be missing without a word.
        return "a symbolic link to a directory, not followed" if link else "directory"
    what = next((name for test, name in _SPECIAL_KINDS if test(mode)), "a special file")
    return f"{'a symbolic link to ' if link else ''}{what}, not a regular file"


def read_at_most(file: Path, limit: int) -> tuple[bytes, int]:
    """The file's bytes and its size, or (b"", size) for a file above ``limit`` bytes: refused before
    reading when ``stat`` says so (a sparse multi-GB file would be read into memory), and while reading
    when more arrives than stat said (a growing file, /proc). Raises OSError."""
    size = file.stat().st_size
    if size > limit:
        return b"", size
    with file.open("rb") as handle:
        data = handle.read(limit + 1)
    return (b"", len(data)) if len(data) > limit else (data, max(size, len(data)))


# The base is libyaml's CSafeLoader when PyYAML was built with it, else the pure-Python SafeLoader: a class
# picked at run time, which mypy cannot check as a base.
class _YamlLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe loader with Kubernetes' reading of YAML: timestamps stay strings, duplicate keys are errors."""


# Kubernetes (sigs.k8s.io/yaml) keeps `2025-01-01T00:00:00Z` a string; PyYAML would build a datetime.
_YamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[str, Any]:
    loader.flatten_mapping(node)
    mapping: dict[str, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, str):
            # JSON (and so the API) has string keys only; YAML 1.1 also reads `on:` / `1:` as bool / int.
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found a non-string key {key!r} (quote it)",
                key_node.start_mark,
            )
        if key in mapping:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r}",
                key_node.start_mark,
            )
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_YamlLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    try:
        return loader.construct_yaml_int(node)
    except ValueError:
        # More digits than Python converts (sys.get_int_max_str_digits(), 4300): far beyond int64, and a
        # ValueError without the file or line otherwise.
        raise yaml.constructor.ConstructorError(
            None, None, f"integer out of range (64-bit): {len(node.value)} digits", node.start_mark
        ) from None


_YamlLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def parse_documents(text: str, *, json: bool) -> list[Any]:
    """The documents of a file's ``text``: one JSON document with ``json``, else every YAML document.
    Raises ValueError naming the problem (malformed, a template, too deep or too large, not JSON data)."""
    if json:
        try:
            documents = [orjson.loads(text)]
        except orjson.JSONDecodeError as err:
            raise ValueError(f"not valid JSON: {err}") from err
        problem = _json_problem(documents[0], max_values=_value_bound(text))
        if problem:
            raise ValueError(problem)
        return documents
    try:
        documents = list(yaml.load_all(text, Loader=_YamlLoader))
    except RecursionError as err:
        # Constructing a document recurses once per level; libyaml alone allows 1000 levels.
        raise ValueError(_TOO_DEEP) from err
    except yaml.YAMLError as err:
        template = _TEMPLATE_LINE.search(text)
        if template:
            # `{{` opens a YAML flow mapping: the directive, not the YAML, is what is wrong.
            line = text.count("\n", 0, template.start()) + 1
            raise ValueError(f"line {line}: {TEMPLATE_PROBLEM}") from err
        raise ValueError(_yaml_problem(err, text)) from err
    for index, document in enumerate(documents):
        problem = _json_problem(document, max_values=_value_bound(text))
        if problem:
            raise ValueError(f"document {index}: {problem}")
    return documents


MAX_DOCUMENT_NODES = 1_000_000
"""Values in one YAML document once aliases are expanded, unless its text is longer: every value takes at
least one character of the text, so only aliases expand past it (a large cluster's dump holds millions of
values, each written out). Guards against alias bombs (a few lines expanding to billions of values)."""


def _value_bound(text: str | bytes) -> int:
    """The most values a document of ``text`` may hold once aliases are expanded (``MAX_DOCUMENT_NODES``);
    bytes count as characters do (a value takes at least one of either)."""
    return max(MAX_DOCUMENT_NODES, len(text))


MAX_DEPTH = 200
"""Levels of nesting in one document (the document is level 1). Kubernetes objects need a few dozen (deep
CRD schemas, skipped but parsed, under a hundred); the copies and digests of objects are encoded by orjson,
which stops at 255 levels, and every walk over an object recurses per level."""

_TOO_DEEP = f"nested more than {MAX_DEPTH} levels deep"
_INT64 = range(-(1 << 63), 1 << 63)


MAX_ENCODED_DEPTH = 254
"""Levels of nesting orjson encodes; it reads 1024. Objects from JSON bodies are copied and digested by
encoding them, so the HTTP layer refuses what it could not encode again (at C speed: a Python walk to hold
them to ``MAX_DEPTH`` would cost ~5x the parse of an 8 MiB body)."""


def check_encodable(document: object, what: str) -> None:
    """ValueError naming ``what`` when a document read from JSON is nested too deeply to be encoded
    again (nothing else can fail it: orjson read it). One encode, ~1 ms per MiB."""
    try:
        orjson.dumps(document)
    except orjson.JSONEncodeError as err:
        raise ValueError(f"{what}: nested more than {MAX_ENCODED_DEPTH} levels deep") from err


def load_yaml_document(text: str | bytes, what: str, *, json_numbers: bool = True) -> Any:
    """One YAML (or JSON) document as plain JSON data, with the state loader's rules: string keys, no
    duplicate keys, timestamps kept as strings, no binary/sets, no self-referencing or exploding aliases,
    no nesting deeper than ``MAX_DEPTH``, and with ``json_numbers`` no number JSON cannot hold (beyond
    int64, .inf, .nan; False: the caller checks its numbers, naming their fields). Raises ValueError
    naming ``what`` (for bodies and files other than a state directory)."""
    try:
        document = yaml.load(text, Loader=_YamlLoader)
    except RecursionError as err:
        raise ValueError(f"{what}: {_TOO_DEEP}") from err
    except yaml.YAMLError as err:
        raise ValueError(f"{what}: {_yaml_problem(err, text if isinstance(text, str) else '')}") from err
    problem = _json_problem(document, json_numbers=json_numbers, max_values=_value_bound(text))
    if problem:
        raise ValueError(f"{what}: {problem}")
    return document


def _json_problem(
    document: object, *, json_numbers: bool = True, max_values: int = MAX_DOCUMENT_NODES
) -> str:
    """Why a parsed document is not plain JSON data (binary, sets, cycles, alias bombs: more than
    ``max_values`` values, nesting deeper than ``MAX_DEPTH``, with ``json_numbers`` numbers JSON and the
    API cannot hold), or ''."""
    # Per container (by id: aliases share one object): its values and its height. Aliases can stack a
    # deep document from flat text, so a shared container's height counts wherever it appears.
    sizes: dict[int, tuple[int, int]] = {}
    in_progress: set[int] = set()

    def size(value: object, depth: int) -> tuple[int, int]:
        if isinstance(value, bool) or value is None or isinstance(value, str):
            return 1, 0
        if isinstance(value, int):
            if (
                json_numbers and value not in _INT64
            ):  # the API's integers are int64; orjson cannot encode larger ones
                raise ValueError(f"integer out of range (64-bit): {value}")
            return 1, 0
        if isinstance(value, float):
            if json_numbers and not math.isfinite(value):  # YAML's .inf / .nan; orjson would write null
                raise ValueError(f"{value} is not a JSON number")
            return 1, 0
        if not isinstance(value, (dict, list)):
            raise ValueError(f"unsupported YAML value of type {type(value).__name__} (plain JSON data only)")
        if depth > MAX_DEPTH:
            raise ValueError(_TOO_DEEP)
        key = id(value)
        if key in sizes:
            total, height = sizes[key]
            if depth + height - 1 > MAX_DEPTH:  # its deepest container
                raise ValueError(_TOO_DEEP)
            return total, height
        if key in in_progress:
            raise ValueError("a YAML alias refers to itself")
        in_progress.add(key)
        children = value.values() if isinstance(value, dict) else value
        total, height = 1, 1
        for child in children:
            child_total, child_height = size(child, depth + 1)
            total += child_total
            height = max(height, child_height + 1)
            if total > max_values:
                raise ValueError(f"more than {max_values} values once aliases are expanded")
        in_progress.discard(key)
        sizes[key] = total, height
        return total, height

    try:
        size(document, 1)
    except ValueError as err:
        return str(err)
    return ""


def _yaml_problem(err: yaml.YAMLError, text: str) -> str:
    mark = getattr(err, "problem_mark", None)
    where = f"line {mark.line + 1}: " if mark is not None else ""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    hint = ""
    if _ELISION.search(text):
        hint = " (the file contains `...` elisions: an illustrative excerpt, not a complete object)"
    return f"{where}not valid YAML: {problem}{hint}"
