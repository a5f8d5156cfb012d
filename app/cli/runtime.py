"""Startup: a state directory → the cluster state → the scheduling service.

``build_runtime(path, gates)`` runs ``load_state`` (``app.state.statedir``), ``generate_template_claims``
(``app.state.claimgen``, what the resourceclaim controller would have created), then feeds the objects to
``ClusterState`` in dependency order (Nodes, DeviceClasses, DeviceTaintRules, ResourceSlices,
ResourceClaimTemplates, ResourceClaims, Pods: the things a claim refers to exist before it) and wraps the
state in a ``SchedulingService`` with the chosen CEL engine (``new_engine``: cel-expr-python by default).

The inventory evaluates DeviceClass selectors as objects arrive (its class-match index uses the service's
``SelectorCache``). With ``config`` (``app.config.derivedconfig``) the cluster-wide derived attributes are
installed before the first slice arrives, so every device is derived once; ``Runtime.problems`` lists the
devices where one failed (``serve`` reloads the file when it changes: ``app.cli.reload``).

``Runtime.warnings`` lists the state's problems, shown at startup without stopping (``strict_fields``:
the first one is a StartupError; ``dra-extender validate`` lists them all): entries of the state directory
that are not regular files (``ClusterObjects.skipped_files``), unknown kinds and fields
(``app.state.knownfields``), CEL selectors of DeviceClasses, ResourceClaims and ResourceClaimTemplates that
do not compile (file, object, field path, compile error), pod claims whose ResourceClaim or
ResourceClaimTemplate is not in the state (``app.state.references``), and a state with no object the
extender uses (a wrong or empty directory).

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
from allocator.cel.limits import claim_cost_problems, selector_cost_problems
from allocator.errors import CELCompileError, InvalidInputError
from allocator.features import FeatureGates
from allocator.selectors import SelectorCache
from app.config.derivedconfig import ConfigError, install, load_config
from app.config.settings import SchedulingSettings, Settings
from app.scheduling.service import SchedulingService
from app.state.claimgen import generate_template_claims
from app.state.cluster import ClusterState
from app.state.references import missing_pod_claims
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
    warnings: list[str] = field(default_factory=list)
    """The state's problems (see the module docstring), to print at startup; ``validate`` reports them."""


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
    engine and the config file ``config`` (if any). ``strict_fields``: the state's problems
    (``Runtime.warnings``) are errors, not warnings. Raises StartupError (also for a ``path`` that does not
    exist)."""
    try:
        objects = load_state(Path(path), strict=strict, strict_fields=strict_fields)
    except StateLoadError as e:
        raise StartupError(str(e)) from e
    runtime = runtime_from_objects(objects, Path(path), gates, cel_engine=cel_engine, config=config)
    if objects.count() == 0:
        found = f"{objects.files} manifest file(s), none with a" if objects.files else "no manifest files, no"
        runtime.warnings.append(
            f"{path}: {found} Node, Pod or DRA object (resource.k8s.io): is this the state directory?"
        )
    _refuse_problems(runtime, strict_fields)
    return runtime


def _refuse_problems(runtime: Runtime, strict_fields: bool) -> None:
    """With ``strict_fields``, the first of the state's problems is a StartupError."""
    if strict_fields and runtime.warnings:
        raise StartupError(runtime.warnings[0])


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
    ``source`` names where they came from. Raises StartupError (with ``strict_fields`` also for the first
    of the state's problems)."""
    selectors = SelectorCache(new_engine(cel_engine))
    state = ClusterState(gates)
    state.inventory.attach_selectors(selectors)
    if config is not None:
        install_config(config, state, selectors)
    notes = list(objects.warnings)
    missing_claims = missing_pod_claims(objects)  # before template claims are generated
    notes.extend(generate_template_claims(objects, workload_claims=state.gates.workload_claims))
    for kind, obj in _ordered(objects):
        try:
            state.apply(kind, obj)
        except InvalidInputError as e:
            raise StartupError(f"{_source(objects, kind, obj)}: {e}") from e
    warnings = [
        *objects.skipped_files,
        *objects.unknown_kinds,
        *objects.unknown_fields,
        *_selector_problems(objects, selectors),
        *_cost_problems(objects, selectors),
        *missing_claims,
    ]
    service = SchedulingService(state, selectors)
    runtime = Runtime(source, state, service, notes, warnings=warnings)
    _refuse_problems(runtime, strict_fields)
    if config is not None:
        runtime.problems = [f"{config}: {problem}" for problem in state.inventory.derivation_summary()]
    return runtime


def _selector_problems(objects: ClusterObjects, selectors: SelectorCache) -> list[str]:
    """``<file>: <Kind> <ref>: <path>.cel.expression: <compile error>`` per CEL selector of a DeviceClass,
    ResourceClaim or ResourceClaimTemplate that does not compile (the API server compiles them on create; a
    class that does not compile matches no device, and every pod asking for it fails). Claims made from a
    template here are left out: their template is reported."""
    problems = []
    for kind, obj, path, expression in _cel_selectors(objects):
        try:
            selectors.program(expression)
        except CELCompileError as e:
            meta = obj.get("metadata") or {}
            ref = meta["name"] if kind == "DeviceClass" else f"{meta.get('namespace')}/{meta['name']}"
            problems.append(f"{_source(objects, kind, obj)}: {kind} {ref}: {path}.cel.expression: {e}")
    return problems


def _cost_problems(objects: ClusterObjects, selectors: SelectorCache) -> list[str]:
    """``<file>: <Kind> <ref>: <path>: Forbidden: too complex, ...`` for each CEL cost limit the API server
    holds a DeviceClass, ResourceClaim or ResourceClaimTemplate to (``allocator.cel.limits``). Claims made
    from a template here are left out: their template is reported."""
    problems = []
    for obj in objects.device_classes:
        spec = obj.get("spec") or {}
        for problem in selector_cost_problems(spec.get("selectors"), "spec.selectors", selectors):
            problems.append(
                f"{_source(objects, 'DeviceClass', obj)}: DeviceClass {obj['metadata']['name']}: {problem}"
            )
    for kind, of_kind in (
        ("ResourceClaimTemplate", objects.resource_claim_templates),
        ("ResourceClaim", objects.resource_claims),
    ):
        for obj in of_kind:
            if objects.source_of(kind, obj) is None:
                continue  # generated from a template
            spec, path = obj.get("spec") or {}, "spec.devices"
            if kind == "ResourceClaimTemplate":
                spec, path = spec.get("spec") or {}, "spec.spec.devices"
            meta = obj.get("metadata") or {}
            ref = f"{meta.get('namespace')}/{meta['name']}"
            for problem in claim_cost_problems(spec.get("devices"), path, selectors):
                problems.append(f"{_source(objects, kind, obj)}: {kind} {ref}: {problem}")
    return problems


def _cel_selectors(objects: ClusterObjects) -> Iterator[tuple[str, Mapping[str, Any], str, str]]:
    """(kind, object, selector path, expression) of every CEL selector, in file order."""
    for obj in objects.device_classes:
        yield from _expressions(
            "DeviceClass", obj, (obj.get("spec") or {}).get("selectors"), "spec.selectors"
        )
    for kind, spec_path, of_kind in (
        ("ResourceClaimTemplate", "spec.spec", objects.resource_claim_templates),
        ("ResourceClaim", "spec", objects.resource_claims),
    ):
        for obj in of_kind:
            if objects.source_of(kind, obj) is None:
                continue  # generated from a template
            spec = obj.get("spec") or {}
            if kind == "ResourceClaimTemplate":
                spec = spec.get("spec") or {}
            for i, request in enumerate((spec.get("devices") or {}).get("requests") or ()):
                where = f"{spec_path}.devices.requests[{i}]"
                exactly = request.get("exactly") or {}
                yield from _expressions(kind, obj, exactly.get("selectors"), f"{where}.exactly.selectors")
                for j, sub in enumerate(request.get("firstAvailable") or ()):
                    yield from _expressions(
                        kind, obj, sub.get("selectors"), f"{where}.firstAvailable[{j}].selectors"
                    )


def _expressions(
    kind: str, obj: Mapping[str, Any], selectors: Any, path: str
) -> Iterator[tuple[str, Mapping[str, Any], str, str]]:
    for i, selector in enumerate(selectors or ()):
        expression = ((selector or {}).get("cel") or {}).get("expression")
        if isinstance(expression, str):  # the converter checked the shape
            yield kind, obj, f"{path}[{i}]", expression


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


def print_limited(level: str, lines: Sequence[str], what: str, *, as_records: bool = False) -> None:
    """The first ``MAX_PROBLEMS_SHOWN`` lines on stderr, then how many more there are; ``as_records``: as
    log records at ``level`` (``warning``, ``error``) instead, for ``serve --log-format json``."""
    shown = list(lines[:MAX_PROBLEMS_SHOWN])
    if len(lines) > MAX_PROBLEMS_SHOWN:
        shown.append(f"... and {len(lines) - MAX_PROBLEMS_SHOWN} more {what}")
    for line in shown:
        if as_records:
            log.log(logging.getLevelName(level.upper()), "%s", line)
        else:
            print(f"dra-extender: {level}: {line}", file=sys.stderr)


def apply_policies(service: SchedulingService, scheduling: SchedulingSettings) -> None:
    """Device selection, scoring, the filter time budget and the filter timeout of the settings, on the
    service."""
    service.set_policy(
        scheduling.device_selection,
        scheduling.scoring,
        scheduling.filter_time_budget_seconds,
        scheduling.filter_timeout_seconds,
    )


def load_runtime(
    settings: Settings, strict_fields: bool = False, objects: ClusterObjects | None = None
) -> Runtime:
    """Build the runtime from the settings (the state directory, or ``objects`` of a cluster snapshot);
    print its warnings and the devices where a config attribute failed."""
    scheduling = settings.scheduling
    if objects is None:
        runtime = build_runtime(
            # No snapshot: the callers (simulate, explain, serve off a cluster) checked --state was given.
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
    as_records = settings.server.log_format == "json"
    print_limited("warning", runtime.warnings, "warnings", as_records=as_records)
    print_limited("error", runtime.problems, "derived attribute errors", as_records=as_records)
    apply_policies(runtime.service, settings.scheduling)
    freeze_long_lived()
    return runtime


def freeze_long_lived() -> None:
    """Collect, then take every object alive now out of the cyclic collector's generations (``gc.freeze``).

    Call once the state is loaded (offline) or first synced (cluster mode). A full collection scans every
    object the collector tracks with the GIL held, every answer waiting: 0.36 s on an idle core for
    serve's modules and a state of 5000 nodes x 8 devices with 20,000 allocated claims (580,000 objects;
    the modules alone, 106,000: 46 ms), 1 ms once they are frozen. What replaces a frozen object later (a
    watch event's new version) is tracked again; slices, classes and the modules mostly stay frozen.
    Frozen objects are still freed by reference counting when the state drops them; only reference
    cycles among them are never freed. The state forms none (tests/app/test_heap.py); what else is alive
    at the freeze and ends in a cycle later (the first watches' connections, tasks) is kept: once, bounded."""
    gc.collect()
    gc.freeze()
