"""SmartTurn: the probability that a caller has finished their turn, from the sound of their last seconds of speech.

The model is Smart Turn v3.2 (Daily's end-of-turn audio classifier, BSD-2-Clause), the int8 CPU build that the
`pipecat-ai` wheel ships as data (`pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx`, 8.7 MB). Only that
file is used: the wheel is installed with `--no-deps` (its dependencies are a whole voice framework) and none of its
Python is imported; the features below are our own code, written to the model's input contract:

- 16 kHz mono audio in [-1, 1]; the model sees exactly 8 s: the *last* 8 s of a longer input, a shorter one with
  zeros in front of it (the speech's end stays at the right edge, where the model looks);
- the 8 s are normalised to zero mean and unit variance, then turned into a Whisper-style log-mel spectrogram:
  25 ms Hann windows (periodic, 400 samples) every 10 ms (160), centred with reflected edges, power spectrum,
  80 Slaney-scale mel bands 0-8 kHz with area normalisation, log10 floored at 1e-10, the last of the 801 frames
  dropped, every value held within 8 (log10 units) of the loudest, then scaled as (x + 4) / 4;
- input `input_features` float32 (1, 80, 800); output a sigmoid probability that the turn is complete.

Cost: one `SmartTurn().probability(audio)` is tens of ms of one core (results/convbench/eot_offline_2026-12-02/
has the measurement). It lives in the lab because the worker does not use it: agent/turn/end_of_turn.py decides
without it, and lab/convbench/eot_offline.py, which fits the schedule of thresholds it would be used with, finds it
worth running only from ~800 ms of silence on NEUTRAL words. Wiring it in means moving it back to agent/turn/.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np

from common.audio_format import SPEECH_SAMPLE_RATE

RATE = SPEECH_SAMPLE_RATE  # the model's input rate: the speech models' 16 kHz
WINDOW_S = 8
SAMPLES = RATE * WINDOW_S
N_FFT = 400
HOP = 160
N_MELS = 80
MODEL_FILE = "smart-turn-v3.2-cpu.onnx"
PACKAGE = "pipecat-ai==1.14.0"


class SmartTurnUnavailable(RuntimeError):
    """The model file is not installed."""


def bundled_model_path() -> Path:
    """The ONNX file inside the installed pipecat-ai wheel, found without importing pipecat."""
    spec = importlib.util.find_spec("pipecat")
    hint = (f"install the model's wheel without its dependencies: python -m pip install -c constraints.txt "
            f"--no-deps {PACKAGE} (or pass model_path / set SMART_TURN_MODEL to the .onnx file)")  # fmt: skip
    if spec is None or not spec.submodule_search_locations:
        raise SmartTurnUnavailable(f"Smart Turn v3.2 needs the pipecat-ai wheel, which is not installed: {hint}")
    for root in spec.submodule_search_locations:
        path = Path(root) / "audio" / "turn" / "smart_turn" / "data" / MODEL_FILE
        if path.is_file():
            return path
    raise SmartTurnUnavailable(f"the installed pipecat package has no {MODEL_FILE}: {hint}")


# -- features ---------------------------------------------------------------------------------------------------
def _hz_to_slaney(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear (3 mels per 200 Hz) up to 1 kHz, logarithmic above (27 mels per factor 6.4)."""
    hz = np.asarray(hz, dtype=np.float64)
    linear = hz * 3.0 / 200.0
    above = 15.0 + np.log(np.maximum(hz, 1e-9) / 1000.0) * (27.0 / np.log(6.4))
    return np.where(hz >= 1000.0, above, linear)


def _slaney_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    linear = mel * 200.0 / 3.0
    above = 1000.0 * np.exp((mel - 15.0) * (np.log(6.4) / 27.0))
    return np.where(mel >= 15.0, above, linear)


def mel_bank() -> np.ndarray:
    """(80, 201): triangles on the FFT bins, evenly spaced in Slaney mels over 0-8 kHz, each of unit area."""
    edges = _slaney_to_hz(np.linspace(0.0, float(_hz_to_slaney(np.asarray(RATE / 2))), N_MELS + 2))
    bins = np.linspace(0.0, RATE / 2, N_FFT // 2 + 1)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (bins[None, :] - lo) / (mid - lo)
    falling = (hi - bins[None, :]) / (hi - mid)
    tri = np.clip(np.minimum(rising, falling), 0.0, None)
    return tri * (2.0 / (hi - lo))


_BANK = mel_bank()
# each band's non-zero bins, as (first bin, weights): the projection as 80 small weighted sums, with no BLAS call
# (a BLAS matrix product here brought OpenBLAS's second thread, spinning: twice the CPU of a call on 2 cores)
_BANDS = [(int(np.flatnonzero(row)[0]), row[np.flatnonzero(row)[0] : np.flatnonzero(row)[-1] + 1]) for row in _BANK]
_HANN = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic: the window of a 400-point FFT


def fit_window(audio: np.ndarray) -> np.ndarray:
    """The model's 8 s: the last 8 s of `audio`, or `audio` after enough zeros."""
    x = np.asarray(audio, dtype=np.float32).reshape(-1)
    if len(x) >= SAMPLES:
        return x[-SAMPLES:]
    return np.concatenate([np.zeros(SAMPLES - len(x), dtype=np.float32), x])


def features(audio: np.ndarray) -> np.ndarray:
    """(80, 800) float32 log-mel of the model's 8 s window of `audio` (16 kHz, [-1, 1])."""
    x = fit_window(audio).astype(np.float64)
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    half = N_FFT // 2
    padded = np.concatenate([x[half:0:-1], x, x[-2 : -half - 2 : -1]])  # reflected edges, 200 samples each side
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP][:-1]  # 800 of the 801 centres
    power = np.abs(np.fft.rfft(frames * _HANN, axis=1)) ** 2  # (800, 201)
    mel = np.empty((N_MELS, power.shape[0]))
    for m, (first, weights) in enumerate(_BANDS):
        mel[m] = (power[:, first : first + len(weights)] * weights).sum(axis=1)
    logmel = np.log10(np.maximum(mel, 1e-10))  # (80, 800)
    logmel = np.maximum(logmel, logmel.max() - 8.0)
    return ((logmel + 4.0) / 4.0).astype(np.float32)


def to_16k(pcm: np.ndarray, rate: int) -> np.ndarray:
    """int16 (or float) mono audio at `rate` as float32 16 kHz in [-1, 1] (polyphase resampling)."""
    x = np.asarray(pcm)
    x = x.astype(np.float32) / 32768.0 if x.dtype == np.int16 else x.astype(np.float32)
    if rate == RATE:
        return x
    from math import gcd

    from scipy.signal import resample_poly

    g = gcd(rate, RATE)
    return resample_poly(x, RATE // g, rate // g).astype(np.float32)


# -- the model --------------------------------------------------------------------------------------------------
class SmartTurn:
    def __init__(self, model_path: Path | str | None = None, threads: int = 1) -> None:
        """`model_path`: the .onnx file (default: $SMART_TURN_MODEL, else the installed pipecat-ai wheel's);
        `threads`: the CPU threads one call may use (1: the worker's other work keeps the rest)."""
        import onnxruntime as ort

        path = Path(model_path or os.environ.get("SMART_TURN_MODEL") or bundled_model_path())
        if not path.is_file():
            raise SmartTurnUnavailable(f"no Smart Turn model at {path}")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.path = path
        self._session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
        self._input = self._session.get_inputs()[0].name

    def probability(self, audio: np.ndarray) -> float:
        """P(the turn is complete) for 16 kHz float audio ending now (its last 8 s count)."""
        out = self._session.run(None, {self._input: features(audio)[None]})
        return float(np.asarray(out[0]).reshape(-1)[0])

    def probabilities(self, clips: list[np.ndarray]) -> list[float]:
        """One call per clip, batched into one model run (the offline evaluation's many silences)."""
        if not clips:
            return []
        batch = np.stack([features(c) for c in clips])
        out = np.asarray(self._session.run(None, {self._input: batch})[0]).reshape(len(clips), -1)
        return [float(v) for v in out[:, 0]]
