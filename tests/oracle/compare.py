"""What must agree between the product and the oracle, as comparable values.

Compared (issue 12): the outcome kind; per claim the results in order (request, device, adminAccess,
tolerations, consumedCapacity, shareID present, binding conditions, skipNodeOperations) and the
nodeSelector; for fatal errors the error class. Not compared: share IDs themselves (random UUIDs), error
wording.
"""

from __future__ import annotations

import json
from typing import Any

from allocator.quantity import parse_quantity

__all__ = ["error_class", "outcome"]

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
            for allocation in answer["results"]
        ),
    )
