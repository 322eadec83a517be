"""CustomVoice prompt assembly (non_streaming_mode=True layout), shared/reference/qwen3_tts.md §3.1-3.2.

Contract: `validate_request` checks text/speaker/language (errors list the valid values); `build_prompt_embeds`
returns the talker prefill embeddings [T, H] and the number of text tokens:
  [instruct (1.7B only)] + role(3 text tokens) + [tts_pad x (len(C)-2), tts_bos] + C[:-1]
  + [text_i + codec_pad]... + [tts_eos + codec_pad] + [tts_pad + codec_bos]
where C = codec prefix ([think, think_bos, lang, think_eos] or [nothink, think_bos, think_eos] for auto)
+ [speaker] + [codec_pad, codec_bos]. Dialect speakers replace the language id for chinese/auto. The text is
tokenized inside the chat template and sliced [3:-5] exactly as the official code does.
"""

from __future__ import annotations

import torch

from tts_engine.errors import EmptyTextError, UnknownLanguageError, UnknownSpeakerError
from tts_engine.model.config import ModelConfig
from tts_engine.model.talker import Talker
from tts_engine.model.tokenizer import TextTokenizer

ROLE_TOKENS = 3  # <|im_start|> assistant \n
SUFFIX_TOKENS = 5  # <|im_end|> \n <|im_start|> assistant \n


def assistant_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def instruct_text(instruct: str) -> str:
    return f"<|im_start|>user\n{instruct}<|im_end|>\n"


def validate_request(cfg: ModelConfig, text: str, speaker: str, language: str) -> tuple[str, str, str]:
    """Normalised (text, speaker, language) or a TTSInputError naming the field and the valid values."""
    if not isinstance(text, str) or not text.strip():
        raise EmptyTextError()
    spk = str(speaker).strip().lower()
    if spk not in cfg.speaker_ids:
        raise UnknownSpeakerError(str(speaker), cfg.speakers)
    lang = str(language).strip().lower()
    if lang not in cfg.languages:
        raise UnknownLanguageError(str(language), cfg.languages)
    return text.strip(), spk, lang


def codec_language_id(cfg: ModelConfig, speaker: str, language: str) -> int | None:
    """The language id in the codec prefix (None = auto), with the dialect-speaker override."""
    lang_id = None if language == "auto" else cfg.language_ids[language]
    dialect = cfg.speaker_dialect.get(speaker)
    if dialect and language in ("chinese", "auto"):
        lang_id = cfg.language_ids[dialect]
    return lang_id


@torch.no_grad()
def build_prompt_embeds(talker: Talker, cfg: ModelConfig, tokenizer: TextTokenizer, text: str, speaker: str,
                        language: str, instruct: str | None = None) -> tuple[torch.Tensor, int]:
    """Validated inputs -> (prefill embeddings [T, H] in the talker's dtype/device, number of text tokens)."""
    device = talker.codec_head.weight.device
    table_device = talker.model.text_embedding.weight.device  # CPU on CUDA models (loader.HOST_TENSORS)

    def ids(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=device)

    def host_ids(values: list[int]) -> torch.Tensor:  # made where the table is: no device -> host round trip
        return torch.tensor(values, dtype=torch.long, device=table_device)

    token_ids = tokenizer.encode(assistant_text(text))
    role, text_ids = token_ids[:ROLE_TOKENS], token_ids[ROLE_TOKENS:-SUFFIX_TOKENS]
    if not text_ids:
        raise EmptyTextError()
    tts_bos, tts_eos, tts_pad = talker.embed_text(host_ids([cfg.tts_bos_id, cfg.tts_eos_id, cfg.tts_pad_id])).unbind(0)

    lang_id = codec_language_id(cfg, speaker, language)
    if lang_id is None:
        prefix = [cfg.codec_nothink_id, cfg.codec_think_bos_id, cfg.codec_think_eos_id]
    else:
        prefix = [cfg.codec_think_id, cfg.codec_think_bos_id, lang_id, cfg.codec_think_eos_id]
    codec_seq = prefix + [cfg.speaker_ids[speaker], cfg.codec_pad_id, cfg.codec_bos_id]
    codec_embeds = talker.embed_codec(ids(codec_seq))

    text_side = torch.cat((tts_pad.expand(len(codec_seq) - 2, -1), tts_bos[None]), dim=0)
    parts = []
    if instruct and cfg.supports_instruct:
        parts.append(talker.embed_text(host_ids(tokenizer.encode(instruct_text(instruct)))))
    parts.append(talker.embed_text(host_ids(role)))
    parts.append(text_side + codec_embeds[:-1])
    body = torch.cat((talker.embed_text(host_ids(text_ids)), tts_eos[None]), dim=0)
    parts.append(body + talker.embed_codec(ids([cfg.codec_pad_id] * (len(text_ids) + 1))))
    parts.append((tts_pad + talker.embed_codec(ids([cfg.codec_bos_id])))[0][None])
    return torch.cat(parts, dim=0), len(text_ids)


@torch.no_grad()
def tts_pad_embedding(talker: Talker, cfg: ModelConfig) -> torch.Tensor:
    """The text-side embedding added to every generated frame's feedback in non-streaming mode ([H])."""
    return talker.embed_text(torch.tensor([cfg.tts_pad_id], device=talker.model.text_embedding.weight.device))[0]
