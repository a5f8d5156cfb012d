"""Load a cluster state from a directory (or one file) of Kubernetes manifests.

``load_state(path)`` reads every ``*.yaml``, ``*.yml`` and ``*.json`` file below ``path`` (recursively, in
sorted order, hidden files and directories skipped; entries so named that are not regular files, such as
FIFOs, devices, sockets, dangling links and links to directories, are skipped unopened and listed in
``ClusterObjects.skipped_files``) or the single file ``path``. A file may hold several YAML
documents; ``kind: List`` and typed ``<Kind>List`` objects are flattened through their ``items``.

Kept kinds (plain dicts, each a private copy in the ``resource.k8s.io/v1`` / core ``v1`` shape)::

    Node, Pod                                  apiVersion v1
    ResourceSlice, DeviceClass, ResourceClaim,  resource.k8s.io/v1, v1beta2, v1beta1, v1alpha3
    ResourceClaimTemplate, DeviceTaintRule     (converted by app.state.convert.to_v1)

Other kinds (Namespace, Deployment, Job, ConfigMap, CRDs, ResourcePoolStatusRequest, ...) are skipped with a
warning (``ClusterObjects.warnings`` and the ``logging`` logger of this module), except a kind its API group
does not have (``app.state.knownfields.unknown_kind``: ``resource.k8s.io/v1 ResourceClame``), listed in
``ClusterObjects.unknown_kinds`` as kubectl reports it (``<file>: ResourceClame ns/name: no matches for kind
"ResourceClame" in version "resource.k8s.io/v1" (did you mean ResourceClaim?)``). Namespaced kinds without
``metadata.namespace`` get ``default``. Pods without ``metadata.uid`` get ``stable_uid("Pod", ns, name)`` so
that owner references of generated claims (app.state.claimgen) work and are the same on every load.

Errors (``StateLoadError``, message ``"<file>: <Kind> <namespace/name>: <field>: <problem>"`` without the
parts that are unknown):

* a file that is not YAML/JSON: excerpts with ``...`` elisions, Helm/Go templates whose ``{{ ... }}`` breaks
  the YAML (reported as a template);
* a kept object with a template directive ``{{ ... }}`` in a field. Free text (annotations, command, args,
  env, opaque parameters) is not searched, and neither are skipped kinds: a ConfigMap with alerting templates
  in a cluster dump is not an error;
* a document without ``kind`` / ``apiVersion``, a kept object without ``metadata.name``;
* a kept object that is not valid: classic DRA ``resource.k8s.io/v1alpha2`` (any kind), conversion failures
  (app.state.convert), a Pod claim in the pre-1.31 ``source:`` form;
* a second object with the same kind, namespace and name.

Unknown fields (``app.state.knownfields``: not in the Kubernetes 1.37 schema of the object's apiVersion,
e.g. a typo'd ``cuont: 3``) are warnings in ``ClusterObjects.unknown_fields`` (``<file>: <Kind> <ref>:
<field path>: unknown field``), as kubectl's strict decoding reports them; with ``strict_fields=True``
they, and unknown kinds, are errors.

With ``strict=False`` each of those errors becomes a warning and the object (or the whole file, for file-level
errors) is skipped; with ``strict=True`` the first one raises.

Documents are read by ``app.state.documents`` (YAML and JSON with Kubernetes' rules and their bounds), a
Pod's claim entries checked by ``app.state.podclaimchecks``, UIDs made by ``app.state.uids``.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from app.state.cluster import NAMESPACED_KINDS
from app.state.convert import CLASSIC_DRA_PROBLEM, CLASSIC_DRA_VERSION, DRA_KINDS, ConversionError, to_v1
from app.state.documents import TEMPLATE_PROBLEM, not_regular, parse_documents, read_at_most
from app.state.knownfields import unknown_fields, unknown_kind, wrong_types
from app.state.podclaimchecks import check_pod_claims
from app.state.podgroups import check_pod_group, check_scheduling_group
from app.state.uids import stable_uid

__all__ = [
    "KIND_FIELDS",
    "MAX_FILE_BYTES",
    "ClusterObjects",
    "StateLoadError",
    "load_documents",
    "load_state",
]

logger = logging.getLogger(__name__)

Obj = dict[str, Any]

KIND_FIELDS = {
    "Namespace": "namespaces",
    "Node": "nodes",
    "Pod": "pods",
    "ResourceSlice": "resource_slices",
    "DeviceClass": "device_classes",
    "ResourceClaim": "resource_claims",
    "ResourceClaimTemplate": "resource_claim_templates",
    "DeviceTaintRule": "device_taint_rules",
    "PodGroup": "pod_groups",
}
"""Kept kind → the ``ClusterObjects`` list that holds it."""

STATE_SUFFIXES = frozenset({".yaml", ".yml", ".json"})
_CORE_KINDS = frozenset({"Namespace", "Node", "Pod"})

_TEMPLATE_ACTION = re.compile(r"\{\{.*?\}\}", re.DOTALL)
# Free text in which `{{ }}` can be real data (container commands, annotations, driver parameters).
_FREE_TEXT_KEYS = frozenset({"annotations", "command", "args", "env", "parameters"})


class StateLoadError(Exception):
    """A state file or object cannot be loaded. Attributes hold the parts of the message (None = unknown)."""

    def __init__(
        self,
        problem: str,
        *,
        file: Path | None = None,
        kind: str | None = None,
        ref: str | None = None,
        field_path: str | None = None,
    ) -> None:
        self.file = file
        self.kind = kind
        self.ref = ref
        self.field_path = field_path
        self.problem = problem
        subject = " ".join(part for part in (kind, ref) if part)
        parts = [str(file) if file else "", subject, field_path or "", problem]
        super().__init__(": ".join(part for part in parts if part))


@dataclass
class ClusterObjects:
    """Objects of a state directory, one list of plain v1-shaped dicts per kind, in file order."""

    namespaces: list[Obj] = field(default_factory=list)
    nodes: list[Obj] = field(default_factory=list)
    pods: list[Obj] = field(default_factory=list)
    resource_slices: list[Obj] = field(default_factory=list)
    device_classes: list[Obj] = field(default_factory=list)
    resource_claims: list[Obj] = field(default_factory=list)
    resource_claim_templates: list[Obj] = field(default_factory=list)
    device_taint_rules: list[Obj] = field(default_factory=list)
    pod_groups: list[Obj] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unknown_fields: list[str] = field(default_factory=list)
    """``<file>: <Kind> <ref>: <field path>: unknown field``, one per field ``app.state.knownfields`` does not
    know (the object is kept: the API server would drop the field)."""
    unknown_kinds: list[str] = field(default_factory=list)
    """``<file>: <Kind> <ref>: no matches for kind ...``, one per object of a kind its API group does not
    have (skipped: the API server would refuse it)."""
    skipped_files: list[str] = field(default_factory=list)
    """``<file>: skipped (<what it is>)``, one per entry named like a manifest that is not a regular file
    (a dangling link, a FIFO, a link to a directory): what it names was not loaded."""
    files: int = 0
    """Manifest files read."""
    sources: dict[tuple[str, str, str], Path] = field(default_factory=dict)
    """(kind, namespace, name) → the file the object came from, for error messages."""

    def of_kind(self, kind: str) -> list[Obj]:
        """The list holding objects of a kept ``kind`` (KeyError for other kinds)."""
        objects: list[Obj] = getattr(self, KIND_FIELDS[kind])
        return objects

    def count(self) -> int:
        """Number of kept objects."""
        return sum(len(self.of_kind(kind)) for kind in KIND_FIELDS)

    def source_of(self, kind: str, obj: Mapping[str, Any]) -> Path | None:
        """The file a kept object came from (None: not loaded from a file, e.g. generated)."""
        return self.sources.get(_source_key(kind, obj))


def _source_key(kind: str, obj: Mapping[str, Any]) -> tuple[str, str, str]:
    """The ``ClusterObjects.sources`` key of a kept (converted) object."""
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace", "") if kind in NAMESPACED_KINDS else ""
    return (kind, namespace, metadata.get("name") or "")


def load_state(path: Path, *, strict: bool = True, strict_fields: bool = False) -> ClusterObjects:
    """Load every manifest below ``path`` (a directory, or one file) into ``ClusterObjects``.

    Raises StateLoadError (see the module docstring); with ``strict=False`` problems become warnings.
    Unknown fields and kinds are listed in ``ClusterObjects.unknown_fields`` / ``unknown_kinds``, or with
    ``strict_fields`` are errors.
    """
    loader = _Loader(strict=strict, strict_fields=strict_fields)
    files, loader.objects.skipped_files = _state_files(Path(path))
    for file in files:
        loader.load_file(file)
        loader.objects.files += 1
    return loader.objects


def load_documents(
    sources: Iterable[tuple[Path, list[Any]]], *, strict_fields: bool = False
) -> ClusterObjects:
    """``load_state`` for documents already parsed (a cluster snapshot: ``app.snapshot``): per source, a
    name that stands for the file in messages and its documents. The same checks, conversions and
    defaults; strict (the first error raises StateLoadError)."""
    loader = _Loader(strict=True, strict_fields=strict_fields)
    for source, documents in sources:
        loader.load_documents(source, documents)
    return loader.objects


def _state_files(path: Path) -> tuple[list[Path], list[str]]:
    """The manifest files to load, and a line per entry named like one that is not a regular file."""
    if path.is_file():
        return [path], []
    if not path.is_dir():
        # A FIFO or a device exists: saying "no such file" would send the user looking for a typo.
        problem = "not a regular file or directory" if path.exists() else "no such file or directory"
        raise StateLoadError(problem, file=path)
    files, skipped = [], []
    for file in sorted(path.rglob("*")):
        if file.suffix.lower() not in STATE_SUFFIXES or any(
            part.startswith(".") for part in file.relative_to(path).parts
        ):
            continue
        what = not_regular(file)
        if not what:
            files.append(file)
        elif what != "directory":
            skipped.append(f"{file}: skipped ({what})")
    return files, skipped


class _Loader:
    """Accumulates objects across files; knows where each object was first seen (duplicate detection)."""

    def __init__(self, *, strict: bool, strict_fields: bool = False) -> None:
        self.strict = strict
        self.strict_fields = strict_fields
        self.objects = ClusterObjects()
        self._first: dict[tuple[str, str, str], Obj] = {}

    def load_file(self, file: Path) -> None:
        try:
            documents = _parse_file(file)
        except StateLoadError as err:
            self._fail(err)
            return
        self.load_documents(file, documents)

    def load_documents(self, file: Path, documents: list[Any]) -> None:
        """Parsed documents of ``file`` (or of a source named like one)."""
        for index, document in enumerate(documents):
            if document is None:  # empty document (`---` at the end, comment-only file)
                continue
            try:
                objects = list(_flatten(document, file, index))
            except StateLoadError as err:
                self._fail(err)
                continue
            for obj in objects:
                try:
                    self._add(obj, file, index)
                except StateLoadError as err:
                    self._fail(err)

    def _fail(self, err: StateLoadError) -> None:
        if self.strict:
            raise err
        self._warn(f"{err} (skipped)")

    def _warn(self, message: str) -> None:
        self.objects.warnings.append(message)
        logger.warning("%s", message)

    def _add(self, obj: object, file: Path, index: int) -> None:
        if not isinstance(obj, dict):
            raise StateLoadError(f"document {index}: must be a mapping, got {type(obj).__name__}", file=file)
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if not isinstance(kind, str) or not kind:
            raise StateLoadError(
                f"document {index}: kind: Required value (not a Kubernetes object: fragment or values file?)",
                file=file,
            )
        ref = _ref(obj, kind)
        if not isinstance(api_version, str) or not api_version:
            raise StateLoadError(
                "Required value" + _case_hint(obj, "apiVersion"),
                file=file,
                kind=kind,
                ref=ref,
                field_path="apiVersion",
            )
        if kind not in KIND_FIELDS:
            self._skip_unknown(kind, api_version, ref, file)
            return
        template_at = _template_path(obj)
        if template_at is not None:
            raise StateLoadError(TEMPLATE_PROBLEM, file=file, kind=kind, ref=ref, field_path=template_at)
        self._check_metadata(obj, kind, ref, file)
        self._check_fields(obj, kind, ref, file)
        converted = self._convert(obj, kind, api_version, ref, file)
        if self._remember(converted, kind, file):
            self.objects.of_kind(kind).append(converted)

    def _skip_unknown(self, kind: str, api_version: str, ref: str, file: Path) -> None:
        # Classic DRA kinds (ResourceClass, ResourceClaimParameters, ...): skipping them would silently drop
        # what the pods need, so they are an error like classic-DRA claims.
        if api_version == CLASSIC_DRA_VERSION:
            raise StateLoadError(CLASSIC_DRA_PROBLEM, file=file, kind=kind, ref=ref, field_path="apiVersion")
        if unknown_kind(api_version, kind):
            near = difflib.get_close_matches(kind, KIND_FIELDS, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            problem = f'no matches for kind "{kind}" in version "{api_version}"{hint}'
            self._unknown(StateLoadError(problem, file=file, kind=kind, ref=ref), self.objects.unknown_kinds)
            return
        self._warn(f"{file}: {kind} {ref}: skipped ({api_version} {kind} is not used by the extender)")

    def _check_fields(self, obj: Obj, kind: str, ref: str, file: Path) -> None:
        """Fields the object's apiVersion does not have (before conversion: the paths are the file's)."""
        for path in unknown_fields(obj):
            error = StateLoadError("unknown field", file=file, kind=kind, ref=ref, field_path=path)
            self._unknown(error, self.objects.unknown_fields)

    def _unknown(self, error: StateLoadError, found: list[str]) -> None:
        """An unknown field or kind: raised with ``strict_fields``, else listed in ``found``."""
        if self.strict_fields:
            raise error
        found.append(str(error))

    @staticmethod
    def _check_metadata(obj: Obj, kind: str, ref: str, file: Path) -> None:
        metadata = obj.get("metadata")
        if (
            not isinstance(metadata, dict)
            or not isinstance(metadata.get("name"), str)
            or not metadata["name"]
        ):
            raise StateLoadError("Required value", file=file, kind=kind, ref=ref, field_path="metadata.name")
        namespace = metadata.get("namespace")
        if namespace is not None and not isinstance(namespace, str):
            raise StateLoadError(
                f"must be a string, got {namespace!r}",
                file=file,
                kind=kind,
                ref=ref,
                field_path="metadata.namespace",
            )

    @staticmethod
    def _convert(obj: Obj, kind: str, api_version: str, ref: str, file: Path) -> Obj:
        try:
            if kind in DRA_KINDS:
                converted = to_v1(obj)
            elif kind == "PodGroup":
                check_pod_group(obj, api_version)
                converted = _deep_copy(obj)
            else:
                converted = _core_object(obj, kind, api_version)
        except ConversionError as err:
            raise StateLoadError(err.problem, file=file, kind=kind, ref=ref, field_path=err.path) from err
        metadata = converted.setdefault("metadata", {})
        if kind in NAMESPACED_KINDS and not metadata.get("namespace"):
            metadata["namespace"] = "default"
        if kind == "Pod" and not metadata.get("uid"):
            metadata["uid"] = stable_uid("Pod", metadata["namespace"], metadata["name"])
        return converted

    def _remember(self, obj: Obj, kind: str, file: Path) -> bool:
        """Record where ``obj`` came from; False for an identical repeat of a Namespace (demo sets repeat
        their Namespace in every file, which ``kubectl apply`` accepts). Other duplicates raise
        StateLoadError."""
        key = _source_key(kind, obj)
        first = self.objects.sources.get(key)
        if first is not None:
            if kind == "Namespace" and self._first[key] == obj:
                return False
            where = "earlier in the same file" if first == file else f"first defined in {first}"
            raise StateLoadError(f"duplicate object ({where})", file=file, kind=kind, ref=_ref(obj, kind))
        self.objects.sources[key] = file
        self._first[key] = obj
        return True


def _case_hint(obj: Obj, field_name: str) -> str:
    """Field names are case-sensitive; point at a near miss such as ``apiversion``."""
    near = [key for key in obj if isinstance(key, str) and key.lower() == field_name.lower()]
    return f" (found {near[0]!r}: field names are case-sensitive)" if near else ""


def _ref(obj: Obj, kind: str) -> str:
    """``namespace/name`` for namespaced kinds, else ``name``; ``?`` stands for a missing name."""
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    name = metadata.get("name") if isinstance(metadata.get("name"), str) else "?"
    if kind in NAMESPACED_KINDS or metadata.get("namespace"):
        return f"{metadata.get('namespace') or 'default'}/{name}"
    return str(name)


# ----------------------------------------------------------------------------------------------------------
# core kinds


def _core_object(obj: Obj, kind: str, api_version: str) -> Obj:
    """Copy of a Namespace, Node or Pod after the checks the extender relies on. Raises ConversionError."""
    if api_version != "v1":
        raise ConversionError("apiVersion", f"{kind} must be apiVersion v1, got {api_version!r}")
    labels = (obj.get("metadata") or {}).get("labels")
    if labels is not None and (
        not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values())
    ):
        raise ConversionError("metadata.labels", "must be a map of strings to strings (quote numbers)")
    if kind == "Pod":
        check_pod_claims(obj)
        check_scheduling_group(obj)
    # The readers of Nodes and Pods (extended resources, node-allocatable fit, preemption, claim
    # generation) trust the API's shapes, as the objects of a live cluster have them: a file's
    # `status: true` is refused here, where the file and field can be named.
    for path, problem in wrong_types(obj)[:1]:
        raise ConversionError(path, problem)
    return _deep_copy(obj)


def _deep_copy(obj: Obj) -> Obj:
    # orjson round trip: several times faster than copy.deepcopy on parsed YAML (plain JSON types only).
    copied: Obj = orjson.loads(orjson.dumps(obj))
    return copied


# ----------------------------------------------------------------------------------------------------------
# files


MAX_FILE_BYTES = 64 << 20
"""64 MiB per state file. Parsing YAML takes ~10 bytes of memory and ~0.4 µs per byte (a 64 MiB file:
~650 MB and ~30 s), so a stray dump or a sparse multi-GB file would exhaust memory or seem to hang; a
single document that size is refused anyway (``app.state.documents.MAX_DOCUMENT_NODES``). Larger states
are split into several files."""


def _parse_file(file: Path) -> list[Any]:
    """The documents of one file. Raises StateLoadError for unreadable, oversized, template or malformed
    files."""
    text = _read_text(file)
    try:
        return parse_documents(text, json=file.suffix.lower() == ".json")
    except ValueError as err:
        raise StateLoadError(str(err), file=file) from err


def _read_text(file: Path) -> str:
    """The file's text, refused above ``MAX_FILE_BYTES``."""
    try:
        data, size = read_at_most(file, MAX_FILE_BYTES)
        if size > MAX_FILE_BYTES:
            raise StateLoadError(
                f"larger than {_bytes(MAX_FILE_BYTES)} ({size} bytes or more): split it into several files",
                file=file,
            )
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise StateLoadError(f"cannot read: {err}", file=file) from err


def _bytes(count: int) -> str:
    return f"{count >> 20} MiB" if count % (1 << 20) == 0 else f"{count} bytes"


def _template_path(value: object, path: str = "") -> str | None:
    """Field path of the first template directive in an object (free-text fields excluded), else None."""
    if isinstance(value, str):
        return (path or ".") if _TEMPLATE_ACTION.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            key_path = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and _TEMPLATE_ACTION.search(key):
                return key_path
            found = None if key in _FREE_TEXT_KEYS else _template_path(item, key_path)
            if found is not None:
                return found
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _template_path(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def _flatten(document: object, file: Path, index: int) -> Iterator[object]:
    """The objects of one document: the document itself, or the items of a ``List`` / ``<Kind>List``."""
    if not isinstance(document, dict):
        yield document
        return
    kind = document.get("kind")
    items = document.get("items")
    if not (isinstance(kind, str) and kind.endswith("List") and "items" in document):
        yield document
        return
    if items is None:
        return
    if not isinstance(items, list):
        raise StateLoadError(f"document {index}: {kind}.items: must be a list", file=file)
    item_kind = kind.removesuffix("List")
    for item in items:
        # Typed lists (ResourceSliceList from the API) omit kind/apiVersion on their items.
        if isinstance(item, dict) and item_kind and not item.get("kind"):
            item = {"apiVersion": document.get("apiVersion"), "kind": item_kind, **item}
        yield item
