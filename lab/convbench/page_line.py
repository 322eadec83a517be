"""PageLine: the call page in Chromium as a conductor line, its microphone fed by the harness (the CI short form).

Chromium's fake capture device loops one WAV, which cannot place a backchannel relative to the agent's speech.
So a Playwright init script (`MIC_JS`, test harness code: web/ is untouched) makes `getUserMedia` return a
WebAudio stream (48 kHz, a MediaStreamAudioDestinationNode) into which the harness schedules each clip; the
page publishes it as its microphone like any other. The same script listens through the page's public
`window.voiceCall` debugging surface: the agent's level after the page's playback gate (what the person hears,
via the page's own `meters.watchNode`), the agent's `lk.agent.state` (a room event) and the transcript lines.
- `async with PageLine(page_url) as line`: launches headless Chromium (callbench/browser.py's flags) on the page;
  `await line.join(room)` presses Join; `await line.ready(timeout)` waits for the agent to listen.
- `await line.play(pcm, marks)`: the clip starts 50 ms after the call on the mic's audio clock; each mark's time is
  that clock mapped to Unix time when it was scheduled (the context renders into the track as it plays: within a
  render quantum of the true capture). Returns once the clip has played.
- A poll every `POLL_S` drains what the page heard into `activity`, `agent_state` and the lists `record_into`
  hands to a Timeline. The page's level events are stamped when heard (its audio clock, `unixOffsetMs`).
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from lab.callbench.browser import BROWSER_FLAGS, chromium_path
from lab.convbench.activity import DEFAULT_THRESHOLDS, AgentActivity, Thresholds
from lab.convbench.timeline import Timeline

POLL_S = 0.03
LOADED_JS = "() => !document.getElementById('server-info').textContent.includes('loading')"
LEAD_S = 0.05

MIC_JS = """
(() => {
  const cb = { ctx: null, dest: null, levels: [], states: [], texts: [], gate: null, room: null, seen: new Map() };
  window.__convbench = cb;
  const original = navigator.mediaDevices.getUserMedia.bind(navigator.mediaDevices);
  navigator.mediaDevices.getUserMedia = async (constraints) => {
    if (!constraints || !constraints.audio) return original(constraints);
    if (!cb.ctx) {
      cb.ctx = new AudioContext({ sampleRate: 48000 });
      cb.dest = cb.ctx.createMediaStreamDestination();
      cb.dest.channelCount = 1;
    }
    await cb.ctx.resume();
    return new MediaStream(cb.dest.stream.getAudioTracks());
  };
  const unixOf = (ctxTime) => performance.timeOrigin + performance.now() + (ctxTime - cb.ctx.currentTime) * 1000;
  cb.play = (b64, marks, leadS) => {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const pcm = new Int16Array(bytes.buffer);
    const buffer = cb.ctx.createBuffer(1, pcm.length, 48000);
    const data = buffer.getChannelData(0);
    for (let i = 0; i < pcm.length; i++) data[i] = pcm[i] / 32768;
    const src = cb.ctx.createBufferSource();
    src.buffer = buffer;
    src.connect(cb.dest);
    const when = cb.ctx.currentTime + leadS;
    src.start(when);
    return { marks: marks.map((m) => unixOf(when + m / 48000)), end: unixOf(when + pcm.length / 48000) };
  };
  const AGENT_STATE = "lk.agent.state";
  cb.hook = () => {
    const call = window.voiceCall;
    if (!call) return;
    if (call.room && cb.room !== call.room) {
      cb.room = call.room;
      call.room.on("participantAttributesChanged", (changed, p) => {
        if (p.isAgent && AGENT_STATE in changed) cb.states.push([Date.now(), changed[AGENT_STATE]]);
      });
      call.room.on("participantConnected", (p) => {
        if (p.isAgent && p.attributes[AGENT_STATE]) cb.states.push([Date.now(), p.attributes[AGENT_STATE]]);
      });
      for (const p of call.room.remoteParticipants.values()) {
        if (p.isAgent && p.attributes[AGENT_STATE]) cb.states.push([Date.now(), p.attributes[AGENT_STATE]]);
      }
    }
    if (call.gate && cb.gate !== call.gate) {
      cb.gate = call.gate;
      call.meters.watchNode(call.gate.node, (db, t) => cb.levels.push([t + call.meters.unixOffsetMs(), db]));
    }
    for (const p of document.querySelectorAll("#transcript p.line")) {
      if (p.classList.contains("partial") || cb.seen.get(p) === p.textContent) continue;
      cb.seen.set(p, p.textContent);
      const who = p.classList.contains("you") ? "user" : p.classList.contains("caller") ? "caller" : "agent";
      cb.texts.push({ t: Date.now(), who,
                      text: p.querySelector(".text")?.textContent ?? "", final: true });
    }
  };
  cb.drain = () => {
    cb.hook();
    const out = { levels: cb.levels, states: cb.states, texts: cb.texts, gate: !!cb.gate };
    cb.levels = []; cb.states = []; cb.texts = [];
    return out;
  };
})();
"""


class PageLine:
    def __init__(self, page_url: str, thresholds: Thresholds = DEFAULT_THRESHOLDS, timeout_ms: int = 30_000) -> None:
        self.page_url = page_url
        self.activity = AgentActivity(thresholds)
        self.agent_state = ""
        self.agent_t: list[float] = []
        self.agent_db: list[float] = []
        self.states: list[tuple[float, str]] = []
        self.transcripts: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.gate = False
        self.timeout_ms = timeout_ms
        self._pw: Any = None
        self._browser: Any = None
        self.page: Any = None
        self._poller: asyncio.Task | None = None

    async def __aenter__(self) -> PageLine:
        from playwright.async_api import async_playwright  # heavy: only the CI short form drives a browser

        self._pw = await async_playwright().start()
        self._browser = await self._pw.chromium.launch(executable_path=chromium_path(), headless=True,
                                                       args=BROWSER_FLAGS)  # fmt: skip
        context = await self._browser.new_context()
        await context.add_init_script(MIC_JS)
        self.page = await context.new_page()
        self.page.set_default_timeout(self.timeout_ms)
        self.page.on("pageerror", lambda exc: self.problems.append(f"pageerror: {exc}"))
        self.page.on("console", lambda m: m.type == "error" and self.problems.append(f"console.error: {m.text}"))
        await self.page.goto(self.page_url)
        await self.page.wait_for_function(LOADED_JS)
        return self

    async def join(self, room: str) -> None:
        await self.page.fill("#room-input", room)
        await self.page.click("#join")
        await self.page.wait_for_function("() => document.getElementById('status').textContent.startsWith('connected')")
        self._poller = asyncio.ensure_future(self._poll())

    async def ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while not (self.gate and self.agent_state == "listening"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the agent was not listening on the page within {timeout:.0f} s "
                                   f"(state {self.agent_state!r}, playback gate {'on' if self.gate else 'absent'})")
            await asyncio.sleep(0.1)

    def now(self) -> float:
        return time.time()

    async def play(self, pcm: np.ndarray, marks: Sequence[int] = ()) -> list[float]:
        b64 = base64.b64encode(np.asarray(pcm, dtype=np.int16).tobytes()).decode()
        out = await self.page.evaluate("([b64, marks, lead]) => window.__convbench.play(b64, marks, lead)",
                                       [b64, list(marks), LEAD_S])  # fmt: skip
        await asyncio.sleep(max(0.0, out["end"] / 1000.0 - time.time()))
        return [m / 1000.0 for m in out["marks"]]

    async def _poll(self) -> None:
        while True:
            heard = await self.page.evaluate("() => window.__convbench.drain()")
            self.gate = heard["gate"]
            for t_ms, db in heard["levels"]:
                t, level = t_ms / 1000.0, db if db is not None else -200.0
                self.agent_t.append(t)
                self.agent_db.append(level)
                self.activity.update(t, level)
            for t_ms, state in heard["states"]:
                if state != self.agent_state:
                    self.agent_state = state
                    self.states.append((t_ms / 1000.0, state))
            self.transcripts += [{**x, "t": x["t"] / 1000.0} for x in heard["texts"]]
            await asyncio.sleep(POLL_S)

    def record_into(self, tl: Timeline) -> Timeline:
        tl.agent_t, tl.agent_db = list(self.agent_t), list(self.agent_db)
        tl.states, tl.transcripts = list(self.states), list(self.transcripts)
        tl.errors += self.problems
        return tl

    async def __aexit__(self, *exc: object) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        try:
            if self._browser is not None:
                await self._browser.close()
        finally:
            if self._pw is not None:
                await self._pw.stop()
