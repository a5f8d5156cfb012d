"""CEL conformance battery: every expression's outcome on both engines against upstream's environment.

The oracle is ``tests/oracle/celoracle`` (Go, built by ``make oracle-bin`` into ``.cache/oracle/celoracle``):
it compiles each expression with ``k8s.io/dynamic-resource-allocation/cel`` ``GetCompiler`` (the
StoredExpressions environment of ``k8s.io/apiserver/pkg/cel/environment/base.go`` v0.37.2, as the scheduler
does) and evaluates it on the same device. An engine agrees when the outcome kind is the same (compile
error, value, evaluation error) and, for a value, the value is the same. Without go the tests skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from allocator.cel import CEL_MAX_COST, CEL_MAX_EXPRESSION_LENGTH, CELDevice, CELEngine, Version
from allocator.cel.frontend import Frontend
from allocator.errors import CELCompileError, CELEvalError
from tests.allocator.cel_conformance_cases import BATTERY, KNOWN_GAPS, UNSUPPORTED_BY
from tests.allocator.cel_corpus import CASES, ENGINE_TYPES, Case, Err, devices
from tests.oracle.client import Oracle

_BINARY = Path(__file__).resolve().parents[2] / ".cache" / "oracle" / "celoracle"
MISSING = (
    "upstream CEL oracle not built: install Go and run `make oracle-bin` (builds .cache/oracle/celoracle)"
)

DEVICES = devices()


def device_json(device: CELDevice) -> dict[str, Any]:
    """The device as upstream's ``cel.Device`` (qualified attribute names, resource.k8s.io/v1 values)."""
    attributes: dict[str, Any] = {}
    for domain, values in device.attributes.items():
        for name, value in values.items():
            attributes[f"{domain}/{name}"] = _attribute_json(value)
    capacity = {
        f"{domain}/{name}": {"value": q.text}
        for domain, values in device.capacity.items()
        for name, q in values.items()
    }
    return {
        "driver": device.driver,
        "allowMultipleAllocations": device.allow_multiple_allocations,
        "attributes": attributes,
        "capacity": capacity,
    }


def _attribute_json(value: object) -> dict[str, Any]:
    if isinstance(value, tuple):
        first = value[0] if value else ""
        key = {bool: "bools", int: "ints", str: "strings", Version: "versions"}[type(first)]
        return {key: [v.text if isinstance(v, Version) else v for v in value]}
    if isinstance(value, Version):
        return {"version": value.text}
    key = {bool: "bool", int: "int", str: "string"}[type(value)]
    return {key: value}


@pytest.fixture(scope="module")
def upstream() -> Iterator[Oracle]:
    if not (_BINARY.is_file()):
        pytest.skip(MISSING)
    with Oracle(_BINARY) as process:
        yield process


@pytest.fixture(scope="module", params=ENGINE_TYPES, ids=lambda t: t.name)
def engine(request: pytest.FixtureRequest) -> CELEngine:
    return request.param()


def outcome(engine: CELEngine, expression: str, device: CELDevice) -> tuple[str, object]:
    """("compile", message), ("eval", message) or ("value", bool)."""
    try:
        program = engine.compile(expression)
    except CELCompileError as err:
        return "compile", str(err)
    try:
        return "value", program.evaluate(device)
    except CELEvalError as err:
        return "eval", str(err)


def upstream_answer(oracle: Oracle, expression: str, device: str) -> dict[str, Any]:
    answer = oracle.ask({"expression": expression, "device": device_json(DEVICES[device])})
    assert answer["kind"] != "badinput", answer
    return answer


def upstream_outcome(oracle: Oracle, expression: str, device: str) -> tuple[str, object]:
    answer = upstream_answer(oracle, expression, device)
    return answer["kind"], answer["value"] if answer["kind"] == "value" else answer["error"]


def beyond_api_validation(expression: str, answer: dict[str, Any]) -> bool:
    """The API server would refuse the selector before any scheduler sees it: longer than
    CELSelectorExpressionMaxLength, or an estimated cost above CELSelectorExpressionMaxCost. The engines may
    refuse those too (a compile error; a cost-limit error from their static bound, which stands in for
    upstream's runtime cost tracking), where upstream's scheduler would still run them."""
    return len(expression.encode()) > CEL_MAX_EXPRESSION_LENGTH or answer.get("maxCost", 0) > CEL_MAX_COST


@pytest.mark.parametrize(("expression", "device"), BATTERY, ids=[f"{d}:{e[:80]}" for e, d in BATTERY])
def test_engine_agrees_with_upstream(
    request: pytest.FixtureRequest, upstream: Oracle, engine: CELEngine, expression: str, device: str
) -> None:
    gap = KNOWN_GAPS.get(engine.name, {}).get(expression)
    if gap:
        request.applymarker(pytest.mark.xfail(reason=gap, strict=True))
    want = upstream_outcome(upstream, expression, device)
    got = outcome(engine, expression, DEVICES[device])
    if expression in UNSUPPORTED_BY.get(engine.name, ()) and want[0] != "compile":
        # A construct this engine cannot run: it must refuse it at compile time, naming itself.
        assert got[0] == "compile" and engine.name in str(got[1]), got
        return
    if want[0] == "value":
        assert got == want, f"upstream {want}, {engine.name} {got}"
    else:
        assert got[0] == want[0], f"upstream {want}, {engine.name} {got}"


def test_battery_size() -> None:
    assert len(BATTERY) >= 200
    assert len(set(BATTERY)) == len(BATTERY), "duplicate battery entries"


@pytest.mark.parametrize(("expression", "device"), BATTERY, ids=[f"{d}:{e[:80]}" for e, d in BATTERY])
def test_cost_bound_never_refuses_what_upstream_accepts(
    upstream: Oracle, expression: str, device: str
) -> None:
    """The engines' static worst-case cost stands for upstream's runtime cost tracking: it must stay within
    the limit wherever upstream's own estimate does (API validation admits those expressions)."""
    answer = upstream_answer(upstream, expression, device)
    if answer["kind"] == "compile" or answer["maxCost"] > CEL_MAX_COST:
        return
    analysis = Frontend().analyze(expression)
    assert analysis.cost_bound <= CEL_MAX_COST, (analysis.cost_bound, answer["maxCost"])


@pytest.mark.parametrize("case", [c for c in CASES if c.device != "badint"], ids=lambda c: c.id)
def test_corpus_expectations_are_upstreams(upstream: Oracle, case: Case) -> None:
    """The corpus of tests/allocator/cel_corpus.py (run on every engine by test_cel.py) says what upstream
    does. (The "badint" device has an int beyond int64, which upstream's API types cannot even hold.)"""
    answer = upstream_answer(upstream, case.expression, case.device)
    if isinstance(case.expect, Err) and beyond_api_validation(case.expression, answer):
        return  # the engines' refusal stands in for API validation's
    if isinstance(case.expect, Err):
        assert answer["kind"] == case.expect.kind, answer
    else:
        assert (answer["kind"], answer.get("value")) == ("value", case.expect), answer
