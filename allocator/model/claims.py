"""The ``ResourceClaim`` kind as the allocator reads it: requests (``exactly`` or ``firstAvailable``
subrequests, with their selectors, counts, tolerations, capacity requests and derived attributes),
constraints and config. Only the spec: the allocation in the status is read by ``allocator.inventory``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from allocator.model.fields import (
    FieldPath,
    object_name,
    read_int,
    read_list,
    read_mapping,
    read_quantity,
    read_selectors,
    read_str,
    read_strings,
)
from allocator.model.taints import Toleration, parse_toleration
from allocator.quantity import Quantity

__all__ = [
    "MAX_DERIVED_ATTRIBUTES",
    "MAX_DEVICES_PER_CLAIM",
    "MAX_REQUESTS_PER_CLAIM",
    "Claim",
    "Constraint",
    "DerivedAttribute",
    "DeviceRequest",
    "Request",
    "parse_claim",
    "qualified_name_problem",
]

MAX_DEVICES_PER_CLAIM = 32
"""``AllocationResultsMaxSize``: results in one claim's allocation."""

MAX_REQUESTS_PER_CLAIM = 32
"""``DeviceRequestsMaxSize``: requests in one claim."""

MAX_DERIVED_ATTRIBUTES = 32
"""Entries of one request's ``derivedAttributes`` (KEP-6080; ``+k8s:maxItems=32`` in ``k8s.io/api``
``resource/v1/types.go``)."""


@dataclass(frozen=True, slots=True)
class DerivedAttribute:
    """One ``derivedAttributes`` entry (KEP-6080): a value computed by a CEL expression per candidate device.

    ``name`` is domain-qualified: a domain no driver uses keeps it local to the claim, a driver's name shadows
    the static attribute in this request's constraints (app.state.validation refuses bare names, as Kubernetes
    1.37).
    """

    name: str
    expression: str


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """An ``exactly`` request or one ``firstAvailable`` subrequest.

    ``name`` is what results carry: ``req`` or ``req/sub``. ``admin_access`` is None when the field is unset
    (upstream treats a non-nil ``false`` with the gate off as an error).
    """

    name: str
    parent: str
    class_name: str
    selectors: tuple[str, ...]
    mode: str
    count: int
    admin_access: bool | None
    tolerations: tuple[Toleration, ...]
    capacity_requests: Mapping[str, Quantity]
    is_subrequest: bool
    derived_attributes: tuple[DerivedAttribute, ...] = ()
    """``derivedAttributes`` (KEP-6080, gate DRADerivedAttributes), in spec order."""

    @property
    def label(self) -> str:
        """How upstream messages name it: ``request <sub>`` prints the subrequest's own name."""
        return self.name.rpartition("/")[2]


@dataclass(frozen=True, slots=True)
class Request:
    """``DeviceRequest``: exactly one alternative for ``exactly``, several for ``firstAvailable``."""

    name: str
    alternatives: tuple[DeviceRequest, ...]
    first_available: bool


@dataclass(frozen=True, slots=True)
class Constraint:
    """``DeviceConstraint``: matchAttribute or distinctAttribute over ``requests`` (empty = all)."""

    requests: tuple[str, ...]
    match_attribute: str
    distinct_attribute: str

    def applies_to(self, request: DeviceRequest) -> bool:
        return not self.requests or request.parent in self.requests or request.name in self.requests


@dataclass(frozen=True, slots=True)
class Claim:
    """``ResourceClaim`` as the allocator needs it; ``key`` is ``namespace/name`` (upstream klog form)."""

    namespace: str
    name: str
    uid: str
    requests: tuple[Request, ...]
    constraints: tuple[Constraint, ...]
    config: tuple[Mapping[str, Any], ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


def _device_request(
    data: Mapping[str, Any], name: str, parent: str, at: FieldPath, *, sub: bool
) -> DeviceRequest:
    mode = read_str(data.get("allocationMode"), at / "allocationMode") or "ExactCount"
    capacity = read_mapping(data.get("capacity"), at / "capacity")
    admin = data.get("adminAccess")
    if admin is not None and not isinstance(admin, bool):
        raise (at / "adminAccess").error(f"must be a boolean, got {type(admin).__name__}")
    count = read_int(data.get("count"), at / "count", 1)
    if mode == "ExactCount" and count < 1:
        raise (at / "count").error("must be greater than zero")
    return DeviceRequest(
        name=name,
        parent=parent,
        class_name=read_str(data.get("deviceClassName"), at / "deviceClassName"),
        selectors=read_selectors(data.get("selectors"), at / "selectors"),
        mode=mode,
        count=count if mode == "ExactCount" else 0,
        admin_access=admin,
        tolerations=tuple(
            parse_toleration(t, at / "tolerations" / i)
            for i, t in enumerate(read_list(data.get("tolerations"), at / "tolerations"))
        ),
        capacity_requests={
            k: read_quantity(v, at / "capacity" / "requests" / k)
            for k, v in read_mapping(capacity.get("requests"), at / "capacity" / "requests").items()
        },
        is_subrequest=sub,
        derived_attributes=_derived_attributes(data.get("derivedAttributes"), at / "derivedAttributes"),
    )


_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def qualified_name_problem(name: str) -> str:
    """Why ``name`` is not a ``QualifiedName`` (``[domain/]id``: a DNS subdomain of at most 63 characters
    and a C identifier of at most 32), or "" when it is one."""
    domain, slash, ident = name.rpartition("/")
    if not _C_IDENTIFIER.fullmatch(ident) or len(ident) > 32:
        return f"{ident!r} must be a C identifier of at most 32 characters"
    if slash and (not _DNS_SUBDOMAIN.fullmatch(domain) or len(domain) > 63):
        return f"domain {domain!r} must be a DNS subdomain of at most 63 characters"
    return ""


def _derived_attributes(raw: Any, at: FieldPath) -> tuple[DerivedAttribute, ...]:
    entries = read_list(raw, at)
    if len(entries) > MAX_DERIVED_ATTRIBUTES:
        raise at.error(f"must have at most {MAX_DERIVED_ATTRIBUTES} entries, got {len(entries)}")
    result: list[DerivedAttribute] = []
    for i, entry in enumerate(entries):
        data = read_mapping(entry, at / i, required=True)
        name = read_str(data.get("name"), at / i / "name", required=True)
        problem = qualified_name_problem(name)
        if problem:
            raise (at / i / "name").error(problem)
        if any(d.name == name for d in result):
            raise (at / i / "name").error(f"duplicate derived attribute name {name}")
        expression = read_str(data.get("expression"), at / i / "expression", required=True)
        result.append(DerivedAttribute(name, expression))
    return tuple(result)


def _request(raw: Any, at: FieldPath) -> Request:
    data = read_mapping(raw, at, required=True)
    name = read_str(data.get("name"), at / "name", required=True)
    if data.get("deviceClassName") is not None:
        raise at.error("flat request fields belong under 'exactly' in resource.k8s.io/v1")
    exactly, first = data.get("exactly"), data.get("firstAvailable")
    if (exactly is None) == (first is None):
        raise at.error("exactly one of 'exactly' or 'firstAvailable' must be set")
    if exactly is not None:
        alternative = _device_request(
            read_mapping(exactly, at / "exactly"), name, name, at / "exactly", sub=False
        )
        return Request(name, (alternative,), first_available=False)
    subs = []
    for i, sub in enumerate(read_list(first, at / "firstAvailable")):
        sub_at = at / "firstAvailable" / i
        sub_data = read_mapping(sub, sub_at, required=True)
        sub_name = read_str(sub_data.get("name"), sub_at / "name", required=True)
        subs.append(_device_request(sub_data, f"{name}/{sub_name}", name, sub_at, sub=True))
    if not subs:
        raise (at / "firstAvailable").error("must have at least one subrequest")
    return Request(name, tuple(subs), first_available=True)


def parse_claim(obj: Mapping[str, Any], *, same_spec: Claim | None = None) -> Claim:
    """Convert a resource.k8s.io/v1 ResourceClaim dict (spec only). Raises InvalidInputError.

    ``same_spec``: a claim parsed from an equal spec (claims made from one template): its requests,
    constraints and config are taken as they are, and only this claim's identity is read."""
    namespace, name, claim_at = object_name("ResourceClaim", obj)
    uid = str((obj.get("metadata") or {}).get("uid") or "")
    if same_spec is not None:
        return replace(same_spec, namespace=namespace, name=name, uid=uid)
    at = claim_at / "spec"
    devices = read_mapping(read_mapping(obj.get("spec"), at).get("devices"), at / "devices")
    requests = tuple(
        _request(r, at / "devices" / "requests" / i)
        for i, r in enumerate(read_list(devices.get("requests"), at / "devices" / "requests"))
    )
    if len(requests) > MAX_REQUESTS_PER_CLAIM:
        raise (at / "devices" / "requests").error(f"must have at most {MAX_REQUESTS_PER_CLAIM} items")
    seen: set[str] = set()
    for i, request in enumerate(requests):
        if request.name in seen:
            raise (at / "devices" / "requests" / i / "name").error(f"duplicate request name {request.name}")
        seen.add(request.name)
    known = seen | {alt.name for request in requests for alt in request.alternatives}
    constraints = []
    for i, raw in enumerate(read_list(devices.get("constraints"), at / "devices" / "constraints")):
        c_at = at / "devices" / "constraints" / i
        data = read_mapping(raw, c_at, required=True)
        named = read_strings(data.get("requests"), c_at / "requests")
        for j, request_name in enumerate(named):
            if request_name not in known:
                raise (c_at / "requests" / j).error(
                    f"no request or subrequest named {request_name} in this claim"
                )
        constraints.append(
            Constraint(
                requests=named,
                match_attribute=read_str(data.get("matchAttribute"), c_at / "matchAttribute"),
                distinct_attribute=read_str(data.get("distinctAttribute"), c_at / "distinctAttribute"),
            )
        )
    return Claim(
        namespace=namespace,
        name=name,
        uid=uid,
        requests=requests,
        constraints=tuple(constraints),
        config=tuple(
            read_mapping(c, at / "devices" / "config" / i, required=True)
            for i, c in enumerate(read_list(devices.get("config"), at / "devices" / "config"))
        ),
    )
