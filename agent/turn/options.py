"""Every knob of turn-taking in one typed, frozen object, read once from the environment.

- `TurnOptions.from_env(env)` parses the variables below (a bad value stops start-up with its name and range);
  `AgentConfig.turn` holds the result, and nothing else in the worker reads these variables.
- `TurnMode` is the `TURN_HANDLING` choice: `ours` (default), `vad` (silence alone), `livekit` (LiveKit's own
  defaults with its local audio turn detector).
- `session_turn_handling(options, detector)` is what the session gets for each mode, as LiveKit's own typed
  `TurnHandlingOptions`; docs/agent.md "Turn-taking" says why each default is what it is.

| field | variable | default | mode |
|---|---|---|---|
| mode | TURN_HANDLING | ours | all |
| min_endpointing_s | MIN_ENDPOINTING | 0.2 | vad, ours: the shortest wait after the VAD's end of speech |
| eot_threshold | EOT_THRESHOLD | 0.44 | ours: the voice model's probability at which a turn may end at once |
| eot_medium_delay_s | EOT_MEDIUM_DELAY_S | 1.8 | ours: the wait when neither words nor voice say the caller is done |
| eot_max_delay_s | EOT_MAX_DELAY_S | 2.5 | ours: the bounded maximum wait (unfinished words) |
| voice_wait_s | (fixed) | 0.3 | ours: how long a judgement waits for the voice model once the words are in |
| overlap_confirm_s | OVERLAP_CONFIRM_S | 0.9 | ours: speech over the agent this long cuts it whatever its words |
| overlap_duck_db | OVERLAP_DUCK_DB | -15 | ours: the agent's voice while the caller speaks over it |
| overlap_early_words | OVERLAP_EARLY_WORDS | 1 | ours: speech over the agent transcribed as it goes on; a cue cuts |
| interrupt_min_speech_s | INTERRUPT_MIN_SPEECH_S | 0.5 | vad: speech over the agent this long cuts it |
| resume_false_interruption | RESUME_FALSE_INTERRUPTION | 0 | vad: resume a reply cut by speech with no words |
| false_interruption_timeout_s | FALSE_INTERRUPTION_TIMEOUT_S | 2.0 | vad: how long to wait for those words |
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from common.env import Env

if TYPE_CHECKING:  # LiveKit's option types are needed only to build the session's options
    from livekit.agents.voice.turn import TurnDetectionMode, TurnHandlingOptions

#: LiveKit's audio end-of-turn model, shipped in `livekit-local-inference` (the name LiveKit's `TurnDetector` takes).
VOICE_MODEL: Final = "v1-mini"  # Final: its literal type is what TurnDetector accepts


class TurnMode(enum.Enum):
    OURS = "ours"
    VAD = "vad"
    LIVEKIT = "livekit"

    @classmethod
    def from_env(cls, env: Env) -> TurnMode:
        return cls(env.choice("TURN_HANDLING", cls.OURS.value, tuple(m.value for m in cls)))

    @property
    def uses_voice_model(self) -> bool:
        """Whether calls in this mode run the audio end-of-turn model (the worker loads it once per process)."""
        return self in (TurnMode.OURS, TurnMode.LIVEKIT)


@dataclass(frozen=True)
class TurnOptions:
    mode: TurnMode = TurnMode.OURS
    min_endpointing_s: float = 0.2
    eot_threshold: float = 0.44  # fitted on the Piper corpus's tuning half: docs/agent.md "Turn-taking"
    eot_medium_delay_s: float = 1.8
    eot_max_delay_s: float = 2.5
    voice_wait_s: float = 0.3
    overlap_confirm_s: float = 0.9
    overlap_duck_db: float = -15.0
    overlap_early_words: bool = True
    interrupt_min_speech_s: float = 0.5
    resume_false_interruption: bool = False
    false_interruption_timeout_s: float = 2.0

    @classmethod
    def from_env(cls, env: Env) -> TurnOptions:
        d = cls()
        return cls(
            mode=TurnMode.from_env(env),
            min_endpointing_s=env.float("MIN_ENDPOINTING", d.min_endpointing_s, lo=0.0, hi=10.0),
            eot_threshold=env.float("EOT_THRESHOLD", d.eot_threshold, lo=0.0, hi=1.0),
            eot_medium_delay_s=env.float("EOT_MEDIUM_DELAY_S", d.eot_medium_delay_s, lo=0.0, hi=10.0),
            eot_max_delay_s=env.float("EOT_MAX_DELAY_S", d.eot_max_delay_s, lo=0.1, hi=10.0),
            overlap_confirm_s=env.float("OVERLAP_CONFIRM_S", d.overlap_confirm_s, lo=0.1, hi=10.0),
            overlap_duck_db=env.float("OVERLAP_DUCK_DB", d.overlap_duck_db, lo=-60.0, hi=0.0),
            overlap_early_words=env.bool("OVERLAP_EARLY_WORDS", d.overlap_early_words),
            interrupt_min_speech_s=env.float("INTERRUPT_MIN_SPEECH_S", d.interrupt_min_speech_s, lo=0.05, hi=5.0),
            resume_false_interruption=env.bool("RESUME_FALSE_INTERRUPTION", d.resume_false_interruption),
            false_interruption_timeout_s=env.float("FALSE_INTERRUPTION_TIMEOUT_S", d.false_interruption_timeout_s,
                                                   lo=0.1, hi=30.0),
        )


def session_turn_handling(
    options: TurnOptions, detector: TurnDetectionMode | None
) -> TurnHandlingOptions:
    """The session's turn handling for `options.mode`:
    - `vad`: silence alone ends the turn (the VAD's hangover + `MIN_ENDPOINTING`); speech over the agent for
      `INTERRUPT_MIN_SPEECH_S` cuts it; nothing prepared early.
    - `livekit`: LiveKit's own defaults, with its local audio turn detector: endpointing 0.5 / 3.0 s,
      interruption after 0.5 s of speech that pauses and resumes when no words follow, preemptive generation.
    - `ours`: `detector` (agent/turn/end_of_turn.py: voice + words) chooses the wait between `MIN_ENDPOINTING` and
      `EOT_MAX_DELAY_S`; the answer is prepared on the transcript, LLM and TTS, and heard only once the turn is
      committed; speech over the agent ducks it and is judged (agent/turn/overlaps.py), a barge-in cue in its words
      cuts it while it goes on (agent/turn/overlap_words.py); speech longer than `OVERLAP_CONFIRM_S` cuts it
      whatever its words."""
    from livekit.agents.inference import TurnDetector  # loads LiveKit's inference stack: only for a session

    if options.mode is TurnMode.LIVEKIT:
        return {"turn_detection": TurnDetector(version=VOICE_MODEL), "interruption": {"mode": "vad"}}
    if options.mode is TurnMode.OURS:
        if detector is None:
            raise ValueError("TURN_HANDLING=ours needs its end-of-turn detector")
        return {
            "turn_detection": detector,
            "endpointing": {"mode": "fixed", "min_delay": options.min_endpointing_s,
                            "max_delay": options.eot_max_delay_s},
            "interruption": {"enabled": True, "mode": "vad", "min_duration": options.overlap_confirm_s,
                             "resume_false_interruption": False},
            "preemptive_generation": {"enabled": True, "preemptive_tts": True},
        }
    return {
        "turn_detection": "vad",
        "endpointing": {"mode": "fixed", "min_delay": options.min_endpointing_s},
        "interruption": {"enabled": True, "mode": "vad", "min_duration": options.interrupt_min_speech_s,
                         "resume_false_interruption": options.resume_false_interruption,
                         "false_interruption_timeout": options.false_interruption_timeout_s},
        "preemptive_generation": {"enabled": False},
    }
