"""Our codec decoder on a tiny random checkpoint: output length, exact streaming, slot reset, batch independence."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tts_engine.model.codec import CodecDecoder
from tts_engine.model.codec_factory import write_codec_checkpoint

FRAME = 1920


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    # The tiny model's ops are too small to gain from threads; on a busy 2-core runner OpenMP contention makes
    # each decode step ~10x slower.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def codec(tmp_path_factory: pytest.TempPathFactory) -> CodecDecoder:
    folder = tmp_path_factory.mktemp("codec") / "speech_tokenizer"
    write_codec_checkpoint(folder, "tiny", seed=0)
    return CodecDecoder.from_pretrained(folder, torch.device("cpu"))


def random_codes(batch: int, frames: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 2048, (batch, 16, frames), generator=torch.Generator().manual_seed(seed))


def snr_db(reference: torch.Tensor, other: torch.Tensor) -> float:
    noise = (reference - other).double().pow(2).sum()
    if noise == 0:
        return float("inf")
    return float(10 * torch.log10(reference.double().pow(2).sum() / noise))


def stream(codec: CodecDecoder, codes: torch.Tensor, n: int) -> torch.Tensor:
    state = codec.new_state(codes.shape[0])
    pieces = [codec.step(codes[:, :, t : t + n], state) for t in range(0, codes.shape[2], n)]
    return torch.cat(pieces, dim=-1)


@pytest.mark.parametrize("frames", [1, 7])
def test_forward_gives_1920_samples_per_frame(codec: CodecDecoder, frames: int) -> None:
    pcm = codec(random_codes(2, frames, seed=frames))
    assert pcm.shape == (2, frames * FRAME)
    assert pcm.dtype == torch.float32
    assert float(pcm.abs().max()) <= 1.0
    assert float(pcm.std()) > 0.01  # random weights still give a real signal, not silence


@pytest.fixture(scope="module")
def single_pass(codec: CodecDecoder) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    out = {}
    for frames in (10, 80, 310):
        codes = random_codes(2, frames, seed=100 + frames)
        out[frames] = (codes, codec(codes))
    return out


@pytest.mark.parametrize("frames", [10, 80, 310])  # 80 > the 72-frame window, 310 > the official 300-frame chunk
@pytest.mark.parametrize("n", [1, 2, 3])
def test_streaming_equals_single_pass(
    codec: CodecDecoder, single_pass: dict[int, tuple[torch.Tensor, torch.Tensor]], frames: int, n: int
) -> None:
    codes, reference = single_pass[frames]
    streamed = stream(codec, codes, n)
    assert streamed.shape == reference.shape
    assert snr_db(reference, streamed) >= 100.0


def test_reset_rows_starts_fresh_streams_and_leaves_others(codec: CodecDecoder) -> None:
    first, second = random_codes(3, 90, seed=1), random_codes(3, 20, seed=2)
    state = codec.new_state(3)
    head = torch.cat([codec.step(first[:, :, t : t + 3], state) for t in range(0, 90, 3)], dim=-1)
    state.reset_(torch.tensor([0, 2]))
    tail = torch.cat([codec.step(second[:, :, t : t + 2], state) for t in range(0, 20, 2)], dim=-1)
    assert state.positions.tolist() == [20, 110, 20]
    fresh = codec(second[[0, 2]])
    assert snr_db(fresh, tail[[0, 2]]) >= 100.0  # reset rows behave like new streams
    continued = codec(torch.cat([first[1:2], second[1:2]], dim=-1))
    assert snr_db(continued, torch.cat([head[1:2], tail[1:2]], dim=-1)) >= 100.0  # row 1 never noticed


@pytest.mark.parametrize("rows", [1, slice(0, 1), torch.tensor([False, True])])
def test_reset_accepts_int_slice_and_mask(codec: CodecDecoder, rows: int | slice | torch.Tensor) -> None:
    state = codec.new_state(2)
    codec.step(random_codes(2, 4, seed=3), state)
    state.reset_(rows)
    cleared = [t[rows] for t in state.tails] + [state.kv_k[:, rows], state.kv_v[:, rows], state.positions[rows]]
    assert all(float(t.abs().sum()) == 0.0 for t in cleared)
    assert int(state.positions.sum()) == 4  # the other row kept its position


def test_batch_rows_are_independent(codec: CodecDecoder) -> None:
    codes = random_codes(3, 12, seed=4)
    together = codec(codes)
    for row in range(3):
        assert snr_db(codec(codes[row : row + 1])[0], together[row]) >= 100.0


def test_rows_that_are_not_live_keep_their_context(codec: CodecDecoder) -> None:
    """A batched step with a row that must not advance (a stream waiting for its text, a free row of a bucket) leaves
    that row as it was, and the live rows decode as they would alone."""
    codes = random_codes(3, 6, seed=5)
    state = codec.new_state(3)
    codec.step(codes[:, :, :3], state)
    batched = [*state.tails, state.positions]  # [B, ...]
    layered = [state.kv_k, state.kv_v]  # [layers, B, ...]
    before = [t.clone() for t in batched], [t.clone() for t in layered]
    state.live = torch.tensor([True, False, True])
    out = codec.step(codes[:, :, 3:4], state)
    for old, new in zip(before[0], batched, strict=True):
        assert torch.equal(old[1], new[1])
    for old, new in zip(before[1], layered, strict=True):
        assert torch.equal(old[:, 1], new[:, 1]) and not torch.equal(old[:, 0], new[:, 0])
    alone = codec.new_state(1)
    codec.step(codes[:1, :, :3], alone)
    assert snr_db(codec.step(codes[:1, :, 3:4], alone)[0], out[0]) >= 100.0
    state.live = None
    codec.step(codes[:, :, 4:5], state)  # the held row goes on from where it was
    assert state.positions.tolist() == [5, 4, 5]


def test_negative_codes_are_padding_and_out_of_range_is_refused(codec: CodecDecoder) -> None:
    codes = random_codes(1, 5, seed=5)
    padded = codes.clone()
    padded[:, :, 3:] = -1
    zeroed = codes.clone()
    zeroed[:, :, 3:] = 0
    assert torch.equal(codec(padded), codec(zeroed))
    with pytest.raises(ValueError, match="2048"):
        codec(torch.full((1, 16, 2), 2048))
    with pytest.raises(ValueError, match=r"\[batch, 16, frames>=1\]"):
        codec(torch.zeros(1, 15, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="dtype"):
        codec(torch.zeros(1, 16, 2))


def test_state_tensors_are_fixed_size(codec: CodecDecoder) -> None:
    state = codec.new_state(2)
    shapes = [t.shape for t in state.tails] + [state.kv_k.shape, state.kv_v.shape]
    for n in (1, 3, 1):
        codec.step(random_codes(2, n, seed=n), state)
        assert [t.shape for t in state.tails] + [state.kv_k.shape, state.kv_v.shape] == shapes
    assert state.kv_k.shape[3] == 71  # window 72 = the query itself + 71 past keys


def test_loader_reads_folder_path_as_str(tmp_path: Path) -> None:
    write_codec_checkpoint(tmp_path, "tiny", seed=1)
    decoder = CodecDecoder.from_pretrained(str(tmp_path), "cpu")
    assert decoder.samples_per_frame == FRAME
