"""A claims shape's kept answer for a node list (``ShapeOutcome``): patched node by node, asked in one
order or another, it answers with the passing nodes in the order asked."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from allocator.inventory import NodeVersions
from app.scheduling.decisions import KeptDecision, ShapeOutcome, list_key, set_key

NAMES = [f"node-{i:02d}" for i in range(40)]

# What a node decides in a step: it fits, it does not, or it has no current decision (undecided).
_FITS, _FAILS, _UNDECIDED = "fits", "fails", "undecided"
_steps = st.lists(
    st.tuples(
        st.dictionaries(st.sampled_from(NAMES), st.sampled_from([_FITS, _FITS, _FITS, _FAILS, _UNDECIDED])),
        st.booleans(),  # the next call asks in another order
    ),
    max_size=12,
)


def _decisions(verdicts: dict[str, str]) -> dict[str, KeptDecision]:
    return {
        name: KeptDecision((1, 0), () if verdict == _FITS else None, None, "full", False)
        for name, verdict in verdicts.items()
        if verdict != _UNDECIDED
    }


def _fresh(names: list[str]) -> list[str]:
    """The names as a request decodes them: equal strings, new objects."""
    return [("x" + name)[1:] for name in names]


@given(st.sampled_from([_FITS, _FAILS]), _steps, st.randoms(use_true_random=False))
def test_the_kept_answer_is_the_asked_names_that_pass_in_the_order_asked(start, steps, rng: random.Random):
    versions = NodeVersions(1, {})
    order = list(NAMES)
    outcome = ShapeOutcome(list_key(order), set_key(order), 1, 0)
    outcome.record(order, _decisions(dict.fromkeys(order, start)), versions)
    passing = {name for name in order if start == _FITS}
    for verdicts, reorder in [*steps, ({}, False), ({}, False)]:
        outcome.record(verdicts, _decisions(verdicts), versions)
        passing |= {n for n, v in verdicts.items() if v == _FITS}
        passing -= {n for n, v in verdicts.items() if v != _FITS}
        if reorder:
            rng.shuffle(order)
        asked = _fresh(order)
        assert outcome.answers(asked, list_key(asked))
        answer = outcome.passing(asked)
        if answer is None:
            outcome.order(asked)
            answer = list(outcome.passed)
        assert answer == [name for name in order if name in passing]


def test_the_answer_is_cut_from_the_asked_names_once_the_order_is_asked_again():
    versions = NodeVersions(1, {})
    outcome = ShapeOutcome(list_key(NAMES), set_key(NAMES), 1, 0)
    outcome.record(NAMES, _decisions(dict.fromkeys(NAMES, _FITS)), versions)
    outcome.record(["node-03"], _decisions({"node-03": _FAILS}), versions)
    assert outcome.passing(_fresh(NAMES)) is None  # the first time: its places are not known yet
    asked = _fresh(NAMES)
    answer = outcome.passing(asked)
    assert answer == [n for n in NAMES if n != "node-03"]
    assert all(a is b for a, b in zip(answer, [n for n in asked if n != "node-03"], strict=True))
    # A node that fills up later is cut out too, and one freed comes back in its place.
    outcome.record(["node-07", "node-03"], _decisions({"node-07": _FAILS, "node-03": _FITS}), versions)
    assert outcome.passing(_fresh(NAMES)) == [n for n in NAMES if n != "node-07"]


def test_a_list_with_a_name_twice_is_answered_from_the_kept_names():
    names = [*NAMES, NAMES[0]]
    versions = NodeVersions(1, {})
    outcome = ShapeOutcome(list_key(names), set_key(names), 1, 0)
    outcome.record(names, _decisions(dict.fromkeys(names, _FITS)), versions)
    outcome.record(["node-01"], _decisions({"node-01": _FAILS}), versions)
    assert outcome.passing(names) is None
    assert outcome.passing(names) is None


def test_mostly_failing_nodes_are_answered_from_the_kept_names():
    versions = NodeVersions(1, {})
    outcome = ShapeOutcome(list_key(NAMES), set_key(NAMES), 1, 0)
    outcome.record(NAMES, _decisions(dict.fromkeys(NAMES, _FAILS)), versions)
    outcome.record(NAMES[:3], _decisions(dict.fromkeys(NAMES[:3], _FITS)), versions)
    assert outcome.passing(NAMES) is None
    assert outcome.passing(NAMES) is None
