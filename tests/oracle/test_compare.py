"""The comparison rule for an upstream search cut off by kube-scheduler's filter timeout."""

from __future__ import annotations

import pytest

from tests.oracle.compare import agrees, outcome

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
