"""What must agree between the product and the oracle, as comparable values.

Compared (issue 12): the outcome kind; per claim the results in order (request, device, adminAccess,
tolerations, consumedCapacity, shareID present, binding conditions, skipNodeOperations) and the
nodeSelector; for fatal errors the error class. Not compared: share IDs themselves (random UUIDs), error
wording. An upstream search still running at kube-scheduler's 10 s filter timeout gives no answer to
compare with (how far it gets depends on the machine): the product agrees by not placing the claims
either, whether its search ends as no fit or times out too; a fit there stays a disagreement.
"""

from __future__ import annotations

import json
from typing import Any

from allocator.quantity import parse_quantity
from tests.oracle.client import Oracle
from tests.oracle.product import state_gates

__all__ = ["agrees", "error_class", "outcome", "product_listing"]

STABLE_RETRIES = 32
"""Answers asked of upstream's stable allocator before a different first fit counts as a disagreement."""

# Upstream error text -> class, first match wins; the product's exception classes map to the same names.
_UPSTREAM_CLASSES = (
    ("CEL", "cel"),
    ("evaluate derived attribute", "cel"),  # a CEL runtime error in a derivedAttributes expression
    ("feature is disabled", "feature"),
    ("constraint would not be satisfied", "constraint"),
)
_PRODUCT_CLASSES = {
    "CELError": "cel",
    "CELCompileError": "cel",
    "CELEvalError": "cel",
    "FeatureDisabledError": "feature",
    "ClaimConstraintError": "constraint",
}


def error_class(answer: dict[str, Any]) -> str:
    """The agreed class of a fatal error: cel, feature, constraint or input."""
    if "class" in answer:
        return _PRODUCT_CLASSES.get(answer["class"], "input")
    return next((name for text, name in _UPSTREAM_CLASSES if text in answer["error"]), "input")


def _pruned(value: Any) -> Any:
    """Without empty fields: Go omits them, the product may write them out (or the other way round)."""
    if isinstance(value, dict):
        pruned = {k: _pruned(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v not in (None, "", [], {}, False)}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def _toleration(raw: dict[str, Any]) -> dict[str, Any]:
    # The API defaults operator to Equal; either side may show it or not.
    return _pruned({**raw, "operator": raw.get("operator") or "Equal"})


def _result(entry: dict[str, Any]) -> tuple[Any, ...]:
    return (
        entry["request"],
        entry["driver"],
        entry["pool"],
        entry["device"],
        bool(entry.get("adminAccess")),
        tuple(json.dumps(_toleration(t), sort_keys=True) for t in entry.get("tolerations") or ()),
        tuple(sorted((k, parse_quantity(v).value) for k, v in (entry.get("consumedCapacity") or {}).items())),
        bool(entry.get("shareID")),
        tuple(entry.get("bindingConditions") or ()),
        tuple(entry.get("bindingFailureConditions") or ()),
        tuple(entry.get("skipNodeOperations") or ()),
    )


def outcome(answer: dict[str, Any]) -> tuple[Any, ...]:
    """The comparable part of an answer (the product's or the oracle's)."""
    kind = answer["kind"]
    if kind == "error":
        return (kind, error_class(answer))
    if kind != "results":
        return (kind,)
    return (
        kind,
        tuple(
            (
                tuple(_result(r) for r in allocation["devices"]["results"]),
                str(_pruned(allocation.get("nodeSelector"))),
            )
            for allocation in answer.get("results") or ()  # Go leaves out an empty list (no claims)
        ),
    )


def product_listing(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with its ResourceSlices listed pool by pool in (driver, pool) order, by name within a pool:
    the order in which the product tries pools and devices under the stable allocator.

    kube-scheduler hands the allocator the slices in the order of a client-go store's List, a range over a
    Go map (k8s.io/client-go v0.37.2 tools/cache/thread_safe_store.go ``threadSafeMap.List``, behind
    dra_manager.go ``ListWithDeviceTaintRules``), so a cluster may list them in any order, this one
    included. The oracle keeps the state's order, and from one listing Go's map iteration over the pools
    (stable GatherPools) gives only some orders: for a few pools, rotations of the order in which the listing
    first names them. The name order need not be one of those (listed b, a, c: never a, b, c)."""
    slices = sorted(
        state["slices"],
        key=lambda s: (s["spec"]["driver"], s["spec"]["pool"]["name"], s["metadata"]["name"]),
    )
    return {**state, "slices": slices}


def agrees(oracle: Oracle, state: dict[str, Any], expected: dict[str, Any], actual: dict[str, Any]) -> bool:
    """Whether ``actual`` is an answer upstream gives for ``state`` (``expected``: its first answer).

    Upstream's stable allocator (chosen when no gate beyond its four is on) tries pools in Go map order
    (v0.37.2 structured/internal/stable/pools_stable.go: GatherPools ranges over a map and never sorts;
    within a pool it keeps the listing's slice order), so its first fit depends on the slices' listing
    order and changes from call to call. The product tries pools in (driver, pool) order and a pool's
    slices by name, as the incubating and experimental allocators do (pools_incubating.go sortPoolsByID,
    sortSlicesByName): for such states upstream is asked again, with the slices listed in that order
    (``product_listing``), until it gives the product's answer. From that listing, n <= 8 pools share
    one 8-slot map group and Go's iteration starts at the first of them with a chance of (9 - n) / 8 per
    call: for the generator's at most 3 pools, ``STABLE_RETRIES`` calls all missing it is below 1e-19."""
    if outcome(actual) == outcome(expected):
        return True
    if expected["kind"] == "timeout":
        return actual["kind"] in ("nofit", "timeout")
    if not state_gates(state).stable_allocator or len(state["slices"]) < 2:
        return False
    listed = product_listing(state)
    return any(outcome(oracle.ask(listed)) == outcome(actual) for _ in range(STABLE_RETRIES))
