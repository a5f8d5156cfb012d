"""Upstream's own allocator table (k8s.io/dynamic-resource-allocation v0.37.2,
``structured/internal/allocatortesting``) run against the product.

``make`` exports the table into ``.cache/upstream-table/cases.jsonl`` (tests/oracle/upstreamtable: a copy of
the module from the Go module cache plus our exporter, which records every case's inputs and upstream's
answer as the table runs it against upstream's allocator). Each case is compared the way the differential
test compares a generated state (``tests/oracle/compare.py``), and also fed back to the oracle program to
prove the bridge format carries the case whole. Without the export (no Go) the tests skip, saying so.

Where a case cannot stand as a cluster state it is adapted, and the oracle test proves the adapted state
keeps upstream's answer: slices sharing a name are renamed, the claims' namespace is given (labelled for
admin access, as admission requires). Cases holding objects the API server refuses must be refused as
input (``REFUSED_BY_API``); the table's context-cancellation cases and a case whose quantity has no
faithful JSON form are skipped with that reason. Cases where the product still disagrees are
``xfail(strict=True)`` naming the item of issue 36 they belong to: fixing the item turns them into
failures until the mark goes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.oracle.client import Oracle
from tests.oracle.compare import agrees, error_class, outcome
from tests.oracle.coverage import implementation
from tests.oracle.product import allocate, state_gates
from tests.oracle.states import ADMIN_ACCESS_LABEL

CASES = Path(__file__).resolve().parents[2] / ".cache" / "upstream-table" / "cases.jsonl"
MISSING = (
    f"upstream allocator table not exported ({CASES}): install Go and run `make test` "
    "(tests/oracle/upstreamtable/export.sh)"
)

KNOWN: dict[str, str] = {}
"""Case name -> why the product still disagrees (the item of issue 36)."""

_ONE_VALUE = "an attribute has exactly one value"
REFUSED_BY_API = {
    "unknown-selector": "a selector has cel",
    "with-distinct-constraints-unknown-type-attribute": _ONE_VALUE,
    "list-attributes-match-constaint-with-empty-or-unknown-type": _ONE_VALUE,
    "list-attributes-distinct-constaint-with-empty-or-unknown-type": _ONE_VALUE,
    "partitionable-devices-device-counter-consumption-references-unknown-counter-set": "consumesCounters[] "
    "has counters",
    "partitionable-devices-same-counter-set-name-in-different-resource-slices": "sharedCounters[] has "
    "counters",
    "list-attributes-match-constaint-list-of-string-values-without-common-elements": "request names are "
    "unique",
}
"""Cases holding objects API validation (k8s.io/kubernetes v1.37.2 pkg/apis/resource/validation) refuses,
with the rule they break. Upstream's allocator, which only ever sees validated objects, answers something
(a CEL runtime error, an invalid pool, no fit); the product refuses them as input naming the field, as it
refuses everything the API server would (nobody else validates its state directories and what-ifs)."""


def _distinct_slice_names(state: dict[str, Any]) -> dict[str, Any]:
    """The state with every ResourceSlice named once. Some cases give two slices one name (one per pool, or
    an old and a new version of one slice), which a cluster cannot hold: the API server keeps one object
    per name, and so do the product's inventory and informers. Upstream's allocator does not look at the
    names (beyond ordering), and the oracle test below checks that the renamed state keeps its answer."""
    seen: dict[str, int] = {}
    slices = []
    for s in state["slices"]:
        name = s["metadata"]["name"]
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            s = {**s, "metadata": {**s["metadata"], "name": f"{name}-again-{seen[name]}"}}
        slices.append(s)
    return {**state, "slices": slices}


def _admitted(state: dict[str, Any]) -> dict[str, Any]:
    """The state with the claims' namespaces, labelled for admin access: a claim with adminAccess exists
    only where admission let it in (the table's claims have no namespace, and the allocator never asks)."""
    names = sorted({c["metadata"].get("namespace", "") for c in state["claims"]})
    labels = {ADMIN_ACCESS_LABEL: "true"}
    return {**state, "namespaces": [{"metadata": {"name": n, "labels": labels}} for n in names]}


def _cases(known: dict[str, str]) -> list[Any]:
    """Every exported case as a test parameter; those in ``known`` expected to fail, strictly."""
    if not CASES.is_file():
        return [pytest.param(None, marks=pytest.mark.skip(reason=MISSING), id="not-exported")]
    cases = []
    for line in CASES.read_text().splitlines():
        case = json.loads(line)
        case["state"] = _admitted(_distinct_slice_names(case["state"]))
        name = case["name"].removeprefix("TestExport/")
        marks = []
        if case["interrupted"]:
            marks.append(
                pytest.mark.skip(reason="a cancelled context: no state to compare (the table's interrupt)")
            )
        elif not case["lossless"]:
            marks.append(pytest.mark.skip(reason="a quantity in the case has no faithful JSON form"))
        elif name in known:
            marks.append(pytest.mark.xfail(strict=True, reason=known[name]))
        cases.append(pytest.param(case, marks=marks, id=name))
    return cases


def _explained(case: dict[str, Any], actual: dict[str, Any]) -> str:
    return (
        f"state: {json.dumps(case['state'])}\nupstream ({case['channel']}): {json.dumps(case['upstream'])}\n"
        f"product: {json.dumps(actual)}"
    )


@pytest.mark.parametrize("case", _cases({}))
def test_the_gates_select_the_implementation_upstream_picks(case: dict[str, Any]) -> None:
    """The rule the coverage table and the product (``FeatureGates.stable_allocator`` and
    ``experimental_allocator``, which decide where stable's behaviour differs) use to tell which upstream
    implementation answers, against the one NewAllocator picked for the case."""
    if case["forced"]:
        pytest.skip(f"the table runs this case on {case['channel']} whatever its features")
    gates = state_gates(case["state"])
    product = (
        "stable"
        if gates.stable_allocator
        else "experimental"
        if gates.experimental_allocator
        else "incubating"
    )
    assert (implementation(case["state"]["gates"]), product) == (case["channel"], case["channel"])


@pytest.mark.parametrize("case", _cases(KNOWN))
def test_product_answers_each_upstream_case_like_upstream(oracle: Oracle, case: dict[str, Any]) -> None:
    assert case["passed"], "upstream fails its own case: no reference"
    actual = allocate(case["state"])
    if case["name"].removeprefix("TestExport/") in REFUSED_BY_API:
        assert actual["kind"] == "error" and error_class(actual) == "input", _explained(case, actual)
        return
    assert agrees(oracle, case["state"], case["upstream"], actual), _explained(case, actual)


READ_BACK_TRIES = 256
"""Calls of the oracle on a case before an answer other than the table's counts as a disagreement."""


@pytest.mark.parametrize("case", _cases({}))
def test_the_oracle_reads_each_exported_case_back(oracle: Oracle, case: dict[str, Any]) -> None:
    """The bridge carries the case whole: the oracle program, given the exported state, answers what the
    table's run answered (for cases the table ran on the implementation the features select).

    Upstream's stable allocator starts at a pool of Go's choosing on every call (``agrees``), so the
    table's run and the oracle's may each have started at a different one: the oracle is asked again, on
    the same listing, until it gives the table's answer. The exported cases have at most 4 pools, which
    share one 8-slot map group, and each start comes with a chance of at least 1/8 per call:
    ``READ_BACK_TRIES`` calls all missing it are below 1e-14 (32 calls missed one in 70)."""
    if case["forced"]:
        pytest.skip(f"the table runs this case on {case['channel']} whatever its features")
    tries = READ_BACK_TRIES if state_gates(case["state"]).stable_allocator else 1
    again = oracle.ask(case["state"])
    for _ in range(tries - 1):
        if outcome(again) == outcome(case["upstream"]):
            break
        again = oracle.ask(case["state"])
    assert agrees(oracle, case["state"], case["upstream"], again), _explained(case, again)
