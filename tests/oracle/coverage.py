"""Which features a generated state exercises (the coverage table of ``make oracle``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from tests.oracle.states import (
    ABOVE_MAX_INT64,
    ADMIN_ACCESS_LABEL,
    CEL_LIBRARY,
    EXPERIMENTAL_GATES,
    GATES,
    MAX_INT64,
    STABLE_GATES,
)

__all__ = ["EXPECTED", "features", "implementation"]

_SELECTOR_PARTS = {
    "selector: driver": "device.driver",
    "selector: quantity": "quantity(",
    "selector: semver": "semver(",
    "selector: string functions": ("startsWith(", "lowerAscii("),
    "selector: exists/all": (".exists(", ".all("),
    "selector: key test (in)": '" in device.',
    "selector: negation": "!(",
}
_LIBRARY_PARTS = {
    "ip/cidr": ("ip(", "cidr(", "isIP("),
    "url": ("url(", "isURL("),
    "format": ("format.",),
    "k8s lists": (".isSorted()", ".sum()", ".min()", ".indexOf("),
    "ext lists": (
        "lists.range",
        ".sort()",
        ".sortBy(",
        ".slice(",
        ".flatten()",
        ".distinct()",
        "].reverse()",
    ),
    "sets": ("sets.",),
    "ext strings": (".charAt(", ".split(", ".trim()", ".format(", "strings.quote", ".join(", '".reverse()'),
    "regex": (".matches(", ".find("),
    "quantity": ("quantity(",),
    "semver": ("semver(",),
    "two-variable comprehensions": ("(i, v,", "(k, v,"),
    "type checking": ('[1, "a"]', "1 < 1.5", "1u < 2", "type("),
}
"""How each library family of ``CEL_LIBRARY`` shows in an expression."""
assert set(_LIBRARY_PARTS) == set(CEL_LIBRARY)

_NODE_FIELDS = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
_DEVICE_FIELDS = {
    "taints": "device taints",
    "consumesCounters": "consumes counters",
    "allowMultipleAllocations": "allowMultipleAllocations",
    "bindingConditions": "binding conditions",
    "bindsToNode": "bindsToNode",
}
_REQUEST_FIELDS = {
    "adminAccess": "adminAccess",
    "tolerations": "tolerations",
    "capacity": "capacity requests",
}


def _present(obj: dict[str, Any], fields: dict[str, str]) -> Iterator[str]:
    """The feature names of the fields ``obj`` sets."""
    return (name for key, name in fields.items() if obj.get(key))


def _slice_features(slices: list[dict[str, Any]]) -> Iterator[str]:
    pools = Counter((s["spec"]["driver"], s["spec"]["pool"]["name"]) for s in slices)
    if any(n > 1 for n in pools.values()):
        yield "multi-slice pool"
    for s in slices:
        spec = s["spec"]
        yield from (f"slice {f}" for f in _NODE_FIELDS if spec.get(f))
        if spec.get("sharedCounters"):
            yield "shared counters"
            if len(spec["sharedCounters"]) > 1:
                yield "shared counters (several sets)"
        if spec.get("skipNodeOperations"):
            yield "skipNodeOperations"
        if spec["pool"]["generation"] > 1:
            yield "pool generation > 1"
        if spec["pool"]["resourceSliceCount"] > pools[(spec["driver"], spec["pool"]["name"])]:
            yield "incomplete pool"
        for device in spec.get("devices", ()):
            yield from _device_features(device)


def _device_features(device: dict[str, Any]) -> Iterator[str]:
    for value in device.get("attributes", {}).values():
        yield f"attribute {next(iter(value))}"
    for capacity in device.get("capacity", {}).values():
        yield "capacity"
        if capacity["value"] == MAX_INT64:
            yield "capacity MaxInt64"
        policy = capacity.get("requestPolicy", {})
        for kind in ("validValues", "validRange"):
            if kind in policy:
                yield f"requestPolicy {kind}"
        if any("." in v or v.endswith("m") for v in (policy.get("validRange") or {}).values()):
            yield "requestPolicy fractional validRange"
    yield from _present(device, _DEVICE_FIELDS)
    if any(c.get("compatibilityGroups") for c in device.get("consumesCounters", ())):
        yield "compatibility groups"


_EXTREME_REQUESTS = {"-5": "negative", ABOVE_MAX_INT64: "above MaxInt64", MAX_INT64: "MaxInt64"}


def _request_features(body: dict[str, Any]) -> Iterator[str]:
    mode = body["allocationMode"]
    yield mode
    if mode == "ExactCount" and body["count"] > 3:
        yield "count > 3" if body["count"] <= 32 else "count > 32"
    yield from _present(body, _REQUEST_FIELDS)
    for value in ((body.get("capacity") or {}).get("requests") or {}).values():
        if value in _EXTREME_REQUESTS:
            yield f"capacity request {_EXTREME_REQUESTS[value]}"
    derived = body.get("derivedAttributes") or ()
    if derived:
        yield "derived attributes" + (" (9-32)" if len(derived) > 8 else "")
        if any(not d["name"].startswith("derived/") for d in derived):
            yield "derived attribute shadows a driver attribute"
        if any(d["expression"].startswith("device.attributes") for d in derived):
            yield "derived attribute may fail at run time"


def _claim_features(claim: dict[str, Any]) -> Iterator[str]:
    devices = claim["spec"]["devices"]
    for request in devices["requests"]:
        if "firstAvailable" in request:
            subs = request["firstAvailable"]
            yield "firstAvailable" + (" (several subrequests)" if len(subs) > 1 else "")
            for sub in subs:
                yield from _request_features(sub)
        else:
            yield from _request_features(request["exactly"])
    for constraint in devices.get("constraints", ()):
        yield from (k for k in ("matchAttribute", "distinctAttribute") if k in constraint)


EXPECTED = (
    "allocator stable",
    "allocator incubating",
    "allocator experimental",
    "bindsToNode (stable)",
    "bindsToNode (incubating)",
    "bindsToNode (experimental)",
    "adminAccess, namespace labelled",
    "adminAccess, namespace not labelled",
    "capacity request negative",
    "capacity request above MaxInt64",
    "capacity request MaxInt64",
    "capacity MaxInt64",
    "requestPolicy validRange",
    "requestPolicy validValues",
    "requestPolicy fractional validRange",
    "derived attributes",
    "derived attributes (9-32)",
    "derived attribute shadows a driver attribute",
    "derived attribute may fail at run time",
    "compatibility groups",
    "skipNodeOperations",
    "node declares DRAOptionalNodeOperations",
    *(f"selector library: {family}" for family in _LIBRARY_PARTS),
)
"""What every run should cover (issue 36): the table shows these even at 0 states, marked."""


def implementation(gates: dict[str, bool]) -> str:
    """The upstream implementation NewAllocator picks for ``gates`` (v0.37.2 structured/allocator.go: the
    first of stable, incubating, experimental whose supported features cover the enabled ones)."""
    enabled = {g for g, on in gates.items() if on} - {"DRADeviceTaintRules"}
    binding = {"DRADeviceBindingConditions", "DRAResourceClaimDeviceStatus"}
    if not binding <= enabled:
        enabled -= binding  # the allocator's DeviceBindingAndStatus needs both
    if enabled <= set(STABLE_GATES):
        return "stable"
    return "experimental" if enabled & set(EXPERIMENTAL_GATES) else "incubating"


def _admin_access(state: dict[str, Any]) -> Iterator[str]:
    labelled = {
        n["metadata"]["name"]
        for n in state.get("namespaces", ())
        if (n["metadata"].get("labels") or {}).get(ADMIN_ACCESS_LABEL) == "true"
    }
    for claim in state["claims"]:
        for request in claim["spec"]["devices"]["requests"]:
            if (request.get("exactly") or {}).get("adminAccess"):
                where = "labelled" if claim["metadata"]["namespace"] in labelled else "not labelled"
                yield f"adminAccess, namespace {where}"


def features(state: dict[str, Any]) -> set[str]:
    """Names of the features ``state`` uses, gates turned off included (of those the generator draws)."""
    found = {f"gate {g} off" for g in GATES if not state["gates"][g]}
    allocator = implementation(state["gates"])
    found.add(f"allocator {allocator}")
    found |= set(_slice_features(state["slices"]))
    if "bindsToNode" in found:
        found.add(f"bindsToNode ({allocator})")
    found |= set(_admin_access(state))
    for claim in state["claims"]:
        found |= set(_claim_features(claim))
    if (state["node"].get("status") or {}).get("declaredFeatures"):
        found.add("node declares DRAOptionalNodeOperations")
    if len(state["claims"]) > 1:
        found.add("several claims")
    expressions = [
        s["cel"]["expression"]
        for obj in (
            *state["classes"],
            *(r.get("exactly", {}) for c in state["claims"] for r in c["spec"]["devices"]["requests"]),
        )
        for s in (obj.get("spec", obj).get("selectors") or ())
    ]
    for name, parts in _SELECTOR_PARTS.items():
        needles = (parts,) if isinstance(parts, str) else parts
        if any(n in e for e in expressions for n in needles):
            found.add(name)
    for family, needles in _LIBRARY_PARTS.items():
        if any(n in e for e in expressions for n in needles):
            found.add(f"selector library: {family}")
    for rule in state["taintRules"]:
        selector = rule["spec"].get("deviceSelector")
        found.add(
            "taint rule: selector omitted"
            if selector is None
            else "taint rule: empty selector"
            if not selector
            else "taint rule: scoped selector"
        )
    for allocation in state["allocated"]:
        found.add("devices allocated to others")
        for result in allocation["devices"]["results"]:
            if result.get("shareID"):
                found.add("shares already consumed")
            if result.get("adminAccess"):
                found.add("allocated with adminAccess")
    return found
