"""The product's first-fit allocator against upstream's (the oracle) on generated states."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings

from tests.oracle.client import Oracle
from tests.oracle.compare import agrees
from tests.oracle.product import allocate
from tests.oracle.states import large_states, states

STATES_PER_RUN = 1000
LARGE_STATES_PER_RUN = 100


def _seeded(examples: int) -> settings:
    return settings(
        max_examples=examples,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def _explained(state: dict, expected: dict, actual: dict) -> str:
    return f"state: {json.dumps(state)}\nupstream: {json.dumps(expected)}\nproduct: {json.dumps(actual)}"


@pytest.mark.xfail(
    strict=True,
    reason="issue 36: the generator now draws what the product still gets wrong (items 5, 6-9, 11, 12 in "
    "`make oracle N=5000`); remove this mark once those fixes are merged",
)
@_seeded(STATES_PER_RUN)
@given(state=states())
def test_first_fit_allocates_like_upstream(oracle: Oracle, state):
    expected = oracle.ask(state)
    assert expected["kind"] != "badinput", expected["error"]
    actual = allocate(state)
    assert agrees(oracle, state, expected, actual), _explained(state, expected, actual)


@_seeded(LARGE_STATES_PER_RUN)
@given(state=large_states())
def test_search_never_says_no_fit_where_upstream_fits(oracle: Oracle, state):
    """Up to 64 devices and 32 requests: the same answer as upstream, or the search gives up with its own
    reason (a step limit upstream does not have), never a wrong one."""
    expected = oracle.ask(state)
    actual = allocate(state)
    if actual["kind"] != "limit":
        assert agrees(oracle, state, expected, actual), _explained(state, expected, actual)
