"""Reading a ``/metrics`` exposition in tests, through prometheus-client's own parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["names", "samples"]


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """(sample name, its labels) -> value, for every sample of the exposition."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def names(text: str) -> set[str]:
    """Every name a query may use: the samples' and the families' (a family may have no sample yet)."""
    families = list(text_string_to_metric_families(text))
    return {f.name for f in families} | {s.name for f in families for s in f.samples}
