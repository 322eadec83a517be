"""`python -m lab.convbench.corpus --out DIR`: our own conversation corpus, generated, never committed as audio.

Writes DIR/NN_<speaker>.json (convbench scripts: 12 speakers, 6 turns each) and their clips in DIR/clips/, plus
DIR/calls/questions.json (the many-calls script: questions with gaps and two barge-ins) and DIR/ci/short.json
(the CI check's short call). Speech is espeak-ng (several voices, rates and pitches), noises are numpy (a cough,
a door slam, keyboard clicks). Every clip continues with the punctuation its prosody needs (a clip the turn goes
on after ends with a comma); pauses of 300-1,500 ms sit at natural points (after "um", mid-clause, inside a
phone number, an address or a string of digits); each turn is followed by one backchannel, barge-in or noise
cued on the agent's reply. Deterministic: the same command writes the same files. A clip's file name is the hash
of everything that makes it (generator version, espeak-ng version, voice, rate, pitch, text, noise seed), so a
second run renders only what changed and removes clips no script uses.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from lab.callbench.speech import speak
from lab.convbench.audio import RATE, write_wav
from lab.convbench.script import FORMAT

GENERATOR_VERSION = 1
PARTS = ("corpus", "calls", "ci")
SEED = 28  # issue 28
# (id, espeak-ng voice, words per minute, pitch 0..99)
SPEAKERS = [
    ("anna", "en-us+f3", 150, 55), ("ben", "en-gb", 165, 45), ("carla", "en-us+f2", 140, 60),
    ("dev", "en-gb-scotland+m3", 160, 40), ("ema", "en-029+f2", 155, 55), ("finn", "en-us+m4", 175, 35),
    ("gwen", "en-gb-x-rp+f4", 145, 50), ("hugo", "en-us-nyc", 185, 50), ("ines", "en-us+f3", 135, 70),
    ("jon", "en-gb-x-gbclan+m2", 170, 45), ("kim", "en-us+f2", 165, 75), ("leo", "en-029", 150, 40),
]  # fmt: skip
TURNS_PER_SCRIPT = 6
PLAIN_PER_SCRIPT = (1, 2)  # turns with no pause: one or two per script
# a turn said with pauses: its clips, the kind of each pause (before clips 1..n), words whisper must hear
PAUSED = [
    (["I would like to book a table,", "for four people tomorrow evening."], ["mid_clause"], ["table", "people"]),
    (["I'd like to um,", "move my appointment to Friday."], ["after_um"], ["appointment", "friday"]),
    (["My phone number is five five five,", "two one eight,", "four four nine nine."],
     ["phone_number", "phone_number"], ["phone", "number"]),
    (["I live at twenty two,", "Baker Street,", "in London."], ["address", "address"], ["baker", "london"]),
    (["Can you tell me uh,", "what time the pharmacy closes?"], ["after_um"], ["pharmacy", "closes"]),
    (["So I was thinking that,", "maybe we could meet on Tuesday."], ["mid_clause"], ["meet", "tuesday"]),
    (["Please send the parcel to fourteen,", "Maple Avenue,", "apartment six."], ["address", "address"],
     ["parcel", "apartment"]),
    (["I need a taxi um,", "to the airport,", "at seven in the morning."], ["after_um", "mid_clause"],
     ["taxi", "airport"]),
    (["Could you remind me to,", "call my sister tonight?"], ["mid_clause"], ["remind", "sister"]),
    (["Call me back at um,", "zero two zero,", "seven nine four six."], ["after_um", "phone_number"], ["call", "back"]),
    (["What is the weather like,", "in Paris this weekend?"], ["mid_clause"], ["weather", "paris"]),
    (["The code is four seven,", "nine one,", "three three."], ["digits", "digits"], ["code"]),
    (["I want to order um,", "a large pizza with mushrooms."], ["after_um"], ["pizza", "mushrooms"]),
    (["My address is one hundred,", "Park Road,", "Springfield."], ["address", "address"], ["address", "park"]),
    (["Is it possible to,", "change my flight to Monday?"], ["mid_clause"], ["flight", "monday"]),
    (["Let me think um,", "I would like the blue one."], ["after_um"], ["think", "blue"]),
    (["You can reach me at eight one two,", "five five five,", "zero one three four."],
     ["phone_number", "phone_number"], ["reach"]),
    (["We are staying at the hotel on,", "Queen Street,", "near the station."], ["address", "address"],
     ["hotel", "station"]),
    (["How long does it take to,", "drive from Boston to New York?"], ["mid_clause"], ["boston", "york"]),
    (["I was hoping you could uh,", "help me with my homework."], ["after_um"], ["help", "homework"]),
    (["The meeting is on the third floor,", "room three hundred and twelve."], ["address"], ["meeting", "floor"]),
    (["Can you play some music,", "something relaxing,", "for the evening?"], ["mid_clause", "mid_clause"],
     ["music", "relaxing"]),
    (["My account number is six two,", "eight eight,", "one zero five."], ["digits", "digits"], ["account"]),
    (["I think I left my keys um,", "somewhere in the kitchen."], ["after_um"], ["keys", "kitchen"]),
    (["Tell me a story about,", "a dragon who loves tea."], ["mid_clause"], ["story", "dragon"]),
    (["Book me a doctor's appointment for,", "next Wednesday afternoon."], ["mid_clause"], ["doctor", "wednesday"]),
    (["The delivery should go to unit five,", "forty one Harbour Road."], ["address"], ["delivery", "road"]),
    (["And then um,", "after that,", "we can have dinner together."], ["after_um", "mid_clause"],
     ["dinner", "together"]),
    (["Set an alarm for six,", "thirty in the morning."], ["digits"], ["alarm", "morning"]),
    (["What would you recommend for,", "a vegetarian dinner?"], ["mid_clause"], ["recommend", "vegetarian"]),
]  # fmt: skip
PLAIN = [
    ("What is the capital of France?", ["capital", "france"]), ("How are you today?", ["today"]),
    ("Tell me a joke about a cat.", ["joke", "cat"]), ("What time is it in London?", ["time", "london"]),
    ("Can you recommend a good book?", ["recommend", "book"]), ("Please count to five.", ["count"]),
    ("Who wrote Romeo and Juliet?", ["romeo", "juliet"]), ("That sounds great.", ["sounds", "great"]),
    ("How far away is the moon?", ["moon"]), ("What should I cook tonight?", ["cook", "tonight"]),
    ("Is it going to rain tomorrow?", ["rain", "tomorrow"]),
    ("Where is the nearest train station?", ["train", "station"]),
]  # fmt: skip
PAUSES_MS = [300, 400, 500, 600, 700, 800, 1000, 1200, 1500]
BACKCHANNELS = ["Mm-hmm.", "Yeah.", "Right.", "Okay.", "Uh-huh.", "I see."]
BARGE_INS = ["Stop.", "Wait, no.", "Actually, make it five people.", "Hold on, that is wrong.", "No, stop.",
             "Sorry, I meant Thursday.", "Wait a second.", "Actually, cancel that."]  # fmt: skip
NOISES = ["cough", "door", "keyboard"]
CUES = {"backchannel": 30, "barge_in": 30, "noise": 12}  # one after each of the 72 turns
CUE_AT_MS = {"backchannel": [800, 1200, 1600, 2000, 2500], "barge_in": [1000, 1500, 2000, 3000],
             "noise": [600, 1000, 1500, 2000]}  # fmt: skip


def espeak_version() -> str:
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise FileNotFoundError("espeak-ng is not installed (Debian package espeak-ng; scripts/setup.sh installs it)")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout
    return out.split("Data at:")[0].strip()  # "eSpeak NG text-to-speech: 1.51", not where its data lies


# -- noises (numpy, seeded) -------------------------------------------------------------------------------------
def _envelope(n: int, attack: int, decay_s: float) -> np.ndarray:
    t = np.arange(n) / RATE
    env = np.exp(-t / decay_s)
    env[:attack] *= np.linspace(0.0, 1.0, attack)
    return env


def _lowpass(x: np.ndarray, alpha: float) -> np.ndarray:
    y, acc = np.empty_like(x), 0.0
    for i, v in enumerate(x):  # a one-pole filter: a few thousand samples per noise
        acc += alpha * (v - acc)
        y[i] = acc
    return y


def noise_pcm(kind: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "cough":  # two voiced-noise bursts: a strong one, then a weaker one
        out = np.zeros(int(0.55 * RATE))
        for start, gain, length in ((0.0, 0.5, 0.22), (0.26, 0.3, 0.18)):
            n = int(length * RATE)
            burst = _lowpass(rng.standard_normal(n), 0.25) * _envelope(n, int(0.012 * RATE), length / 3)
            burst *= 1.0 + 0.5 * np.sin(2 * np.pi * 140 * np.arange(n) / RATE)  # a little voicing
            s = int(start * RATE)
            out[s : s + n] += gain * burst / (np.abs(burst).max() + 1e-9)
    elif kind == "door":  # a low thump with a rattle
        n = int(0.45 * RATE)
        t = np.arange(n) / RATE
        thump = np.sin(2 * np.pi * 55 * t) * _envelope(n, 48, 0.09)
        rattle = _lowpass(rng.standard_normal(n), 0.6) * _envelope(n, 24, 0.04)
        out = 0.6 * thump + 0.35 * rattle / (np.abs(rattle).max() + 1e-9)
    elif kind == "keyboard":  # ten key clicks, 90-220 ms apart
        gaps = rng.uniform(0.09, 0.22, 10)
        out = np.zeros(int((gaps.sum() + 0.05) * RATE))
        at = 0.0
        for gap in gaps:
            n = int(0.006 * RATE)
            click = np.diff(rng.standard_normal(n + 1)) * _envelope(n, 8, 0.0015) * rng.uniform(0.15, 0.3)
            s = int(at * RATE)
            out[s : s + n] += click
            at += gap
    else:
        raise ValueError(f"unknown noise {kind!r} (allowed: {', '.join(NOISES)})")
    return np.clip(out * 32767, -32768, 32767).astype(np.int16)


# -- clips, cached by content hash -----------------------------------------------------------------------------
class Renderer:
    def __init__(self, out: Path) -> None:
        self.clips = out / "clips"
        self.clips.mkdir(parents=True, exist_ok=True)
        self.espeak = espeak_version()
        self.used: set[str] = set()
        self.rendered = 0

    def _file(self, spec: dict[str, Any], make) -> str:
        key = json.dumps({"generator": GENERATOR_VERSION, "espeak": self.espeak, **spec}, sort_keys=True)
        name = hashlib.sha256(key.encode()).hexdigest()[:16] + ".wav"
        self.used.add(name)
        if not (self.clips / name).is_file():
            partial = self.clips / f".{name}.{os.getpid()}"
            write_wav(partial, make())
            partial.replace(self.clips / name)  # atomic: a concurrent build never reads half a clip
            self.rendered += 1
        return f"clips/{name}"

    def speech(self, text: str, speaker: tuple[str, str, int, int]) -> str:
        _, voice, wpm, pitch = speaker
        spec = {"text": text, "voice": voice, "wpm": wpm, "pitch": pitch}
        return self._file(spec, lambda: speak(text, voice=voice, words_per_minute=wpm, pitch=pitch))

    def noise(self, kind: str, seed: int) -> str:
        return self._file({"noise": kind, "seed": seed}, lambda: noise_pcm(kind, seed))

    def prune(self) -> int:
        stale = [p for p in self.clips.glob("*.wav") if p.name not in self.used]
        for path in stale:
            path.unlink()
        return len(stale)


# -- scripts ----------------------------------------------------------------------------------------------------
def _turn(r: Renderer, speaker, item_id: str, clips: list[str], kinds: list[str], words: list[str],
          rng: random.Random, prefix: str = "") -> dict[str, Any]:  # fmt: skip
    out = []
    for i, text in enumerate(clips):
        clip: dict[str, Any] = {"wav": prefix + r.speech(text, speaker), "text": text}
        if i:
            clip["pause_before"] = {"ms": rng.choice(PAUSES_MS), "kind": kinds[i - 1]}
        out.append(clip)
    return {"id": item_id, "kind": "turn", "clips": out, "expect_words": words}


def _cued(r: Renderer, speaker, item_id: str, kind: str, rng: random.Random, prefix: str = "") -> dict[str, Any]:
    at = {"after_agent_audio_ms": rng.choice(CUE_AT_MS[kind])}
    if kind == "noise":
        noise = rng.choice(NOISES)
        return {"id": item_id, "kind": "noise", "noise": noise, "wav": prefix + r.noise(noise, rng.randrange(1 << 16)),
                "at": at}  # fmt: skip
    text = rng.choice(BACKCHANNELS if kind == "backchannel" else BARGE_INS)
    return {"id": item_id, "kind": kind, "text": text, "wav": prefix + r.speech(text, speaker), "at": at}


def _speaker_meta(speaker: tuple[str, str, int, int], r: Renderer) -> dict[str, Any]:
    sid, voice, wpm, pitch = speaker
    return {"id": sid, "voice": voice, "rate_wpm": wpm, "pitch": pitch, "source": r.espeak}


def _write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(doc, indent=1) + "\n")
    partial.replace(path)


def cached(parts: tuple[str, ...] = PARTS) -> Path:
    """The corpus (or some parts) in this machine's temp folder, rendered once and reused (tests, quick runs)."""
    out = Path(tempfile.gettempdir()) / f"convbench-corpus-{GENERATOR_VERSION}"
    build(out, parts)
    return out


def build(out: Path, parts: tuple[str, ...] = PARTS) -> dict[str, int]:
    """Write the corpus (or only some `PARTS`) into `out`; returns its counts. Each part draws from its own seeded
    generator, so a part built alone is the same as in the whole corpus. Unused clips are removed only when the
    whole corpus is built."""
    out = Path(out)
    r = Renderer(out)
    counts: dict[str, int] = {}
    if "corpus" in parts:
        counts.update(corpus_scripts(r, out))
    if "calls" in parts:
        _write(out / "calls" / "questions.json", calls_script(r))
    if "ci" in parts:
        _write(out / "ci" / "short.json", short_script(r))
    counts["clips_rendered"] = r.rendered
    counts["clips_removed"] = r.prune() if set(parts) == set(PARTS) else 0
    return counts


def corpus_scripts(r: Renderer, out: Path) -> dict[str, int]:
    rng = random.Random(SEED)
    paused = list(PAUSED)
    rng.shuffle(paused)
    cues = [kind for kind, n in CUES.items() for _ in range(n)]
    rng.shuffle(cues)
    plain_i = paused_i = cue_i = 0
    counts = {"scripts": 0, "turns": 0, "pauses": 0, **dict.fromkeys(CUES, 0)}
    for s, speaker in enumerate(SPEAKERS):
        plain_at = set(rng.sample(range(TURNS_PER_SCRIPT), PLAIN_PER_SCRIPT[s % 2]))
        items = []
        for t in range(TURNS_PER_SCRIPT):
            if t in plain_at:
                text, words = PLAIN[plain_i % len(PLAIN)]
                plain_i += 1
                items.append(_turn(r, speaker, f"t{t + 1}", [text], [], words, rng))
            else:
                clips, kinds, words = paused[paused_i % len(paused)]
                paused_i += 1
                items.append(_turn(r, speaker, f"t{t + 1}", clips, kinds, words, rng))
                counts["pauses"] += len(kinds)
            kind = cues[cue_i]
            cue_i += 1
            items.append(_cued(r, speaker, f"t{t + 1}.{kind}", kind, rng))
            counts[kind] += 1
        counts["turns"] += TURNS_PER_SCRIPT
        counts["scripts"] += 1
        _write(out / f"{s + 1:02d}_{speaker[0]}.json", {
            "format": FORMAT, "name": f"{s + 1:02d}_{speaker[0]}",
            "description": "convbench corpus (python -m lab.convbench.corpus): turns with labelled pauses, "
                           "each followed by a backchannel, barge-in or noise cued on the agent's reply",
            "speaker": _speaker_meta(speaker, r), "items": items,
        })  # fmt: skip
    return counts


def calls_script(r: Renderer) -> dict[str, Any]:
    """The many-calls script (lab/convbench/many.py): five questions, each after the agent is done and a
    gap of 1-3 s (a person reading the answer), two of the answers cut by a barge-in."""
    rng = random.Random(SEED + 1)
    speaker = SPEAKERS[0]
    items: list[dict[str, Any]] = []
    for i, (text, words) in enumerate(PLAIN[:5]):
        turn = _turn(r, speaker, f"q{i + 1}", [text], [], words, rng, prefix="../")
        turn["gap_ms"] = rng.choice([1000, 1500, 2000, 3000])
        items.append(turn)
        if i in (1, 3):
            barge = _cued(r, speaker, f"q{i + 1}.barge_in", "barge_in", rng, prefix="../")
            barge["text"], barge["wav"] = "Wait, no.", "../" + r.speech("Wait, no.", speaker)
            items.append(barge)
    return {"format": FORMAT, "name": "questions", "speaker": _speaker_meta(speaker, r),
            "description": "many-calls script: five questions with reading gaps, two answers cut by a barge-in",
            "items": items}  # fmt: skip


def short_script(r: Renderer) -> dict[str, Any]:
    """The CI check (tests/call/test_convbench.py): one turn with a 700 ms pause inside it (the issue's own
    example), a backchannel 1 s into the reply, then a turn whose reply a barge-in cuts."""
    speaker = SPEAKERS[1]
    fixed = random.Random(0)
    turn = _turn(r, speaker, "t1", PAUSED[0][0], PAUSED[0][1], PAUSED[0][2], fixed, prefix="../")
    turn["clips"][1]["pause_before"]["ms"] = 700
    items = [
        turn,
        {"id": "t1.backchannel", "kind": "backchannel", "text": "Yeah.", "wav": "../" + r.speech("Yeah.", speaker),
         "at": {"after_agent_audio_ms": 1000}},
        _turn(r, speaker, "t2", [PLAIN[0][0]], [], PLAIN[0][1], fixed, prefix="../"),
        {"id": "t2.barge_in", "kind": "barge_in", "text": "Wait, no.", "wav": "../" + r.speech("Wait, no.", speaker),
         "at": {"after_agent_audio_ms": 1200}},
    ]  # fmt: skip
    return {"format": FORMAT, "name": "short", "speaker": _speaker_meta(speaker, r),
            "description": "CI short form: a 700 ms pause inside a turn, a backchannel, a barge-in", "items": items}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.convbench.corpus", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the scripts and clips/")
    parser.add_argument("--only", choices=PARTS, action="append",
                        help="build only this part (repeatable): corpus (DIR/*.json), calls (DIR/calls/), ci (DIR/ci/)")
    args = parser.parse_args(argv)
    counts = build(args.out, tuple(args.only or PARTS))
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
