"""The product's ``first-fit`` allocator on one oracle state, answered in the oracle's shape. The state's
namespaces are not consulted: like upstream's scheduler, the product decides a claim with admin access
whatever its namespace's label says (the API server's admission checks the label)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from allocator.cel.expr_engine import ExprEngine
from allocator.decide import FILTER_TIMEOUT
from allocator.deviceuse import allocated_devices
from allocator.errors import AllocatorError, NodeLocalError, SearchTimeoutError
from allocator.features import FeatureGates
from allocator.inventory import Inventory
from allocator.model import (
    Claim,
    parse_claim,
    parse_device_class,
    parse_device_taint_rule,
    parse_resource_slice,
)
from allocator.nodeselector import Node
from allocator.search import Allocator, Deadline
from allocator.selectors import SelectorCache

__all__ = ["Loaded", "allocate", "load"]

_ENGINE = ExprEngine()
_GATES = {f.name for f in fields(FeatureGates)}


def state_gates(state: dict[str, Any]) -> FeatureGates:
    """The state's feature gates, as the product's allocator takes them."""
    return FeatureGates(**{k: v for k, v in state["gates"].items() if k in _GATES})


@dataclass(frozen=True, slots=True)
class Loaded:
    """A state as the product's allocator sees it."""

    inventory: Inventory
    selectors: SelectorCache
    node: Node
    claims: list[Claim]


def load(state: dict[str, Any]) -> Loaded:
    """The state's objects parsed into an inventory (raises AllocatorError for what the product refuses)."""
    gates = state_gates(state)
    selectors = SelectorCache(_ENGINE)
    inventory = Inventory(gates, selectors)
    for obj in state["classes"]:
        inventory.upsert_class(parse_device_class(obj))
    for obj in state["slices"]:
        inventory.upsert_slice(parse_resource_slice(obj))
    for obj in state["taintRules"]:
        inventory.upsert_taint_rule(parse_device_taint_rule(obj))
    for i, allocation in enumerate(state["allocated"]):
        inventory.set_allocation(f"default/allocated-{i}", allocated_devices(allocation, "allocated"))
    claims = [parse_claim(obj) for obj in state["claims"]]
    meta = state["node"]["metadata"]
    declared = (state["node"].get("status") or {}).get("declaredFeatures") or ()
    node = Node(meta["name"], meta.get("labels") or {}, frozenset(declared))
    return Loaded(inventory, selectors, node, claims)


def allocate(state: dict[str, Any]) -> dict[str, Any]:
    """``{"kind": "results" | "nofit" | "nodelocal" | "error" | "timeout", ...}`` like the oracle's answer
    ("timeout": the search still ran after the oracle's 10 s filter timeout); an error answer carries the
    exception class name as ``class``."""
    try:
        loaded = load(state)
        search = Allocator(loaded.inventory, loaded.selectors, Deadline(FILTER_TIMEOUT))
        results = search.allocate(loaded.node, loaded.claims)
    except SearchTimeoutError as e:
        return {"kind": "timeout", "error": str(e)}
    except NodeLocalError as e:
        return {"kind": "nodelocal", "error": str(e)}
    except AllocatorError as e:
        return {"kind": "error", "error": str(e), "class": type(e).__name__}
    if results is None:
        return {"kind": "nofit"}
    return {"kind": "results", "results": results}
