"""The comparison rules: an upstream search cut off by kube-scheduler's filter timeout, the stable
allocator's pool order."""

from __future__ import annotations

import pytest

from tests.oracle.client import Oracle
from tests.oracle.compare import agrees, outcome
from tests.oracle.product import allocate
from tests.oracle.test_regressions import CASES

TIMED_OUT = {"kind": "timeout", "error": "filter operation aborted: context deadline exceeded"}
STATE = {"gates": {}, "slices": []}


@pytest.mark.parametrize(
    ("product", "agreed"),
    [
        ({"kind": "nofit"}, True),
        ({"kind": "timeout", "error": "timed out trying to allocate devices (filter timeout 10 s)"}, True),
        ({"kind": "results", "results": []}, False),
        ({"kind": "error", "error": "x", "class": "input"}, False),
    ],
)
def test_an_upstream_timeout_agrees_only_with_not_placing(product: dict, agreed: bool) -> None:
    assert agrees(None, STATE, TIMED_OUT, product) is agreed  # type: ignore[arg-type]


def test_no_claims_agree_whether_or_not_the_empty_list_is_written() -> None:
    """Go's encoder leaves out an empty results list (upstream's table has cases without claims)."""
    assert outcome({"kind": "results"}) == outcome({"kind": "results", "results": []})


def test_the_product_pool_order_agrees_though_the_state_listing_never_gives_it(oracle: Oracle) -> None:
    """Listed b, a, c, upstream's stable allocator tries the pools in a rotation of that order (Go's map
    iteration), never a, b, c; a cluster may list the slices in any order, so the product's (driver, pool)
    order is still upstream's (the second disagreement of make oracle N=100000 SEED=37)."""
    given, _ = CASES[
        "the stable allocator may try pools in (driver, pool) order, whatever the listing (b, a, c)"
    ]
    first = oracle.ask(given)
    product = allocate(given)
    assert outcome(first) != outcome(product)
    assert agrees(oracle, given, first, product)
