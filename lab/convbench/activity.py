"""What the caller hears of the agent: audible or silent, stopped, ducked. One set of thresholds, written down once.

The thresholds come from the received audio of a real call (the embedded stack's random-weight voice, 10 ms
frames at the SDK caller, docs/convbench.md "Thresholds"): inside a reply the babble sits at -17.5 dBFS (P50;
P1 -21.4), its longest dip below -55 dBFS lasted 30 ms; between replies the received track carries -100 dBFS
(decoder noise, never above -100.2). So:
- `silence_db` -55: a frame below it is silent (the page's agent-silence level, web/app.js AudioActivity);
- `stop_min_ms` 100: the agent *stopped* when it stays silent this long (3x the longest dip inside a reply); the
  stop's time is the first silent frame. Real weights pause between words: raise it (`--stop-min-ms 300`);
- `duck_db` 10 and `duck_min_ms` 150: the agent *ducked* when its level (50 ms RMS windows) stays >= 10 dB under
  the level it had in the 500 ms before the cue, but not silent, for 150 ms. On a quiet host the babble's windows
  hardly dip; on a starved one (the baseline corpus run) the decoder's fade around a dropout stayed 10 dB down for
  up to 110 ms, so a duck must outlast that.
`AgentActivity` applies them live (the conductor cues items on it); `runs`/`level_windows` offline (scoring).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

FRAME_S = 0.01


@dataclass(frozen=True)
class Thresholds:
    silence_db: float = -55.0
    stop_min_ms: float = 100.0
    duck_db: float = 10.0
    duck_min_ms: float = 150.0
    reference_ms: float = 500.0  # the agent's level before a cue: median of its 50 ms windows over this span

    def to_json(self) -> dict[str, float]:
        return asdict(self)


DEFAULT_THRESHOLDS = Thresholds()


class AgentActivity:
    """Live: fed every received 10 ms frame (arrival time in Unix s, level in dBFS)."""

    def __init__(self, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> None:
        self.th = thresholds
        self.onsets: list[float] = []  # first audible frame after a stop (or ever)
        self.last_audible: float | None = None
        self._silent_frames = 0

    def update(self, t: float, db: float) -> None:
        if db >= self.th.silence_db:
            if self.last_audible is None or self._silent_frames * FRAME_S * 1000 >= self.th.stop_min_ms:
                self.onsets.append(t)
            self.last_audible = t
            self._silent_frames = 0
        else:
            self._silent_frames += 1

    def onset_after(self, t: float) -> float | None:
        return next((o for o in self.onsets if o >= t), None)

    def audible(self) -> bool:
        """Talking now: the last frames were not silent for `stop_min_ms`."""
        return self.last_audible is not None and self._silent_frames * FRAME_S * 1000 < self.th.stop_min_ms

    def quiet_since(self) -> float | None:
        return None if self.audible() else self.last_audible


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) index ranges where `mask` is True."""
    if mask.size == 0:
        return []
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist(), strict=True))


def level_windows(db: np.ndarray, frames: int = 5) -> np.ndarray:
    """dBFS of the RMS over each frame and the `frames - 1` after it (50 ms windows by default)."""
    if db.size == 0:
        return db
    power = np.power(10.0, db / 10.0)
    kernel = np.ones(frames) / frames
    smoothed = np.convolve(np.concatenate([power, np.full(frames - 1, power[-1])]), kernel, mode="valid")
    with np.errstate(divide="ignore"):
        return 10.0 * np.log10(smoothed)
