"""API validation's cost limits on the CEL expressions of a DeviceClass or a claim.

Kubernetes refuses, on create or update (``k8s.io/kubernetes`` v1.37.2
``pkg/apis/resource/validation/validation.go`` ``validateCELExpression`` and ``validateDeviceClaim``):

* a selector whose estimated cost (``allocator.cel.cost``) is above ``CELSelectorExpressionMaxCost``
  (1,000,000): ``<path>.cel.expression: Forbidden: too complex, exceeds cost limit``;
* a derived attribute expression above ``min(CELSelectorExpressionMaxCost,
  DeviceClaimDerivedAttributeCELMaxCost)``: ``<path>.expression: Forbidden: too complex, exceeds cost
  limit``;
* a claim whose derived attribute expressions sum above ``DeviceClaimDerivedAttributeCELMaxCost``
  (1,000,000): ``spec.devices: Forbidden: too complex, total cost of derived attribute CEL expressions in
  the claim exceeds cost limit``. Only derived attributes count; selectors have no shared budget.

An expression that does not compile is reported by its compile error elsewhere and adds nothing here, as
upstream. The objects are ``resource.k8s.io/v1`` dicts already checked for shape (``app.state``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from allocator.cel import CEL_MAX_COST, SelectorProgram, ValueProgram
from allocator.errors import CELCompileError

__all__ = [
    "CLAIM_TOO_COMPLEX",
    "DERIVED_ATTRIBUTES_MAX_COST",
    "TOO_COMPLEX",
    "Compiler",
    "claim_cost_problems",
    "selector_cost_problems",
]

DERIVED_ATTRIBUTES_MAX_COST = 1_000_000
"""``DeviceClaimDerivedAttributeCELMaxCost``: the summed estimate of one claim's derived attributes."""

TOO_COMPLEX = "Forbidden: too complex, exceeds cost limit"
CLAIM_TOO_COMPLEX = (
    "Forbidden: too complex, total cost of derived attribute CEL expressions in the claim exceeds cost limit"
)

_UINT64 = 2**64


class Compiler(Protocol):
    """Compiles selectors and derived attribute expressions (``allocator.selectors.SelectorCache``)."""

    def program(self, expression: str) -> SelectorProgram: ...

    def value_program(self, expression: str) -> ValueProgram: ...


def _estimate(compiler: Compiler, expression: object, derived: bool) -> int | None:
    if not isinstance(expression, str):
        return None
    try:
        program = compiler.value_program(expression) if derived else compiler.program(expression)
    except CELCompileError:
        return None
    return program.estimated_cost


def _over(cost: int) -> str:
    return f"{TOO_COMPLEX} (estimated cost {cost}, limit {CEL_MAX_COST})"


def selector_cost_problems(selectors: Any, path: str, compiler: Compiler) -> list[str]:
    """``<path>[i].cel.expression: Forbidden: ...`` for each selector of the list over the limit."""
    problems = []
    for i, selector in enumerate(selectors or ()):
        expression = ((selector or {}).get("cel") or {}).get("expression")
        cost = _estimate(compiler, expression, False)
        if cost is not None and cost > CEL_MAX_COST:
            problems.append(f"{path}[{i}].cel.expression: {_over(cost)}")
    return problems


def claim_cost_problems(devices: Mapping[str, Any] | None, path: str, compiler: Compiler) -> list[str]:
    """The problems of a claim spec's ``devices`` (at ``path``, e.g. ``spec.devices``), in field order."""
    problems: list[str] = []
    total = 0
    for i, request in enumerate((devices or {}).get("requests") or ()):
        holders = [(request.get("exactly"), f"{path}.requests[{i}].exactly")]
        holders += [
            (sub, f"{path}.requests[{i}].firstAvailable[{j}]")
            for j, sub in enumerate(request.get("firstAvailable") or ())
        ]
        for holder, at in holders:
            if not holder:
                continue
            problems += selector_cost_problems(holder.get("selectors"), f"{at}.selectors", compiler)
            for k, attribute in enumerate(holder.get("derivedAttributes") or ()):
                cost = _estimate(compiler, (attribute or {}).get("expression"), True)
                if cost is None:
                    continue
                if cost > min(CEL_MAX_COST, DERIVED_ATTRIBUTES_MAX_COST):
                    problems.append(f"{at}.derivedAttributes[{k}].expression: {_over(cost)}")
                # Upstream sums in a uint64, which wraps: kept, so that the verdict is the same.
                total = (total + cost) % _UINT64
    if total > DERIVED_ATTRIBUTES_MAX_COST:
        problems.append(
            f"{path}: {CLAIM_TOO_COMPLEX} (estimated total {total}, limit {DERIVED_ATTRIBUTES_MAX_COST})"
        )
    return problems
