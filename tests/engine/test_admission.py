"""The admission policy (runtime/admission.py) with made-up clocks: capacity from measured step costs, and how
many waiting streams may start before the next step, deadline first."""

from __future__ import annotations

import pytest

from tts_engine.runtime.admission import AdmissionPolicy, Playout, capacity_from_costs


def test_capacity_is_the_largest_bucket_within_the_step_budget() -> None:
    costs = {1: 7.0, 16: 12.0, 64: 25.0, 128: 41.0, 192: 58.0, 256: 77.0}
    assert capacity_from_costs(costs, 60.0, 256) == 192
    assert capacity_from_costs(costs, 200.0, 256) == 256
    assert capacity_from_costs(costs, 200.0, 100) == 100  # never more than the slots
    assert capacity_from_costs(costs, 5.0, 256) == 1  # one stream always runs
    assert capacity_from_costs({}, 60.0, 16) == 16  # nothing measured (CPU): every slot


def test_slack_of_a_listener_with_no_buffer() -> None:
    # first packet at t=10.0 s, 0.24 s of audio handed out: the listener runs dry at 10.24 s
    p = Playout(t_first=10.0, emitted_s=0.24, steps_to_packet=2)
    assert p.slack_ms(now=10.1, step_ms=30.0) == pytest.approx(140.0 - 60.0)
    assert Playout(t_first=None, emitted_s=0.0, steps_to_packet=1).slack_ms(10.0, 30.0) is None


def test_with_nothing_running_a_burst_starts_up_to_the_per_step_bound() -> None:
    policy = AdmissionPolicy(max_per_step=4)
    assert policy.allowed(0.0, [], 30.0, 1.0, 2.0, waiting=10) == 4
    assert policy.allowed(0.0, [], 30.0, 1.0, 2.0, waiting=2) == 2
    assert policy.allowed(0.0, [], 30.0, 1.0, 2.0, waiting=0) == 0


def test_the_least_slack_decides_how_many_start() -> None:
    policy = AdmissionPolicy(max_per_step=8, guard_ms=5.0)
    roomy = Playout(t_first=0.0, emitted_s=1.0, steps_to_packet=1)  # 1 s ahead
    tight = Playout(t_first=0.0, emitted_s=0.08, steps_to_packet=1)  # due at 80 ms
    # at t = 30 ms the tight stream has 80 - 30 - 30 (its next step) = 20 ms; minus the guard (5) and the batch's
    # fixed cost (1): 14 ms, at 2 ms per admission -> 7
    assert policy.allowed(0.030, [roomy, tight], 30.0, 1.0, 2.0, waiting=10) == 7
    assert policy.allowed(0.030, [roomy], 30.0, 1.0, 2.0, waiting=10) == 8
    # too little slack left for even one: nobody starts before the step
    assert policy.allowed(0.043, [tight], 30.0, 1.0, 2.0, waiting=10) == 0
    # a stream that is late whatever happens does not hold newcomers back
    assert policy.allowed(0.200, [tight], 30.0, 1.0, 2.0, waiting=10) == 8
    assert policy.allowed(0.200, [tight, roomy], 30.0, 1.0, 2.0, waiting=3) == 3
    # a stream before its first packet has no playout deadline yet
    fresh = Playout(t_first=None, emitted_s=0.0, steps_to_packet=1)
    assert policy.allowed(0.0, [fresh], 30.0, 1.0, 2.0, waiting=3) == 3


def test_admissions_that_push_the_step_into_a_larger_bucket_count_its_cost() -> None:
    # the step of the running rows takes 30 ms; 5 or more admissions cross into a bucket whose step takes 40 ms
    policy = AdmissionPolicy(max_per_step=8, guard_ms=5.0)
    tight = Playout(t_first=0.0, emitted_s=0.08, steps_to_packet=1)  # due at 80 ms
    roomy = Playout(t_first=0.0, emitted_s=1.0, steps_to_packet=1)

    def step(k: int) -> float:
        return 30.0 if k <= 4 else 40.0

    # a fixed 30 ms estimate admits 7 (see above); with 7 the step is 40 ms and the tight stream would be late:
    # 80 - 30 - 40 - 5 - 1 - 7 * 2 < 0. k = 4 keeps the 30 ms step: 80 - 30 - 30 - 5 - 1 - 8 = 6 >= 0
    assert policy.allowed(0.030, [roomy, tight], 30.0, 1.0, 2.0, waiting=10) == 7
    assert policy.allowed(0.030, [roomy, tight], step, 1.0, 2.0, waiting=10) == 4
    # with room for the larger bucket too, the bound is the per-step cap again
    assert policy.allowed(0.030, [roomy], step, 1.0, 2.0, waiting=10) == 8
    # a stream two steps from its next packet pays the larger step twice
    two = Playout(t_first=0.0, emitted_s=0.16, steps_to_packet=2)  # due at 160 ms
    # k = 8: 160 - 30 - 80 - 5 - 1 - 16 = 28 >= 0 -> 8; with a 60 ms larger bucket: 160 - 30 - 120 < 0 -> k <= 4
    assert policy.allowed(0.030, [two], step, 1.0, 2.0, waiting=10) == 8
    assert policy.allowed(0.030, [two], lambda k: 30.0 if k <= 4 else 60.0, 1.0, 2.0, waiting=10) == 4


def test_a_declared_client_buffer_is_slack_that_admissions_may_use() -> None:
    tight = Playout(t_first=0.0, emitted_s=0.08, steps_to_packet=1)  # due at 80 ms for a listener with no buffer
    assert tight.slack_ms(0.043, 30.0, client_buffer_ms=100.0) == pytest.approx(80.0 - 43.0 - 30.0 + 100.0)
    # at 43 ms nobody may start for a listener with no buffer; with 100 ms buffered: (107 - 5 - 1) / 2 -> 50, cap 8
    assert AdmissionPolicy(max_per_step=8).allowed(0.043, [tight], 30.0, 1.0, 2.0, waiting=10) == 0
    assert AdmissionPolicy(max_per_step=8, client_buffer_ms=100.0).allowed(0.043, [tight], 30.0, 1.0, 2.0,
                                                                           waiting=10) == 8


def test_bad_policy_settings_are_named() -> None:
    with pytest.raises(ValueError, match="max_per_step=0"):
        AdmissionPolicy(max_per_step=0)
    with pytest.raises(ValueError, match="client_buffer_ms=-1"):
        AdmissionPolicy(client_buffer_ms=-1)
