"""core/v1 NodeSelector matching (ResourceSlice ``nodeSelector``, device node selection, result selector).

Semantics of ``k8s.io/component-helpers/scheduling/corev1/nodeaffinity``: terms are ORed, requirements
within a term ANDed; an empty term matches nothing; ``matchExpressions`` read node labels (In, NotIn,
Exists, DoesNotExist, Gt, Lt); ``matchFields`` support ``metadata.name`` (In, NotIn).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from allocator.errors import InvalidInputError

__all__ = ["Node", "NodeSelector", "Requirement", "parse_node_selector"]

_OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}


@dataclass(frozen=True, slots=True)
class Node:
    """What allocation needs of a Node: its name, labels and ``status.declaredFeatures``."""

    name: str
    labels: Mapping[str, str]
    declared_features: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``NodeSelectorRequirement``; ``field`` is True for ``matchFields``."""

    key: str
    operator: str
    values: tuple[str, ...]
    field: bool

    def matches(self, node: Node) -> bool:
        if self.field:
            present, value = self.key == "metadata.name", node.name
        else:
            present, value = self.key in node.labels, node.labels.get(self.key, "")
        if self.operator == "In":
            return present and value in self.values
        if self.operator == "NotIn":
            return not present or value not in self.values
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if not present or len(self.values) != 1:
            return False
        try:
            have, want = int(value), int(self.values[0])
        except ValueError:
            return False
        return have > want if self.operator == "Gt" else have < want

    def to_api(self) -> dict[str, Any]:
        return {"key": self.key, "operator": self.operator, "values": list(self.values)}


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """A parsed ``NodeSelector``: a tuple of terms, each a tuple of requirements."""

    terms: tuple[tuple[Requirement, ...], ...]

    def matches(self, node: Node) -> bool:
        return any(term and all(r.matches(node) for r in term) for term in self.terms)


def _requirements(raw: Any, where: str, *, field: bool) -> list[Requirement]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidInputError(f"{where}: must be a list")
    result = []
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
            raise InvalidInputError(f"{at}: must be an object with a string key")
        operator = item.get("operator")
        if operator not in _OPERATORS or (field and operator not in ("In", "NotIn")):
            raise InvalidInputError(f"{at}.operator: unsupported operator {operator!r}")
        values = item.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise InvalidInputError(f"{at}.values: must be a list of strings")
        result.append(Requirement(item["key"], operator, tuple(values), field))
    return result


def parse_node_selector(raw: Any, where: str) -> NodeSelector:
    """Parse a NodeSelector dict; errors name ``where`` and the field."""
    if not isinstance(raw, Mapping):
        raise InvalidInputError(f"{where}: must be an object")
    terms_raw = raw.get("nodeSelectorTerms")
    if not isinstance(terms_raw, list):
        raise InvalidInputError(f"{where}.nodeSelectorTerms: must be a list")
    terms = []
    for i, term in enumerate(terms_raw):
        at = f"{where}.nodeSelectorTerms[{i}]"
        if not isinstance(term, Mapping):
            raise InvalidInputError(f"{at}: must be an object")
        terms.append(
            tuple(
                _requirements(term.get("matchExpressions"), f"{at}.matchExpressions", field=False)
                + _requirements(term.get("matchFields"), f"{at}.matchFields", field=True)
            )
        )
    return NodeSelector(tuple(terms))
