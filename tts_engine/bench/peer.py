"""Peer runner: faster-qwen3-tts 0.5.4 on the same checkpoint, text and frame count as our engine.

Runs in its own process (`python -m tts_engine bench peer ...`) so its GPU memory and CUDA graphs never
mix with ours. The peer is a test-time comparison only: product code never imports it.

How it is measured (and how that matches our definitions, docs/engine.md "Load reporting and stats"):
- Fixed frame count: `max_new_tokens = min_new_tokens = frames`. The peer's loop makes one codec frame
  per step and suppresses EOS until `min_new_tokens` frames exist, so every run yields exactly `frames`
  frames (checked from the returned sample count).
- TTFA: wall time from the call (tokenization and prompt building included, as in the peer's own
  benchmark) to the first chunk's PCM as a host numpy array. RTF: the whole call's wall time over the
  audio duration (frames x 80 ms). Lower is faster; the peer's README prints the inverse.
- Modes: streaming at chunk 8 (its documented setting, the gated comparison), chunk 1, and offline
  (`generate_custom_voice`, which decodes once at the end).
- Sampling: the peer's defaults (talker do_sample, top_k 50, temperature 0.9; its predictor graph always
  samples). Load time covers `from_pretrained`; capture time covers its explicit `warmup()`.

Import shims (as for the parity reference, tests/parity/official_ref.py): qwen_tts imports sox, onnxruntime,
torchaudio and librosa at import time for paths CustomVoice never runs; a module that is missing or
fails to import is replaced by an empty stand-in whose functions raise. On transformers 5.17-5.20 its
rope registry entry needs `rope_theta` to fall back to `rope_parameters`.
"""

from __future__ import annotations

import sys
import time
import types
from typing import Any

from common.audio_format import SAMPLE_RATE, SAMPLES_PER_FRAME
from tts_engine.bench.stats import BenchError, gpu_memory_gib, summarize

PEER_NAME = "faster-qwen3-tts"
PEER_VERSION = "0.5.4"
MODES = ("chunk8", "chunk1", "offline")


def _raiser(what: str) -> Any:
    def fail(*_a: Any, **_k: Any) -> Any:
        raise NotImplementedError(f"{what} is stubbed for the benchmark (CustomVoice never calls it)")

    return fail


def _stub_if_broken(name: str, build: Any) -> None:
    try:
        __import__(name)
    except Exception:  # noqa: BLE001 - ImportError or a broken native extension: stub either way
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]
        build()


def _stub_torchaudio() -> None:
    ta = types.ModuleType("torchaudio")
    comp = types.ModuleType("torchaudio.compliance")
    kaldi = types.ModuleType("torchaudio.compliance.kaldi")
    kaldi.fbank = _raiser("torchaudio.compliance.kaldi.fbank")  # type: ignore[attr-defined]  # a stub module's attribute
    comp.kaldi = kaldi  # type: ignore[attr-defined]  # a stub module's attribute
    ta.compliance = comp  # type: ignore[attr-defined]  # a stub module's attribute
    sys.modules.update({"torchaudio": ta, "torchaudio.compliance": comp, "torchaudio.compliance.kaldi": kaldi})


def _stub_librosa() -> None:
    lib = types.ModuleType("librosa")
    filters = types.ModuleType("librosa.filters")
    filters.mel = _raiser("librosa.filters.mel")  # type: ignore[attr-defined]  # a stub module's attribute
    lib.filters = filters  # type: ignore[attr-defined]  # a stub module's attribute
    sys.modules.update({"librosa": lib, "librosa.filters": filters})


def _stub_plain(name: str) -> Any:
    return lambda: sys.modules.__setitem__(name, types.ModuleType(name))


def import_peer() -> Any:
    """Import faster_qwen3_tts with the shims above; raise BenchError when it is not installed."""
    import transformers.processing_utils  # noqa: F401  (transformers probes torchaudio before any stub)

    _stub_if_broken("torchaudio.compliance.kaldi", _stub_torchaudio)
    _stub_if_broken("librosa.filters", _stub_librosa)
    for name in ("sox", "onnxruntime", "soundfile"):
        _stub_if_broken(name, _stub_plain(name))
    try:
        import faster_qwen3_tts
        import qwen_tts  # noqa: F401 - the peer needs it importable too
    except ImportError as exc:
        raise BenchError(
            f"the peer {PEER_NAME}=={PEER_VERSION} is not importable ({exc}); on the GPU machine install the "
            "carried wheels first: pip install --no-index --no-deps --target /tmp/site .whl/*.whl"
        ) from exc
    patch_rope_default()
    version = getattr(faster_qwen3_tts, "__version__", "?")
    if version != PEER_VERSION:
        print(f"[peer] warning: expected {PEER_NAME} {PEER_VERSION}, found {version}", file=sys.stderr)
    return faster_qwen3_tts


def patch_rope_default() -> None:
    """Let qwen_tts's rope registry entry read rope_theta from rope_parameters (transformers 5.17-5.20)."""
    from transformers import modeling_rope_utils

    registry = modeling_rope_utils.ROPE_INIT_FUNCTIONS
    original = registry.get("default")
    if original is None or getattr(original, "_bench_patched", False):
        return

    def default_rope(config: Any, *args: Any, **kwargs: Any) -> Any:
        if not hasattr(config, "rope_theta"):
            params = getattr(config, "rope_parameters", None) or {}
            if "rope_theta" in params:
                config.rope_theta = params["rope_theta"]
        return original(config, *args, **kwargs)

    default_rope._bench_patched = True  # type: ignore[attr-defined]  # a marker: patched once
    registry["default"] = default_rope


class PeerRunner:
    """One loaded peer model and the three ways of running it."""

    def __init__(self, model_dir: str, text: str, speaker: str, language: str, frames: int) -> None:
        import torch

        module = import_peer()
        self.text, self.speaker, self.language, self.frames = text, speaker, language, frames
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        self.model = module.FasterQwen3TTS.from_pretrained(model_dir, device="cuda", dtype=torch.bfloat16)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        self.model.warmup()
        torch.cuda.synchronize()
        self.load_s = t1 - t0
        self.capture_s = time.perf_counter() - t1

    def call_kwargs(self) -> dict[str, Any]:
        return dict(
            text=self.text,
            speaker=self.speaker,
            language=self.language,
            max_new_tokens=self.frames,
            min_new_tokens=self.frames,
        )

    def stream_once(self, chunk: int) -> tuple[float, float, int]:
        """(ttfa_s, wall_s, samples) for one streaming call at `chunk` frames per chunk."""
        t0 = time.perf_counter()
        ttfa = None
        samples = 0
        for audio, _sr, _timing in self.model.generate_custom_voice_streaming(chunk_size=chunk, **self.call_kwargs()):
            if ttfa is None:
                ttfa = time.perf_counter() - t0
            samples += len(audio)
        wall = time.perf_counter() - t0
        return float(ttfa if ttfa is not None else wall), wall, samples

    def offline_once(self) -> tuple[float, float, int]:
        t0 = time.perf_counter()
        wavs, _sr = self.model.generate_custom_voice(**self.call_kwargs())
        wall = time.perf_counter() - t0
        return wall, wall, int(len(wavs[0]))

    def run_mode(self, mode: str) -> tuple[float, float, int]:
        if mode == "offline":
            return self.offline_once()
        if mode.startswith("chunk") and mode[5:].isdigit():
            return self.stream_once(int(mode[5:]))
        raise BenchError(f"unknown peer mode {mode!r}; allowed: chunkN (e.g. chunk8), offline")


def run_peer(
    model_dir: str,
    *,
    text: str,
    speaker: str,
    language: str,
    frames: int,
    runs: int,
    warmup: int,
    modes: tuple[str, ...] = MODES,
) -> dict[str, Any]:
    """Measure the peer in every mode; returns the JSON-ready result (per-mode stats and a summary)."""
    import torch

    runner = PeerRunner(model_dir, text, speaker, language, frames)
    audio_s = frames * SAMPLES_PER_FRAME / SAMPLE_RATE
    per_mode: dict[str, Any] = {}
    for mode in modes:
        for _ in range(warmup):
            runner.run_mode(mode)
        ttfa_ms, rtf, sample_counts = [], [], set()
        for _ in range(runs):
            ttfa, wall, samples = runner.run_mode(mode)
            ttfa_ms.append(ttfa * 1000.0)
            rtf.append(wall / audio_s)
            sample_counts.add(samples)
        if sample_counts != {frames * SAMPLES_PER_FRAME}:
            raise BenchError(
                f"peer mode {mode} produced {sorted(sample_counts)} samples per run, expected "
                f"{frames * SAMPLES_PER_FRAME} ({frames} frames); the fixed frame count did not hold"
            )
        per_mode[mode] = {"ttfa_ms": summarize(ttfa_ms), "rtf": summarize(rtf)}
        print(
            f"[peer] {mode}: TTFA P50 {per_mode[mode]['ttfa_ms']['p50']:.1f} ms "
            f"P95 {per_mode[mode]['ttfa_ms']['p95']:.1f} ms, RTF P50 {per_mode[mode]['rtf']['p50']:.3f}",
            flush=True,
        )
    torch.cuda.synchronize()
    return {
        "name": PEER_NAME,
        "version": PEER_VERSION,
        "frames": frames,
        "runs": runs,
        "warmup": warmup,
        "load_s": round(runner.load_s, 3),
        "capture_s": round(runner.capture_s, 3),
        "gpu_mem": gpu_memory_gib(),
        "sampling": "peer defaults: talker do_sample top_k 50 temperature 0.9 rep 1.05; predictor graph samples",
        "modes": per_mode,
    }
