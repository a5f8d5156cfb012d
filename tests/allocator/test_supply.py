"""``allocator.supply.falls_short``: Hall's condition, checked against cases worked out by hand."""

from __future__ import annotations

import pytest

from allocator.supply import falls_short

CASES = [
    # (demands, shareable devices, short?)
    ([(1, {"a"}), (1, {"a"})], set(), True),  # two requests, one device
    ([(1, {"a", "b"}), (1, {"a"})], set(), False),  # the first must move to b
    ([(2, {"a", "b", "c"}), (2, {"b", "c"})], set(), True),  # four devices wanted, three exist
    ([(2, {"a", "b", "c"}), (1, {"c"})], set(), False),
    ([(3, {"a", "b"})], set(), True),  # more than the request's own devices
    ([(2, {"a"}), (1, {"a"})], {"a"}, False),  # a multi-allocatable device serves them all
    ([(1, {"a"}), (1, {"a"}), (1, {"a", "b", "c"})], set(), True),  # the pair {a} alone is short
    ([(0, set()), (1, {"x"})], set(), False),
]


@pytest.mark.parametrize(("demands", "shareable", "short"), CASES)
def test_falls_short(demands: list[tuple[int, set[str]]], shareable: set[str], short: bool) -> None:
    assert falls_short(demands, shareable) is short
