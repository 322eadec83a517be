"""`python -m lab.profile.summarize call-start`: caller joined -> agent active per room, read from LiveKit's own log
(its console format: time, level, logger, source, message, then the fields as JSON), grouped by many's level."""

from __future__ import annotations

import json
from pathlib import Path

from lab.profile.summarize import call_start, call_start_table


def line(t: str, message: str, **fields: object) -> str:
    return f"2026-12-03T14:07:{t}Z\tINFO\tlivekit\tservice/x.go:1\t{message}\t{json.dumps(fields)}"


def test_each_room_is_timed_from_its_caller_to_its_agent_and_grouped_by_level(tmp_path: Path) -> None:
    log = tmp_path / "livekit.log"
    log.write_text("\n".join([
        line("05.000", "starting RTC session", room="mc-a-n16-000", participant="user-1"),
        line("05.200", "assigned job to worker", room="mc-a-n16-000", jobID="AJ_1"),
        line("06.100", "starting RTC session", room="mc-a-n16-000", participant="agent-AJ_1"),
        line("06.150", "participant active", room="mc-a-n16-000", participant="agent-AJ_1"),
        line("06.200", "participant active", room="mc-a-n16-000", participant="agent-AJ_9"),  # a second agent: not it
        line("07.000", "starting RTC session", room="mc-a-n16-001", participant="user-2"),
        line("07.000", "failed to send job request", error="no servers available (received 1 responses)"),
        line("10.000", "participant active", room="mc-a-n16-001", participant="agent-AJ_2"),
        line("11.000", "starting RTC session", room="mc-a-n16-002", participant="user-3"),  # never an agent
        "a line that is not LiveKit's",
        line("12.000", "starting RTC session", room="other", participant="user-4"),
        line("12.500", "participant active", room="other", participant="agent-AJ_4"),
    ]) + "\n")
    report = call_start(log)
    assert report["refused_dispatches"] == 1
    level = report["levels"]["16"]
    assert (level["rooms"], level["no_agent"], level["max_s"]) == (3, 1, 3.0)
    first = next(r for r in level["rows"] if r["room"] == "mc-a-n16-000")
    assert first == {"room": "mc-a-n16-000", "assigned": 0.2, "agent_join": 1.1, "agent_active": 1.15}
    assert report["levels"]["all"]["p50_s"] == 0.5
    table = call_start_table(report)
    assert "| 16 | 3 | 1 | 2.08 / 2.91 / 3.0 |" in table and table.index("| 16 |") < table.index("| all |")
