"""PromptEmbedder: cached pieces and the host-gathered text rows give exactly the per-request prompt layout."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tts_engine.model.loader import LoadedModel, load_model
from tts_engine.model.prompt import (
    ROLE_TOKENS,
    SUFFIX_TOKENS,
    PromptEmbedder,
    assistant_text,
    codec_language_id,
)

REQUESTS = [
    ("hello world", "serena", "english"),
    ("Good morning, everyone.", "ryan", "auto"),
    ("hello world " * 150, "serena", "english"),  # longer than the first staging buffer: it grows
    ("你好，世界。", "serena", "chinese"),
    ("hello world", "ryan", "english"),  # an earlier text with another speaker: no stale prefix
]


def layout_from_parts(model: LoadedModel, text: str, speaker: str, language: str) -> torch.Tensor:
    """The documented layout (model/prompt.py docstring), built per request from the talker's own lookups."""
    talker, cfg = model.talker, model.config
    text_dev = talker.model.text_embedding.weight.device

    def text_rows(ids: list[int]) -> torch.Tensor:
        return talker.embed_text(torch.tensor(ids, device=text_dev))

    def codec_rows(ids: list[int]) -> torch.Tensor:
        return talker.embed_codec(torch.tensor(ids, device=model.device))

    ids = model.tokenizer.encode(assistant_text(text))
    role, text_ids = ids[:ROLE_TOKENS], ids[ROLE_TOKENS:-SUFFIX_TOKENS]
    bos, eos, pad = text_rows([cfg.tts_bos_id, cfg.tts_eos_id, cfg.tts_pad_id]).unbind(0)
    lang = codec_language_id(cfg, speaker, language)
    think = [cfg.codec_nothink_id] if lang is None else [cfg.codec_think_id]
    prefix = think + [cfg.codec_think_bos_id] + ([] if lang is None else [lang]) + [cfg.codec_think_eos_id]
    codec = prefix + [cfg.speaker_ids[speaker], cfg.codec_pad_id, cfg.codec_bos_id]
    text_side = torch.cat([pad[None]] * (len(codec) - 2) + [bos[None]])
    body = torch.cat((text_rows(text_ids), eos[None])) + codec_rows([cfg.codec_pad_id] * (len(text_ids) + 1))
    tail = pad[None] + codec_rows([cfg.codec_bos_id])
    return torch.cat((text_rows(role), text_side + codec_rows(codec)[:-1], body, tail))


@torch.no_grad()
def test_interleaved_requests_equal_the_per_request_layout(tiny_model: LoadedModel) -> None:
    embedder = PromptEmbedder(tiny_model.talker, tiny_model.config, tiny_model.tokenizer)
    for text, speaker, language in REQUESTS * 2:
        embeds, n_text = embedder(text, speaker, language)
        expected = layout_from_parts(tiny_model, text, speaker, language)
        assert embeds.shape == expected.shape, (text[:20], speaker, language)
        assert torch.equal(embeds, expected), (text[:20], speaker, language)
        assert n_text == embeds.shape[0] - (11 if language != "auto" else 10)
    assert embedder._staging.shape[0] > 256  # the long text grew the staging buffer
    assert set(embedder._prefix) == {(s, lang) for _, s, lang in REQUESTS}


@torch.no_grad()
def test_bfloat16_table_rows_are_copied_bit_for_bit(tiny_checkpoint: Path) -> None:
    # numpy has no bfloat16: the host gather views the 2-byte table as int16, which must not change a bit
    model = load_model(tiny_checkpoint, device="cpu", dtype="bfloat16")
    embedder = PromptEmbedder(model.talker, model.config, model.tokenizer)
    for text, speaker, language in REQUESTS:
        embeds, _ = embedder(text, speaker, language)
        assert embeds.dtype == torch.bfloat16
        assert torch.equal(embeds, layout_from_parts(model, text, speaker, language))


def test_text_without_tokens_is_rejected(tiny_model: LoadedModel) -> None:
    from tts_engine.errors import EmptyTextError

    embedder = PromptEmbedder(tiny_model.talker, tiny_model.config, tiny_model.tokenizer)
    with pytest.raises(EmptyTextError):
        embedder("", "serena", "english")
