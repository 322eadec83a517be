// AudioWorklet processor "level-meter": posts the RMS level (dBFS) of its input every `windowMs` (default 10),
// stamped with the AudioContext clock in ms at the end of the window. It runs on the audio thread, so the
// timestamps stay exact when the tab is in the background (timers there are throttled to 1 s).
class LevelMeterProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const windowMs = options?.processorOptions?.windowMs ?? 10;
    this.windowFrames = Math.max(128, Math.round((sampleRate * windowMs) / 1000));
    this.sumSquares = 0;
    this.frames = 0;
  }

  process(inputs) {
    const channel = inputs[0]?.[0];
    const blockFrames = channel ? channel.length : 128; // no input connected yet: count it as silence
    if (channel) {
      for (let i = 0; i < channel.length; i++) this.sumSquares += channel[i] * channel[i];
    }
    this.frames += blockFrames;
    if (this.frames >= this.windowFrames) {
      const rms = Math.sqrt(this.sumSquares / this.frames);
      this.port.postMessage({
        db: rms > 0 ? 20 * Math.log10(rms) : -Infinity,
        t: (currentTime + blockFrames / sampleRate) * 1000,
      });
      this.sumSquares = 0;
      this.frames = 0;
    }
    return true;
  }
}

registerProcessor("level-meter", LevelMeterProcessor);
