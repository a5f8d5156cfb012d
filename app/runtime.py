"""Startup: a state directory → the cluster state → the scheduling service.

``build_runtime(path, gates)`` runs ``load_state`` (``app.statedir``), ``generate_template_claims``
(``app.claimgen``, what the resourceclaim controller would have created), then feeds the objects to
``ClusterState`` in dependency order (Nodes, DeviceClasses, DeviceTaintRules, ResourceSlices,
ResourceClaimTemplates, ResourceClaims, Pods: the things a claim refers to exist before it) and wraps the
state in a ``SchedulingService`` with the chosen CEL engine (``new_engine``: cel-expr-python by default).

The inventory evaluates DeviceClass selectors as objects arrive (its class-match index uses the service's
``SelectorCache``). With ``config`` (``app.derivedconfig``) the cluster-wide derived attributes are
installed before the first slice arrives, so every device is derived once; ``Runtime.problems`` lists the
devices where one failed, and ``Runtime.watcher`` reloads the file when it changes (``serve`` starts it).

Errors: ``StartupError`` with one line naming the problem: ``<file>: <Kind> <ns/name>: <field>:
<problem>``, from the loader or from the DRA object parsers (``allocator.errors.InvalidInputError``), or
``<config file>: <field>: <problem>`` for the config file.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from allocator.cel import CELEngine
from allocator.cel.expr_engine import ExprEngine
from allocator.errors import InvalidInputError
from allocator.features import FeatureGates
from allocator.selectors import SelectorCache
from app.claimgen import generate_template_claims
from app.cluster import ClusterState
from app.derivedconfig import ConfigError, ConfigWatcher, ExtenderConfig, install, load_config
from app.scheduling import SchedulingService
from app.statedir import ClusterObjects, StateLoadError, load_state

__all__ = [
    "LOAD_ORDER",
    "Runtime",
    "StartupError",
    "build_runtime",
    "install_config",
    "new_engine",
    "state_summary",
    "watch_config",
]

log = logging.getLogger(__name__)

LOAD_ORDER = (
    "Namespace",
    "Node",
    "DeviceClass",
    "DeviceTaintRule",
    "ResourceSlice",
    "ResourceClaimTemplate",
    "ResourceClaim",
    "PodGroup",
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
    problems: list[str] = field(default_factory=list)
    """Cluster-wide derived attributes that failed on devices, one line per attribute with the count
    (``<config>: derived attribute ...: failed on N devices, e.g. ...``), to print at startup; the
    attribute is absent on those devices until the config or the device changes."""
    watcher: ConfigWatcher | None = None
    """Reloads the config file when it changes (None without ``config``); ``serve`` starts it."""


def _ordered(objects: ClusterObjects) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for kind in LOAD_ORDER:
        for obj in objects.of_kind(kind):
            yield kind, obj


def _source(objects: ClusterObjects, kind: str, obj: Mapping[str, Any]) -> str:
    source = objects.source_of(kind, obj)
    return str(source) if source else "(generated)"


def new_engine(name: str = "cel-expr") -> CELEngine:
    """The CEL engine called ``name`` (``app.settings.CEL_ENGINES``). Raises ValueError for another name."""
    if name == "cel-expr":
        return ExprEngine()
    if name == "cel-python":
        from allocator.cel.celpy_engine import CelpyEngine

        return CelpyEngine()
    raise ValueError(f"unknown CEL engine {name!r} (cel-expr or cel-python)")


def watch_config(config: Path, service: SchedulingService) -> ConfigWatcher:
    """A watcher that installs a changed config under the service lock and logs its device errors (for any
    runtime serving ``service``; call ``start()`` on it)."""

    def apply(new: ExtenderConfig) -> None:
        with service.lock:
            problems = install(new, service.state.inventory, service.selectors)
        for problem in problems:
            log.error("config %s: %s", config, problem)

    return ConfigWatcher(config, apply)


def install_config(config: Path, state: ClusterState, selectors: SelectorCache) -> list[str]:
    """Load the config file and install its cluster-wide derived attributes on ``state``'s inventory;
    returns the devices where one failed. Raises StartupError for an unusable config file."""
    try:
        return install(load_config(config), state.inventory, selectors)
    except ConfigError as e:
        raise StartupError(str(e)) from e


def build_runtime(
    path: Path,
    gates: FeatureGates | None = None,
    *,
    strict: bool = True,
    cel_engine: str = "cel-expr",
    config: Path | None = None,
) -> Runtime:
    """Load ``path`` (a directory or one manifest file) and build the service with the ``cel_engine``
    engine and the config file ``config`` (if any). Raises StartupError."""
    selectors = SelectorCache(new_engine(cel_engine))
    state = ClusterState(gates)
    state.inventory.attach_selectors(selectors)
    if config is not None:
        install_config(config, state, selectors)
    try:
        objects = load_state(Path(path), strict=strict)
    except StateLoadError as e:
        raise StartupError(str(e)) from e
    notes = list(objects.warnings)
    notes.extend(generate_template_claims(objects, workload_claims=state.gates.workload_claims))
    for kind, obj in _ordered(objects):
        try:
            state.apply(kind, obj)
        except InvalidInputError as e:
            raise StartupError(f"{_source(objects, kind, obj)}: {e}") from e
    service = SchedulingService(state, selectors)
    runtime = Runtime(Path(path), state, service, notes)
    if config is not None:
        runtime.problems = [f"{config}: {problem}" for problem in state.inventory.derivation_summary()]
        runtime.watcher = watch_config(Path(config), service)
    return runtime


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
