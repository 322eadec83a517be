"""callbench's arithmetic: the receiver's jitter buffer between snapshots."""

from __future__ import annotations

from agent.tools.callbench.bench import receiver_series


def test_receiver_series_is_per_interval_not_cumulative() -> None:
    def stats(delay: float, target: float, emitted: int) -> list[dict]:
        return [{"isAgent": True, "jitterBufferDelay": delay, "jitterBufferTargetDelay": target,
                 "jitterBufferMinimumDelay": target, "jitterBufferEmittedCount": emitted}]  # fmt: skip

    samples = [(2.0, stats(0.0, 0.0, 0)), (4.0, stats(2.0, 2.0, 100)), (6.0, stats(14.0, 4.0, 200)),
               (8.0, stats(14.0, 4.0, 200))]  # fmt: skip
    assert receiver_series(samples) == [
        {"t_s": 4.0, "delay_ms": 20.0, "target_ms": 20.0, "minimum_ms": 20.0},
        {"t_s": 6.0, "delay_ms": 120.0, "target_ms": 20.0, "minimum_ms": 20.0},  # 100 ms over target: seen
    ]  # nothing emitted in the last interval (the agent was silent): no row
