"""Startup: a state directory → the cluster state → the scheduling service.

``build_runtime(path, gates)`` runs ``load_state`` (``app.statedir``), ``generate_template_claims``
(``app.claimgen``, what the resourceclaim controller would have created), then feeds the objects to
``ClusterState`` in dependency order (Nodes, DeviceClasses, DeviceTaintRules, ResourceSlices,
ResourceClaimTemplates, ResourceClaims, Pods: the things a claim refers to exist before it) and wraps the
state in a ``SchedulingService`` with the cel-expr-python engine.

Errors: ``StartupError`` with one line naming the problem: ``<file>: <Kind> <ns/name>: <field>:
<problem>``, from the loader or from the DRA object parsers (``allocator.errors.InvalidInputError``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from allocator.cel.expr_engine import ExprEngine
from allocator.errors import InvalidInputError
from allocator.features import FeatureGates
from allocator.selectors import SelectorCache
from app.claimgen import generate_template_claims
from app.cluster import ClusterState
from app.scheduling import SchedulingService
from app.statedir import NAMESPACED_KINDS, ClusterObjects, StateLoadError, load_state

__all__ = ["LOAD_ORDER", "Runtime", "StartupError", "build_runtime", "state_summary"]

LOAD_ORDER = (
    "Namespace",
    "Node",
    "DeviceClass",
    "DeviceTaintRule",
    "ResourceSlice",
    "ResourceClaimTemplate",
    "ResourceClaim",
    "Pod",
)
"""Kinds in the order they are applied to the ``ClusterState``."""


class StartupError(Exception):
    """The state cannot be used: unreadable or invalid files, or a DRA object that does not parse."""


@dataclass(slots=True)
class Runtime:
    """What ``serve`` and ``simulate`` run on. ``notes``: loader warnings and generated-claim notes."""

    state_dir: Path
    state: ClusterState
    service: SchedulingService
    notes: list[str] = field(default_factory=list)


def _ordered(objects: ClusterObjects) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for kind in LOAD_ORDER:
        for obj in objects.of_kind(kind):
            yield kind, obj


def _source(objects: ClusterObjects, kind: str, obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace", "") if kind in NAMESPACED_KINDS else ""
    source = objects.sources.get((kind, namespace, meta.get("name")))
    return str(source) if source else "(generated)"


def build_runtime(path: Path, gates: FeatureGates | None = None, *, strict: bool = True) -> Runtime:
    """Load ``path`` (a directory or one manifest file) and build the service. Raises StartupError."""
    try:
        objects = load_state(Path(path), strict=strict)
    except StateLoadError as e:
        raise StartupError(str(e)) from e
    notes = list(objects.warnings)
    notes.extend(generate_template_claims(objects))
    state = ClusterState(gates)
    for kind, obj in _ordered(objects):
        try:
            state.apply(kind, obj)
        except InvalidInputError as e:
            raise StartupError(f"{_source(objects, kind, obj)}: {e}") from e
    return Runtime(Path(path), state, SchedulingService(state, SelectorCache(ExprEngine())), notes)


def state_summary(state: ClusterState) -> dict[str, int]:
    """Counts for the startup banner: nodes, ResourceSlices, devices in them, claims, pending pods."""
    slices = state.objects["ResourceSlice"].values()
    return {
        "nodes": len(state.objects["Node"]),
        "resource_slices": len(slices),
        "devices": sum(len((s.get("spec") or {}).get("devices") or ()) for s in slices),
        "resource_claims": len(state.objects["ResourceClaim"]),
        "pending_pods": len(state.pending_pods()),
    }
