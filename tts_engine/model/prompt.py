"""CustomVoice prompt assembly, both text layouts (docs/model.md, "Prompt" and "Streaming-text layout").

Contract: `validate_request` checks text/speaker/language (errors list the valid values); a `PromptEmbedder`
returns the talker prefill embeddings [T, H] and the number of text tokens:
  [instruct (1.7B only)] + role(3 text tokens) + [tts_pad x (len(C)-2), tts_bos] + C[:-1]
  + [text_i + codec_pad]... + [tts_eos + codec_pad] + [tts_pad + codec_bos]
where C = codec prefix ([think, think_bos, lang, think_eos] or [nothink, think_bos, think_eos] for auto)
+ [speaker] + [codec_pad, codec_bos]. Dialect speakers replace the language id for chinese/auto. The text is
tokenized inside the chat template and sliced [3:-5] exactly as the official code does.
`PromptEmbedder.streaming(first_id, ...)` builds the streaming-text prefill (non_streaming_mode=False): the same
prefix, then [text(t_0) + codec_bos] alone; the later text tokens (`project(ids)`), then tts_eos, then tts_pad are
added one per generated frame by the code generator.
"""

from __future__ import annotations

import numpy as np
import torch

from tts_engine.errors import EmptyTextError, UnknownLanguageError, UnknownSpeakerError
from tts_engine.model.config import ModelConfig
from tts_engine.model.talker import Talker
from tts_engine.model.tokenizer import TextTokenizer

# numpy has no bfloat16: the host table and staging buffer are viewed as integers of the same width
_SAME_SIZE_INT = {2: torch.int16, 4: torch.int32, 8: torch.int64}
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


class PromptEmbedder:
    """Builds the prefill embeddings for one request: `embedder(text, speaker, language, instruct)` ->
    (embeddings [T, H] on the talker's device, number of text tokens). Inputs must be validated first.

    Everything that does not depend on the text (tts_bos/eos/pad, the codec prefix of each speaker and language,
    the role rows, the codec pad/bos rows) is computed once and kept. Per request the text rows are gathered from
    the embedding table on the host (single-threaded, into a pinned staging buffer when the table is in CPU
    memory on a CUDA model) and sent with one non-blocking copy, so once a speaker/language pair has been seen,
    building a prompt makes no blocking copy and starts no CPU thread pool (the only wait is on the previous
    request's copy out of the staging buffer, long finished; docs/benchmarks.md, `bench.admission_trace`, has what
    the blocking path cost).
    Each piece is projected in the same batch as the official layout implies (bos/eos/pad together, role, text,
    instruct), so the embeddings are bit-identical to computing them per request. `tts_pad` is also the text-side
    embedding the code generator adds to every generated frame's feedback (non-streaming mode).
    """

    def __init__(self, talker: Talker, cfg: ModelConfig, tokenizer: TextTokenizer) -> None:
        self.talker, self.cfg, self.tokenizer = talker, cfg, tokenizer
        self.device = talker.codec_head.weight.device
        table = talker.model.text_embedding.weight
        self._host_gather = table.device.type == "cpu"
        # numpy view of the host table: np.take copies rows on the calling thread (torch's CPU gather may wake its
        # whole intra-op pool, which costs milliseconds of jitter on a busy serving host)
        self._as_int = _SAME_SIZE_INT[table.element_size()]
        self._table_np = table.detach().view(self._as_int).numpy() if self._host_gather else None
        self._pinned = self.device.type == "cuda"
        self._staging = torch.empty(0)
        self._staging_free: torch.cuda.Event | None = None
        with torch.no_grad():
            special = self._project([[cfg.tts_bos_id, cfg.tts_eos_id, cfg.tts_pad_id]])[0]
            self.tts_bos, self.tts_eos, self.tts_pad = special.unbind(0)
            self._codec_pad = talker.embed_codec(self._ids([cfg.codec_pad_id]))
            self._codec_bos = talker.embed_codec(self._ids([cfg.codec_bos_id]))
            self._tail = (self.tts_pad + self._codec_bos)[0][None]
        self._prefix: dict[tuple[str, str], torch.Tensor] = {}
        self._role: dict[tuple[int, ...], torch.Tensor] = {}

    def _ids(self, values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=self.device)

    def _stage(self, rows: int) -> torch.Tensor:
        """The host staging buffer for `rows` rows, once the previous copy out of it has finished."""
        if self._staging_free is not None:
            self._staging_free.synchronize()  # normally long done: it was queued before the previous prefill
        if self._staging.shape[0] < rows:
            hidden = self.talker.model.text_embedding.weight.shape[1]
            size = max(256, 1 << (rows - 1).bit_length())
            self._staging = torch.empty((size, hidden), dtype=self.talker.model.text_embedding.weight.dtype,
                                        pin_memory=self._pinned)
        return self._staging[:rows]

    def _project(self, pieces: list[list[int]]) -> list[torch.Tensor]:
        """Text ids of several pieces -> their projected embeddings, each piece projected as its own batch."""
        ids = [i for piece in pieces for i in piece]
        if self._table_np is not None:  # _host_gather: the table is on the host
            staging = self._stage(len(ids))
            np.take(self._table_np, np.asarray(ids, dtype=np.int64), axis=0, out=staging.view(self._as_int).numpy())
            rows = staging.to(self.device, non_blocking=self._pinned)
            if self._pinned:
                self._staging_free = torch.cuda.Event()
                self._staging_free.record()
        else:  # the table is on the model's device: the talker's own lookup, piece by piece
            return [self.talker.embed_text(self._ids(piece)) for piece in pieces]
        out, start = [], 0
        for piece in pieces:
            out.append(self.talker.text_projection(rows[start : start + len(piece)]))
            start += len(piece)
        return out

    def _codec_prefix(self, speaker: str, language: str) -> torch.Tensor:
        """[tts_pad x (len(C)-2), tts_bos] + C[:-1] for one speaker and language (cached)."""
        key = (speaker, language)
        if key not in self._prefix:
            cfg = self.cfg
            lang_id = codec_language_id(cfg, speaker, language)
            if lang_id is None:
                prefix = [cfg.codec_nothink_id, cfg.codec_think_bos_id, cfg.codec_think_eos_id]
            else:
                prefix = [cfg.codec_think_id, cfg.codec_think_bos_id, lang_id, cfg.codec_think_eos_id]
            codec_seq = prefix + [cfg.speaker_ids[speaker], cfg.codec_pad_id, cfg.codec_bos_id]
            codec_embeds = self.talker.embed_codec(self._ids(codec_seq))
            text_side = torch.cat((self.tts_pad.expand(len(codec_seq) - 2, -1), self.tts_bos[None]), dim=0)
            self._prefix[key] = text_side + codec_embeds[:-1]
        return self._prefix[key]

    @torch.no_grad()
    def __call__(self, text: str, speaker: str, language: str,
                 instruct: str | None = None) -> tuple[torch.Tensor, int]:
        token_ids = self.tokenizer.encode(assistant_text(text))
        role, text_ids = tuple(token_ids[:ROLE_TOKENS]), token_ids[ROLE_TOKENS:-SUFFIX_TOKENS]
        if not text_ids:
            raise EmptyTextError()
        if role not in self._role:
            self._role[role] = self._project([list(role)])[0]
        pieces = [text_ids]
        if instruct and self.cfg.supports_instruct:
            pieces.insert(0, self.tokenizer.encode(instruct_text(instruct)))
        projected = self._project(pieces)
        parts = projected[:-1]  # the instruct rows, when there are any
        parts.append(self._role[role])
        parts.append(self._codec_prefix(speaker, language))
        body = torch.cat((projected[-1], self.tts_eos[None]), dim=0)
        parts.append(body + self._codec_pad.expand(len(text_ids) + 1, -1))
        parts.append(self._tail)
        return torch.cat(parts, dim=0), len(text_ids)

    @torch.no_grad()
    def project(self, ids: list[int]) -> torch.Tensor:
        """Text embeddings [len(ids), H] of token ids (the streaming layout's per-frame text rows)."""
        return self._project([list(ids)])[0]

    @torch.no_grad()
    def project_many(self, pieces: list[list[int]]) -> list[torch.Tensor]:
        """`project` of several id lists as ONE batch (one gather, one copy, one projection), split back per list:
        the streaming-text rows of every stream whose text grew since the last step."""
        rows = self._project([[i for piece in pieces for i in piece]])[0]
        return list(rows.split([len(piece) for piece in pieces]))

    @torch.no_grad()
    def streaming(self, first_id: int, speaker: str, language: str, instruct: str | None = None) -> torch.Tensor:
        """Prefill embeddings of the streaming-text layout: [instruct] + role + codec prefix + [text(t_0) + codec_bos]
        (9 positions for auto, 10 with a language; validated speaker/language)."""
        role = tuple(self.tokenizer.encode(assistant_text("x"))[:ROLE_TOKENS])
        if role not in self._role:
            self._role[role] = self._project([list(role)])[0]
        pieces = [[int(first_id)]]
        if instruct and self.cfg.supports_instruct:
            pieces.insert(0, self.tokenizer.encode(instruct_text(instruct)))
        projected = self._project(pieces)
        parts = projected[:-1]
        parts += [self._role[role], self._codec_prefix(speaker, language), projected[-1] + self._codec_bos]
        return torch.cat(parts, dim=0)
