"""``AnswerFirst``: background work waits while filter or prioritize is answered, never for ever."""

from __future__ import annotations

import threading

from allocator.cel.expr_engine import ExprEngine
from allocator.selectors import SelectorCache
from app.scheduling.answerfirst import AnswerFirst
from app.scheduling.service import SchedulingService
from app.state.cluster import ClusterState
from tests.builders import claim, device, device_class, node, pod, request, resource_slice


def _stepping_aside(first: AnswerFirst) -> tuple[threading.Thread, threading.Event]:
    """A thread that steps aside once and then sets the event it returns."""
    done = threading.Event()

    def work() -> None:
        first.step_aside()
        done.set()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread, done


def test_background_work_goes_on_when_nothing_is_answered():
    first = AnswerFirst(longest_wait=3600)
    thread, done = _stepping_aside(first)
    assert done.wait(30), "step_aside waited with no answer being given"
    thread.join(30)


def test_background_work_waits_for_the_answer_in_flight():
    first = AnswerFirst(longest_wait=3600)
    with first.answering():
        assert first.answering_now
        thread, done = _stepping_aside(first)
        assert not done.wait(0.2)  # still answering: the step waits
    assert done.wait(30), "the step did not go on once the answer was given"
    assert not first.answering_now
    thread.join(30)


def test_overlapping_answers_end_when_the_last_does():
    first = AnswerFirst(longest_wait=3600)
    with first.answering():
        with first.answering():
            pass
        assert first.answering_now
        thread, done = _stepping_aside(first)
        assert not done.wait(0.2)
    assert done.wait(30)
    thread.join(30)


def test_a_long_answer_delays_background_work_by_at_most_the_longest_wait():
    first = AnswerFirst(longest_wait=0.05)
    with first.answering():
        thread, done = _stepping_aside(first)
        assert done.wait(30), "step_aside waited past longest_wait"
    thread.join(30)


def test_a_step_late_in_a_long_answer_goes_on_at_once():
    """A cold answer (seconds) must not hold the watches back all along: it has priority for its first
    ``longest_wait`` only."""
    now = [100.0]
    first = AnswerFirst(longest_wait=10.0, clock=lambda: now[0])
    with first.answering():
        thread, done = _stepping_aside(first)
        assert not done.wait(0.2)  # 0 s into the answer: the step waits
        now[0] += 11.0
        with first.answering():  # a second answer overlapping the first does not restart the clock
            later, later_done = _stepping_aside(first)
            assert later_done.wait(30), "a step 11 s into the answers waited"
        later.join(30)
    assert done.wait(30)
    thread.join(30)


def test_an_answer_that_raises_still_ends():
    first = AnswerFirst()
    try:
        with first.answering():
            raise RuntimeError("bad body")
    except RuntimeError:
        pass
    assert not first.answering_now


def test_a_bind_plans_once_the_answer_in_flight_is_given():
    """The bind verb is background work to kube-scheduler (it binds apart from its cycle)."""
    driver = "gpu.example.com"
    state = ClusterState.from_objects(
        [
            ("Node", node("n1")),
            ("DeviceClass", device_class("gpu", f'device.driver == "{driver}"')),
            ("ResourceSlice", resource_slice("n1-gpus", driver, "n1", [device("gpu-0")])),
            ("ResourceClaim", claim("ml", "one", [request("gpu", "gpu")])),
            ("Pod", pod("ml", "p", ["one"])),
        ]
    )
    service = SchedulingService(state, SelectorCache(ExprEngine()))
    first = service.answer_first
    first.longest_wait = 3600
    bound: list[list[str]] = []
    with first.answering():
        binding = threading.Thread(target=lambda: bound.append(service.bind("ml", "p", "uid-pod-ml-p", "n1")))
        binding.start()
        binding.join(0.2)
        assert binding.is_alive() and not state.inventory.is_allocated((driver, "n1", "gpu-0"))
    binding.join(30)
    assert bound == [["ml/one: gpu.example.com/n1/gpu-0"]]


def test_work_an_answer_waits_on_does_not_step_aside_for_it():
    first = AnswerFirst(longest_wait=3600)
    with first.answering():
        with first.waiting_on_background():
            thread, done = _stepping_aside(first)
            assert done.wait(30), "a step waited for the answer that waits on it"
            thread.join(30)
        thread, done = _stepping_aside(first)
        assert not done.wait(0.2)  # the answer has priority again
    assert done.wait(30)
    thread.join(30)


class _ClaimWrites:
    """A binder that can delete and release claims, noting whether an answer had priority meanwhile."""

    def __init__(self, first: AnswerFirst) -> None:
        self.first = first
        self.answering_during: list[bool] = []

    def bind(self, plan: object) -> None:
        raise AssertionError("not a bind")

    def delete_claim(self, key: str, uid: str) -> bool:
        self.answering_during.append(self.first.answering_now)
        return True

    def release_claim(self, claim: object, pod_uid: str) -> bool:
        self.answering_during.append(self.first.answering_now)
        return True


def test_postfilter_writes_do_not_step_aside_for_the_filter_that_makes_them():
    """Filter deletes a leftover extended-resource claim, or releases an unusable one, through the API
    client, which steps aside for answers: not for the one waiting on that request."""
    service = SchedulingService(ClusterState(), SelectorCache(ExprEngine()))
    writes = _ClaimWrites(service.answer_first)
    service.binder = writes
    with service.answer_first.answering():
        assert service._delete_stale_claims([("ml/leftover", "uid-1")])
        assert service._release(claim("ml", "unusable", [request("gpu", "gpu")]), "uid-pod")
        assert service.answer_first.answering_now
    assert writes.answering_during == [False, False]
