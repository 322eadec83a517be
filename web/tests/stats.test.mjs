// Tests of web/stats.js with node's built-in runner: `node --test web/tests/` (pytest runs this too).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  AudioActivity, EnergyVad, LatencySeries, TurnLatencyTracker, percentile, rmsDb,
} from "../stats.js";

const close = (a, b, eps = 1e-6) => assert.ok(Math.abs(a - b) <= eps, `${a} != ${b}`);

test("percentile interpolates linearly between ranks (numpy's default)", () => {
  const v = [500, 100, 400, 200, 300];
  close(percentile(v, 50), 300);
  close(percentile(v, 95), 480); // rank 3.8 -> 400 + 0.8 * 100
  close(percentile(v, 0), 100);
  close(percentile(v, 100), 500);
  close(percentile([7], 95), 7);
  close(percentile([1, 2], 50), 1.5);
  assert.ok(Number.isNaN(percentile([], 50)));
  assert.throws(() => percentile([1], 101), RangeError);
  assert.deepEqual(v, [500, 100, 400, 200, 300], "input is not reordered");
});

test("rmsDb of a full-scale square wave is 0 dBFS, of half amplitude -6 dB", () => {
  close(rmsDb(Float32Array.from({ length: 480 }, (_, i) => (i % 2 ? 1 : -1))), 0);
  close(rmsDb(new Float32Array(480).fill(0.5)), 20 * Math.log10(0.5));
  assert.equal(rmsDb(new Float32Array(480)), -Infinity);
});

test("LatencySeries keeps the most recent samples and rejects non-numbers", () => {
  const s = new LatencySeries("x", { maxSamples: 3 });
  [10, 20, 30, 40].forEach((v) => s.add(v));
  assert.deepEqual(s.samples, [20, 30, 40]);
  assert.equal(s.last, 40);
  assert.deepEqual(s.summary(), { name: "x", n: 3, last: 40, p50: 30, p95: 39 });
  assert.throws(() => s.add(NaN), TypeError);
});

// Feed a level track sampled every `step` ms: [ [durationMs, levelDb], ... ] starting at t0.
function feed(detector, segments, { t0 = 0, step = 10 } = {}) {
  const events = [];
  let t = t0;
  for (const [duration, level] of segments) {
    for (const end = t + duration; t < end; t += step) {
      const ev = detector.update(level, t);
      if (ev) events.push(ev);
    }
  }
  return events;
}

test("EnergyVad reports onset and end-of-speech with the agent's hangover", () => {
  const vad = new EnergyVad({ thresholdDb: -50, minSpeechMs: 60, hangoverMs: 200 });
  // 1 s silence, 800 ms speech (1000..1790), then silence
  const events = feed(vad, [[1000, -80], [800, -20], [1000, -80]]);
  assert.deepEqual(events, [
    { type: "speech_start", t: 1000 },
    { type: "speech_end", t: 1790 + 200, lastVoiceT: 1790 },
  ]);
});

test("EnergyVad ignores clicks shorter than minSpeechMs and bridges pauses shorter than the hangover", () => {
  const vad = new EnergyVad({ thresholdDb: -50, minSpeechMs: 60, hangoverMs: 200 });
  const events = feed(vad, [[100, -80], [30, -10], [300, -80], [300, -20], [150, -80], [300, -20], [500, -80]]);
  assert.deepEqual(events.map((e) => e.type), ["speech_start", "speech_end"]);
  assert.equal(events[0].t, 430);
  assert.equal(events[1].lastVoiceT, 1170);
  assert.equal(events[1].t, 1370);
});

test("AudioActivity starts at the first audible frame and ends when it went quiet", () => {
  const act = new AudioActivity({ thresholdDb: -55, silenceMs: 250 });
  const events = feed(act, [[500, -90], [1000, -30], [100, -90], [500, -30], [600, -90]]);
  assert.deepEqual(events, [{ type: "audio_start", t: 500 }, { type: "audio_end", t: 2100 }]);
});

test("TurnLatencyTracker: response, turn gap and barge-in series from injected events", () => {
  const records = [];
  const tr = new TurnLatencyTracker({ bargeInTimeoutMs: 3000, onRecord: (r) => records.push(r) });
  const hang = 200;
  const responses = [310, 250, 900, 420, 380, 275, 600, 330, 510, 290];
  let t = 0;
  for (const r of responses) {
    tr.handleUserEvent({ type: "speech_start", t: t + 100 });
    tr.handleUserEvent({ type: "speech_end", t: t + 1000 + hang, lastVoiceT: t + 1000 });
    tr.handleAgentEvent({ type: "audio_start", t: t + 1000 + hang + r });
    tr.handleAgentEvent({ type: "audio_end", t: t + 3000 });
    t += 5000;
  }
  close(tr.response.p50, percentile(responses, 50));
  close(tr.response.p50, 355);
  close(tr.response.p95, 765, 1e-6); // rank 0.95 * 9 = 8.55: 600 + 0.55 * (900 - 600)
  close(tr.turnGap.p50, 555);
  assert.equal(tr.bargeIn.count, 0);

  // barge-ins: user starts while the agent is audible; the agent goes quiet N ms later
  const silences = [120, 95, 240, 180];
  for (const s of silences) {
    tr.onAgentAudioStart(t);
    tr.onUserSpeechStart(t + 700);
    tr.onUserSpeechStart(t + 750); // a second onset does not move the barge-in time
    tr.onAgentAudioEnd(t + 700 + s);
    t += 5000;
  }
  assert.deepEqual(tr.bargeIn.samples, silences);
  close(tr.bargeIn.p50, 150);
  close(tr.bargeIn.p95, 231);
  // an agent that talks on for longer than the timeout did not yield
  tr.onAgentAudioStart(t);
  tr.onUserSpeechStart(t + 100);
  tr.onAgentAudioEnd(t + 5000);
  assert.equal(tr.ignoredBargeIns, 1);
  assert.equal(tr.bargeIn.count, 4);
  assert.equal(records.filter((r) => r.type === "turn").length, 10);
  assert.equal(tr.summary().response.n, 10);
});

test("TurnLatencyTracker: agent audio without a finished user turn is not a turn; a later end replaces an earlier one", () => {
  const tr = new TurnLatencyTracker();
  tr.onAgentAudioStart(100); // greeting
  tr.onAgentAudioEnd(900);
  assert.equal(tr.response.count, 0);
  tr.onUserSpeechEnd(2200, 2000);
  tr.onUserSpeechEnd(3200, 3000); // went on talking
  tr.onAgentAudioStart(3500);
  assert.deepEqual(tr.response.samples, [300]);
  assert.deepEqual(tr.turnGap.samples, [500]);
  tr.reset();
  assert.equal(tr.response.count, 0);
});
