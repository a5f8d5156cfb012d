"""API validation's cost estimate (``allocator.cel.cost``) equals upstream's on every expression.

Upstream's number is ``CompilationResult.MaxCost`` of ``k8s.io/dynamic-resource-allocation/cel``, reported by
the CEL oracle (``tests/oracle/celoracle``, built by ``make oracle-bin``): cel-go's estimator with
Kubernetes' library estimator and DRA's size hints, what ``validation.go`` holds against
CELSelectorExpressionMaxCost and DeviceClaimDerivedAttributeCELMaxCost. Checked on the conformance battery,
the corpus, and cases aimed at each rule of the estimator (comprehensions, strings, lists, the Kubernetes
libraries, optionals, bindings). Without go the tests skip.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from allocator.cel.cost import estimate_cost
from allocator.cel.frontend import Frontend
from allocator.errors import CELCompileError
from tests.allocator.cel_conformance_cases import BATTERY
from tests.allocator.cel_corpus import CASES
from tests.allocator.test_cel_conformance import _BINARY, DEVICES, MISSING, device_json
from tests.oracle.client import Oracle

_ATTR = 'device.attributes["gpu.nvidia.com"]'

TARGETED = [
    # comprehensions over device maps, attributes of unknown shape, literals, nested, two variables
    f'{_ATTR}.tags.map(t, t + "!").size() > 0',
    f'{_ATTR}.tags.filter(t, t.startsWith("a")).size() == 1',
    f'{_ATTR}.tags.exists_one(t, t == "a")',
    'device.attributes.exists(d, device.attributes[d].exists(a, a.startsWith("x")))',
    'device.capacity.all(d, device.capacity[d].all(c, device.capacity[d][c].isGreaterThan(quantity("0"))))',
    "[1, 2, 3].map(x, x * 2).filter(y, y > 2).size() == 2",
    "[[1, 2], [3]].all(l, l.all(x, x > 0))",
    "device.attributes.all(d, d.size() < 64)",
    f'{_ATTR}.tags.all(i, t, i >= 0 && t != "")',
    '{"a": 1, "b": 2}.transformMap(k, v, v + 1).size() == 2',
    "[1, 2].transformList(i, v, v + i) == [1, 3]",
    f"{_ATTR}.tags.transformList(i, t, t + string(i)).size() > 0",
    f"cel.bind(t, {_ATTR}.tags, t.map(x, x + x).size() > 0)",
    f"cel.bind(a, {_ATTR}, a.model.size() + a.model.size() > 0)",
    # strings
    f'{_ATTR}.model.replace("a", "bb") != ""',
    f'{_ATTR}.model.replace("", "xyz") != ""',
    f'{_ATTR}.model.replace("abc", "") != ""',
    f'{_ATTR}.model.split("-").size() > 0',
    f'{_ATTR}.model.split("-", 2).size() > 0',
    f'{_ATTR}.model.split("-").join("+") != ""',
    f'{_ATTR}.model.lowerAscii().upperAscii().trim() != ""',
    f'{_ATTR}.model.substring(1, 3) != ""',
    f'{_ATTR}.model.indexOf("a") >= -1 && {_ATTR}.model.lastIndexOf("a", 2) >= -1',
    f'{_ATTR}.model.find("[a-z]+") != "" || {_ATTR}.model.findAll("[0-9]").size() > 0',
    f'{_ATTR}.model.matches("^a.*b$") || matches(device.driver, "x")',
    f"{_ATTR}.model.contains(device.driver)",
    f'device.driver + "/" + {_ATTR}.model != ""',
    f'"%s-%d".format([{_ATTR}.model, 1]) != ""',
    f'strings.quote({_ATTR}.model) != ""',
    f"{_ATTR}.model < device.driver",
    f"bytes({_ATTR}.model).size() > 0",
    f'string(bytes({_ATTR}.model)) != ""',
    f'{_ATTR}.model.charAt(1) != ""',
    # lists
    f"{_ATTR}.tags.sort().size() > 0",
    f"{_ATTR}.tags.sortBy(t, t.size()).size() > 0",
    f"{_ATTR}.tags.distinct().size() > 0",
    f"{_ATTR}.tags.reverse().size() > 0",
    f"{_ATTR}.tags.slice(0, 1).size() == 1",
    "[[1], [2, 3]].flatten().size() == 3",
    "lists.range(5).size() == 5",
    f'sets.contains({_ATTR}.tags, ["a"]) && sets.intersects(["a"], {_ATTR}.tags)',
    f"sets.equivalent({_ATTR}.tags, {_ATTR}.tags)",
    "[3, 1].isSorted() || [1, 2].sum() == 3 || [1].min() == 1 || [2].max() == 2",
    f'{_ATTR}.tags.includes("a") && {_ATTR}.numaNodes.includes(1)',
    f'"a" in {_ATTR}.tags',
    '"a" in {"a": 1}',
    "[1, 2] + [3] == [1, 2, 3]",
    # Kubernetes libraries
    f"ip({_ATTR}.model).family() == 4",
    f'cidr({_ATTR}.model).containsIP("10.0.0.1")',
    'cidr("10.0.0.0/8").containsCIDR("10.1.0.0/16") && cidr("10.0.0.0/8").containsIP(ip("10.0.0.1"))',
    'cidr("10.0.0.0/8").ip() == ip("10.0.0.0")',
    f'isIP({_ATTR}.model) || isCIDR({_ATTR}.model) || ip.isCanonical("10.0.0.1")',
    f'url({_ATTR}.model).getHost() == "a"',
    'url("https://a.com/x") == url("https://a.com/x")',
    f"format.dns1123Label().validate({_ATTR}.model).hasValue()",
    'format.named("uuid") == format.named("uuid")',
    f"quantity({_ATTR}.model).isInteger() || isQuantity(device.driver)",
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("1Gi")) > 0',
    f"semver({_ATTR}.model, true).major() == 1 || isSemver(device.driver)",
    f'{_ATTR}.version == semver("1.0.0")',
    # optionals, presence, dyn, conditional sizes
    f'{_ATTR}[?"model"].orValue("") != ""',
    f"{_ATTR}.?model.hasValue()",
    f"has({_ATTR}.model) && has(device.driver)",
    f'dyn({_ATTR}.model) != ""',
    f'(device.allowMultipleAllocations ? {_ATTR}.model : "x").size() > 0',
    f'(device.allowMultipleAllocations ? ["a"] : {_ATTR}.tags).exists(t, t == "a")',
    f"type({_ATTR}.model) == string",
]

DERIVED = [
    f"{_ATTR}.model",
    f'{_ATTR}.model.split("-")[0]',
    f"{_ATTR}.tags.map(t, t.size())",
    f'{_ATTR}.memoryGB >= 80 ? "tier-1" : "tier-2"',
    f'{_ATTR}.tags.filter(t, t.startsWith("a"))',
    'device.driver.replace("gpu", "")',
    # the estimates tests/app/test_cel_cost_limits.py builds its claims from
    "device.attributes.map(d, device.attributes[d].map(k, device.attributes[d].map(j, j.size()).size())"
    ".size())",
    "device.attributes.map(d, device.attributes[d].map(k, k.size()).size())",
    'device.attributes["gpu.nvidia.com"].model.split("").map(s, s + s).size()',
]


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


EXPRESSIONS = _unique(
    [e for e, _ in BATTERY] + [c.expression for c in CASES if c.device != "badint"] + TARGETED
)


@pytest.fixture(scope="module")
def upstream() -> Iterator[Oracle]:
    if not _BINARY.is_file():
        pytest.skip(MISSING)
    with Oracle(_BINARY) as process:
        yield process


@pytest.fixture(scope="module")
def frontend() -> Frontend:
    return Frontend()


def _agree(upstream: Oracle, frontend: Frontend, expression: str, derived: bool) -> None:
    query = {"expression": expression, "device": device_json(DEVICES["gpu"])}
    if derived:
        query["derived"] = True
    answer = upstream.ask(query)
    assert answer["kind"] != "badinput", answer
    if answer["kind"] == "compile":
        return  # compile results are the conformance battery's business
    try:
        analysis = frontend.analyze(expression, value=derived)
    except CELCompileError as err:
        assert len(expression.encode()) > 10 * 1024, err  # only the length limit stops ours first
        return
    assert estimate_cost(analysis.ast) == answer["maxCost"]


@pytest.mark.parametrize("expression", EXPRESSIONS, ids=[e[:80] for e in EXPRESSIONS])
def test_selector_estimate_is_upstreams(upstream: Oracle, frontend: Frontend, expression: str) -> None:
    _agree(upstream, frontend, expression, derived=False)


@pytest.mark.parametrize("expression", DERIVED, ids=[e[:80] for e in DERIVED])
def test_derived_attribute_estimate_is_upstreams(
    upstream: Oracle, frontend: Frontend, expression: str
) -> None:
    _agree(upstream, frontend, expression, derived=True)


def test_targeted_cases_compile_upstream(upstream: Oracle) -> None:
    """The targeted cases are meant to reach the estimator: each compiles upstream."""
    refused = []
    for expression in TARGETED:
        answer = upstream.ask({"expression": expression, "device": device_json(DEVICES["gpu"])})
        if answer["kind"] == "compile":
            refused.append((expression, answer["error"]))
    assert not refused
