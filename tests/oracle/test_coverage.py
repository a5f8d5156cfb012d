"""The generator draws what issue 36 asks every differential run to cover."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings

from tests.oracle.coverage import EXPECTED, features
from tests.oracle.states import states

STATES = 300


def test_300_states_cover_every_expected_feature() -> None:
    covered: set[str] = set()

    @seed(0)
    @settings(
        max_examples=STATES,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(state=states())
    def collect(state: dict[str, Any]) -> None:
        covered.update(features(state))

    collect()
    assert sorted(set(EXPECTED) - covered) == []
