"""``DecisionCache``: the bounds of what filter keeps, and which decision a pod's view reads.

Counts are by hand: a view counts 1, each private decision of the pod's current view 1 more."""

from __future__ import annotations

from app.scheduling.decisioncache import DecisionCache
from app.scheduling.decisions import KeptDecision, PodView, ShapeOutcome

FITS = KeptDecision((1, 0), (), 5, "", False)
FULL = KeptDecision((1, 0), None, 0, "claim \x000\x00, request gpu: full", False)


def view(uid: str, shape: bytes = b"s", *, shared: bool = True, spec: bytes = b"spec") -> PodView:
    return PodView(uid, shape, (f"ns/{uid}",), spec, shared)


def answer() -> ShapeOutcome:
    return ShapeOutcome(0, (0, 0), 1, 0)


def test_the_oldest_shape_goes_first_beyond_max_shapes():
    cache = DecisionCache(max_shapes=2)
    for shape in (b"a", b"b", b"c"):
        cache.remember(shape, "n1", FITS)
        cache.keep_answer(shape, answer())
    assert [cache.shared(s) is not None for s in (b"a", b"b", b"c")] == [False, True, True]
    assert [cache.answer(s) is not None for s in (b"a", b"b", b"c")] == [False, True, True]
    cache.remember(b"b", "n2", FULL)  # a shape kept already: nothing dropped
    assert cache.shared(b"b") == {"n1": FITS, "n2": FULL} and cache.shared(b"c") is not None


def test_views_and_private_decisions_count_together_and_the_oldest_pods_go_first():
    cache = DecisionCache(max_kept=4)
    first = cache.adopt(view("p1", shared=False), keep=False)  # 1
    cache.keep_private(first, "n1", FITS, None)  # 2
    cache.keep_private(first, "n2", FITS, None)  # 3
    cache.keep_private(first, "n2", FULL, None)  # the same node again: still 3
    assert cache.kept_count == 3
    second = cache.adopt(view("p2", shared=False), keep=False)  # 4
    cache.keep_private(second, "n1", FITS, None)  # 5 > 4: p1 and its 2 decisions go (5 - 3 = 2)
    assert cache.kept_count == 2
    assert cache.view("p1") is None and cache.view("p2") is second


def test_the_newest_view_is_never_dropped_even_over_the_bound():
    cache = DecisionCache(max_kept=1)
    only = cache.adopt(view("p1", shared=False), keep=False)
    cache.keep_private(only, "n1", FITS, None)
    cache.keep_private(only, "n2", FITS, None)
    assert cache.kept_count == 3 and cache.view("p1") is only


def test_a_view_replaced_by_a_new_filter_no_longer_counts_its_decisions():
    cache = DecisionCache()
    old = cache.adopt(view("p1", shared=False), keep=False)
    cache.keep_private(old, "n1", FITS, None)
    new = cache.adopt(view("p1", shared=False), keep=False)  # filter again: a new view
    assert new is not old and cache.kept_count == 1
    cache.keep_private(old, "n2", FITS, None)  # a late write to the replaced view is not counted
    assert cache.kept_count == 1


def test_score_and_reserve_keep_the_view_only_while_it_is_for_the_same_pod_spec_and_claims():
    cache = DecisionCache()
    filtered = cache.adopt(view("p1", shared=False), keep=False)
    cache.keep_private(filtered, "n1", FITS, None)
    assert cache.adopt(view("p1", shared=False), keep=True) is filtered
    changed = cache.adopt(view("p1", shared=False, spec=b"other"), keep=True)
    assert changed is not filtered and changed.private == {} and cache.kept_count == 1


def test_a_view_reads_its_private_decision_first_and_its_shapes_only_when_shared():
    cache = DecisionCache()
    cache.remember(b"s", "n1", FULL)
    cache.remember(b"s", "n2", FULL)
    shared = cache.adopt(view("p1"), keep=False)
    cache.keep_private(shared, "n2", FITS, None)
    own = cache.adopt(view("p2", shared=False), keep=False)
    assert cache.decision(shared, "n1") == (FULL, None)
    assert cache.decision(shared, "n2") == (FITS, None)
    assert cache.decision(own, "n1") is None


def test_clear_drops_everything_and_the_count():
    cache = DecisionCache()
    kept = cache.adopt(view("p1"), keep=False)
    cache.keep_private(kept, "n1", FITS, None)
    cache.remember(b"s", "n1", FITS)
    cache.keep_answer(b"s", answer())
    cache.clear()
    assert (cache.kept_count, cache.view("p1"), cache.shared(b"s"), cache.answer(b"s")) == (
        0,
        None,
        None,
        None,
    )
