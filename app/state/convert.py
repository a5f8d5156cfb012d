"""Conversion of ``resource.k8s.io`` objects to the ``resource.k8s.io/v1`` shape, plus a structural check.

Input: one API object as a plain dict (parsed YAML/JSON) with ``apiVersion`` ``resource.k8s.io/v1``,
``v1beta2``, ``v1beta1`` or ``v1alpha3`` and ``kind`` ResourceSlice, DeviceClass, ResourceClaim,
ResourceClaimTemplate or DeviceTaintRule. Output: a new dict in the v1 shape (the input is never mutated).

Conversions (``dra-api-facts.md`` §1.1, upstream ``k8s.io/api/resource/*/types.go``):

* ``v1beta2`` is v1-shaped: only ``apiVersion`` changes.
* ``v1beta1`` / ``v1alpha3`` ResourceSlice: ``spec.devices[].basic.{...}`` is unwrapped into the device;
  ``v1alpha3`` (1.31-1.33) bare capacity quantities ``capacity: {memory: 16Gi}`` become
  ``{memory: {value: 16Gi}}`` (``v1beta1`` always had the ``{value: ...}`` form).
* ``v1beta1`` / ``v1alpha3`` ResourceClaim / ResourceClaimTemplate: the flat request fields
  (``deviceClassName, selectors, allocationMode, count, adminAccess, tolerations, capacity``) move under
  ``exactly:``; ``firstAvailable`` is identical in every version.
* DeviceTaintRule ``v1alpha3`` / ``v1beta2`` → v1: same spec, but the selector fields ``deviceClassName`` and
  ``selectors`` (1.33/1.34) were removed in 1.35 and are rejected.
* ``resource.k8s.io/v1alpha2`` is classic DRA (ResourceClass, parametersRef), removed in Kubernetes 1.31:
  rejected.

After conversion the object is checked against the v1 structure an allocator relies on (required fields,
one-of fields, value types, attribute/capacity names, node selection, selectors); the rules and messages
follow ``kubernetes/kubernetes`` ``pkg/apis/resource/validation/validation.go``. This is not the full
API-server validation: CEL is not compiled, cross-object references (classes, counter sets) are not
resolved, and size limits are not enforced.

Errors: ``ConversionError(path, problem)``, rendered ``"<field path>: <problem>"``, e.g.
``spec.devices.requests[0].exactly.count: must be an integer``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from typing import Any

from allocator.quantity import QuantityError, parse_quantity

__all__ = [
    "CLASSIC_DRA_PROBLEM",
    "CLASSIC_DRA_VERSION",
    "DRA_GROUP",
    "DRA_KINDS",
    "FLAT_REQUEST_FIELDS",
    "SUPPORTED_VERSIONS",
    "V1",
    "ConversionError",
    "check_api_version",
    "to_v1",
]

DRA_GROUP = "resource.k8s.io"
V1 = f"{DRA_GROUP}/v1"
CLASSIC_DRA_VERSION = f"{DRA_GROUP}/v1alpha2"
CLASSIC_DRA_PROBLEM = (
    f"{CLASSIC_DRA_VERSION} is classic DRA (ResourceClass, parametersRef, PodSchedulingContext), "
    "removed in Kubernetes 1.31; it has no resource.k8s.io/v1 equivalent"
)
DRA_KINDS = frozenset(
    {"ResourceSlice", "DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "DeviceTaintRule"}
)
SUPPORTED_VERSIONS = ("v1", "v1beta2", "v1beta1", "v1alpha3")
"""Versions ``to_v1`` reads, newest first."""

# DeviceTaintRule appeared in v1alpha3 (1.33), then v1beta2 (1.36) and v1 (1.37); v1beta1 never had it.
_KINDS_BY_VERSION = {
    "v1": DRA_KINDS,
    "v1beta2": DRA_KINDS,
    "v1beta1": DRA_KINDS - {"DeviceTaintRule"},
    "v1alpha3": DRA_KINDS,
}
_OLD_SHAPE_VERSIONS = ("v1beta1", "v1alpha3")

FLAT_REQUEST_FIELDS = (
    "deviceClassName",
    "selectors",
    "allocationMode",
    "count",
    "adminAccess",
    "tolerations",
    "capacity",
)
"""Request fields that v1beta1/v1alpha3 keep directly in the request and v1 keeps under ``exactly``."""
_SUBREQUEST_FIELDS = frozenset({"name", "derivedAttributes", *FLAT_REQUEST_FIELDS} - {"adminAccess"})
# derivedAttributes: KEP-6080; names are checked here, the rest by the allocator's parser (allocator.model).

_ATTRIBUTE_TYPES = ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")
_ALLOCATION_MODES = ("ExactCount", "All")
_TAINT_EFFECTS = ("None", "NoSchedule", "NoExecute")
_TOLERATION_OPERATORS = ("Equal", "Exists")
_TOLERATION_EFFECTS = ("NoSchedule", "NoExecute")
_NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_TAINT_RULE_SELECTOR_FIELDS = ("driver", "pool", "device")
_REMOVED_TAINT_RULE_SELECTOR_FIELDS = ("deviceClassName", "selectors")

_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_MAX_ID_LENGTH = 32  # DeviceMaxIDLength
_MAX_DOMAIN_LENGTH = 63  # DeviceMaxDomainLength
_MAX_LABEL_LENGTH = 63

Obj = dict[str, Any]


class ConversionError(ValueError):
    """The object cannot be converted to (or is not a valid) ``resource.k8s.io/v1`` object.

    ``path`` is the field path (``spec.devices[0].capacity[memory]``), ``problem`` what is wrong with it.
    """

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def check_api_version(api_version: object) -> str:
    """Return the version part (``v1beta1``) of a ``resource.k8s.io/<version>`` apiVersion ``to_v1`` reads.

    Raises ConversionError for classic DRA (``v1alpha2``, removed in 1.31), other groups and unknown versions.
    """
    if not isinstance(api_version, str) or not api_version.startswith(f"{DRA_GROUP}/"):
        raise ConversionError("apiVersion", f"{api_version!r} is not a {DRA_GROUP} API version")
    if api_version == CLASSIC_DRA_VERSION:
        raise ConversionError("apiVersion", CLASSIC_DRA_PROBLEM)
    version = api_version.removeprefix(f"{DRA_GROUP}/")
    if version not in SUPPORTED_VERSIONS:
        supported = ", ".join(f"{DRA_GROUP}/{v}" for v in SUPPORTED_VERSIONS)
        raise ConversionError("apiVersion", f"unsupported version {api_version!r} (supported: {supported})")
    return version


def to_v1(obj: Mapping[str, Any]) -> Obj:
    """Convert one DRA object to a new ``resource.k8s.io/v1`` dict and check its structure.

    ``obj``: a parsed object of a supported version and kind. Returns a deep copy in the v1 shape (``obj`` is
    not modified and shares nothing with the result). Raises ConversionError naming the field path of the
    first problem.
    """
    version = check_api_version(obj.get("apiVersion"))
    kind = obj.get("kind")
    if kind not in _KINDS_BY_VERSION[version]:
        raise ConversionError("kind", f"{kind!r} is not a {DRA_GROUP}/{version} kind this loader converts")
    out: Obj = copy.deepcopy(dict(obj))
    if version in _OLD_SHAPE_VERSIONS:
        _OLD_SHAPE_CONVERTERS[kind](out, version)
    out["apiVersion"] = V1
    _V1_CHECKS[kind](out)
    return out


# ----------------------------------------------------------------------------------------------------
# v1beta1 / v1alpha3 -> v1 (operates on the deep copy)


def _convert_slice(obj: Obj, version: str) -> None:
    spec = _req_mapping(obj, "spec", "spec")
    for i, device in enumerate(_opt_list(spec, "devices", "spec.devices")):
        path = f"spec.devices[{i}]"
        device = _as_mapping(device, path)
        _unwrap_basic(device, path)
        if version == "v1alpha3":
            _wrap_bare_capacities(device)


def _unwrap_basic(device: Obj, path: str) -> None:
    # `basic` was a one-member union (BasicDevice); v1beta2 and v1 inline its fields into Device.
    if "basic" not in device:
        return
    basic = device.pop("basic")
    if basic is None:
        return
    for key, value in _as_mapping(basic, f"{path}.basic").items():
        if key in device:
            raise ConversionError(f"{path}.basic.{key}", f"also set outside `basic` in {path}")
        device[key] = value


def _wrap_bare_capacities(device: Obj) -> None:
    # v1alpha3 (1.31-1.33) had `capacity: map[QualifiedName]Quantity`; later versions wrap the quantity
    # in DeviceCapacity.
    capacity = device.get("capacity")
    if not isinstance(capacity, dict):
        return
    for name, value in capacity.items():
        if not isinstance(value, dict):
            capacity[name] = {"value": value}


def _convert_claim(obj: Obj, version: str) -> None:
    _flat_requests_to_exactly(_req_mapping(obj, "spec", "spec"), "spec", version)


def _convert_claim_template(obj: Obj, version: str) -> None:
    spec = _req_mapping(obj, "spec", "spec")
    _flat_requests_to_exactly(_req_mapping(spec, "spec", "spec.spec"), "spec.spec", version)


def _flat_requests_to_exactly(claim_spec: Obj, path: str, version: str) -> None:
    devices = _opt_mapping(claim_spec, "devices", f"{path}.devices") or {}
    for i, request in enumerate(_opt_list(devices, "requests", f"{path}.devices.requests")):
        request_path = f"{path}.devices.requests[{i}]"
        request = _as_mapping(request, request_path)
        if "exactly" in request:
            raise ConversionError(
                f"{request_path}.exactly",
                f"not a {DRA_GROUP}/{version} field (requests are flat before v1beta2); use apiVersion {V1}",
            )
        flat = {key: request[key] for key in FLAT_REQUEST_FIELDS if key in request}
        if not flat:
            continue
        if "firstAvailable" in request:
            raise ConversionError(
                f"{request_path}.firstAvailable",
                f"must not be combined with {', '.join(flat)} in one request",
            )
        rest = {key: value for key, value in request.items() if key not in flat}
        request.clear()
        request.update(rest)
        request["exactly"] = flat


def _no_shape_change(obj: Obj, version: str) -> None:
    """DeviceClass and DeviceTaintRule have the same shape in every version that has them."""


_OLD_SHAPE_CONVERTERS: dict[str, Callable[[Obj, str], None]] = {
    "ResourceSlice": _convert_slice,
    "DeviceClass": _no_shape_change,
    "ResourceClaim": _convert_claim,
    "ResourceClaimTemplate": _convert_claim_template,
    "DeviceTaintRule": _no_shape_change,
}


# ----------------------------------------------------------------------------------------------------
# v1 structure checks (validation.go, reduced to what the allocator depends on)

_SLICE_NODE_SELECTION = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
_DEVICE_NODE_SELECTION = ("nodeName", "nodeSelector", "allNodes")


def _check_slice(obj: Obj) -> None:
    spec = _req_mapping(obj, "spec", "spec")
    # An older-version shape is the likeliest root cause of everything else, so it is reported first.
    for i, device in enumerate(_opt_list(spec, "devices", "spec.devices")):
        if isinstance(device, dict) and "basic" in device:
            raise ConversionError(
                f"spec.devices[{i}].basic",
                f"the v1beta1 `basic` wrapper is not part of {V1} (move its fields into the device, "
                "or declare apiVersion resource.k8s.io/v1beta1)",
            )
    _req_string(spec, "driver", "spec.driver")
    _check_pool(_req_mapping(spec, "pool", "spec.pool"))
    _check_node_selection(spec, "spec", _SLICE_NODE_SELECTION)
    devices = _opt_list(spec, "devices", "spec.devices")
    counter_sets = _opt_list(spec, "sharedCounters", "spec.sharedCounters")
    if devices and counter_sets:
        # Since 1.35; 1.33/1.34 (v1beta2) allowed both in one slice.
        raise ConversionError("spec", "only one of `sharedCounters` or `devices` is allowed")
    per_device = spec.get("perDeviceNodeSelection") is True
    names: set[str] = set()
    for i, device in enumerate(devices):
        path = f"spec.devices[{i}]"
        _unique(_check_device(_as_mapping(device, path), path, per_device), names, f"{path}.name")
    names.clear()
    for i, counter_set in enumerate(counter_sets):
        path = f"spec.sharedCounters[{i}]"
        counter_set = _as_mapping(counter_set, path)
        _unique(_req_dns_label(counter_set, "name", f"{path}.name"), names, f"{path}.name")
        _check_counters(counter_set, f"{path}.counters")


def _check_pool(pool: Obj) -> None:
    _req_string(pool, "name", "spec.pool.name")
    generation = pool.get("generation")
    # A missing generation means 0 (real Azure dumps omit it, dra-api-facts.md §2).
    if generation is not None and (not _is_int(generation) or generation < 0):
        raise ConversionError("spec.pool.generation", "must be a non-negative integer")
    count = pool.get("resourceSliceCount")
    if not _is_int(count) or count <= 0:
        raise ConversionError("spec.pool.resourceSliceCount", "must be greater than zero")


def _check_node_selection(holder: Obj, path: str, fields: tuple[str, ...]) -> None:
    """Exactly one node selection field: slice level, or device level under perDeviceNodeSelection."""
    chosen = []
    for name in fields:
        value = holder.get(name)
        if value is None or value == "":
            continue
        if name in ("allNodes", "perDeviceNodeSelection"):
            if value is not True:
                raise ConversionError(f"{path}.{name}", "must be either unset or set to true")
        elif name == "nodeName":
            _as_string(value, f"{path}.nodeName")
        else:
            _check_node_selector(value, f"{path}.nodeSelector")
        chosen.append(f"`{name}`")
    wanted = ", ".join(f"`{name}`" for name in fields)
    if not chosen:
        raise ConversionError(path, f"exactly one of {wanted} is required")
    if len(chosen) > 1:
        raise ConversionError(path, f"exactly one of {wanted} is required, but {', '.join(chosen)} are set")


def _check_node_selector(value: object, path: str) -> None:
    terms = _as_list(_as_mapping(value, path).get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms")
    # DRA allows exactly one term so that the selectors of devices from different slices can be merged.
    if len(terms) != 1:
        raise ConversionError(f"{path}.nodeSelectorTerms", "must have exactly one node selector term")
    term_path = f"{path}.nodeSelectorTerms[0]"
    term = _as_mapping(terms[0], term_path)
    for key in ("matchExpressions", "matchFields"):
        for j, requirement in enumerate(_opt_list(term, key, f"{term_path}.{key}")):
            req_path = f"{term_path}.{key}[{j}]"
            requirement = _as_mapping(requirement, req_path)
            _req_string(requirement, "key", f"{req_path}.key")
            _check_enum(requirement.get("operator"), f"{req_path}.operator", _NODE_SELECTOR_OPERATORS)


def _check_device(device: Obj, path: str, per_device_node_selection: bool) -> str:
    """Check one v1 Device (``basic`` was rejected by the caller); returns its name."""
    name = _req_dns_label(device, "name", f"{path}.name")
    _check_attributes(_opt_mapping(device, "attributes", f"{path}.attributes") or {}, f"{path}.attributes")
    _check_capacities(_opt_mapping(device, "capacity", f"{path}.capacity") or {}, f"{path}.capacity")
    for i, consumption in enumerate(_opt_list(device, "consumesCounters", f"{path}.consumesCounters")):
        consumption_path = f"{path}.consumesCounters[{i}]"
        consumption = _as_mapping(consumption, consumption_path)
        _req_dns_label(consumption, "counterSet", f"{consumption_path}.counterSet")
        _check_counters(consumption, f"{consumption_path}.counters")
    for i, taint in enumerate(_opt_list(device, "taints", f"{path}.taints")):
        _check_taint(_as_mapping(taint, f"{path}.taints[{i}]"), f"{path}.taints[{i}]")
    if per_device_node_selection:
        _check_node_selection(device, path, _DEVICE_NODE_SELECTION)
        return name
    if any(device.get(field) is not None for field in _DEVICE_NODE_SELECTION):
        raise ConversionError(
            path,
            "`nodeName`, `nodeSelector` and `allNodes` can only be set if `perDeviceNodeSelection` is set "
            "to true in the ResourceSlice spec",
        )
    return name


def _check_attributes(attributes: Obj, path: str) -> None:
    for name, value in attributes.items():
        attr_path = f"{path}[{name}]"
        _check_qualified_name(name, attr_path)
        set_types = [key for key in _ATTRIBUTE_TYPES if _as_mapping(value, attr_path).get(key) is not None]
        if len(set_types) != 1:
            raise ConversionError(
                attr_path, f"exactly one value must be specified ({', '.join(_ATTRIBUTE_TYPES)})"
            )


def _check_capacities(capacities: Obj, path: str) -> None:
    for name, value in capacities.items():
        cap_path = f"{path}[{name}]"
        _check_qualified_name(name, cap_path)
        if not isinstance(value, dict):
            raise ConversionError(
                cap_path,
                f"must be {{value: <quantity>}}, got the bare quantity {value!r} "
                "(the bare form is resource.k8s.io/v1alpha3 only)",
            )
        _check_quantity(value.get("value"), f"{cap_path}.value")


def _check_counters(holder: Obj, path: str) -> None:
    counters = _req_mapping(holder, "counters", path)
    if not counters:
        raise ConversionError(path, "Required value: at least one counter")
    for name, counter in counters.items():
        counter_path = f"{path}[{name}]"
        _check_dns_label(name, counter_path)
        _check_quantity(_as_mapping(counter, counter_path).get("value"), f"{counter_path}.value")


def _check_taint(taint: Obj, path: str) -> None:
    _req_string(taint, "key", f"{path}.key")
    _check_enum(taint.get("effect"), f"{path}.effect", _TAINT_EFFECTS)


def _check_device_class(obj: Obj) -> None:
    spec = _opt_mapping(obj, "spec", "spec") or {}
    _check_selectors(spec, "spec")
    for i, config in enumerate(_opt_list(spec, "config", "spec.config")):
        _check_opaque_config(_as_mapping(config, f"spec.config[{i}]"), f"spec.config[{i}]")
    _opt_string(spec, "extendedResourceName", "spec.extendedResourceName")


def _check_selectors(holder: Obj, path: str) -> None:
    for i, selector in enumerate(_opt_list(holder, "selectors", f"{path}.selectors")):
        selector_path = f"{path}.selectors[{i}]"
        for key in _as_mapping(selector, selector_path):
            if key != "cel":
                raise ConversionError(
                    f"{selector_path}.{key}", "unknown field (a selector is `cel: {expression: ...}`)"
                )
        cel = _req_mapping(selector, "cel", f"{selector_path}.cel")
        _req_string(cel, "expression", f"{selector_path}.cel.expression")


def _check_opaque_config(config: Obj, path: str) -> None:
    for j, name in enumerate(_opt_list(config, "requests", f"{path}.requests")):
        _as_string(name, f"{path}.requests[{j}]")
    opaque = _req_mapping(config, "opaque", f"{path}.opaque")
    _req_string(opaque, "driver", f"{path}.opaque.driver")


def _check_claim(obj: Obj) -> None:
    _check_claim_spec(_req_mapping(obj, "spec", "spec"), "spec")


def _check_claim_template(obj: Obj) -> None:
    spec = _req_mapping(obj, "spec", "spec")
    _opt_mapping(spec, "metadata", "spec.metadata")
    _check_claim_spec(_req_mapping(spec, "spec", "spec.spec"), "spec.spec")


def _check_claim_spec(claim_spec: Obj, path: str) -> None:
    devices = _opt_mapping(claim_spec, "devices", f"{path}.devices")
    if devices is None:
        return
    path = f"{path}.devices"
    names: set[str] = set()
    for i, request in enumerate(_opt_list(devices, "requests", f"{path}.requests")):
        request_path = f"{path}.requests[{i}]"
        _unique(
            _check_request(_as_mapping(request, request_path), request_path), names, f"{request_path}.name"
        )
    for i, constraint in enumerate(_opt_list(devices, "constraints", f"{path}.constraints")):
        _check_constraint(_as_mapping(constraint, f"{path}.constraints[{i}]"), f"{path}.constraints[{i}]")
    for i, config in enumerate(_opt_list(devices, "config", f"{path}.config")):
        _check_opaque_config(_as_mapping(config, f"{path}.config[{i}]"), f"{path}.config[{i}]")


def _check_request(request: Obj, path: str) -> str:
    """Check one v1 DeviceRequest; returns its name."""
    for key in FLAT_REQUEST_FIELDS:
        if key in request:
            raise ConversionError(
                f"{path}.{key}",
                f"flat (v1beta1) request field; in {V1} it belongs under `exactly:` "
                "(or declare apiVersion resource.k8s.io/v1beta1)",
            )
    name = _req_dns_label(request, "name", f"{path}.name")
    exactly = request.get("exactly")
    first_available = request.get("firstAvailable")
    # As upstream, an empty firstAvailable list counts as unset.
    if (exactly is None) == (first_available in (None, [])):
        raise ConversionError(path, "exactly one of `exactly`, `firstAvailable` is required")
    if exactly is not None:
        _check_exact_request(_as_mapping(exactly, f"{path}.exactly"), f"{path}.exactly")
        return name
    subrequests = _as_list(first_available, f"{path}.firstAvailable")
    names: set[str] = set()
    for j, subrequest in enumerate(subrequests):
        sub_path = f"{path}.firstAvailable[{j}]"
        subrequest = _as_mapping(subrequest, sub_path)
        for key in subrequest:
            if key not in _SUBREQUEST_FIELDS:
                # adminAccess exists only on `exactly` requests (DeviceSubRequest has no such field).
                what = "not allowed" if key == "adminAccess" else "unknown field"
                raise ConversionError(f"{sub_path}.{key}", f"{what} in a firstAvailable subrequest")
        _unique(_req_dns_label(subrequest, "name", f"{sub_path}.name"), names, f"{sub_path}.name")
        _check_exact_request(subrequest, sub_path)
    return name


def _check_exact_request(request: Obj, path: str) -> None:
    """``exactly`` of a request, or one firstAvailable subrequest (same fields minus adminAccess)."""
    _req_string(request, "deviceClassName", f"{path}.deviceClassName")
    _check_selectors(request, path)
    mode = request.get("allocationMode")
    if mode is not None:
        _check_enum(mode, f"{path}.allocationMode", _ALLOCATION_MODES)
    count = request.get("count")
    if count is not None:
        if not _is_int(count):
            raise ConversionError(f"{path}.count", "must be an integer")
        if mode == "All":
            raise ConversionError(f"{path}.count", "must not be specified when allocationMode is 'All'")
        if count <= 0:
            raise ConversionError(f"{path}.count", "must be greater than zero")
    admin_access = request.get("adminAccess")
    if admin_access is not None and not isinstance(admin_access, bool):
        raise ConversionError(f"{path}.adminAccess", "must be a boolean")
    for i, toleration in enumerate(_opt_list(request, "tolerations", f"{path}.tolerations")):
        _check_toleration(_as_mapping(toleration, f"{path}.tolerations[{i}]"), f"{path}.tolerations[{i}]")
    capacity = _opt_mapping(request, "capacity", f"{path}.capacity") or {}
    for name, amount in (_opt_mapping(capacity, "requests", f"{path}.capacity.requests") or {}).items():
        _check_qualified_name(name, f"{path}.capacity.requests[{name}]")
        _check_quantity(amount, f"{path}.capacity.requests[{name}]")
    for i, derived in enumerate(_opt_list(request, "derivedAttributes", f"{path}.derivedAttributes")):
        entry_path = f"{path}.derivedAttributes[{i}]"
        name = _req_string(_as_mapping(derived, entry_path), "name", f"{entry_path}.name")
        _check_fully_qualified_name(name, f"{entry_path}.name")


def _check_toleration(toleration: Obj, path: str) -> None:
    if toleration.get("operator") is not None:
        _check_enum(toleration["operator"], f"{path}.operator", _TOLERATION_OPERATORS)
    if toleration.get("effect") not in (None, ""):
        _check_enum(toleration["effect"], f"{path}.effect", _TOLERATION_EFFECTS)
    seconds = toleration.get("tolerationSeconds")
    if seconds is not None and not _is_int(seconds):
        raise ConversionError(f"{path}.tolerationSeconds", "must be an integer")


def _check_constraint(constraint: Obj, path: str) -> None:
    for j, name in enumerate(_opt_list(constraint, "requests", f"{path}.requests")):
        _as_string(name, f"{path}.requests[{j}]")
    chosen = [key for key in ("matchAttribute", "distinctAttribute") if constraint.get(key) is not None]
    if len(chosen) != 1:
        raise ConversionError(path, "exactly one of `matchAttribute`, `distinctAttribute` is required")
    attribute_path = f"{path}.{chosen[0]}"
    _check_fully_qualified_name(_as_string(constraint[chosen[0]], attribute_path), attribute_path)


def _check_fully_qualified_name(name: str, path: str) -> None:
    # FullyQualifiedName upstream (1.37): constraint attributes and derivedAttributes names; the hint is
    # upstream's advice for a derived attribute that shadows no driver's attribute.
    if "/" not in name:
        raise ConversionError(
            path,
            f"{name!r} must include the domain (<domain>/<name>); a name local to the claim takes a domain "
            f"no driver uses, e.g. 'derived/{name}'",
        )
    _check_qualified_name(name, path)


def _check_taint_rule(obj: Obj) -> None:
    spec = _req_mapping(obj, "spec", "spec")
    for key in spec:
        if key not in ("deviceSelector", "taint"):
            raise ConversionError(
                f"spec.{key}", "unknown field (a DeviceTaintRule spec has `deviceSelector` and `taint`)"
            )
    for key, value in (_opt_mapping(spec, "deviceSelector", "spec.deviceSelector") or {}).items():
        key_path = f"spec.deviceSelector.{key}"
        if key in _REMOVED_TAINT_RULE_SELECTOR_FIELDS:
            raise ConversionError(
                key_path,
                "removed in Kubernetes 1.35: a DeviceTaintRule selects by driver, pool and device only",
            )
        if key not in _TAINT_RULE_SELECTOR_FIELDS:
            raise ConversionError(
                key_path, f"unknown field (one of {', '.join(_TAINT_RULE_SELECTOR_FIELDS)})"
            )
        if value is not None:
            _as_string(value, key_path)
    _check_taint(_req_mapping(spec, "taint", "spec.taint"), "spec.taint")


_V1_CHECKS: dict[str, Callable[[Obj], None]] = {
    "ResourceSlice": _check_slice,
    "DeviceClass": _check_device_class,
    "ResourceClaim": _check_claim,
    "ResourceClaimTemplate": _check_claim_template,
    "DeviceTaintRule": _check_taint_rule,
}


# ----------------------------------------------------------------------------------------------------
# typed accessors: each returns the narrowed value or raises ConversionError naming the path


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _as_mapping(value: object, path: str) -> Obj:
    if not isinstance(value, dict):
        raise ConversionError(path, f"must be an object, got {_type_name(value)}")
    return value


def _as_list(value: object, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise ConversionError(path, f"must be a list, got {_type_name(value)}")
    return value


def _as_string(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise ConversionError(path, f"must be a string, got {_type_name(value)}")
    return value


def _opt_mapping(holder: Obj, key: str, path: str) -> Obj | None:
    value = holder.get(key)
    return None if value is None else _as_mapping(value, path)


def _req_mapping(holder: Obj, key: str, path: str) -> Obj:
    value = holder.get(key)
    if value is None:
        raise ConversionError(path, "Required value")
    return _as_mapping(value, path)


def _opt_list(holder: Obj, key: str, path: str) -> list[Any]:
    """The list at ``holder[key]``, or an empty list when the field is absent or null."""
    value = holder.get(key)
    return [] if value is None else _as_list(value, path)


def _opt_string(holder: Obj, key: str, path: str) -> str | None:
    value = holder.get(key)
    return None if value is None else _as_string(value, path)


def _req_string(holder: Obj, key: str, path: str) -> str:
    value = holder.get(key)
    if value is None or value == "":
        raise ConversionError(path, "Required value")
    return _as_string(value, path)


def _req_dns_label(holder: Obj, key: str, path: str) -> str:
    value = _req_string(holder, key, path)
    _check_dns_label(value, path)
    return value


def _unique(name: str, seen: set[str], path: str) -> None:
    if name in seen:
        raise ConversionError(path, f"Duplicate value: {name!r}")
    seen.add(name)


def _check_enum(value: object, path: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConversionError(path, f"Unsupported value: {value!r}: supported values: {', '.join(allowed)}")


def _check_dns_label(value: str, path: str) -> None:
    if len(value) > _MAX_LABEL_LENGTH or not _DNS_LABEL.fullmatch(value):
        raise ConversionError(
            path, f"{value!r} is not a DNS label (lower case alphanumerics and '-', at most 63 characters)"
        )


def _check_qualified_name(name: object, path: str) -> None:
    """``QualifiedName``: ``<C identifier>`` or ``<DNS subdomain>/<C identifier>`` (validateQualifiedName)."""
    parts = _as_string(name, path).split("/")
    if len(parts) > 2:
        # Upstream does not reject names with more than one '/' (a TODO in validation.go); neither do we.
        return
    identifier = parts[-1]
    if len(parts) == 2:
        domain = parts[0]
        if not domain:
            raise ConversionError(path, "the domain must not be empty")
        if len(domain) > _MAX_DOMAIN_LENGTH or not _DNS_SUBDOMAIN.fullmatch(domain):
            raise ConversionError(path, f"domain {domain!r} is not a DNS subdomain of at most 63 characters")
    if len(identifier) > _MAX_ID_LENGTH or not _C_IDENTIFIER.fullmatch(identifier):
        raise ConversionError(
            path,
            f"{identifier!r} is not a C identifier (letters, digits and '_', not starting with a digit, "
            "at most 32 characters)",
        )


def _check_quantity(value: object, path: str) -> None:
    if value is None:
        raise ConversionError(path, "Required value")
    try:
        parse_quantity(value)
    except QuantityError as err:
        raise ConversionError(path, str(err)) from err
