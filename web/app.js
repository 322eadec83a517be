// The call page: join a LiveKit room with a token from our server, talk to the agent, and show how fast it
// answers as heard here (see stats.js for what is measured). livekit-client comes from the UMD build that
// the token server serves at /vendor/livekit-client.umd.js (global `LivekitClient`).
//
// Join order: audio context (needs the click) -> microphone -> token -> connect -> publish the microphone,
// so each failure gets its own clear message: no mic, token error, LiveKit unreachable.
// Playback runs through that audio context (livekit-client's webAudioMix): the agent's track passes a
// PlaybackGate, which closes when the agent says it cut its reply (data topic "voice_agent.cut",
// agent/turn/cut_notice.py) and opens when it speaks again, so a barge-in silences the agent here within a few ms
// instead of after WebRTC's buffers drain. The agent's meter listens after the gate: it measures what is heard.
// The agent's presence (AgentWatch below): the page follows the newest agent in the room, says so when it is lost
// ("reconnecting": the token server's agent guard dispatches a new one) and never waits without a bound: after
// AGENT_JOIN_WAIT_MS / AGENT_RETURN_WAIT_MS it says what to do. "speaking" is shown only while the agent's audio
// arrives (its RTP packets), so a dead agent stops "speaking" within AUDIO_SILENT_MS + AUDIO_POLL_MS.
// Other people in the room (agent/callers.py): the agent talks with one caller at a time and says whom in its
// "voice_agent.caller" attribute; a page whose person is not that one says so. Transcript lines are labelled by
// the speaker's kind: you, the agent, or another caller (by name).
// Notices say what is true now: "silent" mid-reply for SILENT_NOTICE_MS gets a notice that goes when the agent's
// sound returns; an agent back after a loss is the same one (nothing lost) or a new one (asks to repeat, once it
// has stayed NEW_AGENT_SETTLE_MS), and that notice goes once the agent answers again.
// `window.voiceCall` exposes the live state for the browser tests and for debugging in the console.

import { LevelMeters, PlaybackGate, WorkletLoadError } from "./audio.js";
import { renderAgentState, renderLatency, renderLevel, showTranscriptChunk } from "./view.js";
import { AudioActivity, EnergyVad, TurnLatencyTracker } from "./stats.js";

const LK = window.LivekitClient;
const AGENT_STATE = "lk.agent.state";
const CUT_TOPIC = "voice_agent.cut";
const AGENT_JOIN_WAIT_MS = 20_000; // no agent since Join: say what to do (the server's agent guard keeps trying)
const AGENT_RETURN_WAIT_MS = 30_000; // the agent was lost and none came back (the worker restarts in ~15-25 s)
const AUDIO_SILENT_MS = 400; // "speaking" but no packet of its audio for this long: shown as silent
const SILENT_NOTICE_MS = 2_000; // silent mid-reply this long, with no other explanation: the page says so
const RESUMED_NOTICE_MS = 5_000; // "nothing was lost" is news for this long
// Another agent arrived while ours was lost: say the conversation was lost only once it has stayed this long. After
// LiveKit restarts, the page's new room can dispatch a stand-in before the call's own agent reconnects (~2 s later);
// the stand-in then leaves (agent/one_agent.py) and the page's agent is back with nothing lost.
const NEW_AGENT_SETTLE_MS = 3_000;
const AUDIO_POLL_MS = 150;
// When LiveKit's connection drops, livekit-client retries after these delays (each +/-50 % jitter; then it gives up
// and the page says Disconnected). Its default (0, 0.3, 1.2, 2.7, 4.8, then 7 s) waits up to 4.8 s after a server
// that restarts in ~4 s is back: 9.4 s without the agent, measured (lab/faults/livekit_restart.py). Every 0.6 s for
// the first ~12 s, then every 2 s, about as long in all as the default (~42 s).
const RECONNECT_DELAYS_MS = [0, 300, ...Array(20).fill(600), ...Array(15).fill(2_000)];
const CALLER_ATTRIBUTE = "voice_agent.caller"; // whom the agent talks with (agent/callers.py)
const TEXT = {
  waiting: "Connected. Waiting for the agent to join…",
  joinTimeout: `No agent joined within ${AGENT_JOIN_WAIT_MS / 1000} s. The agent worker may be down or busy; the ` +
    "server keeps trying. You can wait, or press Leave and Join again later (on the server: scripts/start_all.sh status).",
  lost: "The agent was lost (its worker stopped). Reconnecting a new agent…",
  returnTimeout: `No agent came back within ${AGENT_RETURN_WAIT_MS / 1000} s. Press Leave, then Join to start ` +
    "again; if no agent joins then either, the agent worker is down (on the server: scripts/start_all.sh status).",
  back: "A new agent took over. It lost what was said before: please repeat your last question.",
  resumed: "The agent is back; nothing was lost.",
  stalled: `The agent stopped mid-reply (no sound from it for ${SILENT_NOTICE_MS / 1000} s). Its worker may be ` +
    "stalled; the page waits for it.",
  otherCaller: "The agent is talking with another person in this room and answers one caller at a time: you " +
    "will be heard when they leave. For a call of your own, press Leave and Join with the Room field empty.",
  yourTurn: "The other caller left: the agent is talking with you now.",
  reconnecting: "The connection to LiveKit was lost; reconnecting…",
  serverDown: "Token server unreachable: the page cannot load its audio module from it",
};
const $ = (id) => document.getElementById(id);

class UserFacingError extends Error {}

// `?audio_latency=interactive|balanced|playback` trades the agent's playback delay for fewer dropouts on a slow
// device; by default the page's audio context asks for the smallest output buffer (web/audio.js says why).
function audioLatencyHint() {
  const asked = new URLSearchParams(location.search).get("audio_latency");
  if (asked === null) return 0;
  if (["interactive", "balanced", "playback"].includes(asked)) return asked;
  console.warn(`audio_latency=${asked} is not one of interactive, balanced, playback; using the smallest buffer`);
  return 0;
}

const call = {
  config: null,
  room: null,
  micTrack: null,
  meters: new LevelMeters({ latencyHint: audioLatencyHint() }),
  watchers: new Map(), // track sid or "mic" -> stop()
  leaving: false,
  tracker: null,
  vad: null,
  agentAudio: null,
  gate: null, // the agent's PlaybackGate while its track is subscribed
  cuts: [], // Unix ms at which each cut notice from the agent arrived
  agentPeakDb: -Infinity, // the loudest 10 ms of the agent heard in this call (after the gate)
  levels: { mic: 0, agent: 0 }, // level events metered so far (each 10 ms window), for the tests and the console
  log: [],
  agent: null, // AgentWatch while in a call
};
window.voiceCall = call;

function newDetectors() {
  const hangoverMs = call.config?.vad_silence_ms ?? 224;
  call.vad = new EnergyVad({ thresholdDb: -50, minSpeechMs: 60, hangoverMs });
  call.agentAudio = new AudioActivity({ thresholdDb: -55, silenceMs: 250 });
}
call.tracker = new TurnLatencyTracker({
  origin: () => call.meters.unixOffsetMs(), // level events are stamped on the audio context clock
  onRecord: (record) => { call.log.push(record); renderLatency(call); },
});
newDetectors();

function notice(kind, text) {
  const el = $("notice");
  el.textContent = text ?? "";
  el.className = `notice ${kind}`;
  el.hidden = !text;
}

function setStatus(text, kind) {
  const el = $("status");
  el.textContent = text;
  el.className = `pill ${kind}`;
}

function setButtons(inCall) {
  $("join").disabled = inCall;
  $("leave").disabled = !inCall;
  $("mute").disabled = !inCall;
  $("room-input").disabled = inCall;
  $("name-input").disabled = inCall;
}

// The worker describes its parts in participant attributes (agent/worker.py voice_attributes): say plainly
// when it speaks with the embedded random-weight checkpoint, and which parts are local stand-ins.
const PART_NAMES = { tts: "random-weight TTS", llm: "SmolLM2-135M (llama.cpp)", stt: "whisper tiny.en", livekit: "local LiveKit" };
function showAgentParts(attributes) {
  const el = $("agent-parts");
  const defaults = (attributes?.["voice_agent.defaults"] ?? "").split(",").filter(Boolean);
  const lines = [];
  if (attributes?.["voice_agent.tts_weights"] === "random") {
    lines.push("This agent speaks with a random-weight TTS checkpoint, so its voice babbles. " +
      "Set TTS_DEEP_STREAM_MODEL_DIR to real Qwen3-TTS weights for speech.");
  }
  if (defaults.length) lines.push(`Embedded defaults in use: ${defaults.map((d) => PART_NAMES[d] ?? d).join(", ")}.`);
  el.textContent = lines.join(" ");
  el.hidden = !lines.length;
  call.agentParts = { tts_weights: attributes?.["voice_agent.tts_weights"] ?? null, defaults };
}

// Which agent the page talks to and what it shows of it. presence: waiting (none since Join) | present | lost
// (the one we had left, none is here). shown: the agent's own state (lk.agent.state), except "silent" when it
// says speaking but its audio stopped, "reconnecting" when lost, "not here" while waiting. `history` keeps every
// change of `shown` with its Unix ms time, for the browser tests.
class AgentWatch {
  constructor(room) {
    this.room = room;
    this.identity = null;
    this.holder = null; // the agent that holds this page's conversation
    this.missing = false; // that agent left and has not come back (nor has another taken over)
    this.presence = "waiting";
    this.state = null;
    this.shown = null;
    this.history = [];
    this.notices = []; // each notice AgentWatch raised by itself, with its Unix ms time, for the browser tests
    this.packets = 0;
    this.lastAudioAt = 0;
    this.timer = null;
    this.poll = setInterval(() => this.pollAudio(), AUDIO_POLL_MS);
    this.wait(TEXT.waiting, AGENT_JOIN_WAIT_MS, TEXT.joinTimeout);
  }

  wait(text, ms, timeoutText) {
    clearTimeout(this.timer);
    notice(this.presence === "lost" ? "warn" : "info", text);
    this.timer = setTimeout(() => notice(this.presence === "lost" ? "error" : "warn", timeoutText), ms);
  }

  arrived(p) {
    const wasLost = this.presence === "lost";
    clearTimeout(this.timer);
    clearTimeout(this.newAgentTimer);
    // the agent that holds this page's conversation is back (its own connection: the session lives on), also when
    // a stand-in came in between (after a LiveKit restart the page's new room can dispatch one before the call's
    // agent is back; agent/one_agent.py sends it away)
    const returning = this.missing && p.identity === this.holder;
    this.identity = p.identity;
    this.presence = "present";
    this.packets = 0;
    this.setState(p.attributes[AGENT_STATE] ?? "initializing");
    showAgentParts(p.attributes);
    this.callerChanged(p.attributes[CALLER_ATTRIBUTE]);
    if (returning) {
      this.missing = false;
      // It rejoined a room where this page already was (LiveKit restarted and the page came back first): the
      // agent (LiveKit's Python SDK 1.1.21) then linked the caller again but never started reading the microphone,
      // and heard nothing more (lab/faults/livekit_restart.py: 5 of 10 tries, 2026-12-03). Publishing the
      // microphone again hands it a new publication; the cost is a brief gap in what the agent hears, once.
      republishMic(this.room);
      notice("info", TEXT.resumed);
      setTimeout(() => { if ($("notice").textContent === TEXT.resumed) notice("info", ""); }, RESUMED_NOTICE_MS);
    } else if (this.missing) {
      // another agent while ours is missing: it holds the conversation (lost) once it stayed a moment or answers
      notice("info", "");
      this.newAgentTimer = setTimeout(() => { if (this.identity === p.identity) this.tookOver(); },
        NEW_AGENT_SETTLE_MS);
    } else {
      this.holder ??= p.identity; // the first agent of this call
      if (!wasLost && [TEXT.waiting, TEXT.joinTimeout].includes($("notice").textContent)) notice("info", "");
    }
  }

  tookOver() {
    clearTimeout(this.newAgentTimer);
    this.holder = this.identity;
    this.missing = false;
    notice("info", TEXT.back);
  }

  // The agent says whom it talks with (agent/callers.py): another person here, or this page's.
  callerChanged(caller) {
    const mine = this.room.localParticipant.identity;
    const shown = $("notice").textContent;
    if (caller && caller !== mine) notice("warn", TEXT.otherCaller);
    else if (caller === mine && shown === TEXT.otherCaller) notice("info", TEXT.yourTurn);
    this.caller = caller ?? null;
  }

  left(p) {
    if (call.leaving || p.identity !== this.identity) return; // ours only (an older agent LiveKit drops late is not)
    if (p.identity === this.holder) this.missing = true; // a stand-in that leaves changes nothing of that
    const other = [...this.room.remoteParticipants.values()].filter((q) => q.isAgent && q.identity !== p.identity).pop();
    if (other) return this.arrived(other);
    clearTimeout(this.newAgentTimer);
    this.identity = null;
    this.presence = "lost";
    this.state = null;
    this.render();
    this.wait(TEXT.lost, AGENT_RETURN_WAIT_MS, TEXT.returnTimeout);
  }

  setState(state) {
    if (state === "speaking" && this.state !== "speaking") this.lastAudioAt = performance.now(); // its audio is due
    // a notice about what was lost is true until the conversation goes on: the agent thinks about a new question
    // (not "speaking": a new agent's first words are its own "I was cut off" line, before anything was repeated)
    if (state === "thinking" && [TEXT.back, TEXT.resumed].includes($("notice").textContent)) {
      notice("info", "");
    }
    // a new agent that thinks about a question before its settle time holds the conversation from now on
    if (state === "thinking" && this.missing && this.identity !== this.holder) {
      this.tookOver();
      notice("info", "");
    }
    this.state = state;
    this.render();
  }

  async pollAudio() {
    const p = this.identity && this.room.remoteParticipants.get(this.identity);
    const receiver = p && [...p.audioTrackPublications.values()].find((pub) => pub.track)?.track.receiver;
    if (receiver) {
      let packets = 0;
      try {
        (await receiver.getStats()).forEach((s) => { if (s.type === "inbound-rtp") packets += s.packetsReceived ?? 0; });
      } catch { return; }
      if (packets > this.packets) this.lastAudioAt = performance.now();
      this.packets = packets;
    }
    this.render();
  }

  render() {
    let shown = this.state;
    if (this.presence === "lost") shown = "reconnecting";
    else if (this.presence === "waiting") shown = null;
    else if (shown === "speaking" && performance.now() - this.lastAudioAt > AUDIO_SILENT_MS) shown = "silent";
    this.noticeSilence(shown);
    if (shown === this.shown) return;
    this.shown = shown;
    this.history.push({ at: performance.timeOrigin + performance.now(), shown });
    renderAgentState(shown);
  }

  // "speaking" with no sound for SILENT_NOTICE_MS, while nothing else explains it (the page's own connection is
  // up, the agent still in the room): say so; take it back once its sound returns or it stops "speaking".
  noticeSilence(shown) {
    const silentMs = performance.now() - this.lastAudioAt;
    const unexplained = shown === "silent" && this.room.state === "connected" && silentMs >= SILENT_NOTICE_MS;
    if (unexplained && !this.stalledNotice) {
      this.stalledNotice = true;
      this.notices.push({ at: performance.timeOrigin + performance.now(), notice: "stalled" });
      notice("warn", TEXT.stalled);
    } else if (!unexplained && this.stalledNotice && shown !== "silent") {
      this.stalledNotice = false;
      if ($("notice").textContent === TEXT.stalled) notice("info", "");
    }
  }

  stop() {
    clearTimeout(this.timer);
    clearInterval(this.poll);
  }
}

async function loadConfig() {
  try {
    const resp = await fetch("/api/config", { cache: "no-store" });
    if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
    call.config = await resp.json();
  } catch (err) {
    $("server-info").textContent = "";
    notice("error", `Cannot load the configuration from the token server (${err.message}). Is it running?`);
    return;
  }
  newDetectors();
  $("hangover").textContent = String(call.config.vad_silence_ms);
  const dev = call.config.dev ? " · dev keys" : "";
  $("server-info").textContent = `LiveKit ${call.config.url} · agent “${call.config.agent_name}”${dev}`;
  if (!LK) notice("error", "The LiveKit client library did not load: run scripts/setup.sh (npm ci in web/).");
}

// The audio context and its level worklet. The worklet's script comes from the token server, like the page and
// the token: when it cannot be fetched, that server is down (the page was loaded earlier). Join works again
// once it is back: LevelMeters keeps nothing of a failed load.
async function startAudio() {
  try {
    await call.meters.start();
  } catch (err) {
    if (!(err instanceof WorkletLoadError)) throw err;
    throw new UserFacingError(`${TEXT.serverDown} (${err.message}). Press Join again once it is back.`);
  }
}

// The microphone published again, the same track (not restarted): see AgentWatch.arrived.
function republishMic(room) {
  room.localParticipant.republishAllTracks(undefined, false).catch((err) => {
    console.warn("publishing the microphone again failed", err);
  });
}

// The microphone's meter (the page's own VAD, the latency table's "you") on the track's current MediaStreamTrack.
function watchMic() {
  call.watchers.get("mic")?.();
  call.watchers.set("mic", call.meters.watchCapture(call.micTrack.mediaStreamTrack, onMicLevel));
}

async function openMic() {
  if (!navigator.mediaDevices?.getUserMedia) {
    throw new UserFacingError("This page cannot use a microphone here: open it over https or on localhost.");
  }
  try {
    return await LK.createLocalAudioTrack({ echoCancellation: true, noiseSuppression: true, autoGainControl: true });
  } catch (err) {
    const why = {
      NotAllowedError: "Microphone access was denied. Allow it for this site (lock icon in the address bar) and press Join again.",
      NotFoundError: "No microphone found. Connect one and press Join again.",
      NotReadableError: "The microphone is busy or blocked by the system. Close other apps using it and try again.",
    }[err?.name];
    throw new UserFacingError(why ?? `Could not open the microphone: ${err?.message ?? err}`);
  }
}

// The token comes from LiveKit's standard token endpoint through livekit-client's own TokenSource
// (docs/token_server.md): POST {room_name, participant_name, room_config: {agents: [{agent_name}]}} ->
// {server_url, participant_token}; the room and identity the server chose are read back from the token.
const tokenSource = LK?.TokenSource.endpoint("/api/token");

async function fetchToken() {
  const options = {};
  const room = $("room-input").value.trim();
  const name = $("name-input").value.trim();
  if (room) options.roomName = room;
  if (name) options.participantName = name;
  if (call.config?.agent_name) options.agentName = call.config.agent_name;
  let details;
  try {
    details = await tokenSource.fetch(options, true); // force: a fresh token (and identity) for every Join
  } catch (err) {
    throw tokenError(err);
  }
  const claims = LK.decodeTokenPayload(details.participantToken);
  return {
    url: details.serverUrl, token: details.participantToken, room: claims.video?.room, identity: claims.sub,
    expires_at: claims.exp,
  };
}

// TokenSource.endpoint reports an HTTP error as "... received STATUS / BODY"; the body is the server's
// {error, field}. Anything else is a network failure.
function tokenError(err) {
  const answer = /received (\d+) \/ ([\s\S]*)$/.exec(err?.message ?? "");
  if (!answer) return new UserFacingError(`Token server unreachable (${err?.message ?? err}).`);
  let data = {};
  try { data = JSON.parse(answer[2]); } catch { /* not our JSON: show the text */ }
  const field = data.field ? ` [${data.field}]` : "";
  return new UserFacingError(`Token error (HTTP ${answer[1]})${field}: ${data.error ?? answer[2]}`);
}

async function connectRoom(room, grant) {
  try {
    await room.connect(grant.url, grant.token, { autoSubscribe: true, maxRetries: 1, websocketTimeout: 10000 });
  } catch (err) {
    const R = LK.ConnectionErrorReason;
    if (err instanceof LK.ConnectionError && err.reason === R.NotAllowed) {
      throw new UserFacingError(
        `LiveKit at ${grant.url} refused the token (HTTP ${err.status ?? "?"}): the token server and LiveKit ` +
          "must use the same LIVEKIT_API_KEY / LIVEKIT_API_SECRET.");
    }
    if (err instanceof LK.ConnectionError && err.reason === R.Cancelled) throw new UserFacingError("Join cancelled.");
    const reason = err?.reasonName ? `${err.reasonName}: ${err.message}` : err?.message ?? String(err);
    throw new UserFacingError(
      `Cannot reach LiveKit at ${grant.url} (${reason}). Is the LiveKit server running, and is LIVEKIT_URL right?`);
  }
}

function onMicLevel(db, t) {
  call.levels.mic += 1;
  renderLevel("mic-meter", db);
  const ev = call.vad.update(db, t);
  if (!ev) return;
  // while the agent talks with another person in the room it does not hear this page: no latency row for a
  // question it never heard (the first words after it turns to this page start a row as usual)
  const caller = call.agent?.caller;
  if (!caller || caller === call.room?.localParticipant.identity) call.tracker.handleUserEvent(ev);
  const el = $("you-state");
  el.textContent = ev.type === "speech_start" ? "talking" : "silent";
  el.className = `tag ${ev.type === "speech_start" ? "talking" : ""}`;
}

function onAgentLevel(db, t) {
  call.levels.agent += 1;
  renderLevel("agent-meter", db);
  if (db > call.agentPeakDb) call.agentPeakDb = db;
  const ev = call.agentAudio.update(db, t);
  if (ev) call.tracker.handleAgentEvent(ev);
}

function wireRoom(room) {
  const E = LK.RoomEvent;
  room.on(E.TrackSubscribed, (track, _pub, participant) => {
    if (track.kind !== LK.Track.Kind.Audio) return;
    if (participant.isAgent) {
      call.gate = new PlaybackGate(call.meters.ctx);
      track.setWebAudioPlugins([call.gate.node]); // source -> gate -> volume -> speakers
      call.watchers.set(track.sid, call.meters.watchNode(call.gate.node, onAgentLevel));
    }
    const el = track.attach(); // muted by livekit-client under webAudioMix; Chrome needs it to feed WebAudio
    $("remote-audio").append(el);
  });
  room.on(E.TrackUnsubscribed, (track) => {
    track.detach().forEach((el) => el.remove());
    call.watchers.get(track.sid)?.();
    call.watchers.delete(track.sid);
  });
  room.on(E.AudioPlaybackStatusChanged, () => { $("enable-audio").hidden = room.canPlaybackAudio; });
  room.on(E.ParticipantConnected, (p) => { if (p.isAgent) call.agent?.arrived(p); });
  room.on(E.ParticipantDisconnected, (p) => { if (p.isAgent) call.agent?.left(p); });
  room.on(E.DataReceived, (_payload, participant, _kind, topic) => {
    if (topic !== CUT_TOPIC || !participant?.isAgent || !call.gate) return;
    call.gate.close();
    call.cuts.push(performance.timeOrigin + performance.now());
  });
  room.on(E.ParticipantAttributesChanged, (changed, p) => {
    if (!p.isAgent || p.identity !== call.agent?.identity) return;
    if (changed[AGENT_STATE] === "speaking") call.gate?.open(); // its next reply: let it through
    if (AGENT_STATE in changed) call.agent.setState(changed[AGENT_STATE]);
    if (CALLER_ATTRIBUTE in changed) call.agent.callerChanged(changed[CALLER_ATTRIBUTE]);
    if (Object.keys(changed).some((k) => k.startsWith("voice_agent."))) showAgentParts(p.attributes);
  });
  // the SDK retries on its own (signal and media); it ends in Reconnected or, after its retries, Disconnected
  room.on(E.Reconnecting, () => { setStatus("reconnecting", "busy"); notice("warn", TEXT.reconnecting); });
  room.on(E.SignalReconnecting, () => setStatus("reconnecting", "busy"));
  room.on(E.Reconnected, () => {
    setStatus(`connected · ${room.name}`, "on");
    if ($("notice").textContent === TEXT.reconnecting) notice("info", "");
  });
  room.on(E.Disconnected, (reason) => {
    if (!call.leaving) {
      const why = LK.DisconnectReason?.[reason] ?? reason;
      notice("error", `Disconnected from LiveKit (${why}). Press Join to call again.`);
    }
    teardown();
  });
  room.registerTextStreamHandler("lk.transcription", async (reader, participantInfo) => {
    const { who, name } = speakerOf(room, participantInfo.identity);
    const segment = reader.info.attributes?.["lk.segment_id"] ?? reader.info.id;
    let text = "";
    try {
      for await (const chunk of reader) {
        text += chunk;
        showTranscriptChunk(segment, who, text, false, name);
      }
    } catch (err) {
      console.warn("transcript stream ended early", err);
    }
    showTranscriptChunk(segment, who, text, true, name);
  });
}

// Who said a transcribed line, by kind: this page's person, an agent, or another caller in the room (the agent
// publishes each caller's words under that caller's identity). An identity no longer here is another caller's.
function speakerOf(room, identity) {
  if (identity === room.localParticipant.identity) return { who: "you", name: "" };
  const p = room.remoteParticipants.get(identity);
  if (p?.isAgent) return { who: "agent", name: "" };
  return { who: "caller", name: p?.name || identity };
}

async function join(event) {
  event?.preventDefault();
  if (!LK) return notice("error", "The LiveKit client library did not load: run scripts/setup.sh (npm ci in web/).");
  if (!$("join-form").reportValidity()) return;
  setButtons(true);
  notice("info", "");
  setStatus("connecting", "busy");
  call.leaving = false;
  newDetectors(); // the latency table keeps earlier calls until "Reset"
  try {
    await startAudio();
    call.micTrack = await openMic();
    watchMic();
    // livekit-client restarts the microphone (a new MediaStreamTrack) when it rejoins after LiveKit restarted:
    // the meter follows it, or the page would go on metering the stopped one and measure no turn again
    call.micTrack.on(LK.TrackEvent.Restarted, watchMic);
    const grant = await fetchToken();
    call.grant = { url: grant.url, room: grant.room, identity: grant.identity, expires_at: grant.expires_at };
    $("room-input").value = grant.room;
    const room = new LK.Room({
      adaptiveStream: false, dynacast: false, webAudioMix: { audioContext: call.meters.ctx },
      reconnectPolicy: new LK.DefaultReconnectPolicy(RECONNECT_DELAYS_MS),
    });
    call.room = room;
    wireRoom(room);
    await connectRoom(room, grant);
    await room.localParticipant.publishTrack(call.micTrack, { source: LK.Track.Source.Microphone });
    setStatus(`connected · ${grant.room}`, "on");
    $("enable-audio").hidden = room.canPlaybackAudio;
    call.agent = new AgentWatch(room);
    const agent = [...room.remoteParticipants.values()].filter((p) => p.isAgent).pop();
    if (agent) call.agent.arrived(agent);
  } catch (err) {
    if (!(err instanceof UserFacingError)) console.error(err);
    call.leaving = true;
    await leaveRoom();
    notice("error", err.message);
  }
}

async function leaveRoom() {
  call.leaving = true;
  const room = call.room;
  if (room) await room.disconnect();
  teardown();
}

function teardown() {
  call.agent?.stop();
  for (const stop of call.watchers.values()) stop();
  call.watchers.clear();
  call.gate?.open();
  call.gate = null;
  call.micTrack?.stop();
  call.micTrack = null;
  call.room = null;
  $("remote-audio").replaceChildren();
  renderLevel("mic-meter", -Infinity);
  renderLevel("agent-meter", -Infinity);
  renderAgentState(null);
  showAgentParts(null);
  setButtons(false);
  setStatus("disconnected", "off");
  $("mute").textContent = "Mute";
}

async function toggleMute() {
  if (!call.micTrack) return;
  if (call.micTrack.isMuted) await call.micTrack.unmute();
  else await call.micTrack.mute();
  $("mute").textContent = call.micTrack.isMuted ? "Unmute" : "Mute";
}

$("join-form").addEventListener("submit", join);
$("leave").addEventListener("click", () => { leaveRoom().then(() => notice("info", "You left the call.")); });
$("mute").addEventListener("click", toggleMute);
$("reset-stats").addEventListener("click", () => { call.tracker.reset(); call.log = []; renderLatency(call); });
$("enable-audio").addEventListener("click", async () => {
  await call.room?.startAudio(); // a click is the user gesture browsers need to start playback
  $("enable-audio").hidden = call.room?.canPlaybackAudio ?? true;
});
// A closed tab, a reload or a navigation leaves the room at once (LiveKit's LEAVE on the signal connection, sent
// before the page goes; livekit-client's own disconnectOnPageLeave does the same, this does not rely on it):
// else LiveKit keeps the caller ~21 s, and with them the agent's call slot. Tested in tests/browser/test_page_faults.py.
window.addEventListener("pagehide", () => { call.room?.disconnect(); });
renderLatency(call);
loadConfig();
