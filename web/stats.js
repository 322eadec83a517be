// Per-turn latency as heard in the browser: pure logic, no DOM, no WebAudio (tested in node and in Chromium).
//
// Contract
// - percentile(values, p): linear interpolation between closest ranks (numpy's default); NaN when empty.
// - rmsDb(samples): RMS level of float samples in dBFS (-Infinity for digital silence).
// - EnergyVad: fed (levelDb, tMs) every few ms from the local mic. Speech starts after `minSpeechMs` of
//   level >= thresholdDb (reported at the onset time); it ends once the level stayed below the threshold
//   for `hangoverMs`, the agent's VAD_SILENCE_MS, so "end of speech" here is the moment the agent's VAD also
//   declares it: t = last voiced time + hangover.
// - AudioActivity: fed (levelDb, tMs) from the agent's track; "start" at the first audible frame, "end" once
//   silent for `silenceMs`, reported at the start of that silent run (when the agent went quiet).
// - TurnLatencyTracker: joins those events into three series (ms):
//     response  = user end of speech (VAD, with hangover) -> first agent audio heard
//     turnGap   = user's last voiced frame -> first agent audio heard (= response + hangover)
//     bargeIn   = user starts talking while the agent is audible -> agent audio went silent
//   A barge-in the agent did not yield to within `bargeInTimeoutMs` is counted in `ignoredBargeIns`.
//   With `origin` (a function giving the Unix ms of t = 0; the page passes its audio clock's mapping), each
//   record also carries the moments as Unix ms
//   (`userEndAtMs`/`agentStartAtMs`, `userStartAtMs`/`silentAtMs`), so a tool on the same host can line
//   them up with the agent's trace (its `wall_t0`).

export function percentile(values, p) {
  if (!values.length) return NaN;
  if (!(p >= 0 && p <= 100)) throw new RangeError(`percentile p=${p} must be in 0..100`);
  const sorted = [...values].sort((a, b) => a - b);
  const rank = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo);
}

export function rmsDb(samples) {
  let sum = 0;
  for (let i = 0; i < samples.length; i++) sum += samples[i] * samples[i];
  const rms = Math.sqrt(sum / Math.max(1, samples.length));
  return rms > 0 ? 20 * Math.log10(rms) : -Infinity;
}

export class LatencySeries {
  constructor(name, { maxSamples = 500 } = {}) {
    this.name = name;
    this.maxSamples = maxSamples; // a long call keeps the most recent turns
    this.samples = [];
  }
  add(ms) {
    if (!Number.isFinite(ms)) throw new TypeError(`${this.name}: latency ${ms} is not a finite number`);
    this.samples.push(ms);
    if (this.samples.length > this.maxSamples) this.samples.shift();
  }
  get count() { return this.samples.length; }
  get last() { return this.samples.length ? this.samples[this.samples.length - 1] : NaN; }
  get p50() { return percentile(this.samples, 50); }
  get p95() { return percentile(this.samples, 95); }
  summary() { return { name: this.name, n: this.count, last: this.last, p50: this.p50, p95: this.p95 }; }
  clear() { this.samples = []; }
}

export class EnergyVad {
  constructor({ thresholdDb = -50, minSpeechMs = 60, hangoverMs = 200 } = {}) {
    this.thresholdDb = thresholdDb;
    this.minSpeechMs = minSpeechMs;
    this.hangoverMs = hangoverMs;
    this.reset();
  }
  reset() {
    this.state = "silent"; // silent | onset | speech
    this.onsetT = NaN;
    this.lastVoiceT = NaN;
  }
  get speaking() { return this.state === "speech"; }
  // Returns null, {type: "speech_start", t} or {type: "speech_end", t, lastVoiceT}.
  update(levelDb, t) {
    const loud = levelDb >= this.thresholdDb;
    if (this.state === "silent") {
      if (loud) { this.state = "onset"; this.onsetT = t; this.lastVoiceT = t; }
      return null;
    }
    if (this.state === "onset") {
      if (!loud) { this.state = "silent"; return null; }
      this.lastVoiceT = t;
      if (t - this.onsetT >= this.minSpeechMs) {
        this.state = "speech";
        return { type: "speech_start", t: this.onsetT };
      }
      return null;
    }
    if (loud) { this.lastVoiceT = t; return null; }
    if (t - this.lastVoiceT >= this.hangoverMs) {
      this.state = "silent";
      return { type: "speech_end", t: this.lastVoiceT + this.hangoverMs, lastVoiceT: this.lastVoiceT };
    }
    return null;
  }
}

export class AudioActivity {
  constructor({ thresholdDb = -55, silenceMs = 250 } = {}) {
    this.thresholdDb = thresholdDb;
    this.silenceMs = silenceMs;
    this.audible = false;
    this.quietSince = NaN;
  }
  // Returns null, {type: "audio_start", t} or {type: "audio_end", t} (t = when it went quiet).
  update(levelDb, t) {
    const loud = levelDb >= this.thresholdDb;
    if (!this.audible) {
      if (!loud) return null;
      this.audible = true;
      this.quietSince = NaN;
      return { type: "audio_start", t };
    }
    if (loud) { this.quietSince = NaN; return null; }
    if (Number.isNaN(this.quietSince)) this.quietSince = t;
    if (t - this.quietSince >= this.silenceMs) {
      this.audible = false;
      return { type: "audio_end", t: this.quietSince };
    }
    return null;
  }
}

export class TurnLatencyTracker {
  constructor({ bargeInTimeoutMs = 3000, onRecord = null, origin = null } = {}) {
    this.bargeInTimeoutMs = bargeInTimeoutMs;
    this.origin = origin; // () => Unix ms of t = 0 (null: records carry no absolute times)
    this.onRecord = onRecord; // called with each record, for the page's log
    this.response = new LatencySeries("response");
    this.turnGap = new LatencySeries("turnGap");
    this.bargeIn = new LatencySeries("bargeIn");
    this.ignoredBargeIns = 0;
    this.agentAudible = false;
    this.pendingTurn = null;
    this.bargeInAt = null;
  }
  onUserSpeechStart(t) {
    if (this.agentAudible && this.bargeInAt === null) this.bargeInAt = t;
  }
  onUserSpeechEnd(t, lastVoiceT) {
    // a later end replaces an earlier one: the user went on talking, so the agent's turn starts from here
    this.pendingTurn = { t, lastVoiceT };
  }
  onAgentAudioStart(t) {
    this.agentAudible = true;
    if (!this.pendingTurn) return;
    const record = { type: "turn", responseMs: t - this.pendingTurn.t, turnGapMs: t - this.pendingTurn.lastVoiceT };
    const o = this.origin?.() ?? null;
    if (o !== null) {
      record.userEndAtMs = o + this.pendingTurn.t;
      record.agentStartAtMs = o + t;
    }
    this.pendingTurn = null;
    this.response.add(record.responseMs);
    this.turnGap.add(record.turnGapMs);
    this.onRecord?.(record);
  }
  onAgentAudioEnd(t) {
    this.agentAudible = false;
    if (this.bargeInAt === null) return;
    const ms = Math.max(0, t - this.bargeInAt);
    const o = this.origin?.() ?? null;
    const at = o === null ? {} : { userStartAtMs: o + this.bargeInAt, silentAtMs: o + t };
    this.bargeInAt = null;
    if (ms > this.bargeInTimeoutMs) {
      this.ignoredBargeIns += 1;
      this.onRecord?.({ type: "barge_in_ignored", ms, ...at });
      return;
    }
    this.bargeIn.add(ms);
    this.onRecord?.({ type: "barge_in", silenceMs: ms, ...at });
  }
  // Route detector events here.
  handleUserEvent(ev) {
    if (ev?.type === "speech_start") this.onUserSpeechStart(ev.t);
    else if (ev?.type === "speech_end") this.onUserSpeechEnd(ev.t, ev.lastVoiceT);
  }
  handleAgentEvent(ev) {
    if (ev?.type === "audio_start") this.onAgentAudioStart(ev.t);
    else if (ev?.type === "audio_end") this.onAgentAudioEnd(ev.t);
  }
  summary() {
    return {
      response: this.response.summary(),
      turnGap: this.turnGap.summary(),
      bargeIn: this.bargeIn.summary(),
      ignoredBargeIns: this.ignoredBargeIns,
    };
  }
  reset() {
    this.response.clear(); this.turnGap.clear(); this.bargeIn.clear();
    this.ignoredBargeIns = 0; this.agentAudible = false; this.pendingTurn = null; this.bargeInAt = null;
  }
}
