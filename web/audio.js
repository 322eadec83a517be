// Level metering for the call page: one AudioContext, one AudioWorklet ("level-meter") per watched track.
//
// Contract: `await meters.start()` (from a user gesture: browsers only start audio after one) creates the
// context and loads the worklet; when the worklet's script cannot be fetched it rejects with a WorkletLoadError
// and keeps nothing of the failure (not even the context), so a later start() (the next Join) fetches it again; `meters.watch(mediaStreamTrack, onLevel)` calls onLevel(db, tMs) about every
// 10 ms with the track's RMS level in dBFS and a timestamp on the context clock, the same clock for every
// track, so local and remote events can be subtracted. `meters.watchNode(audioNode, onLevel)` does the same
// for a node already in the context (the agent's playback gate: what the person hears). Both return a
// function that stops watching. The analysis path never reaches the speakers: the worklet outputs silence.
// Every tMs is on one scale: the context time that `unixOffsetMs()` maps to the moment the sound is heard.
// A played track is metered when the context renders it, which is exactly that. A local capture is not
// played: `meters.watchCapture(micTrack, onLevel)` stamps its levels when the sound was made, the render time
// less the context's lead over the speakers and the capture latency (headless Chromium: 40 + 10 ms with
// latencyHint "interactive", 12 + 10 ms with 0; metered like a played track, the user's words would count as
// said that late).
//
// The context asks for the smallest output buffer the device allows (`latencyHint: 0`): on the dev box, with
// "interactive" headless Chromium renders 40 ms ahead of the speakers, with 0 about 12, and the agent's voice
// (played through this context: livekit-client's webAudioMix) is heard ~30 ms sooner; what a given device grants
// is its own choice (on the CI machine 10 ms for "interactive", 11.9 for 0). A device that crackles with it
// can take `new LevelMeters({ latencyHint: "interactive" })`; the page passes `?audio_latency=interactive`.
//
// PlaybackGate: a GainNode in the agent's playback path (a livekit-client web-audio plugin). `close()` ramps it
// to 0 within `rampMs`: the agent cut its reply (agent/turn/cut_notice.py), and what WebRTC still delivers of it
// (~100 ms in flight and in the jitter buffer) must not be heard. `open()` lets the next reply through; the
// gate also opens by itself after `maxClosedMs`, so a lost "speaking" state can never mute the agent for good.

// The level worklet could not be loaded: its script comes from the server that serves the page (the token
// server), so this usually means that server is down. `url` is the script's; `cause` the browser's own error
// (Chromium: "AbortError: Unable to load a worklet's module.", reported as "Failed to load worklet module script").
export class WorkletLoadError extends Error {
  constructor(url, cause) {
    super(`cannot load the audio worklet ${url.pathname} from ${url.origin} (${cause?.message ?? cause})`);
    this.name = "WorkletLoadError";
    this.url = url;
    this.cause = cause;
  }
}

export class LevelMeters {
  constructor({ windowMs = 10, latencyHint = 0 } = {}) {
    this.windowMs = windowMs;
    this.latencyHint = latencyHint;
    this.ctx = null;
    this.loading = null;
  }

  async start() {
    if (!this.ctx) {
      const ctx = new AudioContext({ latencyHint: this.latencyHint });
      const url = new URL("./level-worklet.js", import.meta.url);
      this.ctx = ctx;
      this.loading = ctx.audioWorklet.addModule(url).catch((err) => {
        // A worklet keeps a failed module (the module map caches the failure for that URL): a retry on this
        // context fails the same way. Drop the context; the next start() makes a new one and fetches again.
        this.ctx = null;
        this.loading = null;
        ctx.close().catch(() => {});
        throw new WorkletLoadError(url, err);
      });
    }
    await this.loading;
    if (this.ctx.state !== "running") await this.ctx.resume();
  }

  now() {
    return this.ctx ? this.ctx.currentTime * 1000 : performance.now();
  }

  // Unix ms of context time 0, from the context's own clock-to-performance mapping (re-read each call, since
  // the audio clock drifts against the system clock), so a level event's t lines up with a server's wall
  // clock on the same host. Includes the output latency: a remote sound maps to when it is heard.
  unixOffsetMs() {
    if (!this.ctx) return null;
    const ts = this.ctx.getOutputTimestamp?.();
    if (ts && ts.performanceTime > 0) return performance.timeOrigin + ts.performanceTime - ts.contextTime * 1000;
    return performance.timeOrigin + performance.now() - this.ctx.currentTime * 1000;
  }

  // How far the context renders ahead of what is heard (ms): its own buffer and the output device's.
  renderLeadMs() {
    return this.ctx ? ((this.ctx.baseLatency || 0) + (this.ctx.outputLatency || 0)) * 1000 : 0;
  }

  watchCapture(mediaStreamTrack, onLevel) {
    const captureMs = (mediaStreamTrack.getSettings?.().latency ?? 0) * 1000;
    return this.watch(mediaStreamTrack, (db, t) => onLevel(db, t - this.renderLeadMs() - captureMs));
  }

  watch(mediaStreamTrack, onLevel) {
    if (!this.ctx) throw new Error("LevelMeters.start() must be awaited before watch()");
    const source = this.ctx.createMediaStreamSource(new MediaStream([mediaStreamTrack]));
    const stop = this.watchNode(source, onLevel);
    return () => {
      stop();
      source.disconnect();
    };
  }

  watchNode(sourceNode, onLevel) {
    if (!this.ctx) throw new Error("LevelMeters.start() must be awaited before watchNode()");
    const node = new AudioWorkletNode(this.ctx, "level-meter", {
      numberOfInputs: 1,
      numberOfOutputs: 1,
      channelCount: 1,
      channelCountMode: "explicit", // downmix to mono before measuring
      processorOptions: { windowMs: this.windowMs },
    });
    node.port.onmessage = (msg) => onLevel(msg.data.db, msg.data.t);
    sourceNode.connect(node);
    node.connect(this.ctx.destination); // keeps the node pulled by the graph; it only outputs silence
    return () => {
      node.port.onmessage = null;
      try { sourceNode.disconnect(node); } catch { /* already disconnected */ }
      node.disconnect();
    };
  }
}

export class PlaybackGate {
  constructor(ctx, { rampMs = 5, maxClosedMs = 1500 } = {}) {
    this.ctx = ctx;
    this.rampS = rampMs / 1000;
    this.maxClosedMs = maxClosedMs;
    this.node = ctx.createGain();
    this.closed = false;
    this.timer = null;
  }

  _rampTo(value) {
    const gain = this.node.gain;
    const t = this.ctx.currentTime;
    gain.cancelScheduledValues(t);
    gain.setValueAtTime(gain.value, t);
    gain.linearRampToValueAtTime(value, t + this.rampS); // a ramp, not a step: no click
  }

  close() {
    this._rampTo(0);
    this.closed = true;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.open(), this.maxClosedMs);
  }

  open() {
    clearTimeout(this.timer);
    this.timer = null;
    if (!this.closed) return;
    this.closed = false;
    this._rampTo(1);
  }
}
