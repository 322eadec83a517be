"""The per-frame hot loop: a fixed-shape batched code generator over static slots (gpt-fast style).

Contract (docs/model.md, "The frame step"):
- `CodeGenerator(model, max_slots, max_seq_len)` preallocates everything: talker KV cache
  [layers, max_slots, kv_heads, max_seq_len, head_dim], predictor KV cache (16 positions, fresh every frame),
  per-slot positions / frame counters / caps / c0 seen-masks / sampling parameters / last logits and hidden,
  all as device tensors.
- `prepare()` validates and builds a `Prompt` (host side, eager); `prepare_streaming()` the streaming-text layout's
  prompt (its first text token); `set_stream_rows(slots, rows, caps)` gives streaming-text slots the text row their
  next step adds and their cap, in one batched write. `admit(slot, ...)` prefills that slot's KV rows
  (`admit_many` prefills several slots' prompts together where a batched prefill hook exists)
  and resets its state; other slots are untouched. `release(slot)` marks it free (state is reset on admit).
- `step(n_rows)` advances slots [0, n_rows) by one frame using prefix views of the buffers: sample c0 (HF order),
  run the code predictor (15 passes), feed the summed embedding back through the talker at each row's own
  position. No host syncs, no data-dependent Python control flow: the same function can be captured in a CUDA
  graph per n_rows. Returns (codes [n_rows, 16], done [n_rows]) on the device; done = EOS sampled (that frame's
  codes are garbage) or the frame cap reached (that frame is valid). Only live rows advance (`set_live`; all rows
  unless set): the others' state stays as it was and their output is garbage, so a step over a row bucket leaves
  free slots and streams waiting for their text untouched.
- Runaway cap: max_frames = min(HARD_CEILING_FRAMES, generation max_new_tokens - 1, max_seq_len - prompt_len,
  the text's frame budget (text/speech_length.py, times `cap_scale`)); an explicit `max_frames` in prepare()
  replaces the budget (still bounded by the ceiling and the cache room). A streaming-text slot's cap follows its
  text as it grows (`set_stream_rows`).
- Room: `max_seq_len` positions per slot hold the prompt and every frame. Without an explicit `max_frames`,
  prepare() refuses (TTSInputError, field "text") a text whose prompt plus EXPECTED_FRAMES_PER_TEXT_TOKEN frames
  per text token would not fit, instead of cutting its speech off at the end of the cache.
- Seeded sampling uses counter-based Gumbel noise keyed by (seed, frame, pass, token): reproducible per stream and
  independent of batch composition (see model/sampling.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from tts_engine.errors import TTSInputError
from tts_engine.model.config import GenerationDefaults, ModelConfig
from tts_engine.model.layers import rope_table
from tts_engine.model.loader import LoadedModel
from tts_engine.model.predictor import PREDICTOR_POSITIONS
from tts_engine.model.prompt import PromptEmbedder, validate_request
from tts_engine.model.sampling import choose, process_talker_logits, token_hashes
from tts_engine.text.speech_length import FLOOR_FRAMES, frame_budget

if TYPE_CHECKING:
    from tts_engine.runtime.cuda_graphs import GraphStats

#: absolute ceiling on frames per utterance (163.84 s), whatever the text length
HARD_CEILING_FRAMES = 2048
#: frames per text token assumed when checking room (an estimate, not measured: ~0.25-0.3 s per token)
EXPECTED_FRAMES_PER_TEXT_TOKEN = 4
MIN_NEW_TOKENS = 2  # HF min_new_tokens of the official generate(): EOS masked for the first 2 frames


@dataclass(frozen=True)
class SamplingParams:
    do_sample: bool = False
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    subtalker_do_sample: bool = False
    subtalker_temperature: float = 0.9
    subtalker_top_k: int = 50
    subtalker_top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("temperature", "subtalker_temperature", "repetition_penalty"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name}={value!r} is not allowed; it must be > 0")
        for name in ("top_p", "subtalker_top_p"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"{name}={value!r} is not allowed; it must be in (0, 1]")
        if not 0 <= self.seed < 2**63:
            raise ValueError(f"seed={self.seed!r} is not allowed; it must be in [0, 2**63)")

    @classmethod
    def greedy(cls, repetition_penalty: float = 1.05, seed: int = 0) -> SamplingParams:
        """Argmax for both stages; HF still applies the penalty and masks in greedy mode (so do we)."""
        return cls(do_sample=False, subtalker_do_sample=False, repetition_penalty=repetition_penalty, seed=seed)

    @classmethod
    def from_generation_config(cls, cfg: GenerationDefaults | ModelConfig, **overrides: Any) -> SamplingParams:
        gen = cfg.generation if isinstance(cfg, ModelConfig) else cfg
        base = cls(
            do_sample=gen.do_sample, temperature=gen.temperature, top_k=gen.top_k, top_p=gen.top_p,
            repetition_penalty=gen.repetition_penalty, subtalker_do_sample=gen.subtalker_do_sample,
            subtalker_temperature=gen.subtalker_temperature, subtalker_top_k=gen.subtalker_top_k,
            subtalker_top_p=gen.subtalker_top_p,
        )
        return dataclasses.replace(base, **overrides)


@dataclass
class Prompt:
    embeds: torch.Tensor  # [T, H] prefill embeddings on the model's device, in its dtype
    n_text_tokens: int
    max_frames: int


class CodeGenerator:
    """Fixed-shape batched frame stepper over `max_slots` static slots."""

    graph_stats: GraphStats  # set by the Engine once it has built the step graphs; absent until then

    def __init__(self, model: LoadedModel, max_slots: int, max_seq_len: int = 2048, cap_scale: float = 1.0) -> None:
        if max_slots < 1:
            raise ValueError(f"max_slots={max_slots} is not allowed; it must be >= 1")
        if not cap_scale > 0:
            raise ValueError(f"cap_scale={cap_scale} is not allowed; it must be > 0")
        self.cap_scale = cap_scale
        cfg: ModelConfig = model.config
        self.model = model
        self.cfg = cfg
        self.max_slots = max_slots
        self.max_seq_len = min(max_seq_len, cfg.talker.max_position_embeddings)
        self.talker = model.talker
        self.predictor = model.predictor
        dev, dt = model.device, model.dtype
        t, p = cfg.talker, cfg.predictor
        s, length, vocab = max_slots, self.max_seq_len, t.vocab_size

        def zeros(*shape: int, dtype: torch.dtype = dt) -> torch.Tensor:
            return torch.zeros(shape, dtype=dtype, device=dev)

        self.k_cache = zeros(t.num_layers, s, t.num_kv_heads, length, t.head_dim)
        self.v_cache = zeros(t.num_layers, s, t.num_kv_heads, length, t.head_dim)
        self.pk_cache = zeros(p.num_layers, s, p.num_kv_heads, PREDICTOR_POSITIONS, p.head_dim)
        self.pv_cache = zeros(p.num_layers, s, p.num_kv_heads, PREDICTOR_POSITIONS, p.head_dim)
        cos, sin = rope_table(t.rope_theta, t.head_dim, length, dev)
        self.cos_f32, self.sin_f32 = cos, sin  # cast per use, as the official rotary module does
        pcos, psin = rope_table(p.rope_theta, p.head_dim, PREDICTOR_POSITIONS, dev)
        self.pcos, self.psin = pcos.to(dt), psin.to(dt)
        self.key_index = torch.arange(length, device=dev)
        self.suppress = torch.zeros(vocab, dtype=torch.bool, device=dev)
        self.suppress[vocab - 1024 :] = True
        self.suppress[cfg.codec_eos_id] = False
        self.hash_talker = token_hashes(vocab, dev)
        self.hash_predictor = token_hashes(p.vocab_size, dev)
        self.prompts = PromptEmbedder(self.talker, cfg, model.tokenizer)
        self.tts_pad = self.prompts.tts_pad  # the same row the prompt uses (official: one bos/eos/pad projection)
        # the text row each slot's next feedback adds: tts_pad (whole-text layout), or the streaming-text layout's
        # next text token / tts_eos / tts_pad, set by the scheduler before each step (`set_text`)
        self.text_feed = self.tts_pad.expand(s, -1).clone()
        # per-slot state
        self.positions = zeros(s, dtype=torch.long)
        self.frame = zeros(s, dtype=torch.long)
        self.max_frames = torch.ones(s, dtype=torch.long, device=dev)
        self.seen = zeros(s, vocab, dtype=torch.bool)
        self.logits = zeros(s, vocab, dtype=torch.float32)
        self.past_hidden = zeros(s, t.hidden_size)
        self.do_sample = zeros(s, dtype=torch.bool)
        self.temperature = torch.ones(s, device=dev)
        self.top_k = zeros(s, dtype=torch.long)
        self.top_p = torch.ones(s, device=dev)
        self.penalty = torch.ones(s, device=dev)
        self.sub_do_sample = zeros(s, dtype=torch.bool)
        self.sub_temperature = torch.ones(s, device=dev)
        self.sub_top_k = zeros(s, dtype=torch.long)
        self.sub_top_p = torch.ones(s, device=dev)
        self.seed = zeros(s, dtype=torch.long)
        self.active = [False] * s  # host-side bookkeeping only
        # the rows a step advances; the rest of a row bucket is computed and left unchanged
        self.live = torch.ones(s, dtype=torch.bool, device=dev)
        # host-side: does any admitted slot sample? If none, step() takes plain argmax (identical result for greedy
        # rows, far fewer kernels). A CUDA-graph wrapper keys its graphs on (n_rows, self.sampling).
        self.sampling_slots: set[int] = set()
        # optional replacement of the talker prefill: (slot, embeds [T, H]) -> last hidden [H], KV rows written
        self.prefill_hook: Callable[[int, torch.Tensor], torch.Tensor] | None = None
        # optional batched prefill: (slots, [embeds [T_i, H]]) -> last hidden [H] per slot, KV rows written
        self.prefill_many_hook: Callable[[list[int], list[torch.Tensor]], list[torch.Tensor]] | None = None

    # ---- host side -------------------------------------------------------------------------------------------
    def prepare(self, text: str, speaker: str, language: str = "auto", instruct: str | None = None,
                max_frames: int | None = None) -> Prompt:
        text, speaker, language = validate_request(self.cfg, text, speaker, language)
        embeds, n_text = self.prompts(text, speaker, language, instruct)
        room = self.max_seq_len - embeds.shape[0]
        if room < 1:
            raise TTSInputError(
                f"text needs {embeds.shape[0]} prompt positions; this generator holds at most "
                f"{self.max_seq_len - 1} plus one frame (max_seq_len={self.max_seq_len}; "
                "TTS_DEEP_STREAM_MAX_POSITIONS in the engine)", field="text"
            )
        if max_frames is None:
            needed = embeds.shape[0] + EXPECTED_FRAMES_PER_TEXT_TOKEN * n_text
            if needed > self.max_seq_len:
                raise TTSInputError(
                    f"text is too long for one stream: its {n_text} tokens need about {needed} positions (prompt "
                    f"{embeds.shape[0]} + ~{EXPECTED_FRAMES_PER_TEXT_TOKEN} frames per token) and one stream holds "
                    f"{self.max_seq_len}; split the text, or raise TTS_DEEP_STREAM_MAX_POSITIONS", field="text"
                )
            cap = self.cap(frame_budget(text, self.cap_scale), embeds.shape[0])
        elif max_frames < 1:
            raise ValueError(f"max_frames={max_frames} is not allowed; it must be >= 1")
        else:  # an explicit cap replaces the text budget, still bounded by the ceiling and the cache room
            cap = min(max_frames, HARD_CEILING_FRAMES, room)
        return Prompt(embeds=embeds, n_text_tokens=n_text, max_frames=cap)

    def prepare_streaming(self, first_id: int, speaker: str, language: str = "auto", instruct: str | None = None,
                          max_frames: int | None = None) -> Prompt:
        """The streaming-text layout's prompt (its first text token only). Its frame cap starts at the floor of the
        text budget (or `max_frames`); `set_stream_rows` raises it as the text grows."""
        _, speaker, language = validate_request(self.cfg, "x", speaker, language)
        embeds = self.prompts.streaming(first_id, speaker, language, instruct)
        cap = self.cap(FLOOR_FRAMES if max_frames is None else max_frames, embeds.shape[0])
        return Prompt(embeds=embeds, n_text_tokens=1, max_frames=cap)

    def cap(self, frames: int, prompt_len: int) -> int:
        """A frame cap of at most `frames`, bounded by the ceiling, the generation config and the cache room left
        after a prompt of `prompt_len` positions."""
        return max(1, min(frames, HARD_CEILING_FRAMES, self.cfg.generation.max_new_tokens - 1,
                          self.max_seq_len - prompt_len))

    def set_stream_rows(self, slots: list[int], rows: torch.Tensor, caps: list[int]) -> None:
        """Streaming-text slots' next text rows (rows [len(slots), H]: what each slot's next step adds to its
        feedback) and frame caps, in one write each (no host sync)."""
        dev = self.positions.device
        index = torch.tensor(slots, dtype=torch.long).to(dev, non_blocking=True)
        self.text_feed.index_copy_(0, index, rows.to(self.text_feed.dtype))
        self.max_frames.index_copy_(0, index, torch.tensor(caps, dtype=torch.long).to(dev, non_blocking=True))

    def set_live(self, rows: np.ndarray) -> None:
        """The next steps advance the rows where `rows` (bool, one per row from 0) is true, and no row past it (one
        non-blocking copy)."""
        mask = np.zeros(self.max_slots, dtype=np.bool_)
        mask[: len(rows)] = rows
        self.live.copy_(torch.from_numpy(mask), non_blocking=True)

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.max_slots:
            raise ValueError(f"slot={slot} is not allowed; slots are 0..{self.max_slots - 1}")

    def _check_room(self, slot: int, prompt: Prompt) -> None:
        self._check_slot(slot)
        n = prompt.embeds.shape[0]
        if n + prompt.max_frames > self.max_seq_len:
            raise ValueError(
                f"prompt of {n} positions + {prompt.max_frames} frames exceeds max_seq_len {self.max_seq_len}"
            )

    @torch.no_grad()
    def admit(self, slot: int, prompt: Prompt, params: SamplingParams) -> None:
        self._check_room(slot, prompt)
        dt = self.model.dtype
        if self.prefill_hook is not None:  # CUDA: padded, graphed prefill (runtime/step_graphs.StepGraphs)
            last = self.prefill_hook(slot, prompt.embeds.to(dt))
        else:
            n = prompt.embeds.shape[0]
            cos, sin = self.cos_f32[:n].to(dt), self.sin_f32[:n].to(dt)
            h = self.talker.model.prefill(
                prompt.embeds.to(dt)[None], cos, sin, self.k_cache[:, slot], self.v_cache[:, slot]
            )
            last = h[0, -1]
        self._set_slot(slot, prompt, params, last)

    @torch.no_grad()
    def admit_many(self, slots: list[int], prompts: list[Prompt], params: list[SamplingParams]) -> None:
        """Admit several streams at once: with a batched prefill hook (CUDA) their prompts are prefilled together
        (one call per length bucket instead of one per stream); otherwise one after another, as `admit`."""
        for slot, prompt in zip(slots, prompts, strict=True):
            self._check_room(slot, prompt)
        if self.prefill_many_hook is None or len(slots) < 2:
            for slot, prompt, p in zip(slots, prompts, params, strict=True):
                self.admit(slot, prompt, p)
            return
        dt = self.model.dtype
        lasts = self.prefill_many_hook(slots, [prompt.embeds.to(dt) for prompt in prompts])
        for slot, prompt, p, last in zip(slots, prompts, params, lasts, strict=True):
            self._set_slot(slot, prompt, p, last)

    def _set_slot(self, slot: int, prompt: Prompt, params: SamplingParams, last: torch.Tensor) -> None:
        """Per-slot state after the prefill: first logits, position, counters, sampling settings."""
        n = prompt.embeds.shape[0]
        self.logits[slot] = self.talker.codec_head(last).float()
        self.past_hidden[slot] = last
        self.positions[slot] = n
        self.frame[slot] = 0
        self.max_frames[slot] = prompt.max_frames
        self.seen[slot] = False
        self.do_sample[slot] = params.do_sample
        self.temperature[slot] = params.temperature
        self.top_k[slot] = params.top_k
        self.top_p[slot] = params.top_p
        self.penalty[slot] = params.repetition_penalty
        self.sub_do_sample[slot] = params.subtalker_do_sample
        self.sub_temperature[slot] = params.subtalker_temperature
        self.sub_top_k[slot] = params.subtalker_top_k
        self.sub_top_p[slot] = params.subtalker_top_p
        self.seed[slot] = params.seed
        self.text_feed[slot] = self.tts_pad
        self.active[slot] = True
        if params.do_sample or params.subtalker_do_sample:
            self.sampling_slots.add(slot)
        else:
            self.sampling_slots.discard(slot)

    def release(self, slot: int) -> None:
        self._check_slot(slot)
        self.active[slot] = False
        self.sampling_slots.discard(slot)

    def _slot_tensors(self) -> list[tuple[torch.Tensor, int]]:
        """Every per-slot device tensor and its slot dimension (what `move` carries; predictor caches are rebuilt
        every frame, so they hold nothing between steps)."""
        per_slot = [self.positions, self.frame, self.max_frames, self.seen, self.logits, self.past_hidden,
                    self.do_sample, self.temperature, self.top_k, self.top_p, self.penalty, self.sub_do_sample,
                    self.sub_temperature, self.sub_top_k, self.sub_top_p, self.seed, self.text_feed]
        return [(self.k_cache, 1), (self.v_cache, 1)] + [(t, 0) for t in per_slot]

    @torch.no_grad()
    def move(self, src: int, dst: int) -> None:
        """Move an admitted stream from slot `src` to the free slot `dst` (its whole state: talker KV rows,
        positions, counters, sampling settings). The scheduler compacts active rows to the bottom with it, so a
        step never runs rows of finished streams. Device copies only (no host sync); `src` is free afterwards."""
        self._check_slot(src)
        self._check_slot(dst)
        if not self.active[src] or self.active[dst]:
            raise ValueError(f"move {src} -> {dst}: the source must be admitted and the destination free")
        for tensor, dim in self._slot_tensors():
            tensor.select(dim, dst).copy_(tensor.select(dim, src))
        self.active[dst], self.active[src] = True, False
        if src in self.sampling_slots:
            self.sampling_slots.discard(src)
            self.sampling_slots.add(dst)

    @property
    def sampling(self) -> bool:
        """True when step() must run the sampling path (some admitted slot samples)."""
        return bool(self.sampling_slots)

    # ---- device side: the frame step -------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, n_rows: int, sampling: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """One frame for rows [0, n_rows). `sampling` (default: `self.sampling`) picks the sampling or the plain
        argmax path; a CUDA-graph wrapper passes it explicitly because the choice is baked into a graph."""
        c0, c0_embed, rest = self.predict_frame(n_rows, sampling)
        return self.advance_talker(n_rows, c0, c0_embed, rest)

    @torch.no_grad()
    def predict_frame(self, n_rows: int, sampling: bool | None = None) -> tuple[torch.Tensor, ...]:
        """First half of `step`: choose c0 from the talker's last logits, then c1..c15 with the code predictor.
        Returns (c0 [n], c0 embedding [n, H], c1..c15 [n, 15])."""
        n = n_rows
        frame = self.frame[:n]
        seed = self.seed[:n]
        logits = process_talker_logits(
            self.logits[:n], self.seen[:n], self.penalty[:n], frame, self.cfg.codec_eos_id, self.suppress,
            MIN_NEW_TOKENS,
        )
        sampling = self.sampling if sampling is None else sampling
        if sampling:
            c0 = choose(logits, self.do_sample[:n], self.temperature[:n], self.top_k[:n], self.top_p[:n], seed, frame,
                        0, self.hash_talker)
        else:
            c0 = logits.argmax(dim=-1)
        live = self.live[:n]
        self.seen[:n].scatter_(1, c0[:, None], live[:, None] | self.seen[:n].gather(1, c0[:, None]))

        sub = (self.sub_do_sample[:n], self.sub_temperature[:n], self.sub_top_k[:n], self.sub_top_p[:n])

        def sample_sub(pass_index: int, sub_logits: torch.Tensor) -> torch.Tensor:
            if not sampling:
                return sub_logits.argmax(dim=-1)
            return choose(sub_logits, *sub, seed, frame, pass_index, self.hash_predictor)

        c0_embed = self.talker.embed_codec(c0)
        rest = self.predictor.generate(
            self.past_hidden[:n], c0_embed, self.pk_cache[:, :n], self.pv_cache[:, :n], self.pcos, self.psin,
            sample_sub,
        )
        return c0, c0_embed, rest

    @torch.no_grad()
    def advance_talker(self, n_rows: int, c0: torch.Tensor, c0_embed: torch.Tensor,
                       rest: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Second half of `step`: feed the frame back through the talker (next logits), advance the counters.
        Returns (codes [n, 16], done [n])."""
        n = n_rows
        frame = self.frame[:n]
        codes = torch.cat((c0[:, None], rest), dim=1)

        x = (self.predictor.feedback_embedding(c0_embed, rest) + self.text_feed[:n])[:, None]
        pos = self.positions[:n]
        dt = self.model.dtype
        cos = self.cos_f32[pos].to(dt)[:, None, None]
        sin = self.sin_f32[pos].to(dt)[:, None, None]
        mask = (self.key_index[None, :] <= pos[:, None])[:, None, None]
        # a row that does not advance writes garbage keys/values at its next position, which its next real step
        # overwrites before any attention reads it; everything else of it is left as it was
        h = self.talker.model.step(x, cos, sin, self.k_cache[:, :n], self.v_cache[:, :n], pos, mask)[:, 0]
        live = self.live[:n]
        torch.where(live[:, None], self.talker.codec_head(h).float(), self.logits[:n], out=self.logits[:n])
        torch.where(live[:, None], h, self.past_hidden[:n], out=self.past_hidden[:n])

        done = (c0 == self.cfg.codec_eos_id) | (frame + 1 >= self.max_frames[:n])
        self.frame[:n] += live.long()
        # clamp so a free row's cache writes stay in bounds (its output is ignored)
        torch.where(live, (pos + 1).clamp(max=self.max_seq_len - 1), pos, out=self.positions[:n])
        return codes, done


@torch.no_grad()
def generate_codes(model: LoadedModel, text: str, speaker: str, language: str = "auto",
                   params: SamplingParams | None = None, max_frames: int | None = None,
                   instruct: str | None = None) -> torch.Tensor:
    """Offline: [T, 16] codes of one utterance (EOS frame dropped). Greedy unless `params` says otherwise."""
    gen = CodeGenerator(model, max_slots=1)
    prompt = gen.prepare(text, speaker, language, instruct=instruct, max_frames=max_frames)
    gen.admit(0, prompt, params or SamplingParams.greedy())
    frames: list[torch.Tensor] = []
    for _ in range(prompt.max_frames):
        codes, done = gen.step(1)
        if bool(done[0]):  # host sync is fine here: offline helper, one utterance
            if int(codes[0, 0]) != model.config.codec_eos_id:
                frames.append(codes[0])
            break
        frames.append(codes[0])
    gen.release(0)
    if not frames:
        return torch.zeros((0, model.config.num_code_groups), dtype=torch.long, device=model.device)
    return torch.stack(frames)
