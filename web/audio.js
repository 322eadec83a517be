// Level metering for the call page: one AudioContext, one AudioWorklet ("level-meter") per watched track.
//
// Contract: `await meters.start()` (from a user gesture: browsers only start audio after one) creates the
// context and loads the worklet; `meters.watch(mediaStreamTrack, onLevel)` calls onLevel(db, tMs) about every
// 10 ms with the track's RMS level in dBFS and a timestamp on the context clock, the same clock for every
// track, so local and remote events can be subtracted. It returns a function that stops watching.
// The analysis path never reaches the speakers: the worklet outputs silence; playback is the <audio> element.

export class LevelMeters {
  constructor({ windowMs = 10 } = {}) {
    this.windowMs = windowMs;
    this.ctx = null;
    this.loading = null;
  }

  async start() {
    if (!this.ctx) {
      this.ctx = new AudioContext({ latencyHint: "interactive" });
      this.loading = this.ctx.audioWorklet.addModule(new URL("./level-worklet.js", import.meta.url));
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

  watch(mediaStreamTrack, onLevel) {
    if (!this.ctx) throw new Error("LevelMeters.start() must be awaited before watch()");
    const source = this.ctx.createMediaStreamSource(new MediaStream([mediaStreamTrack]));
    const node = new AudioWorkletNode(this.ctx, "level-meter", {
      numberOfInputs: 1,
      numberOfOutputs: 1,
      channelCount: 1,
      channelCountMode: "explicit", // downmix to mono before measuring
      processorOptions: { windowMs: this.windowMs },
    });
    node.port.onmessage = (msg) => onLevel(msg.data.db, msg.data.t);
    source.connect(node);
    node.connect(this.ctx.destination); // keeps the node pulled by the graph; it only outputs silence
    return () => {
      node.port.onmessage = null;
      source.disconnect();
      node.disconnect();
    };
  }
}
