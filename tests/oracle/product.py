"""The product's ``first-fit`` allocator on one oracle state, answered in the oracle's shape, after the
scheduling layer's check of the claims' namespace for admin access."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields
from typing import Any

from allocator.cel.expr_engine import ExprEngine
from allocator.errors import AllocatorError, NodeLocalError, SearchLimitError
from allocator.features import FeatureGates
from allocator.inventory import Inventory, allocated_devices
from allocator.model import (
    parse_claim,
    parse_device_class,
    parse_device_taint_rule,
    parse_resource_slice,
)
from allocator.nodeselector import Node
from allocator.search import Allocator
from allocator.selectors import SelectorCache
from app.scheduling.claimrules import check_admin_access

__all__ = ["allocate"]

_ENGINE = ExprEngine()
_GATES = {f.name for f in fields(FeatureGates)}


class _Namespaces:
    """The state's Namespaces, looked up as the scheduling layer's check of the admin-access label does."""

    def __init__(self, objects: Iterable[dict[str, Any]]) -> None:
        self._by_name = {o["metadata"]["name"]: o for o in objects}

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        return self._by_name.get(name) if kind == "Namespace" else None


def state_gates(state: dict[str, Any]) -> FeatureGates:
    """The state's feature gates, as the product's allocator takes them."""
    return FeatureGates(**{k: v for k, v in state["gates"].items() if k in _GATES})


def allocate(state: dict[str, Any]) -> dict[str, Any]:
    """``{"kind": "results" | "nofit" | "nodelocal" | "error" | "limit", ...}`` like the oracle's answer
    ("limit": the search ran out of steps, which the oracle never does); an error answer carries the
    exception class name as ``class``."""
    gates = state_gates(state)
    selectors = SelectorCache(_ENGINE)
    inventory = Inventory(gates, selectors)
    try:
        for obj in state["classes"]:
            inventory.upsert_class(parse_device_class(obj))
        for obj in state["slices"]:
            inventory.upsert_slice(parse_resource_slice(obj))
        for obj in state["taintRules"]:
            inventory.upsert_taint_rule(parse_device_taint_rule(obj))
        for i, allocation in enumerate(state["allocated"]):
            inventory.set_allocation(f"default/allocated-{i}", allocated_devices(allocation, "allocated"))
        claims = [parse_claim(obj) for obj in state["claims"]]
        namespaces = _Namespaces(state.get("namespaces") or ())
        for claim in claims:
            check_admin_access(namespaces, claim)  # type: ignore[arg-type]  # the one lookup it makes
        meta = state["node"]["metadata"]
        declared = (state["node"].get("status") or {}).get("declaredFeatures") or ()
        node = Node(meta["name"], meta.get("labels") or {}, frozenset(declared))
        results = Allocator(inventory, selectors).allocate(node, claims)
    except SearchLimitError as e:
        return {"kind": "limit", "error": str(e)}
    except NodeLocalError as e:
        return {"kind": "nodelocal", "error": str(e)}
    except AllocatorError as e:
        return {"kind": "error", "error": str(e), "class": type(e).__name__}
    if results is None:
        return {"kind": "nofit"}
    return {"kind": "results", "results": results}
