"""Typed, immutable views of the resource.k8s.io/v1 objects the allocator reads.

API-shaped dicts are converted once (``parse_*``) into frozen, slotted dataclasses; the search never
touches raw dicts. Every parse error is an ``InvalidInputError`` whose message names the object and the
field path, e.g. ``ResourceClaim demo/x: spec.devices.requests[0].exactly.count: must be an integer``.

Shapes follow ``k8s.io/api/resource/v1/types.go`` (1.37), one module per kind: ``slices`` (ResourceSlice,
Device), ``classes`` (DeviceClass), ``claims`` (ResourceClaim(Spec), DeviceRequest / DeviceSubRequest,
DeviceConstraint), ``taints`` (DeviceTaint, DeviceToleration, DeviceTaintRule); ``fields`` reads a field
naming its path, ``shared`` holds the parts alike devices share once.
"""

from allocator.model.claims import (
    MAX_DEVICES_PER_CLAIM,
    Claim,
    Constraint,
    DerivedAttribute,
    DeviceRequest,
    Request,
    parse_claim,
    qualified_name_problem,
)
from allocator.model.classes import DeviceClass, parse_device_class
from allocator.model.slices import (
    CounterConsumption,
    Device,
    DeviceCapacity,
    DeviceID,
    RequestPolicy,
    ResourceSlice,
    parse_resource_slice,
)
from allocator.model.taints import DeviceTaintRule, Taint, Toleration, parse_device_taint_rule

__all__ = [
    "MAX_DEVICES_PER_CLAIM",
    "Claim",
    "Constraint",
    "CounterConsumption",
    "DerivedAttribute",
    "Device",
    "DeviceCapacity",
    "DeviceClass",
    "DeviceID",
    "DeviceRequest",
    "DeviceTaintRule",
    "Request",
    "RequestPolicy",
    "ResourceSlice",
    "Taint",
    "Toleration",
    "parse_claim",
    "parse_device_class",
    "parse_device_taint_rule",
    "parse_resource_slice",
    "qualified_name_problem",
]
