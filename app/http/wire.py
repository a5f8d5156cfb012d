"""kube-scheduler extender wire format (``k8s.io/kube-scheduler/extender/v1``), decoded from raw bytes.

Source: ``staging/src/k8s.io/kube-scheduler/extender/v1/types.go`` (extender-protocol.md §1). The
extender structs have no json tags, so the keys are the Go field names (``Pod``, ``NodeNames``,
``FailedNodes``, ``Host`` ...); nil lists and maps are ``null``. Nested Kubernetes objects (Pod, NodeList,
Node) have json tags and use the usual camelCase API names.

Decoding follows Go's ``encoding/json``: a top-level key selects the field whose name it equals, else the
field it equals case-insensitively (``pod``, ``NODENAMES``); unknown keys are ignored; when several keys
select the same field the last one wins. Only what the extender reads is validated: a wrong type there is
a ``WireError`` naming the field (``Pod.metadata.name: must be a string, got int``), never a 500. Whole Pods
are not validated (they are large and the service reads a handful of fields), except that the Pod and the
Nodes must be shallow enough to be encoded again (``app.state.documents.MAX_ENCODED_DEPTH``).

Encoding produces exactly the Go names, ``null`` for the list kube-scheduler must ignore, ``{}`` for empty
failure maps, and a bare array for prioritize.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson

from app.scheduling.preemption import Victims
from app.scheduling.service import FilterOutcome
from app.state.documents import check_encodable
from app.state.podclaimchecks import pod_claim_source_problem

__all__ = [
    "ExtenderArgs",
    "ExtenderBindingArgs",
    "ExtenderPreemptionArgs",
    "WireError",
    "decode_binding_args",
    "decode_extender_args",
    "decode_preemption_args",
    "encode_binding_result",
    "encode_error",
    "encode_filter_result",
    "encode_host_priorities",
    "encode_preemption_result",
]

_Decoded = TypeVar("_Decoded")

_PARSING = threading.Lock()
"""Held while a body is parsed and its fields are taken, so that one parse tree exists at a time, whichever
thread decodes (the event loop for filter and prioritize, worker threads for the other verbs): a hostile
body of empty arrays parses to about 30 times its size, and four of them parsed at once outgrew the pod's
memory limit. A parse holds the GIL throughout anyway."""

Obj = dict[str, Any]


class WireError(ValueError):
    """A request body is not valid JSON or a field the extender reads has the wrong shape (HTTP 400)."""


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """``ExtenderArgs``: the request of filter and prioritize.

    ``pod``: the Pod object as sent. ``nodes``: the ``Nodes.items`` Node objects (nodeCacheCapable: false)
    or None. ``node_names``: ``NodeNames`` (nodeCacheCapable: true) or None. At least one is not None.
    """

    pod: Obj
    nodes: list[Obj] | None
    node_names: list[str] | None
    node_names_text: str | None = None
    """``node_names`` joined by newlines, none holding one (for ``list_key``), or None."""
    candidate_names: list[str] = field(init=False)
    """The candidate node names in request order (``NodeNames`` wins when both are sent); one list per
    request, not to be modified (the filter fast path answers with this very list)."""
    nodes_by_name: dict[str, Obj] | None = field(init=False)
    """The sent Node objects by name (labels for node selectors), or None when only names were sent."""

    def __post_init__(self) -> None:
        names = self.node_names
        if names is None:
            names = [node["metadata"]["name"] for node in self.nodes or ()]
        object.__setattr__(self, "candidate_names", names)
        by_name = None if self.nodes is None else {node["metadata"]["name"]: node for node in self.nodes}
        object.__setattr__(self, "nodes_by_name", by_name)

    @property
    def node_cache_capable(self) -> bool:
        """True when kube-scheduler sent ``NodeNames``: it then reads ``NodeNames`` from the answer."""
        return self.node_names is not None


@dataclass(frozen=True, slots=True)
class ExtenderBindingArgs:
    """``ExtenderBindingArgs``: bind ``pod_namespace/pod_name`` (UID ``pod_uid``, may be "") to ``node``."""

    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


@dataclass(frozen=True, slots=True)
class ExtenderPreemptionArgs:
    """``ExtenderPreemptionArgs``: the preemptor ``pod`` and, per candidate node, kube-scheduler's victims.
    ``sent_pods``: the victims' Pod objects by UID when they came whole (``NodeNameToVictims``)."""

    pod: Obj
    victims: dict[str, Victims]
    sent_pods: dict[str, Obj]


# --- decoding ---------------------------------------------------------------------------------------------


def _load_object(body: bytes) -> Mapping[str, Any]:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise WireError(f"malformed JSON: {e}") from e
    if not isinstance(data, dict):
        raise WireError(f"request body: must be a JSON object, got {_type(data)}")
    return data


class _SpelledTwice(Exception):
    """A field sent in two spellings inside a decoded object: only the text tells which one Go keeps."""


def _fields(data: Mapping[str, Any], names: Iterable[str], *, in_text_order: bool) -> dict[str, Any]:
    """Go's key → field matching in ``data``'s key order: exact name, else case-insensitive; later keys
    overwrite earlier ones. Raises _SpelledTwice where two spellings of a field meet in an object whose
    keys are not ``in_text_order`` (a decoded dict keeps a repeated key in its first place)."""
    exact = set(names)
    folded = {name.casefold(): name for name in exact}
    found: dict[str, Any] = {}
    matched = 0
    for key in data:
        name = key if key in exact else folded.get(key.casefold())
        if name is not None:
            found[name] = data[key]
            matched += 1
    if matched > len(found) and not in_text_order:
        raise _SpelledTwice
    return found


def _load_fields(body: bytes, names: Iterable[str]) -> dict[str, Any]:
    """The fields ``names`` of the JSON object ``body``. Where two spellings of one field are sent
    (``NodeNames``, ``nodenames``), the one written last wins, as in Go, even when the other spelling
    is repeated after it."""
    return _decoded(body, lambda data, in_text_order: _fields(data, names, in_text_order=in_text_order))


def _decoded(body: bytes, decode: Callable[[Mapping[str, Any], bool], _Decoded]) -> _Decoded:
    """``decode(object, in_text_order)`` of the JSON object ``body``: the object as orjson decodes it,
    or, where two spellings of one field meet in it (``_SpelledTwice``), as parsed in text order."""
    with _PARSING:
        try:
            return decode(_load_object(body), False)
        except _SpelledTwice:
            # Parsed again only once the exception, whose frames hold the decoded object, is gone: a
            # hostile body's two parses never take memory together.
            pass
        return decode(_object_in_text_order(body), True)


def _object_in_text_order(body: bytes) -> Mapping[str, Any]:
    """The JSON object ``body`` with every object's keys in the order each occurs last (a repeated key:
    its last value), so that ``_fields`` matches nested fields as Go does."""

    def ordered(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for key, value in pairs:
            obj.pop(key, None)
            obj[key] = value
        return obj

    # A rare path (the standard library's parser is slow), and it recurses: it can give out before
    # orjson's depth limit.
    try:
        data = json.loads(body, object_pairs_hook=ordered)
    except RecursionError:
        raise WireError("request body: nested too deeply to match a field sent in two spellings") from None
    if not isinstance(data, dict):
        raise WireError(f"request body: must be a JSON object, got {_type(data)}")
    return data


def _type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


_KIND_NAMES: dict[type, str] = {dict: "an object", list: "an array", str: "a string"}


def _expect(value: Any, kind: type, path: str, *, optional: bool = True) -> Any:
    """``value`` if it is a ``kind`` (dict, list or str), or null when ``optional``; else WireError naming
    ``path``."""
    if value is None and optional:
        return None
    if not isinstance(value, kind):
        raise WireError(f"{path}: must be {_KIND_NAMES[kind]}, got {_type(value)}")
    return value


def _encodable(value: Any, path: str) -> None:
    """WireError naming ``path`` when ``value`` is nested too deeply to be encoded again
    (``MAX_ENCODED_DEPTH``): the service encodes the pod (its spec digest) and filter's answer the
    received Nodes. One C-speed encode, cheaper than a depth walk in Python."""
    try:
        check_encodable(value, path)
    except ValueError as e:
        raise WireError(str(e)) from e


def _metadata_name(obj: Mapping[str, Any], path: str) -> str:
    meta = _expect(obj.get("metadata"), dict, f"{path}.metadata", optional=False)
    name = _expect(meta.get("name"), str, f"{path}.metadata.name", optional=False)
    if not name:
        raise WireError(f"{path}.metadata.name: must not be empty")
    return name


def _check_pod(pod: Any) -> Obj:
    """The Pod fields the service reads: metadata name/namespace/uid, spec.resourceClaims (each naming
    exactly one source, as in a state file), status.resourceClaimStatuses (``app.state.podclaims``)."""
    if pod is None:
        raise WireError("Pod: required")
    pod = _expect(pod, dict, "Pod", optional=False)
    _metadata_name(pod, "Pod")
    for key in ("namespace", "uid", "creationTimestamp"):
        _expect(pod["metadata"].get(key), str, f"Pod.metadata.{key}")
    spec = _expect(pod.get("spec"), dict, "Pod.spec") or {}
    for i, entry in enumerate(_expect(spec.get("resourceClaims"), list, "Pod.spec.resourceClaims") or ()):
        at = f"Pod.spec.resourceClaims[{i}]"
        _expect(entry, dict, at, optional=False)
        for key in ("name", "resourceClaimName", "resourceClaimTemplateName"):
            _expect(entry.get(key), str, f"{at}.{key}")
        # The API server refuses both (or neither); taking the claim name would decide a pod that cannot be.
        problem = pod_claim_source_problem(entry)
        if problem:
            raise WireError(f"{at}: {problem}")
    for kind in ("containers", "initContainers"):  # their resources may name DRA-backed extended resources
        for i, container in enumerate(_expect(spec.get(kind), list, f"Pod.spec.{kind}") or ()):
            at = f"Pod.spec.{kind}[{i}]"
            _expect(container, dict, at, optional=False)
            resources = _expect(container.get("resources"), dict, f"{at}.resources") or {}
            for key in ("requests", "limits"):
                _expect(resources.get(key), dict, f"{at}.resources.{key}")
    status = _expect(pod.get("status"), dict, "Pod.status") or {}
    statuses = _expect(status.get("resourceClaimStatuses"), list, "Pod.status.resourceClaimStatuses") or ()
    for i, entry in enumerate(statuses):
        at = f"Pod.status.resourceClaimStatuses[{i}]"
        _expect(entry, dict, at, optional=False)
        for key in ("name", "resourceClaimName"):
            _expect(entry.get(key), str, f"{at}.{key}")
    _encodable(pod, "Pod")
    return pod


def _check_nodes(nodes: Any) -> list[Obj] | None:
    """``Nodes``: null or a NodeList whose items have ``metadata.name`` (and object-valued labels)."""
    if nodes is None:
        return None
    _expect(nodes, dict, "Nodes", optional=False)
    items = _expect(nodes.get("items"), list, "Nodes.items") or []
    for i, node in enumerate(items):
        at = f"Nodes.items[{i}]"
        _expect(node, dict, at, optional=False)
        _metadata_name(node, at)
        _expect(node["metadata"].get("labels"), dict, f"{at}.metadata.labels")
        status = _expect(node.get("status"), dict, f"{at}.status") or {}
        _expect(status.get("allocatable"), dict, f"{at}.status.allocatable")
    _encodable(items, "Nodes")  # filter's answer holds them as received
    return items


def _node_names_text(body: bytes, names: list[Any]) -> str | None:
    """``NodeNames`` checked to be strings (else WireError naming the first that is not) and joined by
    newlines, for ``list_key``; None where a name may hold a newline. Only an escape can put one in a
    name, so a body without a backslash (kube-scheduler's, usually) spares counting them."""
    try:
        text = "\n".join(names)  # a C-speed check over thousands of names: only strings join
    except TypeError:
        bad = next(i for i, name in enumerate(names) if not isinstance(name, str))
        raise WireError(f"NodeNames[{bad}]: must be a string, got {_type(names[bad])}") from None
    return text if b"\\" not in body or text.count("\n") == len(names) - 1 else None


def decode_extender_args(body: bytes) -> ExtenderArgs:
    """Decode an ``ExtenderArgs`` body (filter, prioritize). Raises WireError naming the bad field."""
    found = _load_fields(body, ("Pod", "Nodes", "NodeNames"))
    pod = _check_pod(found.get("Pod"))
    nodes = _check_nodes(found.get("Nodes"))
    node_names = _expect(found.get("NodeNames"), list, "NodeNames")
    names_text = None if node_names is None else _node_names_text(body, node_names)
    if nodes is None and node_names is None:
        raise WireError("Nodes, NodeNames: one of them is required")
    return ExtenderArgs(pod, nodes, node_names, names_text)


def decode_binding_args(body: bytes) -> ExtenderBindingArgs:
    """Decode an ``ExtenderBindingArgs`` body. Raises WireError naming the bad field.

    ``PodName`` and ``Node`` are required; ``PodNamespace`` defaults to ``default`` (Go zero value "" is
    what an unset namespace means); ``PodUID`` may be empty (then the UID is not checked).
    """
    found = _load_fields(body, ("PodName", "PodNamespace", "PodUID", "Node"))
    values = {
        name: _expect(found.get(name), str, name) or ""
        for name in ("PodName", "PodNamespace", "PodUID", "Node")
    }
    for name in ("PodName", "Node"):
        if not values[name]:
            raise WireError(f"{name}: required")
    return ExtenderBindingArgs(
        values["PodName"], values["PodNamespace"] or "default", values["PodUID"], values["Node"]
    )


def _victims(value: Any, at: str, *, whole: bool, in_text_order: bool) -> tuple[Victims, list[Obj]]:
    """One ``Victims`` (``whole``: Pods are Pod objects) or ``MetaVictims`` (Pods are ``{"UID": ...}``)."""
    victims = _expect(value, dict, at, optional=False)
    found = _fields(victims, ("Pods", "NumPDBViolations"), in_text_order=in_text_order)
    violations = found.get("NumPDBViolations") or 0
    if not isinstance(violations, int) or isinstance(violations, bool):
        raise WireError(f"{at}.NumPDBViolations: must be an integer, got {_type(violations)}")
    if violations < 0:
        raise WireError(f"{at}.NumPDBViolations: must not be negative, got {violations}")
    uids, pods = [], []
    for i, entry in enumerate(_expect(found.get("Pods"), list, f"{at}.Pods") or ()):
        where = f"{at}.Pods[{i}]"
        _expect(entry, dict, where, optional=False)
        if whole:
            meta = _expect(entry.get("metadata"), dict, f"{where}.metadata", optional=False)
            uid = _expect(meta.get("uid"), str, f"{where}.metadata.uid", optional=False)
            pods.append(entry)
        else:
            uid_field = _fields(entry, ("UID",), in_text_order=in_text_order)
            uid = _expect(uid_field.get("UID"), str, f"{where}.UID", optional=False)
        uids.append(uid)
    return Victims(tuple(uids), violations), pods


def decode_preemption_args(body: bytes) -> ExtenderPreemptionArgs:
    """Decode an ``ExtenderPreemptionArgs`` body: ``NodeNameToMetaVictims`` (nodeCacheCapable) or
    ``NodeNameToVictims``, whichever is not null (both null: no candidates). Raises WireError naming the
    bad field."""
    return _decoded(body, _preemption_args)


def _preemption_args(data: Mapping[str, Any], in_text_order: bool) -> ExtenderPreemptionArgs:
    names = ("Pod", "NodeNameToVictims", "NodeNameToMetaVictims")
    found = _fields(data, names, in_text_order=in_text_order)
    pod = _check_pod(found.get("Pod"))
    key = "NodeNameToMetaVictims" if found.get("NodeNameToMetaVictims") is not None else "NodeNameToVictims"
    victims: dict[str, Victims] = {}
    sent: dict[str, Obj] = {}
    for node, value in (_expect(found.get(key), dict, key) or {}).items():
        at, whole = f"{key}.{node}", key == "NodeNameToVictims"
        victims[node], pods = _victims(value, at, whole=whole, in_text_order=in_text_order)
        sent.update((p["metadata"]["uid"], p) for p in pods)
    return ExtenderPreemptionArgs(pod, victims, sent)


# --- encoding ---------------------------------------------------------------------------------------------


def encode_filter_result(args: ExtenderArgs, outcome: FilterOutcome) -> bytes:
    """``ExtenderFilterResult`` for ``args``: the passing nodes in the list kube-scheduler reads.

    nodeCacheCapable (``NodeNames`` sent): ``NodeNames`` = passing names, ``Nodes`` null. Otherwise
    ``Nodes`` = ``{"metadata": {}, "items": [...]}`` with the received Node objects, unmodified and in input
    order, and ``NodeNames`` null. ``Error`` is the fatal error text or "".
    """
    result: Obj = {"Nodes": None, "NodeNames": None}
    candidates = args.candidate_names
    if args.node_cache_capable:
        # Only names from the input, in its order: kube-scheduler fails the pod on a name it did not send.
        result["NodeNames"] = _passed_names(candidates, outcome)
    else:
        passed = None if outcome.passed is candidates else set(outcome.passed)
        items = [node for node in args.nodes or () if passed is None or node["metadata"]["name"] in passed]
        result["Nodes"] = {"metadata": {}, "items": items}
    result["FailedNodes"] = outcome.failed
    result["FailedAndUnresolvableNodes"] = outcome.unresolvable
    result["Error"] = outcome.error
    return orjson.dumps(result)


def _passed_names(candidates: list[str], outcome: FilterOutcome) -> list[str]:
    """The candidates that ``outcome`` passes, in candidate order. The service answers in that order,
    usually every candidate but a few: checking that guess (C-speed comparisons) costs less than looking
    every candidate up among thousands of passing names, which is done when the guess is wrong."""
    passed = outcome.passed
    if outcome.in_request_order:
        return passed
    if passed is candidates or passed == candidates:
        return candidates
    failed = outcome.failed.keys() | outcome.unresolvable.keys()
    guess = list(itertools.filterfalse(failed.__contains__, candidates))
    if passed == guess:
        return guess
    return list(filter(set(passed).__contains__, candidates))


def encode_host_priorities(hosts: Sequence[str], scores: Sequence[int]) -> bytes:
    """``HostPriorityList``: a bare array ``[{"Host": node, "Score": 0..10}]``, one entry per host.

    kube-scheduler asks for every passing node: a dict per host would cost more than the decision. The
    names are encoded at once and the entries formed around them by C-speed replaces and one format, byte
    for byte what encoding the dicts gives; names needing an escape (no node name does) take that way."""
    if len(hosts) != len(scores):
        raise ValueError(f"{len(hosts)} hosts, {len(scores)} scores")
    names = orjson.dumps(hosts)
    if not hosts or b"\\" in names:
        return orjson.dumps(
            [{"Host": host, "Score": score} for host, score in zip(hosts, scores, strict=True)]
        )
    # Without escapes no name holds a quote: '","' occurs only between two names.
    between = names[2:-2]
    distinct = set(scores)
    if len(distinct) == 1:
        (score,) = distinct
        tail = b'","Score":%d}' % score
        return b'[{"Host":"' + between.replace(b'","', tail + b',{"Host":"') + tail + b"]"
    template = between.replace(b"%", b"%%").replace(b'","', b'","Score":%d},{"Host":"')
    return (b'[{"Host":"' + template + b'","Score":%d}]') % tuple(scores)


def encode_binding_result(error: str = "") -> bytes:
    """``ExtenderBindingResult``: ``{"Error": ""}`` on success."""
    return orjson.dumps({"Error": error})


def encode_error(error: str) -> bytes:
    """The JSON body of a 4xx/5xx answer: ``{"Error": "..."}`` (same key kube-scheduler logs for results)."""
    return orjson.dumps({"Error": error})


def encode_preemption_result(victims: Mapping[str, Victims]) -> bytes:
    """``ExtenderPreemptionResult``: always ``NodeNameToMetaVictims`` (UIDs), whatever was sent."""
    return orjson.dumps(
        {
            "NodeNameToMetaVictims": {
                node: {"Pods": [{"UID": uid} for uid in v.uids], "NumPDBViolations": v.pdb_violations}
                for node, v in victims.items()
            }
        }
    )
