"""Filter passes on as many fitting nodes as kube-scheduler would score (its ``numFeasibleNodesToFind``),
in turn around the passing list. Expected counts worked out by hand from kube-scheduler v1.37.2's rule:
below 100 nodes all; ``percentage`` 0 is 50 minus nodes/125 (at least 5); never fewer than 100."""

from __future__ import annotations

import pytest

from app.scheduling.decisions import FilterOutcome
from app.scheduling.sampling import NodeSampler, nodes_to_score


@pytest.mark.parametrize(
    ("percentage", "nodes", "expected"),
    [
        (0, 99, 99),  # under 100 nodes: every one
        (0, 150, 100),  # 49 % is 73: raised to 100
        (0, 500, 230),  # 46 %
        (0, 5000, 500),  # 10 %
        (0, 10_000, 500),  # 50 - 80 is below 5: 5 %
        (30, 1000, 300),
        (100, 5000, 5000),
        (1, 5000, 100),  # 50 nodes: raised to 100
    ],
)
def test_nodes_to_score_follows_kube_scheduler(percentage, nodes, expected):
    assert nodes_to_score(percentage, nodes) == expected


def _names(count: int) -> list[str]:
    return [f"n{i}" for i in range(count)]


def test_samples_rotate_around_the_passing_nodes_in_the_order_asked():
    asked = _names(250)  # adaptive: 48 % of 250 is 120
    passed = [n for i, n in enumerate(asked) if i % 50 != 7]  # 245 fit
    sampler = NodeSampler(0)
    first = sampler.sample(FilterOutcome(passed=passed, in_request_order=True), asked)
    assert first.passed == passed[:120] and first.in_request_order
    second = sampler.sample(FilterOutcome(passed=passed), asked)
    assert second.passed == passed[120:240]
    third = sampler.sample(FilterOutcome(passed=passed), asked)
    # 240..244, then from the start again: kept in passing order
    assert third.passed == passed[:115] + passed[240:]


def test_every_fitting_node_is_passed_on_when_they_are_few():
    asked = _names(5000)
    outcome = FilterOutcome(passed=asked[:400], failed=dict.fromkeys(asked[400:], "no free device"))
    assert NodeSampler(0).sample(outcome, asked) is outcome  # 400 fit, 500 would be scored


def test_percentage_100_passes_on_every_node():
    asked = _names(5000)
    outcome = FilterOutcome(passed=asked)
    assert NodeSampler(100).sample(outcome, asked).passed == asked


def test_a_cut_leaves_the_kept_outcome_alone():
    asked = _names(300)
    outcome = FilterOutcome(passed=list(asked), failed={})
    cut = NodeSampler(0).sample(outcome, asked)
    assert len(cut.passed) == 144 and outcome.passed == asked  # 48 % of 300
