"""lab/convbench/engines.py: each engine server's streams read over its real HTTP API (two servers on the tiny
checkpoint), a level's share per engine and its distance from an even split, and the many-calls table that shows
them."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from lab.convbench import engines
from lab.convbench.many import markdown
from tts_engine.server.app import start_server
from tts_engine.server.config import ServerConfig


async def _until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "the sampler wrote no such line in time"
        await asyncio.sleep(0.05)


async def test_the_sampler_reads_each_servers_streams_over_http(make_engine: Callable[..., Any], tmp_path: Path,
                                                                monkeypatch: Any) -> None:  # fmt: skip
    monkeypatch.setattr(engines.shutil, "which", lambda name: None)  # this machine has no nvidia-smi anyway
    runners, urls = [], []
    for _ in range(2):
        runner, port, _server = await start_server(make_engine(), config=ServerConfig(client_max_streams=0))
        runners.append(runner)
        urls.append(f"http://127.0.0.1:{port}")
    path = tmp_path / "engines.jsonl"
    sampler = engines.EngineSampler([*urls, "http://127.0.0.1:9"], path, interval_s=0.1).start()  # 9: nobody there
    try:
        await _until(lambda: len(engines.read(path)) >= 1)
        t0 = time.time()
        body = {"text": "Hello there.", "speaker": "serena", "max_frames": 2}
        async with aiohttp.ClientSession() as session:
            for _ in range(2):  # two streams on the first server, none on the second
                async with session.post(f"{urls[0]}/tts/stream", json=body) as r:
                    assert r.status == 200
                    await r.read()
        await _until(lambda: any(r["engines"][0]["started"] == 2 for r in engines.read(path)))
        t1 = time.time() + 1.0
    finally:
        await asyncio.to_thread(sampler.stop)
        for runner in runners:
            await runner.cleanup()
    records = engines.read(path)
    assert all(r["gpu_mib"] == {} for r in records)
    assert records[-1]["engines"][2] == {"url": "http://127.0.0.1:9", "open": None, "started": None}
    load = engines.summarize(records, t0, t1)
    first, second, absent = load["engines"]
    assert (first["started"], first["share"]) == (2, 1.0) and (second["started"], second["share"]) == (0, 0.0)
    assert absent["started"] is None and absent["open_max"] is None
    assert first["open_max"] in (0, 1) and second["open_max"] == 0
    assert load["off_even"] == 2.0  # three engines, one took all: 1.0 against an even 1/3


def _record(t: float, started: list[float], opened: list[int], mib: dict[str, int]) -> dict[str, Any]:
    return {"t_wall": t, "engines": [{"url": f"u{i}", "open": o, "started": s}
                                     for i, (s, o) in enumerate(zip(started, opened, strict=True))],
            "gpu_mib": mib}  # fmt: skip


def test_a_level_counts_the_streams_started_inside_it_and_the_most_memory() -> None:
    records = [_record(9.0, [10, 10], [0, 0], {"0": 100, "1": 100}),  # before the level: its baseline
               _record(10.0, [12, 11], [2, 1], {"0": 900, "1": 700}),
               _record(11.0, [20, 19], [5, 4], {"0": 950, "1": 800}),
               _record(12.0, [40, 40], [0, 0], {"0": 100, "1": 100})]  # after it  # fmt: skip
    load = engines.summarize(records, 10.0, 12.0)
    assert [e["started"] for e in load["engines"]] == [10, 9]
    assert [e["share"] for e in load["engines"]] == [0.526, 0.474]
    assert load["off_even"] == 0.053 and load["gpu_mib_max"] == {"0": 950, "1": 800}
    assert [(e["open_mean"], e["open_max"]) for e in load["engines"]] == [(3.5, 5), (2.5, 4)]
    assert engines.summarize(records, 100.0, 101.0) is None


def test_the_many_calls_table_shows_the_split_when_engines_were_sampled() -> None:
    load = engines.summarize([_record(9.0, [0, 0], [0, 0], {"0": 1, "1": 1}),
                              _record(10.0, [64, 64], [30, 31], {"0": 31204, "1": 30988})], 10.0, 11.0)  # fmt: skip
    level = json.loads(json.dumps({
        "calls": 128, "failed_calls": 0, "unanswered_turns": 0, "turns": 256, "failed_turns": 0,
        "response_ms": {"p50": 1, "p95": 2, "p99": 3}, "calls_with_gap": 0, "gaps": 0, "gap_ms_max": None,
        "stalls": 0, "stall_ms_max": None, "concealed_ms_total": None, "barge_in_silence_ms": {"p50": 1, "p95": 2},
        "caller_processes": [], "workers": [], "engines": load}))  # fmt: skip
    report = {"device": "d", "date": "2026-12-03", "command": "c", "levels": [level],
              "config": {"stand_in": "production", "caller_procs": 8, "arrival_window_s": 10}}  # fmt: skip
    table = markdown(report)
    assert "| 128 | 64 (0.5) / 64 (0.5), 0.0 % off even | 30 / 31 | 0: 31,204 / 1: 30,988 |" in table
    assert "streams each engine server started" not in markdown({**report, "levels": [{**level, "engines": None}]})
