"""The ``resource.k8s.io/v1`` structure an allocator relies on, checked on every converted object.

Required fields, one-of fields, value types, attribute and capacity names, node selection, selectors,
tolerations and constraints of ResourceSlice, DeviceClass, ResourceClaim, ResourceClaimTemplate and
DeviceTaintRule; the rules and messages follow ``kubernetes/kubernetes``
``pkg/apis/resource/validation/validation.go``, with its rule that every derived attribute is named by a
constraint targeting its request. Not the full API-server validation: CEL is not compiled,
cross-object references (classes, counter sets) are not resolved, and size limits are not enforced.
Raises ``ConversionError`` naming the field path of the first problem.
"""

from __future__ import annotations

from collections.abc import Callable

from app.state.fields import (
    ConversionError,
    Obj,
    as_list,
    as_mapping,
    as_string,
    check_dns_label,
    check_enum,
    check_qualified_name,
    check_quantity,
    is_int,
    opt_list,
    opt_mapping,
    opt_string,
    req_dns_label,
    req_mapping,
    req_string,
    unique,
)

__all__ = ["DRA_GROUP", "FLAT_REQUEST_FIELDS", "V1", "V1_CHECKS"]

DRA_GROUP = "resource.k8s.io"
V1 = f"{DRA_GROUP}/v1"

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


_SLICE_NODE_SELECTION = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
_DEVICE_NODE_SELECTION = ("nodeName", "nodeSelector", "allNodes")


def _check_slice(obj: Obj) -> None:
    spec = req_mapping(obj, "spec", "spec")
    # An older-version shape is the likeliest root cause of everything else, so it is reported first.
    for i, device in enumerate(opt_list(spec, "devices", "spec.devices")):
        if isinstance(device, dict) and "basic" in device:
            raise ConversionError(
                f"spec.devices[{i}].basic",
                f"the v1beta1 `basic` wrapper is not part of {V1} (move its fields into the device, "
                "or declare apiVersion resource.k8s.io/v1beta1)",
            )
    req_string(spec, "driver", "spec.driver")
    _check_pool(req_mapping(spec, "pool", "spec.pool"))
    _check_node_selection(spec, "spec", _SLICE_NODE_SELECTION)
    devices = opt_list(spec, "devices", "spec.devices")
    counter_sets = opt_list(spec, "sharedCounters", "spec.sharedCounters")
    if devices and counter_sets:
        # Since 1.35; 1.33/1.34 (v1beta2) allowed both in one slice.
        raise ConversionError("spec", "only one of `sharedCounters` or `devices` is allowed")
    per_device = spec.get("perDeviceNodeSelection") is True
    names: set[str] = set()
    for i, device in enumerate(devices):
        path = f"spec.devices[{i}]"
        unique(_check_device(as_mapping(device, path), path, per_device), names, f"{path}.name")
    names.clear()
    for i, counter_set in enumerate(counter_sets):
        path = f"spec.sharedCounters[{i}]"
        counter_set = as_mapping(counter_set, path)
        unique(req_dns_label(counter_set, "name", f"{path}.name"), names, f"{path}.name")
        _check_counters(counter_set, f"{path}.counters")


def _check_pool(pool: Obj) -> None:
    req_string(pool, "name", "spec.pool.name")
    generation = pool.get("generation")
    # A missing generation means 0 (real Azure dumps omit it, dra-api-facts.md §2).
    if generation is not None and (not is_int(generation) or generation < 0):
        raise ConversionError("spec.pool.generation", "must be a non-negative integer")
    count = pool.get("resourceSliceCount")
    if not is_int(count) or count <= 0:
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
            as_string(value, f"{path}.nodeName")
        else:
            _check_node_selector(value, f"{path}.nodeSelector")
        chosen.append(f"`{name}`")
    wanted = ", ".join(f"`{name}`" for name in fields)
    if not chosen:
        raise ConversionError(path, f"exactly one of {wanted} is required")
    if len(chosen) > 1:
        raise ConversionError(path, f"exactly one of {wanted} is required, but {', '.join(chosen)} are set")


def _check_node_selector(value: object, path: str) -> None:
    terms = as_list(as_mapping(value, path).get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms")
    # DRA allows exactly one term so that the selectors of devices from different slices can be merged.
    if len(terms) != 1:
        raise ConversionError(f"{path}.nodeSelectorTerms", "must have exactly one node selector term")
    term_path = f"{path}.nodeSelectorTerms[0]"
    term = as_mapping(terms[0], term_path)
    for key in ("matchExpressions", "matchFields"):
        for j, requirement in enumerate(opt_list(term, key, f"{term_path}.{key}")):
            req_path = f"{term_path}.{key}[{j}]"
            requirement = as_mapping(requirement, req_path)
            req_string(requirement, "key", f"{req_path}.key")
            check_enum(requirement.get("operator"), f"{req_path}.operator", _NODE_SELECTOR_OPERATORS)


def _check_device(device: Obj, path: str, per_device_node_selection: bool) -> str:
    """Check one v1 Device (``basic`` was rejected by the caller); returns its name."""
    name = req_dns_label(device, "name", f"{path}.name")
    _check_attributes(opt_mapping(device, "attributes", f"{path}.attributes") or {}, f"{path}.attributes")
    _check_capacities(opt_mapping(device, "capacity", f"{path}.capacity") or {}, f"{path}.capacity")
    for i, consumption in enumerate(opt_list(device, "consumesCounters", f"{path}.consumesCounters")):
        consumption_path = f"{path}.consumesCounters[{i}]"
        consumption = as_mapping(consumption, consumption_path)
        req_dns_label(consumption, "counterSet", f"{consumption_path}.counterSet")
        _check_counters(consumption, f"{consumption_path}.counters")
    for i, taint in enumerate(opt_list(device, "taints", f"{path}.taints")):
        _check_taint(as_mapping(taint, f"{path}.taints[{i}]"), f"{path}.taints[{i}]")
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
        check_qualified_name(name, attr_path)
        set_types = [key for key in _ATTRIBUTE_TYPES if as_mapping(value, attr_path).get(key) is not None]
        if len(set_types) != 1:
            raise ConversionError(
                attr_path, f"exactly one value must be specified ({', '.join(_ATTRIBUTE_TYPES)})"
            )


def _check_capacities(capacities: Obj, path: str) -> None:
    for name, value in capacities.items():
        cap_path = f"{path}[{name}]"
        check_qualified_name(name, cap_path)
        if not isinstance(value, dict):
            raise ConversionError(
                cap_path,
                f"must be {{value: <quantity>}}, got the bare quantity {value!r} "
                "(the bare form is resource.k8s.io/v1alpha3 only)",
            )
        check_quantity(value.get("value"), f"{cap_path}.value")


def _check_counters(holder: Obj, path: str) -> None:
    counters = req_mapping(holder, "counters", path)
    if not counters:
        raise ConversionError(path, "Required value: at least one counter")
    for name, counter in counters.items():
        counter_path = f"{path}[{name}]"
        check_dns_label(name, counter_path)
        check_quantity(as_mapping(counter, counter_path).get("value"), f"{counter_path}.value")


def _check_taint(taint: Obj, path: str) -> None:
    req_string(taint, "key", f"{path}.key")
    check_enum(taint.get("effect"), f"{path}.effect", _TAINT_EFFECTS)


def _check_device_class(obj: Obj) -> None:
    spec = opt_mapping(obj, "spec", "spec") or {}
    _check_selectors(spec, "spec")
    for i, config in enumerate(opt_list(spec, "config", "spec.config")):
        _check_opaque_config(as_mapping(config, f"spec.config[{i}]"), f"spec.config[{i}]")
    opt_string(spec, "extendedResourceName", "spec.extendedResourceName")


def _check_selectors(holder: Obj, path: str) -> None:
    for i, selector in enumerate(opt_list(holder, "selectors", f"{path}.selectors")):
        selector_path = f"{path}.selectors[{i}]"
        for key in as_mapping(selector, selector_path):
            if key != "cel":
                raise ConversionError(
                    f"{selector_path}.{key}", "unknown field (a selector is `cel: {expression: ...}`)"
                )
        cel = req_mapping(selector, "cel", f"{selector_path}.cel")
        req_string(cel, "expression", f"{selector_path}.cel.expression")


def _check_opaque_config(config: Obj, path: str) -> None:
    for j, name in enumerate(opt_list(config, "requests", f"{path}.requests")):
        as_string(name, f"{path}.requests[{j}]")
    opaque = req_mapping(config, "opaque", f"{path}.opaque")
    req_string(opaque, "driver", f"{path}.opaque.driver")


def _check_claim(obj: Obj) -> None:
    _check_claim_spec(req_mapping(obj, "spec", "spec"), "spec")


def _check_claim_template(obj: Obj) -> None:
    spec = req_mapping(obj, "spec", "spec")
    opt_mapping(spec, "metadata", "spec.metadata")
    _check_claim_spec(req_mapping(spec, "spec", "spec.spec"), "spec.spec")


def _check_claim_spec(claim_spec: Obj, path: str) -> None:
    devices = opt_mapping(claim_spec, "devices", f"{path}.devices")
    if devices is None:
        return
    path = f"{path}.devices"
    names: set[str] = set()
    for i, request in enumerate(opt_list(devices, "requests", f"{path}.requests")):
        request_path = f"{path}.requests[{i}]"
        unique(_check_request(as_mapping(request, request_path), request_path), names, f"{request_path}.name")
    for i, constraint in enumerate(opt_list(devices, "constraints", f"{path}.constraints")):
        _check_constraint(as_mapping(constraint, f"{path}.constraints[{i}]"), f"{path}.constraints[{i}]")
    for i, config in enumerate(opt_list(devices, "config", f"{path}.config")):
        _check_opaque_config(as_mapping(config, f"{path}.config[{i}]"), f"{path}.config[{i}]")
    _check_derived_references(devices, path)


def _check_derived_references(devices: Obj, path: str) -> None:
    """Every derived attribute must be named by a matchAttribute or distinctAttribute constraint targeting
    its request: one without ``requests`` (every request), or one listing the request, the subrequest or
    its parent (upstream ``validateDeviceDerivedAttribute``). Called after the requests and constraints
    passed their own checks."""
    targeted: dict[str, set[str]] = {}
    for constraint in devices.get("constraints") or ():
        name = constraint.get("matchAttribute") or constraint.get("distinctAttribute")
        for target in constraint.get("requests") or ("",):
            targeted.setdefault(target, set()).add(name)
    for i, request in enumerate(devices.get("requests") or ()):
        request_path = f"{path}.requests[{i}]"
        if request.get("exactly") is not None:
            alternatives = [(request["name"], request["exactly"], f"{request_path}.exactly")]
        else:
            alternatives = [
                (f"{request['name']}/{sub['name']}", sub, f"{request_path}.firstAvailable[{j}]")
                for j, sub in enumerate(request["firstAvailable"])
            ]
        for target, alternative, alt_path in alternatives:
            scopes = {"", target, target.partition("/")[0]}
            for k, derived in enumerate(alternative.get("derivedAttributes") or ()):
                if not any(derived["name"] in targeted.get(scope, ()) for scope in scopes):
                    raise ConversionError(
                        f"{alt_path}.derivedAttributes[{k}].name",
                        f"{derived['name']!r}: must be referenced by at least one matchAttribute or "
                        "distinctAttribute constraint targeting this request",
                    )


def _check_request(request: Obj, path: str) -> str:
    """Check one v1 DeviceRequest; returns its name."""
    for key in FLAT_REQUEST_FIELDS:
        if key in request:
            raise ConversionError(
                f"{path}.{key}",
                f"flat (v1beta1) request field; in {V1} it belongs under `exactly:` "
                "(or declare apiVersion resource.k8s.io/v1beta1)",
            )
    name = req_dns_label(request, "name", f"{path}.name")
    exactly = request.get("exactly")
    first_available = request.get("firstAvailable")
    # As upstream, an empty firstAvailable list counts as unset.
    if (exactly is None) == (first_available in (None, [])):
        raise ConversionError(path, "exactly one of `exactly`, `firstAvailable` is required")
    if exactly is not None:
        _check_exact_request(as_mapping(exactly, f"{path}.exactly"), f"{path}.exactly")
        return name
    subrequests = as_list(first_available, f"{path}.firstAvailable")
    names: set[str] = set()
    for j, subrequest in enumerate(subrequests):
        sub_path = f"{path}.firstAvailable[{j}]"
        subrequest = as_mapping(subrequest, sub_path)
        for key in subrequest:
            if key not in _SUBREQUEST_FIELDS:
                # adminAccess exists only on `exactly` requests (DeviceSubRequest has no such field).
                what = "not allowed" if key == "adminAccess" else "unknown field"
                raise ConversionError(f"{sub_path}.{key}", f"{what} in a firstAvailable subrequest")
        unique(req_dns_label(subrequest, "name", f"{sub_path}.name"), names, f"{sub_path}.name")
        _check_exact_request(subrequest, sub_path)
    return name


def _check_exact_request(request: Obj, path: str) -> None:
    """``exactly`` of a request, or one firstAvailable subrequest (same fields minus adminAccess)."""
    req_string(request, "deviceClassName", f"{path}.deviceClassName")
    _check_selectors(request, path)
    mode = request.get("allocationMode")
    if mode is not None:
        check_enum(mode, f"{path}.allocationMode", _ALLOCATION_MODES)
    count = request.get("count")
    if count is not None:
        if not is_int(count):
            raise ConversionError(f"{path}.count", "must be an integer")
        if mode == "All":
            raise ConversionError(f"{path}.count", "must not be specified when allocationMode is 'All'")
        if count <= 0:
            raise ConversionError(f"{path}.count", "must be greater than zero")
    admin_access = request.get("adminAccess")
    if admin_access is not None and not isinstance(admin_access, bool):
        raise ConversionError(f"{path}.adminAccess", "must be a boolean")
    for i, toleration in enumerate(opt_list(request, "tolerations", f"{path}.tolerations")):
        _check_toleration(as_mapping(toleration, f"{path}.tolerations[{i}]"), f"{path}.tolerations[{i}]")
    capacity = opt_mapping(request, "capacity", f"{path}.capacity") or {}
    for name, amount in (opt_mapping(capacity, "requests", f"{path}.capacity.requests") or {}).items():
        check_qualified_name(name, f"{path}.capacity.requests[{name}]")
        check_quantity(amount, f"{path}.capacity.requests[{name}]")
    for i, derived in enumerate(opt_list(request, "derivedAttributes", f"{path}.derivedAttributes")):
        entry_path = f"{path}.derivedAttributes[{i}]"
        name = req_string(as_mapping(derived, entry_path), "name", f"{entry_path}.name")
        _check_fully_qualified_name(name, f"{entry_path}.name")


def _check_toleration(toleration: Obj, path: str) -> None:
    if toleration.get("operator") is not None:
        check_enum(toleration["operator"], f"{path}.operator", _TOLERATION_OPERATORS)
    if toleration.get("effect") not in (None, ""):
        check_enum(toleration["effect"], f"{path}.effect", _TOLERATION_EFFECTS)
    seconds = toleration.get("tolerationSeconds")
    if seconds is not None and not is_int(seconds):
        raise ConversionError(f"{path}.tolerationSeconds", "must be an integer")


def _check_constraint(constraint: Obj, path: str) -> None:
    for j, name in enumerate(opt_list(constraint, "requests", f"{path}.requests")):
        as_string(name, f"{path}.requests[{j}]")
    chosen = [key for key in ("matchAttribute", "distinctAttribute") if constraint.get(key) is not None]
    if len(chosen) != 1:
        raise ConversionError(path, "exactly one of `matchAttribute`, `distinctAttribute` is required")
    attribute_path = f"{path}.{chosen[0]}"
    _check_fully_qualified_name(as_string(constraint[chosen[0]], attribute_path), attribute_path)


def _check_fully_qualified_name(name: str, path: str) -> None:
    # FullyQualifiedName upstream (1.37): constraint attributes and derivedAttributes names; the hint is
    # upstream's advice for a derived attribute that shadows no driver's attribute.
    if "/" not in name:
        raise ConversionError(
            path,
            f"{name!r} must include the domain (<domain>/<name>); a name local to the claim takes a domain "
            f"no driver uses, e.g. 'derived/{name}'",
        )
    check_qualified_name(name, path)


def _check_taint_rule(obj: Obj) -> None:
    spec = req_mapping(obj, "spec", "spec")
    for key in spec:
        if key not in ("deviceSelector", "taint"):
            raise ConversionError(
                f"spec.{key}", "unknown field (a DeviceTaintRule spec has `deviceSelector` and `taint`)"
            )
    for key, value in (opt_mapping(spec, "deviceSelector", "spec.deviceSelector") or {}).items():
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
            as_string(value, key_path)
    _check_taint(req_mapping(spec, "taint", "spec.taint"), "spec.taint")


V1_CHECKS: dict[str, Callable[[Obj], None]] = {
    "ResourceSlice": _check_slice,
    "DeviceClass": _check_device_class,
    "ResourceClaim": _check_claim,
    "ResourceClaimTemplate": _check_claim_template,
    "DeviceTaintRule": _check_taint_rule,
}
