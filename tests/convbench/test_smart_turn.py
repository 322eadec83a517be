"""lab/convbench/smart_turn.py: Smart Turn v3.2's features follow the model's input contract, the model scores a
generated clip, and a machine without the model's wheel gets an error that says how to install it."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from lab.convbench import smart_turn
from lab.convbench.smart_turn import RATE, SAMPLES, SmartTurn, SmartTurnUnavailable, features, fit_window, mel_bank


def _model_installed() -> bool:
    try:
        smart_turn.bundled_model_path()
    except SmartTurnUnavailable:
        return False
    return True


INSTALL = "python -m pip install -c constraints.txt --no-deps pipecat-ai"
needs_model = pytest.mark.skipif(not _model_installed(), reason=f"the Smart Turn model's wheel is missing: {INSTALL}")


def _voiced(seconds: float, seed: int = 0) -> np.ndarray:
    """A vowel-like sound: harmonics of a gliding 120-180 Hz pitch, with an onset and a fall."""
    t = np.arange(int(seconds * RATE)) / RATE
    f0 = 150 + 30 * np.sin(2 * np.pi * 0.7 * t + seed)
    phase = 2 * np.pi * np.cumsum(f0) / RATE
    x = sum(np.sin(k * phase) / k for k in range(1, 12))
    env = np.minimum(1.0, t / 0.05) * np.minimum(1.0, (t[-1] - t) / 0.2 + 0.05)
    return (0.2 * x * env).astype(np.float32)


def test_the_window_is_the_last_8_s_with_zeros_in_front() -> None:
    short = _voiced(2.0)
    w = fit_window(short)
    assert len(w) == SAMPLES and not w[: SAMPLES - len(short)].any() and np.array_equal(w[-len(short) :], short)
    long = np.concatenate([np.ones(RATE, np.float32), _voiced(8.0)])
    assert np.array_equal(fit_window(long), long[-SAMPLES:])


def test_features_follow_the_whisper_log_mel_contract() -> None:
    f = features(_voiced(3.0))
    assert f.shape == (80, 800) and f.dtype == np.float32
    # (log10 + 4) / 4, held within 8 of the loudest: values span at most 2.0
    assert f.max() - f.min() <= 2.0 + 1e-6
    # the zeros in front are one flat frame after another, the speech at the right edge holds the loudest
    assert np.allclose(f[:, 5:100], f[:, 5:6]) and f[:, -200:].max() == f.max()
    # what lies beyond the last 8 s changes nothing
    x = _voiced(8.0, seed=1)
    assert np.array_equal(features(x), features(np.concatenate([_voiced(1.0), x])))


def test_the_mel_bank_is_slaney_area_normalised() -> None:
    bank = mel_bank()
    assert bank.shape == (80, 201) and (bank >= 0).all() and (bank.sum(axis=1) > 0).all()
    librosa = pytest.importorskip("librosa")
    ref = librosa.filters.mel(sr=RATE, n_fft=400, n_mels=80, fmin=0.0, fmax=RATE / 2, htk=False, norm="slaney")
    assert np.allclose(bank, ref, atol=1e-6)


@needs_model
def test_the_model_scores_a_generated_clip() -> None:
    model = SmartTurn()
    speech = _voiced(1.5)
    clips = [np.concatenate([speech, np.zeros(int(ms * RATE / 1000), np.float32)]) for ms in (0, 300, 1000)]
    ps = [model.probability(c) for c in clips]
    assert all(0.0 <= p <= 1.0 for p in ps)
    assert model.probability(clips[1]) == ps[1]  # deterministic
    assert np.allclose(model.probabilities(clips), ps, atol=1e-5)  # batched: the same numbers


@needs_model
def test_the_model_scores_espeak_speech() -> None:
    import shutil

    from tests.agent.espeak_audio import speech

    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    pcm = speech("I would like to book a table for two.", RATE, lead_s=0.2)
    p = SmartTurn().probability(pcm.astype(np.float32) / 32768.0)
    assert 0.0 <= p <= 1.0


def test_a_missing_wheel_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SMART_TURN_MODEL", raising=False)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pipecat" else real(name, *a))
    with pytest.raises(SmartTurnUnavailable, match="--no-deps pipecat-ai"):
        SmartTurn()
