"""Startup: a state directory → the cluster state → the scheduling service.

``build_runtime(path, gates)`` runs ``load_state`` (``app.state.statedir``), ``generate_template_claims``
(``app.state.claimgen``, what the resourceclaim controller would have created), then feeds the objects to
``ClusterState`` in dependency order (Nodes, DeviceClasses, DeviceTaintRules, ResourceSlices,
ResourceClaimTemplates, ResourceClaims, Pods: the things a claim refers to exist before it) and wraps the
state in a ``SchedulingService`` with the chosen CEL engine (``new_engine``: cel-expr-python by default).

The inventory evaluates DeviceClass selectors as objects arrive (its class-match index uses the service's
``SelectorCache``). With ``config`` (``app.config.derivedconfig``) the cluster-wide derived attributes are
installed before the first slice arrives, so every device is derived once; ``Runtime.problems`` lists the
devices where one failed, and ``Runtime.watcher`` reloads the file when it changes (``serve`` starts it).

``Runtime.warnings`` lists what to show at startup without stopping: unknown fields
(``app.state.knownfields``),
DeviceClass CEL selectors that do not compile (file, class, field path, compile error; both errors with
``strict_fields``), and a state with no object the extender uses (a wrong or empty directory).

Errors: ``StartupError`` with one line naming the problem: ``<file>: <Kind> <ns/name>: <field>:
<problem>``, from the loader or from the DRA object parsers (``allocator.errors.InvalidInputError``), or
``<config file>: <field>: <problem>`` for the config file.
"""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from allocator.cel import CELEngine
from allocator.cel.expr_engine import ExprEngine
from allocator.errors import CELCompileError, InvalidInputError
from allocator.features import FeatureGates
from allocator.selectors import SelectorCache
from app.config.derivedconfig import ConfigError, ConfigWatcher, ExtenderConfig, install, load_config
from app.config.settings import SchedulingSettings, Settings
from app.scheduling.service import SchedulingService
from app.state.claimgen import generate_template_claims
from app.state.cluster import ClusterState
from app.state.statedir import ClusterObjects, StateLoadError, load_state

__all__ = [
    "EXIT_OK",
    "EXIT_USAGE",
    "LOAD_ORDER",
    "Runtime",
    "StartupError",
    "apply_policies",
    "build_runtime",
    "install_config",
    "load_runtime",
    "new_engine",
    "print_limited",
    "runtime_from_objects",
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
    warnings: list[str] = field(default_factory=list)
    """To print at startup: unknown fields in the objects, DeviceClass selectors that do not compile, a
    state without any object the extender uses."""


def _ordered(objects: ClusterObjects) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for kind in LOAD_ORDER:
        for obj in objects.of_kind(kind):
            yield kind, obj


def _source(objects: ClusterObjects, kind: str, obj: Mapping[str, Any]) -> str:
    source = objects.source_of(kind, obj)
    return str(source) if source else "(generated)"


def new_engine(name: str = "cel-expr") -> CELEngine:
    """The CEL engine called ``name`` (``app.config.settings.CEL_ENGINES``). Raises ValueError for another
    name."""
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
    strict_fields: bool = False,
    cel_engine: str = "cel-expr",
    config: Path | None = None,
) -> Runtime:
    """Load ``path`` (a directory or one manifest file) and build the service with the ``cel_engine``
    engine and the config file ``config`` (if any). ``strict_fields``: unknown fields and DeviceClass
    selectors that do not compile are errors, not warnings. Raises StartupError (also for a ``path`` that
    does not exist)."""
    try:
        objects = load_state(Path(path), strict=strict, strict_fields=strict_fields)
    except StateLoadError as e:
        raise StartupError(str(e)) from e
    runtime = runtime_from_objects(
        objects, Path(path), gates, strict_fields=strict_fields, cel_engine=cel_engine, config=config
    )
    if objects.count() == 0:
        found = f"{objects.files} manifest file(s), none with a" if objects.files else "no manifest files, no"
        runtime.warnings.append(
            f"{path}: {found} Node, Pod or DRA object (resource.k8s.io): is this the state directory?"
        )
    return runtime


def runtime_from_objects(
    objects: ClusterObjects,
    source: Path,
    gates: FeatureGates | None = None,
    *,
    strict_fields: bool = False,
    cel_engine: str = "cel-expr",
    config: Path | None = None,
) -> Runtime:
    """The runtime of loaded objects (a state directory, or a cluster snapshot: ``app.snapshot``);
    ``source`` names where they came from. Raises StartupError."""
    selectors = SelectorCache(new_engine(cel_engine))
    state = ClusterState(gates)
    state.inventory.attach_selectors(selectors)
    if config is not None:
        install_config(config, state, selectors)
    notes = list(objects.warnings)
    notes.extend(generate_template_claims(objects, workload_claims=state.gates.workload_claims))
    for kind, obj in _ordered(objects):
        try:
            state.apply(kind, obj)
        except InvalidInputError as e:
            raise StartupError(f"{_source(objects, kind, obj)}: {e}") from e
    cel_problems = _class_selector_problems(objects, selectors)
    if strict_fields and cel_problems:
        raise StartupError(cel_problems[0])
    service = SchedulingService(state, selectors)
    runtime = Runtime(source, state, service, notes, warnings=[*objects.unknown_fields, *cel_problems])
    if config is not None:
        runtime.problems = [f"{config}: {problem}" for problem in state.inventory.derivation_summary()]
        runtime.watcher = watch_config(Path(config), service)
    return runtime


def _class_selector_problems(objects: ClusterObjects, selectors: SelectorCache) -> list[str]:
    """``<file>: DeviceClass <name>: spec.selectors[i].cel.expression: <compile error>`` per selector that
    does not compile (the API server compiles them on create; a class that does not compile matches no
    device, and every pod asking for it fails)."""
    problems = []
    for obj in objects.device_classes:
        name = (obj.get("metadata") or {}).get("name")
        for i, selector in enumerate((obj.get("spec") or {}).get("selectors") or ()):
            expression = ((selector or {}).get("cel") or {}).get("expression")
            if not isinstance(expression, str):
                continue  # the converter checked the shape
            try:
                selectors.program(expression)
            except CELCompileError as e:
                where = f"spec.selectors[{i}].cel.expression"
                problems.append(f"{_source(objects, 'DeviceClass', obj)}: DeviceClass {name}: {where}: {e}")
    return problems


def state_summary(state: ClusterState) -> dict[str, int]:
    """Counts for the startup banner: nodes, ResourceSlices, devices in them, claims, pending pods."""
    inventory = state.inventory.report()
    return {
        "nodes": len(state.objects["Node"]),
        "resource_slices": inventory["slices"],
        "devices": inventory["devices"],
        "resource_claims": len(state.objects["ResourceClaim"]),
        "pending_pods": len(state.pending_pods()),
    }


EXIT_OK = 0
"""The command ran (pods may stay pending)."""

EXIT_USAGE = 2
"""Unusable input: bad flags, a StartupError."""


MAX_PROBLEMS_SHOWN = 20
"""Warnings, and config problems (failed derived attributes), printed at startup; the rest are counted."""


def print_limited(level: str, lines: Sequence[str], what: str) -> None:
    """The first ``MAX_PROBLEMS_SHOWN`` lines on stderr, then how many more there are."""
    for line in lines[:MAX_PROBLEMS_SHOWN]:
        print(f"dra-extender: {level}: {line}", file=sys.stderr)
    if len(lines) > MAX_PROBLEMS_SHOWN:
        print(
            f"dra-extender: {level}: ... and {len(lines) - MAX_PROBLEMS_SHOWN} more {what}", file=sys.stderr
        )


def apply_policies(service: SchedulingService, scheduling: SchedulingSettings) -> None:
    """Device selection and scoring of the settings, on the service."""
    service.device_selection = scheduling.device_selection
    service.scoring = scheduling.scoring
    service.filter_timeout = scheduling.filter_timeout_seconds
    if scheduling.filter_time_budget_seconds is not None:
        service.filter_time_budget = scheduling.filter_time_budget_seconds


def load_runtime(
    settings: Settings, strict_fields: bool = False, objects: ClusterObjects | None = None
) -> Runtime:
    """Build the runtime from the settings (the state directory, or ``objects`` of a cluster snapshot);
    print its warnings and the devices where a config attribute failed."""
    scheduling = settings.scheduling
    if objects is None:
        runtime = build_runtime(
            settings.state_dir,  # type: ignore[arg-type]
            scheduling.feature_gates,
            strict_fields=strict_fields,
            cel_engine=scheduling.cel_engine,
            config=settings.config_file,
        )
    else:
        runtime = runtime_from_objects(
            objects,
            Path("cluster"),
            scheduling.feature_gates,
            strict_fields=strict_fields,
            cel_engine=scheduling.cel_engine,
            config=settings.config_file,
        )
    print_limited("warning", runtime.warnings, "warnings")
    print_limited("error", runtime.problems, "derived attribute errors")
    apply_policies(runtime.service, settings.scheduling)
    # The loaded state is long-lived: keep the cyclic collector from rescanning it on every full collection
    # (with 10^6 objects each one costs tens of ms on the request path).
    gc.collect()
    gc.freeze()
    return runtime
