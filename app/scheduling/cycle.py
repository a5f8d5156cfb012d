"""What one pod's scheduling cycle carries from PreFilter to Filter, Score and Reserve.

kube-scheduler's DynamicResources plugin keeps one ``stateData`` per cycle: PreFilter resolves the pod's
claims once and every later step reads them from there. ``CycleState`` is that here: made by the claims
gate (``app.scheduling.claimsgate``), read by the node decider (``app.scheduling.nodedecider``) and by
Reserve (``app.scheduling.binding``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from allocator.model import Claim
from allocator.nodeselector import Node
from app.scheduling.decisions import PodView
from app.scheduling.extended import PodExtendedResources
from app.state.cluster import ClusterState, node_from_api
from app.state.podclaims import PodClaim

__all__ = ["CycleState", "node_object", "scheduling_node"]

Obj = Mapping[str, Any]


@dataclass(slots=True)
class CycleState:
    """One pod's claims as PreFilter resolved them, and the per-pod inputs that keep its decisions private.

    Decisions are shared with other pods of the claims shape (``view.shared``) only when they depend on
    nothing but the pending claims and the state's nodes: no ``allocated`` claims, no ``extended``
    resources, no ``nodes`` sent by kube-scheduler."""

    pod: Obj
    view: PodView
    """The pod's view of the decisions; the decision cache's kept one once Filter adopted it."""
    pending: list[Claim]
    """The claims to allocate together, parsed, in the pod's order."""
    allocated: list[PodClaim] = field(default_factory=list)
    """Claims allocated already: their ``nodeSelector`` must admit the node."""
    extended: PodExtendedResources | None = None
    """The pod's extended resources backed by DRA (a claim per node is made for them)."""
    nodes: Mapping[str, Obj] | None = None
    """Node objects as kube-scheduler sent them, by name (None: the state's)."""
    refusals: list[str] = field(default_factory=list)
    """Why the API server would refuse writing the pending claims' allocations (admin access): added to
    the reasons of nodes that do not fit."""
    beside: frozenset[str] = frozenset()
    """Claims of the pod other pods' binds are writing right now, left out of ``pending`` and
    ``allocated``: each will be allocated on its bind's node, and only that node can pass."""
    elsewhere: dict[str, str] = field(default_factory=dict)
    """The nodes asked that are not the node of a bind in ``beside``: they fail, with the reason."""

    @property
    def uid(self) -> str:
        return self.view.uid

    @property
    def shared(self) -> bool:
        return self.view.shared


def scheduling_node(state: ClusterState, name: str, nodes: Mapping[str, Obj] | None) -> Node | None:
    """Node ``name`` for the allocator: as kube-scheduler sent it, else the state's (None: unknown)."""
    if nodes and name in nodes:
        return node_from_api(nodes[name])
    return state.node(name)


def node_object(state: ClusterState, name: str, nodes: Mapping[str, Obj] | None) -> Obj | None:
    """The core/v1 Node dict (for ``status.allocatable``): as kube-scheduler sent it, else the state's."""
    if nodes and name in nodes:
        return nodes[name]
    return state.get("Node", name)
