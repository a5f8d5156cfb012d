"""The product's first-fit allocator against upstream's (the oracle) on generated states."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings

from tests.oracle.client import Oracle
from tests.oracle.compare import outcome
from tests.oracle.product import allocate
from tests.oracle.states import states

STATES_PER_RUN = 1000


@settings(
    max_examples=STATES_PER_RUN,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(state=states())
def test_first_fit_allocates_like_upstream(oracle: Oracle, state):
    expected = oracle.ask(state)
    assert expected["kind"] != "badinput", expected["error"]
    actual = allocate(state)
    assert outcome(actual) == outcome(expected), (
        f"state: {json.dumps(state)}\nupstream: {json.dumps(expected)}\nproduct: {json.dumps(actual)}"
    )
