"""Score recorded calls (timeline.Timeline): one row per item, so every miss traces back to its item; then totals.

Signals that the agent took a turn, all on the caller's clock:
- at the caller: its `lk.agent.state` goes to `thinking`, its audio starts (`activity`'s onset), its reply
  transcript arrives;
- in the worker's traces (same host, `wall_t0`): a turn's `turn_committed` point. A worker whose traces have no
  such point (today's VAD-only one) ends a user turn at the VAD's end of speech, where it opens the turn's trace
  (`vad_speech_end`, t0): every trace with a transcript counts as committed there, `unanswered` ones included
  (their words became a user message of their own; the reply that follows answers the half). Once any trace of
  a run has `turn_committed`, only that point counts (an early LLM request on a turn not yet committed is
  speculation, not a commit).
Rows and rules:
- Pause rows: a pause inside a turn is *cut* when a commit lies between its start (the last voiced sample before
  it) and `RESUME_SLACK_S` after the resume (the worker hears the resume that much later at most). The trace's
  commit catches a split that the caller sees only later (today's worker: `thinking` for the first half comes
  after the true end once STT and endpointing are done); `before_resume` says whether any signal came before
  the user resumed. `false_cutoff_rate` = cut / pauses.
- True-end rows: last voiced sample -> the first `thinking` after it (`decision_ms`), -> the trace's commit
  (`commit_ms`), -> the first agent audio (`audio_ms`), within `EOT_WINDOW_S`; and the expected words found in
  the user's final transcripts. On a turn cut at a pause (`cut_inside`) the first `thinking` after the end may
  belong to the cut-off half: the summary gives the delays of uncut turns too.
- Cued rows (backchannel, noise, barge-in): from the clip's first voiced sample. The agent *stopped* when, between
  that onset and `STOP_WINDOW_S` after the clip, it decided to (its state left `speaking`, which LiveKit does on a
  cut and on a pause, or its trace has an interruption) and its audio went silent (`Thresholds`) from at most
  `EVIDENCE_LEAD_S` before that decision on; the stop's time is the first silent frame. A silence with no decision
  is an audio dropout (the reply's frames came late: counted in `dropouts`, not a stop). It *ducked* when its level
  fell >= `duck_db` under its level before the cue and stayed audible (`duck_ms`: onset -> that duck or the stop,
  whichever came first). A stop is the worker's cut when its trace
  has an interruption decided then; it *resumed* when its audio comes back within `RESUME_WINDOW_S` with no
  `thinking` in between (a `thinking` first means it took the item as a turn: `answered`). A stop that was neither
  cut nor resumed was the reply's natural end (not an interruption) only where the worker traced that reply (a
  trace whose first frame was published up to `REPLY_TRACE_S` before the reply was heard) and recorded no
  interruption of it; where no trace holds the reply (today's worker leaves the reply to a turn it answered again
  after a cut untraced), a stop counts.
  False interruption = a backchannel or noise after which the agent stopped (cut or paused). Barge-in: onset ->
  silence (`silence_ms`), onset -> the first >= `duck_db` drop (`duck_ms`), a miss when it never went silent.
- Pause and true-end rows also say which wait the worker's judgement chose (`wait`: short | medium | long, from the
  traces' `turn_decision` at a commit and `pauses[].decision` for a pause held; None when nothing was judged or the
  worker traces no judgement), totalled as `by_wait`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from common.percentiles import percentiles
from lab.convbench.activity import DEFAULT_THRESHOLDS, FRAME_S, AgentActivity, Thresholds, level_windows, runs
from lab.convbench.timeline import Timeline

EOT_WINDOW_S = 15.0
STOP_WINDOW_S = 3.0
EVIDENCE_LEAD_S = 0.2
REPLY_TRACE_S = 1.5  # a reply's first frame is heard at the caller this long after its trace's publish at most
RESUME_WINDOW_S = 5.0
RESUME_SLACK_S = 0.2
SIGNALS = ("trace_commit", "thinking", "agent_audio", "agent_transcript")


def _first(times: list[float], lo: float, hi: float) -> float | None:
    return next((t for t in sorted(times) if lo <= t < hi), None)


def _ms(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round((b - a) * 1000.0, 1)


def _traces(tl: Timeline) -> list[dict[str, Any]]:
    return [tr for tr in tl.traces if "wall_t0" in tr and isinstance(tr.get("points"), dict)]


def commit_point(timelines: list[Timeline]) -> str | None:
    """Which trace point marks a commit in this run (module docstring); None without traces."""
    traces = [tr for tl in timelines for tr in _traces(tl)]
    if not traces:
        return None
    return "turn_committed" if any("turn_committed" in tr["points"] for tr in traces) else "vad_speech_end"


class Signals:
    """Everything in one timeline that says the agent took a turn, as sorted lists of Unix seconds."""

    def __init__(self, tl: Timeline, th: Thresholds, commit_point: str = "vad_speech_end") -> None:
        self.th = th
        self.t, self.db = tl.agent_audio()
        activity = AgentActivity(th)
        for t, db in zip(self.t.tolist(), self.db.tolist(), strict=True):
            activity.update(t, db)
        self.onsets = activity.onsets
        self.thinking = [t for t, s in tl.states if s == "thinking"]
        self.agent_text = [r["t"] for r in tl.transcripts if r.get("who") == "agent"]
        traces = _traces(tl)
        if commit_point == "turn_committed":
            self.commits = [tr["wall_t0"] + tr["points"]["turn_committed"] for tr in traces
                            if "turn_committed" in tr["points"]]  # fmt: skip
        else:  # the VAD ended a user turn there: every trace is opened at that end; one with words is a turn
            self.commits = [tr["wall_t0"] for tr in traces
                            if "stt_done" in tr["points"] and tr.get("outcome") != "no_transcript"]  # fmt: skip
        self.interruptions = [
            (tr["wall_t0"] + irq["interrupt_detected"], irq.get("source", ""))
            for tr in tl.traces
            if "wall_t0" in tr
            for irq in tr.get("interruptions", [])
        ]  # fmt: skip
        # the wait each judgement chose (TURN_HANDLING=ours): a turn's last end at its commit, a held pause at the end
        # of speech before it (traces/README.md `turn_decision`, `pauses[].decision`)
        self.commit_waits = {tr["wall_t0"] + tr["points"]["turn_committed"]: tr["turn_decision"].get("wait")
                             for tr in traces if "turn_committed" in tr["points"] and tr.get("turn_decision")}
        self.pause_waits = sorted((tr["wall_t0"] + p["at"], p["decision"].get("wait"))
                                  for tr in traces for p in tr.get("pauses", []) if p.get("decision"))  # fmt: skip
        self.states = tl.states
        self.published = [tr["wall_t0"] + tr["points"]["first_frame_published"] for tr in traces
                          if "first_frame_published" in tr["points"]]  # fmt: skip

    def earliest_commit(self, lo: float, hi: float) -> tuple[str, float] | None:
        found = [(t, name) for name, times in zip(SIGNALS, (self.commits, self.thinking, self.onsets, self.agent_text),
                                                   strict=True)
                 if (t := _first(times, lo, hi)) is not None]  # fmt: skip
        return (min(found)[1], min(found)[0]) if found else None

    def wait_held(self, lo: float, hi: float) -> str | None:
        """The wait a pause whose speech ended in [lo, hi) was held in; None when the caller went on before it was
        judged."""
        return next((w for t, w in self.pause_waits if lo <= t < hi), None)

    def reply_traced(self, heard: float | None) -> bool:
        """Whether a trace holds the reply first heard at `heard` (its first frame published shortly before)."""
        return heard is not None and any(heard - REPLY_TRACE_S <= t <= heard + 0.05 for t in self.published)

    def silent_runs(self, lo: float, hi: float) -> list[float]:
        """Arrival of the first frame of each silent run of `stop_min_ms` that begins in [lo, hi)."""
        need = int(round(self.th.stop_min_ms / 1000.0 / FRAME_S))
        silent = runs(self.db < self.th.silence_db)
        return [float(self.t[a]) for a, b in silent if b - a >= need and lo <= self.t[a] < hi]

    def decided_stop(self, lo: float, hi: float) -> tuple[float | None, tuple[float, str] | None]:
        """(the agent's decision to stop in [lo, hi): its state leaving `speaking` or a traced interruption, the
        traced interruption itself) -- module docstring."""
        left = next((t for t, s in self.states if lo <= t < hi and s != "speaking"), None)
        cut = next(((t, s) for t, s in self.interruptions if lo - 0.05 <= t < hi), None)
        times = [x for x in (left, cut[0] if cut else None) if x is not None]
        return (min(times) if times else None), cut

    def stop_after(self, lo: float, hi: float) -> tuple[float | None, tuple[float, str] | None, int]:
        """(when the agent went silent after deciding to stop, the traced cut, silent runs with no decision)."""
        decided, cut = self.decided_stop(lo, hi)
        silences = self.silent_runs(lo, hi + EVIDENCE_LEAD_S)
        if decided is None:
            return None, None, len(silences)
        stop = next((t for t in silences if t >= decided - EVIDENCE_LEAD_S), None)
        return stop, cut, sum(t < decided - EVIDENCE_LEAD_S for t in silences)

    def reference_db(self, before: float) -> float | None:
        span = (self.t >= before - self.th.reference_ms / 1000.0) & (self.t < before) & (self.db >= self.th.silence_db)
        return float(np.median(level_windows(self.db)[span])) if span.any() else None

    def duck_after(self, ref: float | None, lo: float, hi: float) -> float | None:
        """When the level first stayed `duck_db` under `ref` for `duck_min_ms` while staying audible (a duck, not a
        dropout nor a stop)."""
        if ref is None:
            return None
        need = int(round(self.th.duck_min_ms / 1000.0 / FRAME_S))
        ducked = (level_windows(self.db) <= ref - self.th.duck_db) & (self.db >= self.th.silence_db)
        return next((float(self.t[a]) for a, b in runs(ducked) if b - a >= need and lo <= self.t[a] < hi), None)


def pause_rows(tl: Timeline, sig: Signals) -> list[dict[str, Any]]:
    rows = []
    for rec in (r for r in tl.items if r.kind == "turn" and r.played):
        plays = tl.plays_of(rec.item_id)
        for i, pause in enumerate(rec.pauses, start=1):
            start, resume = plays[i - 1].last_voiced, plays[i].first_voiced
            hit = sig.earliest_commit(start, resume + RESUME_SLACK_S)
            commit = _first(sig.commits, start, resume + RESUME_SLACK_S)
            # the cut turn's judgement, or the one the pause was held in
            wait = sig.commit_waits.get(commit) if commit is not None else sig.wait_held(start, resume + RESUME_SLACK_S)
            rows.append({
                "script": tl.script, "item": rec.item_id, "pause": i, "kind": pause["kind"], "ms": pause["ms"],
                "measured_ms": _ms(start, resume), "cut": hit is not None,
                "signal": hit[0] if hit else None, "signal_ms": _ms(start, hit[1]) if hit else None,
                "before_resume": bool(hit and hit[1] < resume), "commit_ms": _ms(start, commit), "wait": wait,
                "agent_busy_at_start": rec.agent_busy_at_start,
            })  # fmt: skip
    return rows


_WORD = re.compile(r"[a-z0-9']+")


def end_rows(tl: Timeline, sig: Signals, pauses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for rec in (r for r in tl.items if r.kind == "turn" and r.played):
        plays = tl.plays_of(rec.item_id)
        begin, end = plays[0].first_voiced, plays[-1].last_voiced
        hi = end + EOT_WINDOW_S
        heard = " ".join(r["text"].lower() for r in tl.transcripts
                         if r.get("who") == "user" and r.get("final") and begin <= r["t"] < hi)  # fmt: skip
        words = set(_WORD.findall(heard))
        commit = _first(sig.commits, end, hi)
        found = [w for w in rec.expect_words if all(part in words for part in _WORD.findall(w))]
        rows.append({
            "script": tl.script, "item": rec.item_id, "speech_ms": _ms(begin, end),
            "decision_ms": _ms(end, _first(sig.thinking, end, hi)),
            "commit_ms": _ms(end, commit), "wait": sig.commit_waits.get(commit) if commit is not None else None,
            "audio_ms": _ms(end, _first(sig.onsets, end, hi)),
            "cut_inside": any(p["cut"] for p in pauses if p["item"] == rec.item_id and p["script"] == tl.script),
            "expect_words": rec.expect_words, "words_found": found, "heard": heard,
            "agent_busy_at_start": rec.agent_busy_at_start,
        })  # fmt: skip
    return rows


def cued_rows(tl: Timeline, sig: Signals) -> list[dict[str, Any]]:
    rows = []
    for rec in (r for r in tl.items if r.kind in ("backchannel", "noise", "barge_in")):
        row: dict[str, Any] = {"script": tl.script, "item": rec.item_id, "kind": rec.kind, "label": rec.label,
                               "played": rec.played, "reason": rec.reason,
                               "cue_after_audio_ms": _ms(rec.anchor, rec.cue)}  # fmt: skip
        rows.append(row)
        if not rec.played:
            continue
        play = tl.plays_of(rec.item_id)[0]
        onset, clip_end = play.first_voiced, play.last_voiced
        row["played_after_audio_ms"] = _ms(rec.anchor, onset)
        stop, cut, dropouts = sig.stop_after(onset, clip_end + STOP_WINDOW_S)
        ref = sig.reference_db(onset)
        duck = sig.duck_after(ref, onset, clip_end + STOP_WINDOW_S)
        first_drop = min((t for t in (duck, stop) if t is not None), default=None)
        back = _first(sig.onsets, stop, stop + RESUME_WINDOW_S) if stop is not None else None
        thought = _first(sig.thinking, stop, back) if stop is not None and back is not None else None
        resumed = back is not None and thought is None
        natural = stop is not None and cut is None and not resumed and sig.reply_traced(rec.anchor)
        row.update({
            "reference_db": None if ref is None else round(ref, 1),
            "stopped": stop is not None and not natural, "silence_ms": _ms(onset, stop), "reply_ended": natural,
            "reply_traced": sig.reply_traced(rec.anchor),
            "dropouts": dropouts,
            "duck_ms": _ms(onset, first_drop), "ducked": duck is not None,
            "cut_by_worker": cut is not None, "cut_source": cut[1] if cut else None,
            "resumed": resumed, "gap_ms": _ms(stop, back) if resumed else None,
            "answered": back is not None and thought is not None,
        })  # fmt: skip
    return rows


def _summary(values: list[float | None]) -> dict[str, Any]:
    vals = [v for v in values if v is not None]
    return {"n": len(vals), **percentiles(vals, (50, 95), 1)}


def _by(rows: list[dict[str, Any]], key: Callable[[dict[str, Any]], str]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(key(row), []).append(row)
    return dict(sorted(out.items()))


def _rate(hits: int, n: int) -> float | None:
    return round(hits / n, 4) if n else None


BUCKETS = ("under 300", "300-499", "500-799", "800-1199", "1200+")


def _bucket(ms: float) -> str:
    for hi, name in zip((300, 500, 800, 1200), BUCKETS, strict=False):
        if ms < hi:
            return name
    return BUCKETS[-1]


def summarize(pauses: list[dict], ends: list[dict], cued: list[dict]) -> dict[str, Any]:
    def group(rows: list[dict], key) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for row in rows:
            k = key(row)
            n, cut = out.get(k, (0, 0))
            out[k] = (n + 1, cut + row["cut"])
        return {k: {"n": n, "cut": c, "rate": _rate(c, n)} for k, (n, c) in sorted(out.items(), key=order)}

    def order(entry: tuple[str, Any]) -> tuple[int, str]:  # length buckets shortest first, kinds by name
        return (BUCKETS.index(entry[0]) if entry[0] in BUCKETS else len(BUCKETS), entry[0])

    cut = sum(r["cut"] for r in pauses)
    played = {k: [r for r in cued if r["kind"] == k and r["played"]] for k in ("backchannel", "noise", "barge_in")}
    soft = played["backchannel"] + played["noise"]
    expected = sum(len(r["expect_words"]) for r in ends)
    barge = played["barge_in"]
    return {
        "pauses": {"n": len(pauses), "cut": cut, "false_cutoff_rate": _rate(cut, len(pauses)),
                   "cut_before_resume": sum(r["before_resume"] for r in pauses),
                   "false_cutoff_before_resume_rate": _rate(sum(r["before_resume"] for r in pauses), len(pauses)),
                   "by_kind": group(pauses, lambda r: r["kind"]),
                   "by_length_ms": group(pauses, lambda r: _bucket(r["ms"])),
                   "by_wait": group(pauses, lambda r: r.get("wait") or "none")},
        "true_ends": {"n": len(ends), "decision_ms": _summary([r["decision_ms"] for r in ends]),
                      "decision_ms_uncut": _summary([r["decision_ms"] for r in ends if not r["cut_inside"]]),
                      "commit_ms": _summary([r["commit_ms"] for r in ends]),
                      "audio_ms": _summary([r["audio_ms"] for r in ends]),
                      "no_decision": sum(r["decision_ms"] is None for r in ends),
                      "by_wait": {w: {"n": len(rs), "decision_ms": _summary([r["decision_ms"] for r in rs])}
                                  for w, rs in _by(ends, lambda r: r.get("wait") or "none").items()},
                      "words_expected": expected, "words_found": sum(len(r["words_found"]) for r in ends)},
        "false_interruptions": {
            "n": len(soft), "stopped": sum(r["stopped"] for r in soft),
            "rate": _rate(sum(r["stopped"] for r in soft), len(soft)),
            **{kind: {"n": len(played[kind]), "stopped": sum(r["stopped"] for r in played[kind]),
                      "rate": _rate(sum(r["stopped"] for r in played[kind]), len(played[kind])),
                      "ducked": sum(r["ducked"] for r in played[kind]),
                      "resumed": sum(r["resumed"] for r in played[kind]),
                      "answered": sum(r["answered"] for r in played[kind]),
                      "reply_ended": sum(r["reply_ended"] for r in played[kind]),
                      "stopped_untraced": sum(r["stopped"] and not r["reply_traced"] for r in played[kind]),
                      "gap_ms": _summary([r["gap_ms"] for r in played[kind]])}
               for kind in ("backchannel", "noise")},
        },
        "barge_ins": {"n": len(barge), "missed": sum(r["silence_ms"] is None for r in barge),
                      "silence_ms": _summary([r["silence_ms"] for r in barge]),
                      "duck_ms": _summary([r["duck_ms"] for r in barge]),
                      "cut_by_worker": sum(r["cut_by_worker"] for r in barge)},
        "not_played": [{"item": r["item"], "script": r["script"], "kind": r["kind"], "reason": r["reason"]}
                       for r in cued if not r["played"]],
    }  # fmt: skip


def score(timelines: list[Timeline], thresholds: Thresholds = DEFAULT_THRESHOLDS) -> dict[str, Any]:
    pauses, ends, cued = [], [], []
    point = commit_point(timelines)
    for tl in timelines:
        sig = Signals(tl, thresholds, point or "vad_speech_end")
        p = pause_rows(tl, sig)
        pauses += p
        ends += end_rows(tl, sig, p)
        cued += cued_rows(tl, sig)
    return {"thresholds": thresholds.to_json(), "commit_point": point,
            "windows_s": {"true_end": EOT_WINDOW_S, "stop": STOP_WINDOW_S, "resume": RESUME_WINDOW_S,
                          "evidence_lead": EVIDENCE_LEAD_S,
                          "resume_slack": RESUME_SLACK_S},
            "summary": summarize(pauses, ends, cued), "pause_rows": pauses, "end_rows": ends, "cued_rows": cued}
