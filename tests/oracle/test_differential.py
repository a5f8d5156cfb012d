"""The product's first-fit allocator against upstream's (the oracle) on generated states."""

from __future__ import annotations

import json

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
    """Up to 64 devices and 32 requests: the same answer as upstream, or the search times out (the Python
    search is slower than upstream's: it may pass the 10 s filter timeout where upstream did not), never a
    wrong answer."""
    expected = oracle.ask(state)
    actual = allocate(state)
    if actual["kind"] != "timeout":
        assert agrees(oracle, state, expected, actual), _explained(state, expected, actual)
