"""The call page in headless Chromium: loads cleanly, Join fetches a real token, clear errors for an
unreachable LiveKit, a token error and a missing microphone, and the live P50/P95 table for injected events."""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

import numpy as np
import pytest
from livekit.api import TokenVerifier

pytestmark = pytest.mark.browser


def test_page_loads_without_console_errors(page, live_server) -> None:
    page.goto(live_server.base_url + "/")
    info = page.locator("#server-info")
    info.filter(has_text="LiveKit ws://127.0.0.1:").wait_for()
    assert page.evaluate("window.LivekitClient.version") == "2.23.0"
    assert page.locator("#hangover").inner_text() == "250"  # the agent's hangover, from /api/config
    assert page.locator("#join").is_enabled() and page.locator("#leave").is_disabled()
    assert page.locator("#notice").is_hidden()
    assert API_SECRET_NOT_IN(page.content(), live_server)
    assert page.problems == []


def API_SECRET_NOT_IN(html: str, live_server) -> bool:  # reads as a sentence in the assert
    return live_server.config.api_secret not in html


def test_join_fetches_token_then_reports_unreachable_livekit(page, live_server) -> None:
    page.goto(live_server.base_url + "/")
    page.locator("#server-info").filter(has_text="LiveKit").wait_for()
    page.fill("#name-input", "Browser Tester")
    with page.expect_response(lambda r: r.url.endswith("/api/token")) as token_info:
        page.click("#join")
    response = token_info.value
    # LiveKit's standard token endpoint, through livekit-client's own TokenSource.endpoint
    assert response.status == 201 and response.request.method == "POST"
    grant = response.json()
    assert (grant["participant_token"], grant["server_url"]) == (grant["token"], live_server.config.livekit_url)
    claims = TokenVerifier(live_server.config.api_key, live_server.config.api_secret).verify(grant["token"])
    assert claims.identity == grant["identity"] and claims.video.room == grant["room"]
    assert claims.name == "Browser Tester"
    assert [a.agent_name for a in claims.room_config.agents] == ["voice-agent"]
    assert response.request.post_data_json == {
        "participant_name": "Browser Tester", "room_config": {"agents": [{"agent_name": "voice-agent"}]}}
    assert page.evaluate("window.voiceCall.grant") == {  # read back from the token the page got
        "url": grant["url"], "room": grant["room"], "identity": grant["identity"], "expires_at": grant["expires_at"]}

    notice = page.locator("#notice.error")
    notice.wait_for()
    text = notice.inner_text()
    assert f"Cannot reach LiveKit at {live_server.config.livekit_url}" in text, text
    assert "Is the LiveKit server running" in text
    # the page is usable again: Join enabled, status back to disconnected, the room it got is kept
    page.locator("#join:enabled").wait_for()
    assert page.locator("#status").inner_text() == "disconnected"
    assert page.locator("#room-input").input_value() == grant["room"]
    assert live_server.config.api_secret not in page.content()


def test_token_error_is_shown(page, live_server) -> None:
    page.goto(live_server.base_url + "/")
    page.locator("#server-info").filter(has_text="LiveKit").wait_for()
    # a client that skips the form's own check still gets a clear server answer naming the field
    page.evaluate("document.getElementById('room-input').removeAttribute('pattern')")
    page.fill("#room-input", "no spaces allowed")
    page.click("#join")
    notice = page.locator("#notice.error")
    notice.wait_for()
    assert re.search(r"Token error \(HTTP 400\) \[room_name\]: room_name='no spaces allowed' is not allowed",
                     notice.inner_text())
    page.locator("#join:enabled").wait_for()


def test_unreachable_token_server_is_shown(page, live_server) -> None:
    page.goto(live_server.base_url + "/")
    page.locator("#server-info").filter(has_text="LiveKit").wait_for()
    page.route("**/api/token", lambda route: route.abort("connectionrefused"))
    page.click("#join")
    notice = page.locator("#notice.error")
    notice.wait_for()
    assert notice.inner_text().startswith("Token server unreachable ("), notice.inner_text()
    page.locator("#join:enabled").wait_for()


def test_missing_microphone_is_explained(page, live_server) -> None:
    # what Chromium answers on a machine without any audio input device
    page.add_init_script(
        "navigator.mediaDevices.getUserMedia = () => "
        "Promise.reject(new DOMException('Requested device not found', 'NotFoundError'));"
    )
    page.goto(live_server.base_url + "/")
    page.locator("#server-info").filter(has_text="LiveKit").wait_for()
    token_requests: list[str] = []
    page.on("request", lambda r: token_requests.append(r.url) if "/api/token" in r.url else None)
    page.click("#join")
    page.locator("#notice.error").wait_for()
    assert "No microphone found. Connect one and press Join again." in page.locator("#notice").inner_text()
    page.locator("#join:enabled").wait_for()
    assert token_requests == []  # no token is fetched without a microphone


def test_microphone_level_feeds_the_vad(page, live_server) -> None:
    """The fake microphone's beeps reach the level meter and the energy VAD through the AudioWorklet."""
    page.goto(live_server.base_url + "/")
    page.locator("#server-info").filter(has_text="LiveKit").wait_for()
    levels = page.evaluate(
        """async () => {
        const { LevelMeters } = await import('/audio.js');
        const meters = new LevelMeters();
        await meters.start();
        const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
        const got = [];
        const stop = meters.watch(stream.getAudioTracks()[0], (db, t) => got.push([db, t]));
        await new Promise((r) => setTimeout(r, 1500));
        stop();
        stream.getTracks().forEach((t) => t.stop());
        return got;
    }"""
    )
    dbs = [db for db, _ in levels if db is not None]
    times = [t for _, t in levels]
    assert len(levels) > 50, len(levels)  # ~10 ms windows
    assert all(b > a for a, b in zip(times, times[1:], strict=False))
    steps = np.diff(times)
    assert 5 < float(np.median(steps)) < 20
    assert max(dbs) > -40  # the beep is loud


def test_microphone_levels_are_stamped_when_spoken_not_when_heard(page, live_server) -> None:
    """A sound cannot be made after the page measured it. Metered like a played track, the microphone's levels
    map to the moment they would be heard, tens of ms after they reached the page: every user end of speech
    and barge-in onset counted that late, and response times that much short. watchCapture stamps them at
    capture, before they arrive."""
    page.goto(live_server.base_url + "/")
    page.locator("#server-info").filter(has_text="LiveKit").wait_for()
    result = page.evaluate(
        """async () => {
        const { LevelMeters } = await import('/audio.js');
        const meters = new LevelMeters();
        await meters.start();
        const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
        const track = stream.getAudioTracks()[0];
        const ahead = { played: [], captured: [] };  // stamp (Unix ms) minus when the page received it
        const stamp = (kind) => (db, t) =>
          ahead[kind].push(meters.unixOffsetMs() + t - (performance.timeOrigin + performance.now()));
        const stops = [meters.watch(track, stamp('played')), meters.watchCapture(track, stamp('captured'))];
        await new Promise((r) => setTimeout(r, 1500));
        stops.forEach((stop) => stop());
        track.stop();
        return { ahead, leadMs: meters.renderLeadMs(), captureMs: (track.getSettings().latency ?? 0) * 1000 };
    }"""
    )
    played, captured = (sorted(result["ahead"][k][20:]) for k in ("played", "captured"))  # after warm-up
    assert len(captured) > 50, result
    print({"lead_ms": result["leadMs"], "capture_ms": result["captureMs"], "played_p50": played[len(played) // 2]})
    assert result["leadMs"] > 0, result
    assert captured[-1] <= 1.0, captured[-10:]  # never stamped after it arrived (1 ms: clock mapping rounding)
    assert played[len(played) // 2] > 5.0, played  # the bias this removes: "heard" is later than "arrived"


def test_audio_context_asks_for_the_smallest_output_buffer(page, live_server) -> None:
    """The agent plays through the page's audio context: by default it renders as little ahead as the device
    allows; ?audio_latency= picks a safer buffer, and a value that is none of them is named in a warning."""
    warnings: list[str] = []
    page.on("console", lambda msg: warnings.append(msg.text) if msg.type == "warning" else None)
    leads = {}
    for query in ("", "?audio_latency=interactive", "?audio_latency=fast"):
        page.goto(live_server.base_url + "/" + query)
        page.locator("#server-info").filter(has_text="LiveKit").wait_for()
        leads[query] = page.evaluate(
            """async () => { const m = window.voiceCall.meters; await m.start();
               return { hint: m.latencyHint, leadMs: m.renderLeadMs(),
                        contextMs: (m.ctx.baseLatency + m.ctx.outputLatency) * 1000 }; }"""
        )
    print(leads)
    assert leads[""]["hint"] == 0 and leads["?audio_latency=interactive"]["hint"] == "interactive", leads
    # What the lead is for each hint is the browser's and the audio device's choice, not the page's: on the dev
    # box headless Chromium gives ~12 ms for 0 and 40 for "interactive", on the CI machine 11.9 and 10. The page's
    # part is to ask (above) and to report the lead the context really has, which the capture stamps rely on.
    for query, lead in leads.items():
        assert lead["leadMs"] == pytest.approx(lead["contextMs"]) and lead["leadMs"] > 0, (query, leads)
    assert leads["?audio_latency=fast"]["hint"] == 0, leads
    assert any("audio_latency=fast is not one of interactive" in w for w in warnings), warnings
    assert page.problems == []


def test_stats_table_shows_p50_p95_of_injected_events(page, live_server, tmp_path: Path) -> None:
    page.goto(live_server.base_url + "/")
    page.locator("#server-info").filter(has_text="LiveKit").wait_for()
    rng = random.Random(7)
    responses = [rng.randint(180, 1400) + 0.3 for _ in range(23)]
    silences = [rng.randint(40, 600) + 0.3 for _ in range(9)]
    hangover = 250
    page.evaluate(
        """([responses, silences, hangover]) => {
        const tr = window.voiceCall.tracker;
        let t = 10_000;
        for (const r of responses) {
          tr.handleUserEvent({ type: 'speech_start', t });
          tr.handleUserEvent({ type: 'speech_end', t: t + 900 + hangover, lastVoiceT: t + 900 });
          tr.handleAgentEvent({ type: 'audio_start', t: t + 900 + hangover + r });
          tr.handleAgentEvent({ type: 'audio_end', t: t + 4000 });
          t += 6000;
        }
        for (const s of silences) {
          tr.handleAgentEvent({ type: 'audio_start', t });
          tr.handleUserEvent({ type: 'speech_start', t: t + 500 });
          tr.handleAgentEvent({ type: 'audio_end', t: t + 500 + s });
          t += 6000;
        }
    }""",
        [responses, silences, hangover],
    )

    def row(series: str) -> list[float]:
        cells = page.locator(f"#latency tr[data-series={series}] td").all_inner_texts()
        return [float(c) for c in cells]  # n, last, P50, P95 in whole ms

    def expected(values: list[float]) -> list[float]:
        return [len(values), values[-1], float(np.percentile(values, 50)), float(np.percentile(values, 95))]

    for series, values in (
        ("response", responses),
        ("turnGap", [r + hangover for r in responses]),
        ("bargeIn", silences),
    ):
        assert row(series) == pytest.approx(expected(values), abs=0.5 + 1e-6), series
    # the module's own percentile agrees with numpy to float precision, not only after rounding
    exact = page.evaluate(
        "async (v) => { const s = await import('/stats.js'); return [s.percentile(v, 50), s.percentile(v, 95)]; }",
        responses,
    )
    assert exact == pytest.approx([np.percentile(responses, 50), np.percentile(responses, 95)], rel=1e-12)
    assert page.locator("#turn-log li").count() == 20  # the log keeps the last 20 records

    assert page.problems == []

    # for the review screenshot, also show how a failed join looks (LiveKit is a closed port here)
    page.click("#join")
    page.locator("#notice.error").wait_for()
    page.locator("#join:enabled").wait_for()
    assert page.locator("#latency tr[data-series=response] td.n").inner_text() == "23"  # a join keeps the stats
    shot = Path(os.environ.get("CALL_PAGE_SCREENSHOT", tmp_path / "call_page.png"))
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
    page.click("#reset-stats")
    assert page.locator("#latency tr[data-series=response] td.n").inner_text() == "0"
    assert page.locator("#turn-log li").count() == 0


def test_measurement_chain_on_scheduled_audio(page, live_server) -> None:
    """Real Chromium audio through audio.js + level-worklet.js + stats.js: a synthetic user and agent, switched on
    and off at exact AudioContext times, give the latencies that were scheduled (within the 10 ms windows)."""
    page.goto(live_server.base_url + "/")
    page.locator("#server-info").filter(has_text="LiveKit").wait_for()
    result = page.evaluate(
        """async () => {
        const { LevelMeters } = await import('/audio.js');
        const S = await import('/stats.js');
        const meters = new LevelMeters();
        await meters.start();
        const ctx = meters.ctx;
        const voice = (freq) => {
          const osc = ctx.createOscillator();
          osc.frequency.value = freq;
          const gain = ctx.createGain();
          gain.gain.value = 0;
          const dest = ctx.createMediaStreamDestination();
          osc.connect(gain).connect(dest);
          osc.start();
          return { gain: gain.gain, track: dest.stream.getAudioTracks()[0] };
        };
        const user = voice(300), agent = voice(520);
        const vad = new S.EnergyVad({ hangoverMs: 200 });
        const act = new S.AudioActivity();
        const tr = new S.TurnLatencyTracker();
        meters.watch(user.track, (db, t) => tr.handleUserEvent(vad.update(db, t)));
        meters.watch(agent.track, (db, t) => tr.handleAgentEvent(act.update(db, t)));
        const t0 = ctx.currentTime + 0.3;
        user.gain.setValueAtTime(0.3, t0);              // the user talks for 600 ms
        user.gain.setValueAtTime(0, t0 + 0.6);
        agent.gain.setValueAtTime(0.3, t0 + 1.25);      // the agent answers 650 ms after the last sound
        user.gain.setValueAtTime(0.3, t0 + 1.9);        // barge-in while the agent talks
        agent.gain.setValueAtTime(0, t0 + 2.08);        // the agent goes quiet 180 ms later
        user.gain.setValueAtTime(0, t0 + 2.3);
        await new Promise((r) => setTimeout(r, 3000));
        return tr.summary();
    }"""
    )
    print({k: v["last"] for k, v in result.items() if isinstance(v, dict)})
    assert result["response"]["n"] == 1 and result["bargeIn"]["n"] == 1, result
    assert result["response"]["last"] == pytest.approx(450, abs=25), result
    assert result["turnGap"]["last"] == pytest.approx(650, abs=25), result
    assert result["bargeIn"]["last"] == pytest.approx(180, abs=25), result


def test_playback_gate_silences_at_once_and_reopens(page, live_server) -> None:
    """audio.js's PlaybackGate in real Chromium audio: a tone through the gate, metered after it (what the page
    plays). close() silences it within the ramp (counted on the audio clock, one 10 ms meter window of slack),
    open() lets it through again, and a gate left closed opens by itself after maxClosedMs."""
    page.goto(live_server.base_url + "/")
    page.locator("#server-info").filter(has_text="LiveKit").wait_for()
    result = page.evaluate(
        """async () => {
        const { LevelMeters, PlaybackGate } = await import('/audio.js');
        const meters = new LevelMeters();
        await meters.start();
        const ctx = meters.ctx;
        const osc = ctx.createOscillator();
        const gate = new PlaybackGate(ctx, { rampMs: 5, maxClosedMs: 400 });
        osc.connect(gate.node);
        osc.start();
        const levels = [];
        meters.watchNode(gate.node, (db, t) => levels.push([t, db]));
        const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
        await sleep(300);
        const closedAt = ctx.currentTime * 1000;
        gate.close();
        await sleep(200);
        const reopenedAt = ctx.currentTime * 1000;
        gate.open();
        await sleep(200);
        gate.close();                                   // left closed: opens by itself after 400 ms
        const closedAgainAt = ctx.currentTime * 1000;
        await sleep(300);                               // this timer expires before the gate's, however late both run
        const closedAt300 = gate.closed;
        await sleep(400);
        const firstQuiet = (from) => levels.find(([t, db]) => t > from && db < -55)?.[0] ?? null;
        const firstLoud = (from) => levels.find(([t, db]) => t > from && db > -20)?.[0] ?? null;
        return {
          quietAfterClose: firstQuiet(closedAt) - closedAt,
          loudAfterOpen: firstLoud(reopenedAt) - reopenedAt,
          selfOpened: firstLoud(closedAgainAt + 100) - closedAgainAt,
          closedAt300,
          closed: gate.closed,
        };
    }"""
    )
    # audio-clock arithmetic: the 5 ms ramp, the 10.7 ms meter window it ends in and one more, and up to two
    # 2.7 ms render quanta before the audio thread applies what the main thread scheduled
    bound_ms = 5 + 2 * 10.7 + 2 * 2.7
    assert 0 < result["quietAfterClose"] <= bound_ms, result
    assert 0 < result["loudAfterOpen"] <= bound_ms, result
    # the gate's own timer runs on the page's main thread: still closed 300 ms after close() by a timer of the same
    # clock, open again by the end, and loud again in the audio within 400 ms more. Not `selfOpened >= 400`: the
    # audio clock falls behind the main thread's on a busy machine (377 ms measured for 400 in one CI run)
    assert result["closedAt300"] is True, result
    assert 0 < result["selfOpened"] <= 400 + 400, result
    assert result["closed"] is False, result


def test_transcript_lines_update_in_place_per_segment(page, live_server) -> None:
    page.goto(live_server.base_url + "/")
    page.locator("#server-info").filter(has_text="LiveKit").wait_for()
    page.evaluate(
        """async () => {
        const { showTranscriptChunk } = await import('/view.js');
        showTranscriptChunk('SG_1', 'you', 'What is the', false);
        showTranscriptChunk('SG_1', 'you', 'What is the weather?', true);
        showTranscriptChunk('SG_2', 'agent', 'It is', false);
        showTranscriptChunk('SG_2', 'agent', 'It is <b>sunny</b>.', false);
    }"""
    )
    lines = page.locator("#transcript p.line")
    assert page.locator("#transcript p.line .who").all_inner_texts() == ["You", "Agent"]
    # updated in place, and inserted as text, never as HTML
    assert page.locator("#transcript p.line .text").all_inner_texts() == ["What is the weather?", "It is <b>sunny</b>."]
    assert lines.nth(0).get_attribute("class") == "line you"
    assert lines.nth(1).get_attribute("class") == "line agent partial"
