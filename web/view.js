// DOM rendering for the call page: level meters, the latency table and log, the live transcript.
// Pure presentation: state lives in app.js (`call`) and stats.js.

const $ = (id) => document.getElementById(id);
const MAX_TRANSCRIPT_LINES = 200;
const MAX_LOG_LINES = 20;

export function formatMs(ms) {
  return Number.isFinite(ms) ? String(Math.round(ms)) : "–";
}

// Map -60..0 dBFS onto the bar width.
export function renderLevel(id, db) {
  const pct = Number.isFinite(db) ? Math.min(100, Math.max(0, ((db + 60) / 60) * 100)) : 0;
  $(id).style.width = `${pct.toFixed(0)}%`;
}

// The agent's state tag: its own state (listening, thinking, speaking, ...), "silent" (it says speaking, its audio
// stopped), "reconnecting" (it was lost: a new one is on its way), or "not here".
const SHOWN_CLASS = { silent: "state-idle", reconnecting: "state-none" };
export function renderAgentState(shown) {
  const el = $("agent-state");
  el.textContent = shown ?? "not here";
  el.className = `tag ${SHOWN_CLASS[shown] ?? `state-${shown ?? "none"}`}`;
}

export function renderLatency(call) {
  for (const row of document.querySelectorAll("#latency tbody tr")) {
    const s = call.tracker[row.dataset.series].summary();
    row.querySelector(".n").textContent = String(s.n);
    row.querySelector(".last").textContent = formatMs(s.last);
    row.querySelector(".p50").textContent = formatMs(s.p50);
    row.querySelector(".p95").textContent = formatMs(s.p95);
  }
  const ignored = call.tracker.ignoredBargeIns;
  $("ignored-barge-ins").textContent = ignored ? `${ignored} barge-in(s) the agent talked through.` : "";
  const items = call.log.slice(-MAX_LOG_LINES).reverse().map((r) => {
    const li = document.createElement("li");
    if (r.type === "turn") li.textContent = `turn: agent heard ${formatMs(r.responseMs)} ms after your end of speech`;
    else if (r.type === "barge_in") li.textContent = `barge-in: agent silent after ${formatMs(r.silenceMs)} ms`;
    else li.textContent = `barge-in ignored: agent kept talking ${formatMs(r.ms)} ms`;
    return li;
  });
  $("turn-log").replaceChildren(...items);
}

// who: "you" | "agent" | "caller" (another person in the room, shown with `name`).
export function showTranscriptChunk(segmentId, who, text, final, name = "") {
  const box = $("transcript");
  box.querySelector("p.muted")?.remove();
  let line = box.querySelector(`[data-segment="${CSS.escape(segmentId)}"]`);
  if (!line) {
    line = document.createElement("p");
    line.dataset.segment = segmentId;
    const label = document.createElement("span");
    label.className = "who";
    label.textContent = { you: "You", agent: "Agent" }[who] ?? (name ? `Other caller (${name})` : "Other caller");
    const body = document.createElement("span");
    body.className = "text";
    line.append(label, body);
    box.append(line);
    while (box.children.length > MAX_TRANSCRIPT_LINES) box.firstElementChild.remove();
  }
  line.className = `line ${who}${final ? "" : " partial"}`;
  line.querySelector(".text").textContent = text;
  box.scrollTop = box.scrollHeight;
}
