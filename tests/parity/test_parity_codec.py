"""Our codec decoder vs the official single-pass decoder (qwen-tts-hf) on the same tiny speech_tokenizer folder.

The reference is `Qwen3TTSTokenizer.from_pretrained(...).model.decoder(codes)`: the unchunked decode (the official
`decode()` goes through a 300-frame chunked re-decode, which is only an approximation past 300 frames). The wrapper
must be used, not `Qwen3TTSTokenizerV2Model.from_pretrained` directly: on transformers 5 only the wrapper restores
the non-persistent RoPE `inv_freq` buffer, which is otherwise left uninitialised.
Fails (never skips) when the reference cannot be imported.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.parity.official_ref import import_qwen_tts
from tts_engine.model.codec import CodecDecoder
from tts_engine.model.codec_factory import write_codec_checkpoint

pytestmark = pytest.mark.parity


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops; avoids OpenMP contention on busy 2-core runners
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("parity_codec") / "speech_tokenizer"
    write_codec_checkpoint(out, "tiny", seed=0)
    return out


@pytest.fixture(scope="module")
def official(folder: Path) -> Any:
    qwen_tts = import_qwen_tts()  # raises if the reference is not installed
    tokenizer = qwen_tts.Qwen3TTSTokenizer.from_pretrained(str(folder), device_map="cpu", dtype=torch.float32)
    return tokenizer.model.decoder.eval()


@pytest.fixture(scope="module")
def ours(folder: Path) -> CodecDecoder:
    return CodecDecoder.from_pretrained(folder, torch.device("cpu"))


def snr_db(reference: torch.Tensor, other: torch.Tensor) -> float:
    noise = (reference - other).double().pow(2).sum()
    return float("inf") if noise == 0 else float(10 * torch.log10(reference.double().pow(2).sum() / noise))


def random_codes(frames: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 2048, (2, 16, frames), generator=torch.Generator().manual_seed(seed))


def report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    with capsys.disabled():
        print(f"\n[parity codec] {line}")


@pytest.mark.parametrize("frames", [40, 100, 320])  # 100 > the 72-frame window, 320 > the 300-frame chunk
def test_single_pass_matches_official(
    official: Any, ours: CodecDecoder, frames: int, capsys: pytest.CaptureFixture[str]
) -> None:
    codes = random_codes(frames, seed=frames)
    with torch.no_grad():
        expected = official(codes).squeeze(1)
    got = ours(codes)
    assert got.shape == expected.shape == (2, frames * 1920)
    snr = snr_db(expected, got)
    report(capsys, f"single pass, {frames} frames x 2 rows: SNR {snr:.1f} dB (need >= 80)")
    assert snr >= 80.0


def test_streaming_matches_official(official: Any, ours: CodecDecoder, capsys: pytest.CaptureFixture[str]) -> None:
    codes = random_codes(100, seed=7)
    with torch.no_grad():
        expected = official(codes).squeeze(1)
    state = ours.new_state(2)
    got = torch.cat([ours.step(codes[:, :, t : t + 1], state) for t in range(100)], dim=-1)
    snr = snr_db(expected, got)
    report(capsys, f"frame-by-frame step, 100 frames x 2 rows: SNR {snr:.1f} dB (need >= 80)")
    assert snr >= 80.0


def test_dequantizer_and_pre_transformer_match_official(official: Any, ours: CodecDecoder) -> None:
    codes = random_codes(100, seed=11)
    codes[0, :, -5:] = -1  # padding codes are read as code 0 by both
    with torch.no_grad():
        quantized = official.quantizer.decode(codes.clamp(min=0))
        hidden = official.pre_transformer(inputs_embeds=official.pre_conv(quantized).transpose(1, 2))
    torch.testing.assert_close(ours.dequantize(codes), quantized, rtol=0, atol=1e-5)
    torch.testing.assert_close(ours.transformer_output(codes), hidden.last_hidden_state, rtol=1e-5, atol=1e-5)
