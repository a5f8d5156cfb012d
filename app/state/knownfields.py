"""Unknown fields in state files, reported as kubectl's strict decoding reports them.

The API server drops a field it does not know (or, with ``kubectl --validate=strict``, rejects the object);
either way a typo such as ``cuont: 3`` in a request silently means "count unset". ``unknown_fields(obj)``
lists the field paths of an object that its kind and apiVersion do not have, e.g.
``spec.devices.requests[0].exactly.cuont``, so that the state loader can warn (or, strict, refuse);
``strict_decoding_error(obj)`` words them as the API server's strict field validation does, for objects a
person submits (what-ifs: ``app.explain.pod``), which are always refused.

What a kind has comes from the Kubernetes OpenAPI schemas that kubernetes-validate ships (its
``v<k8s>-local-strict`` set), reduced to field names: ``knownfields.json`` beside this module, written by
``python -m app.state.knownfields`` (``make known-fields``; kubernetes-validate is a development dependency,
the
extender does not need its 100 MB of schemas at run time). The reduced form::

    {"kubernetes": "1.37.0",
     "kinds": {"<group>": ["<kind>", ...]},
     "roots": {"<apiVersion> <kind>": <spec>},
     "defs": {"<definition>": {"<field>": <spec>}}}

    <spec> = "<definition>"      a closed object: only its fields are known
           | {"items": <spec>}   a list (``{"items": null}``: of scalars, or of anything)
           | {"values": <spec>}  a map with free keys (labels, attributes, capacity)
           | null                anything goes: scalars, quantities, RawExtension (opaque parameters)

Kinds without a schema (``resource.k8s.io/v1alpha3`` ResourceSlice of Kubernetes 1.31-1.33) are not
checked.

``unknown_kind(api_version, kind)`` is True for a kind that no version of its API group has, in the groups
the state loader reads (``KIND_GROUPS``): ``resource.k8s.io/v1 ResourceClame`` is a typo the API server
would refuse (``no matches for kind``), while kinds of other groups (apps, CRDs) are merely not used. The
file's ``"kinds"`` holds, per group, every kind of its versions in the schemas.

``wrong_types(obj)`` lists the fields whose value is not the shape the schema gives them (an object, a
list, a map; null is allowed, as Go decodes it to the zero value), as kubectl's decoding refuses them. The
state loader applies it to Nodes and Pods, whose readers trust the shapes (the DRA kinds have a converter
and structure check of their own).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

__all__ = [
    "KINDS",
    "KIND_GROUPS",
    "SCHEMA_FILE",
    "generate",
    "strict_decoding_error",
    "unknown_fields",
    "unknown_kind",
    "wrong_types",
]

SCHEMA_FILE = Path(__file__).with_name("knownfields.json")
KUBERNETES_VERSION = "1.37.0"

KINDS = {
    "v1": ("Namespace", "Node", "Pod"),
    "resource.k8s.io/v1": (
        "DeviceClass",
        "DeviceTaintRule",
        "ResourceClaim",
        "ResourceClaimTemplate",
        "ResourceSlice",
    ),
    "resource.k8s.io/v1beta2": (
        "DeviceClass",
        "DeviceTaintRule",
        "ResourceClaim",
        "ResourceClaimTemplate",
        "ResourceSlice",
    ),
    "resource.k8s.io/v1beta1": ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice"),
    "resource.k8s.io/v1alpha3": ("DeviceTaintRule",),
}
"""apiVersion → the kinds the state loader keeps that have a schema at that version."""

KIND_GROUPS = ("", "resource.k8s.io", "scheduling.k8s.io")
"""API groups of the kinds the state loader keeps ("": core): every kind of theirs is known."""

_MAX_REPORTED = 20
"""Unknown fields reported per object (a wrong apiVersion would otherwise list every field)."""


@functools.cache
def _schema() -> dict[str, Any]:
    loaded: dict[str, Any] = orjson.loads(SCHEMA_FILE.read_bytes())
    return loaded


def unknown_fields(obj: Mapping[str, Any]) -> list[str]:
    """Paths of the fields of ``obj`` its ``apiVersion`` / ``kind`` do not have (at most 20), in document
    order; [] for a kind without a schema."""
    schema = _schema()
    root = schema["roots"].get(f"{obj.get('apiVersion')} {obj.get('kind')}")
    if root is None:
        return []
    found: list[str] = []
    for path in _walk(obj, root, "", schema["defs"]):
        found.append(path)
        if len(found) == _MAX_REPORTED:
            break
    return found


def unknown_kind(api_version: str, kind: str) -> bool:
    """True when ``api_version``'s group is one of ``KIND_GROUPS`` and none of its versions has ``kind``."""
    group = api_version.rpartition("/")[0]
    kinds = _schema()["kinds"].get(group)
    return kinds is not None and kind not in kinds


def strict_decoding_error(obj: Mapping[str, Any]) -> str:
    """The API server's answer to ``obj`` under strict field validation (``kubectl --validate=strict``),
    ``unknown field "<path>"`` per unknown field, comma-separated; "" when every field is known."""
    return ", ".join(f'unknown field "{path}"' for path in unknown_fields(obj))


def _walk(value: object, spec: Any, path: str, defs: Mapping[str, Any]) -> Iterator[str]:
    if spec is None:
        return
    if isinstance(spec, str):
        if not isinstance(value, dict):
            return  # a wrong type is the converter's to report
        fields = defs[spec]
        for key, item in value.items():
            key_path = f"{path}.{key}" if path else str(key)
            if key not in fields:
                yield key_path
            else:
                yield from _walk(item, fields[key], key_path, defs)
    elif "items" in spec:
        if isinstance(value, list):
            for i, item in enumerate(value):
                yield from _walk(item, spec["items"], f"{path}[{i}]", defs)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, spec["values"], f"{path}[{key}]", defs)


def wrong_types(obj: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(field path, problem)`` for the fields of ``obj`` whose value has another shape than its schema
    gives (``must be an object, got string``), at most 20, in document order; [] for a kind without a
    schema. Unknown fields are not looked into (``unknown_fields`` reports them)."""
    schema = _schema()
    root = schema["roots"].get(f"{obj.get('apiVersion')} {obj.get('kind')}")
    if root is None:
        return []
    found: list[tuple[str, str]] = []
    for problem in _shapes(obj, root, "", schema["defs"]):
        found.append(problem)
        if len(found) == _MAX_REPORTED:
            break
    return found


def _shapes(value: object, spec: Any, path: str, defs: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    if spec is None or value is None:
        return
    if isinstance(spec, str) or "values" in spec:
        if not isinstance(value, dict):
            shape = "an object" if isinstance(spec, str) else "a map"
            yield path or ".", f"must be {shape}, got {_json_type(value)}"
            return
        for key, item in value.items():
            if isinstance(spec, str):
                fields = defs[spec]
                if key in fields:
                    yield from _shapes(item, fields[key], f"{path}.{key}" if path else str(key), defs)
            else:
                yield from _shapes(item, spec["values"], f"{path}[{key}]", defs)
    elif not isinstance(value, list):
        yield path, f"must be a list, got {_json_type(value)}"
    else:
        for i, item in enumerate(value):
            yield from _shapes(item, spec["items"], f"{path}[{i}]", defs)


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    names: dict[type, str] = {str: "string", list: "list", dict: "object"}
    return names.get(type(value), type(value).__name__)


# --- generation (development only: needs kubernetes-validate) ----------------------------------------------


def generate() -> dict[str, Any]:
    """The reduced schema of ``KINDS`` from kubernetes-validate's bundled OpenAPI schemas."""
    from importlib.resources import files

    folder = files("kubernetes_validate") / "kubernetes-json-schema" / f"v{KUBERNETES_VERSION}-local-strict"
    definitions = orjson.loads((folder / "_definitions.json").read_bytes())["$defs"]
    defs: dict[str, dict[str, Any]] = {}

    def reduce(schema: Mapping[str, Any]) -> Any:
        ref = schema.get("$ref")
        if ref is not None:
            return define(str(ref).rsplit("/", 1)[-1])
        # Lists and maps stay such even when their values are free: wrong_types checks their shape.
        if "items" in schema:
            return {"items": reduce(schema["items"])}
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and "object" in (schema.get("type") or ()):
            return {"values": reduce(extra)}
        return None

    def define(name: str) -> str | None:
        schema = definitions[name]
        closed = schema.get("additionalProperties") is False and "properties" in schema
        if not closed or schema.get("x-kubernetes-preserve-unknown-fields"):
            return None
        if name not in defs:
            defs[name] = {}  # before the fields: recursive definitions refer to themselves
            defs[name] = {key: reduce(value) for key, value in sorted(schema["properties"].items())}
        return name

    kinds_of: dict[str, set[str]] = {group: set() for group in KIND_GROUPS}
    for definition in definitions.values():
        for gvk in definition.get("x-kubernetes-group-version-kind") or ():
            if gvk["group"] in kinds_of:
                kinds_of[gvk["group"]].add(gvk["kind"])
    roots = {}
    for api_version, kinds in KINDS.items():
        group, _, version = api_version.rpartition("/")
        package = f"io.k8s.api.{group.split('.')[0] if group else 'core'}.{version}"
        for kind in kinds:
            roots[f"{api_version} {kind}"] = define(f"{package}.{kind}")
    return {
        "kubernetes": KUBERNETES_VERSION,
        "kinds": {group: sorted(kinds) for group, kinds in kinds_of.items()},
        "roots": roots,
        "defs": dict(sorted(defs.items())),
    }


def render(schema: Mapping[str, Any]) -> bytes:
    """The file form of a reduced schema (stable bytes, for the up-to-date test)."""
    return orjson.dumps(schema, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"


if __name__ == "__main__":
    SCHEMA_FILE.write_bytes(render(generate()))
    print(f"wrote {SCHEMA_FILE}", file=sys.stderr)
