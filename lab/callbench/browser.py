"""BrowserCall: the real call page in Debian Chromium (Playwright), with a WAV file as the microphone.

Contract
- `BrowserCall(page_url, mic_wav)` as a context manager launches headless Chromium with a fake capture
  device that loops `mic_wav` (`--use-file-for-fake-audio-capture`), opens the page and records console
  errors, page errors and failed requests in `problems`.
- `open_page(label)` opens another page of the call in the same browser (a second person in the room, with the
  same microphone WAV).
- `join(room)` presses Join and waits until the page says it is connected; `wait_for(js, timeout)` waits for
  a JS condition on the page; `snapshot()` returns what a person would see and what the page measured:
  agent state, the agent's parts, transcript lines, the latency records (`window.voiceCall.log`), the cut
  notices received (`cuts`), the loudest level of the agent as heard (`agentPeakDb`, after the page's playback
  gate), and WebRTC inbound-audio stats of the agent's track (bytes, packets, jitter buffer; its audio energy
  stays 0, since playback runs through the page's audio context, not the muted media element).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

BROWSER_FLAGS = [
    "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream",
    "--autoplay-policy=no-user-gesture-required",
    "--no-sandbox",  # CI containers run as root
]

SNAPSHOT_JS = """async () => {
  const call = window.voiceCall;
  const shown = (id) => (document.getElementById(id).hidden ? '' : document.getElementById(id).textContent);
  const lines = [...document.querySelectorAll('#transcript p.line')].map((p) => ({
    who: p.classList.contains('you') ? 'you' : p.classList.contains('caller') ? 'caller' : 'agent',
    final: !p.classList.contains('partial'),
    text: p.querySelector('.text').textContent,
  }));
  const inbound = [];
  const room = call.room;
  if (room) {
    for (const p of room.remoteParticipants.values()) {
      for (const pub of p.audioTrackPublications.values()) {
        const receiver = pub.track?.receiver;
        if (!receiver) continue;
        (await receiver.getStats()).forEach((s) => {
          if (s.type === 'inbound-rtp') inbound.push({
            identity: p.identity, isAgent: p.isAgent, bytesReceived: s.bytesReceived,
            packetsReceived: s.packetsReceived, audioLevel: s.audioLevel ?? null,
            totalAudioEnergy: s.totalAudioEnergy ?? null, jitterBufferDelay: s.jitterBufferDelay ?? null,
            jitterBufferEmittedCount: s.jitterBufferEmittedCount ?? null, jitter: s.jitter ?? null,
            jitterBufferTargetDelay: s.jitterBufferTargetDelay ?? null,
            jitterBufferMinimumDelay: s.jitterBufferMinimumDelay ?? null,
            concealedSamples: s.concealedSamples ?? null, totalSamplesReceived: s.totalSamplesReceived ?? null,
            concealmentEvents: s.concealmentEvents ?? null, packetsLost: s.packetsLost ?? null,
          });
        });
      }
    }
  }
  return {
    status: document.getElementById('status').textContent,
    agentState: document.getElementById('agent-state').textContent,
    agentParts: call.agentParts ?? null,
    agentPartsText: shown('agent-parts'),
    notice: shown('notice'),
    transcript: lines,
    log: call.log,
    cuts: call.cuts,  // Unix ms: each cut notice from the agent (its playback gate closed then)
    agentPeakDb: Number.isFinite(call.agentPeakDb) ? call.agentPeakDb : null,  // the agent as heard, loudest
    summary: call.tracker.summary(),
    inbound,
    // the page's audio clock onto Unix ms: when the context's render thread is starved its clock falls behind
    // and this offset grows; callbench reports how much over the call
    clockOffsetMs: call.meters.unixOffsetMs(),
  };
}"""


def chromium_path() -> str:
    for candidate in (os.environ.get("CHROMIUM_PATH"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).exists():
            return candidate
    raise FileNotFoundError("Chromium not found: install Debian chromium (scripts/setup.sh does) or set CHROMIUM_PATH")


class BrowserCall:
    def __init__(self, page_url: str, mic_wav: Path, *, timeout_ms: int = 30_000) -> None:
        self.page_url = page_url
        self.mic_wav = Path(mic_wav)
        self.timeout_ms = timeout_ms
        self.problems: list[str] = []
        self._pw: Any = None
        self._browser: Any = None
        self._context: Any = None
        self.page: Any = None

    def __enter__(self) -> BrowserCall:
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        flags = [*BROWSER_FLAGS, f"--use-file-for-fake-audio-capture={self.mic_wav}"]
        self._browser = self._pw.chromium.launch(executable_path=chromium_path(), headless=True, args=flags)
        self._context = self._browser.new_context()
        self._context.grant_permissions(["microphone"], origin=self.page_url.rstrip("/"))
        self.page = self.open_page()
        return self

    def open_page(self, label: str = "") -> Any:
        """A page of the call in this browser, loaded (the first is `page`; another is a second person with the same
        microphone WAV, as two tabs on one machine). Its problems go to `problems`, prefixed with `label`."""
        page = self._context.new_page()
        page.set_default_timeout(self.timeout_ms)
        prefix = f"{label}: " if label else ""
        page.on("console", lambda msg: self._on_console(msg, prefix))
        page.on("pageerror", lambda exc: self.problems.append(f"{prefix}pageerror: {exc}"))
        page.on("requestfailed", lambda req: self.problems.append(f"{prefix}requestfailed: {req.url} {req.failure}"))
        page.goto(self.page_url)
        page.wait_for_function("() => !document.getElementById('server-info').textContent.includes('loading')")
        return page

    def _on_console(self, message: Any, prefix: str = "") -> None:
        if message.type == "error":
            self.problems.append(f"{prefix}console.error: {message.text}")

    def join(self, room: str | None = None) -> None:
        if room:
            self.page.fill("#room-input", room)
        self.page.click("#join")
        self.page.wait_for_function("() => document.getElementById('status').textContent.startsWith('connected')")

    def wait_for(self, js: str, timeout_s: float, arg: Any = None) -> None:
        self.page.wait_for_function(js, arg=arg, timeout=timeout_s * 1000, polling=100)

    def snapshot(self) -> dict[str, Any]:
        return self.page.evaluate(SNAPSHOT_JS)

    def leave(self) -> None:
        self.page.click("#leave")
        self.page.wait_for_function("() => document.getElementById('status').textContent === 'disconnected'")

    def __exit__(self, *exc: object) -> None:
        try:
            if self._browser is not None:
                self._browser.close()
        finally:
            if self._pw is not None:
                self._pw.stop()
