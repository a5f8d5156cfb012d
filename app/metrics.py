"""``GET /metrics``: a few gauges in the Prometheus text format (no client library: five lines of text).

``dra_extender_derived_attribute_errors{attribute=...}``: devices on which a cluster-wide derived
attribute failed (absent there); ``dra_extender_cel_program_bytes`` and ``dra_extender_cel_results``:
the CEL caches' estimated size and entries; ``dra_extender_kept_pod_decisions``: per-pod views and
private decisions kept between filter and bind. Read under the service lock."""

from __future__ import annotations

from app.scheduling import SchedulingService

__all__ = ["render"]


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(service: SchedulingService) -> bytes:
    """The exposition text."""
    with service.lock:
        errors = service.state.inventory.derivation_counts()
        cache = service.selectors.report()
        kept = service.kept_decisions()
    lines = [
        "# HELP dra_extender_derived_attribute_errors Devices a cluster-wide derived attribute failed on.",
        "# TYPE dra_extender_derived_attribute_errors gauge",
        *(f'dra_extender_derived_attribute_errors{{attribute="{_label(a)}"}} {n}' for a, n in errors.items()),
        "# HELP dra_extender_cel_program_bytes Estimated bytes of the compiled CEL programs kept.",
        "# TYPE dra_extender_cel_program_bytes gauge",
        f"dra_extender_cel_program_bytes {cache['program_bytes']}",
        "# HELP dra_extender_cel_results CEL results kept per expression and device.",
        "# TYPE dra_extender_cel_results gauge",
        f"dra_extender_cel_results {cache['results']}",
        "# HELP dra_extender_kept_pod_decisions Per-pod views and private decisions kept for bind.",
        "# TYPE dra_extender_kept_pod_decisions gauge",
        f"dra_extender_kept_pod_decisions {kept}",
    ]
    return ("\n".join(lines) + "\n").encode()
