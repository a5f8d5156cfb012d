"""Conversion of ``resource.k8s.io`` objects to the ``resource.k8s.io/v1`` shape, then the v1 structure check.

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

After conversion the object is checked against the v1 structure an allocator relies on
(``app.state.validation``, after upstream's ``validation.go``); field errors come from
``app.state.fields``.

Errors: ``ConversionError(path, problem)``, rendered ``"<field path>: <problem>"``, e.g.
``spec.devices.requests[0].exactly.count: must be an integer``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from app.state.fields import ConversionError, Obj, as_mapping, opt_list, opt_mapping, req_mapping
from app.state.validation import DRA_GROUP, FLAT_REQUEST_FIELDS, V1, V1_CHECKS

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


def to_v1(obj: Mapping[str, Any], *, owned: bool = False) -> Obj:
    """Convert one DRA object to a new ``resource.k8s.io/v1`` dict and check its structure.

    ``obj``: a parsed object of a supported version and kind. Returns a deep copy in the v1 shape (``obj`` is
    not modified and shares nothing with the result). ``owned``: the caller gives ``obj`` up (a watch
    event parsed for this call), so an object already in v1's shape is returned itself, its apiVersion
    set, instead of a copy: the copy was most of the cost of a claim's event. Raises ConversionError
    naming the field path of the first problem.
    """
    version = check_api_version(obj.get("apiVersion"))
    kind = obj.get("kind")
    if kind not in _KINDS_BY_VERSION[version]:
        raise ConversionError("kind", f"{kind!r} is not a {DRA_GROUP}/{version} kind this loader converts")
    reshaped = version in _OLD_SHAPE_VERSIONS
    out: Obj = obj if owned and not reshaped and isinstance(obj, dict) else copy.deepcopy(dict(obj))
    if reshaped:
        _OLD_SHAPE_CONVERTERS[kind](out, version)
    out["apiVersion"] = V1
    V1_CHECKS[kind](out)
    return out


# ----------------------------------------------------------------------------------------------------
# v1beta1 / v1alpha3 -> v1 (operates on the deep copy)


def _convert_slice(obj: Obj, version: str) -> None:
    spec = req_mapping(obj, "spec", "spec")
    for i, device in enumerate(opt_list(spec, "devices", "spec.devices")):
        path = f"spec.devices[{i}]"
        device = as_mapping(device, path)
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
    for key, value in as_mapping(basic, f"{path}.basic").items():
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
    _flat_requests_to_exactly(req_mapping(obj, "spec", "spec"), "spec", version)


def _convert_claim_template(obj: Obj, version: str) -> None:
    spec = req_mapping(obj, "spec", "spec")
    _flat_requests_to_exactly(req_mapping(spec, "spec", "spec.spec"), "spec.spec", version)


def _flat_requests_to_exactly(claim_spec: Obj, path: str, version: str) -> None:
    devices = opt_mapping(claim_spec, "devices", f"{path}.devices") or {}
    for i, request in enumerate(opt_list(devices, "requests", f"{path}.devices.requests")):
        request_path = f"{path}.devices.requests[{i}]"
        request = as_mapping(request, request_path)
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
