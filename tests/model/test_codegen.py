"""CodeGenerator: batching independence, slot reuse, seeded sampling, caps, EOS handling, request validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tts_engine.errors import EmptyTextError, TTSInputError, UnknownLanguageError, UnknownSpeakerError
from tts_engine.model.loader import LoadedModel
from tts_engine.runtime.codegen import CodeGenerator, SamplingParams, generate_codes
from tts_engine.text.speech_length import frame_budget

SEEDED = SamplingParams(do_sample=True, subtalker_do_sample=True, temperature=0.9, top_k=50, top_p=0.95, seed=1234)


def _run(gen: CodeGenerator, slot: int, frames: int, n_rows: int) -> torch.Tensor:
    out = []
    for _ in range(frames):
        codes, _ = gen.step(n_rows)
        out.append(codes[slot].clone())
    return torch.stack(out)


@pytest.mark.parametrize("params", [SamplingParams.greedy(), SEEDED], ids=["greedy", "seeded"])
def test_batched_streams_equal_each_alone(tiny_model: LoadedModel, params: SamplingParams) -> None:
    texts = [("hello world", "serena", "english"), ("你好，世界。", "dylan", "auto")]
    alone = []
    for text, spk, lang in texts:
        gen = CodeGenerator(tiny_model, max_slots=1, max_seq_len=256)
        gen.admit(0, gen.prepare(text, spk, lang, max_frames=12), params)
        alone.append(_run(gen, 0, 12, 1))
    gen = CodeGenerator(tiny_model, max_slots=3, max_seq_len=256)
    gen.admit(0, gen.prepare(*texts[0], max_frames=12), params)
    gen.admit(2, gen.prepare(*texts[1], max_frames=12), params)  # slot 1 idle: its row is stepped and ignored
    rows = [[], []]
    for _ in range(12):
        codes, _ = gen.step(3)
        rows[0].append(codes[0].clone())
        rows[1].append(codes[2].clone())
    assert torch.equal(torch.stack(rows[0]), alone[0])
    assert torch.equal(torch.stack(rows[1]), alone[1])


def test_slot_reuse_after_release_is_clean(tiny_model: LoadedModel) -> None:
    gen = CodeGenerator(tiny_model, max_slots=2, max_seq_len=256)
    first = gen.prepare("The quick brown fox jumps over the lazy dog.", "vivian", "english", max_frames=20)
    gen.admit(0, first, SEEDED)
    gen.admit(1, gen.prepare("hello world", "serena", "english", max_frames=20), SamplingParams.greedy())
    for _ in range(20):
        gen.step(2)
    gen.release(0)
    reference = CodeGenerator(tiny_model, max_slots=1, max_seq_len=256)
    prompt = reference.prepare("Good morning, everyone.", "ryan", "auto", max_frames=10)
    reference.admit(0, prompt, SamplingParams.greedy())
    expected = _run(reference, 0, 10, 1)
    gen.admit(0, prompt, SamplingParams.greedy())  # slot 1 keeps running alongside
    assert torch.equal(_run(gen, 0, 10, 2), expected)


def test_seeded_sampling_reproducible_and_seed_dependent(tiny_model: LoadedModel) -> None:
    a = generate_codes(tiny_model, "hello world", "serena", "english", SEEDED, max_frames=10)
    b = generate_codes(tiny_model, "hello world", "serena", "english", SEEDED, max_frames=10)
    other = SamplingParams(**{**SEEDED.__dict__, "seed": 99})
    c = generate_codes(tiny_model, "hello world", "serena", "english", other, max_frames=10)
    greedy = generate_codes(tiny_model, "hello world", "serena", "english", SamplingParams.greedy(), max_frames=10)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert not torch.equal(a, greedy)


def test_top_k_one_sampling_equals_greedy(tiny_model: LoadedModel) -> None:
    top1 = SamplingParams(do_sample=True, subtalker_do_sample=True, top_k=1, subtalker_top_k=1, seed=5)
    got = generate_codes(tiny_model, "hello world", "serena", "english", top1, max_frames=8)
    assert torch.equal(got, generate_codes(tiny_model, "hello world", "serena", "english", max_frames=8))


def test_codes_in_range_and_cap_respected(tiny_model: LoadedModel) -> None:
    gen = CodeGenerator(tiny_model, max_slots=1, max_seq_len=256)
    prompt = gen.prepare("hello world", "serena", "english", max_frames=5)
    gen.admit(0, prompt, SamplingParams.greedy())
    dones = []
    for _ in range(5):
        codes, done = gen.step(1)
        assert codes.shape == (1, 16) and codes.dtype == torch.long
        assert int(codes.min()) >= 0 and int(codes.max()) < 2048  # control ids are suppressed
        dones.append(bool(done[0]))
    assert dones == [False] * 4 + [True]  # the capped frame is valid and flagged done


def test_eos_ends_stream_and_is_masked_for_first_frames(tiny_model: LoadedModel) -> None:
    gen = CodeGenerator(tiny_model, max_slots=1, max_seq_len=256)
    gen.admit(0, gen.prepare("hello world", "serena", "english", max_frames=20), SamplingParams.greedy())
    eos = tiny_model.config.codec_eos_id
    for frame in range(4):
        gen.logits[0].fill_(-5.0)
        gen.logits[0, eos] = 10.0  # force the model to "want" EOS
        codes, done = gen.step(1)
        if frame < 2:  # min_new_tokens=2: EOS is masked, a real code is chosen
            assert int(codes[0, 0]) != eos and not bool(done[0])
        else:
            assert int(codes[0, 0]) == eos and bool(done[0])


def test_rows_that_are_not_live_keep_their_state(tiny_model: LoadedModel) -> None:
    """A step over 3 rows with row 1 held (a stream waiting for its text) leaves row 1 as it was, the others step as
    before, and row 1 goes on later with the codes it would have had without the wait."""
    gen = CodeGenerator(tiny_model, max_slots=3, max_seq_len=256)
    reference = CodeGenerator(tiny_model, max_slots=3, max_seq_len=256)
    for g in (gen, reference):
        for slot, text in enumerate(["hello world", "a second one", "and a third"]):
            g.admit(slot, g.prepare(text, "serena", "english"), SamplingParams.greedy())
        g.step(3)
    state = [t.clone() for t in (gen.positions, gen.frame, gen.logits, gen.past_hidden, gen.seen)]
    gen.set_live(np.array([True, False, True]))
    codes, _ = gen.step(3)
    expected, _ = reference.step(3)
    assert torch.equal(codes[0], expected[0]) and torch.equal(codes[2], expected[2])
    for old, new in zip(state, (gen.positions, gen.frame, gen.logits, gen.past_hidden, gen.seen), strict=True):
        assert torch.equal(old[1], new[1])
    assert gen.positions.tolist() == [p + 1 if i != 1 else p for i, p in enumerate(state[0].tolist())]
    gen.set_live(np.ones(3, dtype=np.bool_))
    later, _ = gen.step(3)
    assert torch.equal(later[1], expected[1])


def test_runaway_cap_sized_from_the_text(tiny_model: LoadedModel) -> None:
    gen = CodeGenerator(tiny_model, max_slots=1, max_seq_len=2048)
    short = gen.prepare("hello world", "serena", "english")
    long = gen.prepare("hello world " * 40, "serena", "english")
    assert short.max_frames == frame_budget("hello world") == 20 + 17  # floor + 11 characters x 1.5
    assert long.max_frames == min(frame_budget(("hello world " * 40).strip()), 2048 - long.embeds.shape[0])
    slower = CodeGenerator(tiny_model, max_slots=1, max_seq_len=2048, cap_scale=2.0)  # TTS_DEEP_STREAM_RUNAWAY_SCALE
    assert slower.prepare("hello world", "serena", "english").max_frames == 20 + 33
    small = CodeGenerator(tiny_model, max_slots=1, max_seq_len=64)
    medium = small.prepare("hello world, hello", "serena", "english")
    assert medium.max_frames == 64 - medium.embeds.shape[0]  # bounded by the cache room
    # a text whose expected speech cannot fit is refused up front, naming the variable that raises the room
    with pytest.raises(TTSInputError, match="too long for one stream.*TTS_DEEP_STREAM_MAX_POSITIONS") as info:
        small.prepare("hello world " * 3, "serena", "english")
    assert info.value.field == "text"
    # with an explicit frame cap only the prompt itself must fit
    assert small.prepare("hello world " * 5, "serena", "english", max_frames=3).max_frames == 3
    with pytest.raises(TTSInputError, match="max_seq_len=64"):
        small.prepare("hello world " * 40, "serena", "english", max_frames=3)


def test_prompt_lengths_and_validation(tiny_model: LoadedModel) -> None:
    gen = CodeGenerator(tiny_model, max_slots=1, max_seq_len=256)
    explicit = gen.prepare("hello world", "Serena", "English")
    auto = gen.prepare("hello world", "serena", "auto")
    assert explicit.embeds.shape[0] == explicit.n_text_tokens + 11
    assert auto.embeds.shape[0] == auto.n_text_tokens + 10
    # 0.6B layout: the instruction is dropped (official `tts_model_size in "0b6"`)
    assert torch.equal(gen.prepare("hello world", "serena", "auto", instruct="whisper").embeds, auto.embeds)
    with pytest.raises(EmptyTextError):
        gen.prepare("   ", "serena")
    with pytest.raises(UnknownSpeakerError, match="valid speakers: aiden"):
        gen.prepare("hi", "nobody")
    with pytest.raises(UnknownLanguageError, match="valid languages: auto") as info:
        gen.prepare("hi", "serena", "beijing_dialect")  # dialects come from the speaker, not the language
    assert info.value.field == "language"
    with pytest.raises(ValueError, match="slot=5"):
        gen.admit(5, auto, SamplingParams.greedy())
