"""A conversation script (`convbench.script/1`, JSON): what the scripted caller says and when. docs/convbench.md.

Contract
- `load_script(path)` reads and validates one script and every WAV it names (paths relative to the script);
  it returns a `Script` or raises `ScriptError`, whose lines each name the script, the item (index and id) and
  the field: a missing WAV, a wrong rate, an unknown kind, a pause on a turn's first clip, a cue before any turn...
- Items play in order. A `turn` is one or more clips with a labelled pause before each clip after the first
  (every such pause lies inside the turn; the end of the last clip is a true end of turn). A `backchannel`,
  `barge_in` or `noise` is cued on the agent's speech: `at.after_agent_audio_ms` after the agent's reply to the
  last turn starts reaching the caller. A `gap` is silence.
- Clips play from their first to their last voiced sample (audio.py's rule); a pause is exact silence between
  the last voiced sample before it and the first after it.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lab.convbench.audio import VOICED_DB, WavError, read_wav, voiced_span

FORMAT = "convbench.script/1"
IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]*$")  # pause kinds and noise kinds: free, but one spelling each
DEFAULTS = {"turn_gap_ms": 600, "agent_wait_ms": 30_000, "cue_within_ms": 15_000}
LIMITS_MS = {"pause": (50, 10_000), "gap": (0, 120_000), "at": (0, 60_000), "wait": (1_000, 120_000),
             "turn_gap": (0, 60_000)}


class ItemKind(enum.Enum):
    TURN = "turn"
    BACKCHANNEL = "backchannel"
    BARGE_IN = "barge_in"
    NOISE = "noise"
    GAP = "gap"


CUED = (ItemKind.BACKCHANNEL, ItemKind.BARGE_IN, ItemKind.NOISE)
_KEYS = {
    ItemKind.TURN: {"id", "kind", "clips", "expect_words", "wait_for_agent", "gap_ms", "agent_wait_ms", "meta"},
    ItemKind.BACKCHANNEL: {"id", "kind", "wav", "text", "at", "within_ms", "meta"},
    ItemKind.BARGE_IN: {"id", "kind", "wav", "text", "at", "within_ms", "meta"},
    ItemKind.NOISE: {"id", "kind", "wav", "noise", "at", "within_ms", "meta"},
    ItemKind.GAP: {"id", "kind", "ms", "meta"},
}
_TOP_KEYS = {"format", "name", "description", "speaker", "defaults", "items", "meta"}


@dataclass(frozen=True)
class Pause:
    ms: int
    kind: str  # after_um, mid_clause, phone_number, address, ... (any lowercase identifier)


@dataclass(eq=False)
class Clip:
    wav: Path
    text: str
    pcm: np.ndarray  # the voiced span only: what the caller plays
    pause_before: Pause | None = None

    @property
    def duration_ms(self) -> float:
        return len(self.pcm) / 48.0


@dataclass(eq=False)
class Turn:
    id: str
    clips: list[Clip]
    expect_words: tuple[str, ...] = ()
    wait_for_agent: bool = True  # start once the agent is done talking (bounded by agent_wait_ms), then gap_ms
    gap_ms: int = DEFAULTS["turn_gap_ms"]
    agent_wait_ms: int = DEFAULTS["agent_wait_ms"]
    kind: ItemKind = ItemKind.TURN


@dataclass(eq=False)
class Cued:
    id: str
    kind: ItemKind  # one of CUED
    clip: Clip
    label: str  # the words, or the noise's kind
    after_agent_audio_ms: int
    within_ms: int  # the longest wait for the agent's reply to start; then the item is not played


@dataclass(eq=False)
class Gap:
    id: str
    ms: int
    kind: ItemKind = ItemKind.GAP


Item = Turn | Cued | Gap


@dataclass(eq=False)
class Script:
    path: Path
    name: str
    speaker: dict[str, Any]
    items: list[Item] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)  # free-form: who made it, with what (piper_corpus: its half)

    def counts(self) -> dict[str, int]:
        turns = [i for i in self.items if isinstance(i, Turn)]
        out = {"turns": len(turns), "pauses": sum(len(t.clips) - 1 for t in turns)}
        for kind in CUED:
            out[kind.value] = sum(i.kind is kind for i in self.items)
        return out


class ScriptError(ValueError):
    def __init__(self, path: Path, problems: list[str]) -> None:
        self.path, self.problems = path, problems
        super().__init__(f"{path}: {len(problems)} problem(s)\n" + "\n".join(f"  {p}" for p in problems))


class _Checker:
    """Collects every problem of one script, each naming where it is."""

    def __init__(self, path: Path) -> None:
        self.path, self.base, self.problems = path, path.parent, []

    def fail(self, where: str, message: str) -> None:
        self.problems.append(f"{where}: {message}")

    def integer(self, where: str, obj: dict, key: str, limits: tuple[int, int], default: int | None = None) -> int:
        value = obj.get(key, default)
        lo, hi = limits
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            self.fail(f"{where} field '{key}'", f"must be an integer in {lo}..{hi} ms, got {value!r}")
            return lo
        return value

    def text(self, where: str, obj: dict, key: str, required: bool = False) -> str:
        value = obj.get(key)
        if value is None and not required:
            return ""
        if not isinstance(value, str) or not value.strip():
            self.fail(f"{where} field '{key}'", f"must be a non-empty string, got {value!r}")
            return ""
        return value

    def keys(self, where: str, obj: dict, allowed: set[str]) -> None:
        for key in sorted(set(obj) - allowed):
            self.fail(f"{where} field '{key}'", f"unknown field (allowed: {', '.join(sorted(allowed))})")

    def clip(self, where: str, obj: Any, first_in_turn: bool = True) -> Clip | None:
        if not isinstance(obj, dict):
            self.fail(where, f"must be an object with 'wav', got {obj!r}")
            return None
        self.keys(where, obj, {"wav", "text", "pause_before"} if not first_in_turn or "pause_before" in obj
                  else {"wav", "text"})  # fmt: skip
        pause = None
        if first_in_turn and "pause_before" in obj:
            self.fail(f"{where} field 'pause_before'", "the first clip of a turn has no pause before it")
        elif not first_in_turn:
            pause = self.pause(f"{where} field 'pause_before'", obj.get("pause_before"))
        name = self.text(where, obj, "wav", required=True)
        if not name:
            return None
        wav = (self.base / name).resolve() if not Path(name).is_absolute() else Path(name)
        try:
            pcm = read_wav(wav)
        except WavError as exc:
            self.fail(f"{where} field 'wav'", str(exc))
            return None
        span = voiced_span(pcm)
        if span is None:
            self.fail(f"{where} field 'wav'", f"{wav} never reaches {VOICED_DB:g} dBFS: the caller would play silence")
            return None
        return Clip(wav=wav, text=self.text(where, obj, "text"), pcm=pcm[span[0] : span[1] + 1], pause_before=pause)

    def pause(self, where: str, obj: Any) -> Pause | None:
        if not isinstance(obj, dict):
            self.fail(where, f"every clip after a turn's first needs a pause: {{'ms': N, 'kind': K}}, got {obj!r}")
            return None
        self.keys(where, obj, {"ms", "kind"})
        ms = self.integer(where, obj, "ms", LIMITS_MS["pause"])
        kind = obj.get("kind")
        if not isinstance(kind, str) or not IDENTIFIER.match(kind):
            self.fail(f"{where} field 'kind'", f"must be a lowercase identifier (after_um...), got {kind!r}")
            return None
        return Pause(ms=ms, kind=kind)


def _item(check: _Checker, where: str, obj: dict, kind: ItemKind, item_id: str, defaults: dict) -> Item | None:
    check.keys(where, obj, _KEYS[kind])
    if kind is ItemKind.GAP:
        return Gap(id=item_id, ms=check.integer(where, obj, "ms", LIMITS_MS["gap"]))
    if kind is ItemKind.TURN:
        clips_obj = obj.get("clips")
        if not isinstance(clips_obj, list) or not clips_obj:
            check.fail(f"{where} field 'clips'", f"must be a non-empty list of clips, got {clips_obj!r}")
            return None
        clips = [check.clip(f"{where} field 'clips[{i}]'", c, first_in_turn=i == 0) for i, c in enumerate(clips_obj)]
        words = obj.get("expect_words", [])
        if not isinstance(words, list) or not all(isinstance(w, str) and w.strip() for w in words):
            check.fail(f"{where} field 'expect_words'", f"must be a list of words, got {words!r}")
            words = []
        wait = obj.get("wait_for_agent", True)
        if not isinstance(wait, bool):
            check.fail(f"{where} field 'wait_for_agent'", f"must be true or false, got {wait!r}")
        if None in clips:
            return None
        return Turn(id=item_id, clips=clips, expect_words=tuple(w.strip().lower() for w in words),
                    wait_for_agent=bool(wait),
                    gap_ms=check.integer(where, obj, "gap_ms", LIMITS_MS["turn_gap"], defaults["turn_gap_ms"]),
                    agent_wait_ms=check.integer(where, obj, "agent_wait_ms", LIMITS_MS["wait"],
                                                defaults["agent_wait_ms"]))  # fmt: skip
    at = obj.get("at")
    after = 0
    if not isinstance(at, dict) or set(at) != {"after_agent_audio_ms"}:
        check.fail(f"{where} field 'at'", f"must be {{'after_agent_audio_ms': N}}, got {at!r}")
    else:
        after = check.integer(f"{where} field 'at'", at, "after_agent_audio_ms", LIMITS_MS["at"])
    within = check.integer(where, obj, "within_ms", LIMITS_MS["wait"], defaults["cue_within_ms"])
    if kind is ItemKind.NOISE:
        label = obj.get("noise")
        if not isinstance(label, str) or not IDENTIFIER.match(label):
            check.fail(f"{where} field 'noise'", f"must be a lowercase identifier (cough, door...), got {label!r}")
    else:
        label = check.text(where, obj, "text", required=True)
    clip = check.clip(where, {k: obj[k] for k in ("wav",) if k in obj} | {"text": label or "-"})
    if clip is None:
        return None
    return Cued(id=item_id, kind=kind, clip=clip, label=str(label), after_agent_audio_ms=after, within_ms=within)


def load_script(path: Path) -> Script:
    path = Path(path)
    check = _Checker(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ScriptError(path, ["the script file does not exist"]) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ScriptError(path, [f"not valid JSON: {exc}"]) from None
    if not isinstance(doc, dict):
        raise ScriptError(path, [f"the top level must be an object, got {type(doc).__name__}"])
    check.keys("top level", doc, _TOP_KEYS)
    if doc.get("format") != FORMAT:
        check.fail("top level field 'format'", f"must be {FORMAT!r}, got {doc.get('format')!r}")
    speaker = doc.get("speaker", {})
    if not isinstance(speaker, dict):
        check.fail("top level field 'speaker'", f"must be an object (id, voice, rate_wpm, ...), got {speaker!r}")
        speaker = {}
    defaults = dict(DEFAULTS)
    given = doc.get("defaults", {})
    if not isinstance(given, dict):
        check.fail("top level field 'defaults'", f"must be an object, got {given!r}")
        given = {}
    check.keys("top level field 'defaults'", given, set(DEFAULTS))
    limits = {"turn_gap_ms": LIMITS_MS["turn_gap"], "agent_wait_ms": LIMITS_MS["wait"],
              "cue_within_ms": LIMITS_MS["wait"]}
    for key in set(given) & set(DEFAULTS):
        defaults[key] = check.integer("top level field 'defaults'", given, key, limits[key])
    items_obj = doc.get("items")
    if not isinstance(items_obj, list) or not items_obj:
        check.fail("top level field 'items'", "must be a non-empty list")
        items_obj = []
    items: list[Item] = []
    seen: set[str] = set()
    had_turn = False
    for i, obj in enumerate(items_obj):
        where = f"items[{i}]"
        if not isinstance(obj, dict):
            check.fail(where, f"must be an object, got {obj!r}")
            continue
        item_id = obj.get("id")
        if not isinstance(item_id, str) or not item_id.strip():
            check.fail(f"{where} field 'id'", f"must be a non-empty string, got {item_id!r}")
            item_id = f"#{i}"
        elif item_id in seen:
            check.fail(f"{where} field 'id'", f"{item_id!r} is used twice")
        seen.add(item_id)
        where = f"items[{i}] (id {item_id!r})"
        try:
            kind = ItemKind(obj.get("kind"))
        except ValueError:
            check.fail(f"{where} field 'kind'", f"unknown kind {obj.get('kind')!r} (allowed: "
                       f"{', '.join(k.value for k in ItemKind)})")  # fmt: skip
            continue
        if kind in CUED and not had_turn:
            check.fail(where, f"a {kind.value} is cued on the agent's reply to a turn, and no turn comes before it")
        had_turn |= kind is ItemKind.TURN
        item = _item(check, where, obj, kind, item_id, defaults)
        if item is not None:
            items.append(item)
    if check.problems:
        raise ScriptError(path, check.problems)
    name = doc.get("name") if isinstance(doc.get("name"), str) and doc.get("name") else path.stem
    meta = doc.get("meta") if isinstance(doc.get("meta"), dict) else {}
    return Script(path=path, name=name, speaker=speaker, items=items, meta=meta)


#: a corpus folder's own description (counts, halves, versions: piper_corpus writes one), not a script
MANIFEST = "manifest.json"


def load_corpus(folder: Path) -> list[Script]:
    """Every `*.json` script directly in `folder` (its MANIFEST aside), by name; all problems of all scripts in one
    error."""
    folder = Path(folder)
    paths = sorted(p for p in folder.glob("*.json") if p.name != MANIFEST)
    if not paths:
        raise ScriptError(folder, [f"no *.json conversation scripts in {folder}"])
    scripts, problems = [], []
    for path in paths:
        try:
            scripts.append(load_script(path))
        except ScriptError as exc:
            problems += [f"{path.name}: {p}" for p in exc.problems]
    if problems:
        raise ScriptError(folder, problems)
    return scripts
