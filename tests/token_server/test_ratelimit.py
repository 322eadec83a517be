"""The sliding-window rate limiter, driven by a fake clock."""

from __future__ import annotations

import pytest

from token_server.ratelimit import RateLimiter


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_limit_per_client_and_retry_after() -> None:
    clock = FakeClock()
    limiter = RateLimiter(3, 60.0, clock=clock)
    for step in range(3):
        clock.now += 1
        assert limiter.check("a") == 0.0, step
    clock.now += 1  # t=1004; oldest hit at 1001 leaves the window at 1061
    assert limiter.check("a") == pytest.approx(57.0)
    assert limiter.check("b") == 0.0  # other clients are independent
    clock.now = 1061.0
    assert limiter.check("a") == 0.0  # the oldest left, one slot free
    assert limiter.check("a") > 0


def test_refused_requests_do_not_extend_the_wait() -> None:
    clock = FakeClock()
    limiter = RateLimiter(1, 10.0, clock=clock)
    assert limiter.check("a") == 0.0
    for _ in range(5):
        clock.now += 1
        limiter.check("a")
    clock.now = 1010.0
    assert limiter.check("a") == 0.0


def test_memory_is_bounded() -> None:
    clock = FakeClock()
    limiter = RateLimiter(5, 60.0, clock=clock, max_clients=100)
    for i in range(1000):
        limiter.check(f"client-{i}")
    assert limiter.tracked_clients() <= 101
    clock.now += 61
    limiter.check("late")
    assert limiter.tracked_clients() == 1


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="limit"):
        RateLimiter(0)
