"""One call: the AgentSession and everything wired into it (used by the worker and by the simulator).

`Call(cfg, vad=, backend=)` builds: TraceCollector + DuplexController, RtcAudioOutput (owns the
AudioSource), OmniSTT, the vLLM LLM (+ continuation LLM), QwenTTS over the engine backend, and
`VoiceAgent`, whose node overrides put the trace points and the cancel registry in the data path:
- `stt_node` wraps the default (VAD + EarlyTranscriber, or LiveKit's StreamAdapter with `STT_EARLY_MS=off`):
  START/END_OF_SPEECH and the final transcript drive `vad_speech_start`, `vad_speech_end` (opens the turn) and
  `stt_done`.
- `llm_node` marks `llm_request` / `llm_first_token`, registers the stream for the cascade, resumes a
  capped answer (agent/llm.py) and turns an LLM failure into a short spoken apology (logged once with
  the turn id), so the call stays responsive and the framework's error counter resets.
- `tts_node` yields QwenTTS's exact 20 ms frames tagged with the reply id; marks `tts_first_text`
  and `tts_first_packet`; the producer task is registered for the cascade.
Barge-in: every speech is registered with the DuplexController in the `speech_created` handler,
before any of its nodes runs, with the public `SpeechHandle.interrupted` flag (read before every frame)
and `SpeechHandle.add_done_callback` (the speech's end closes whatever its reply still holds). So an
interruption at any instant, 0 ms after the speech was created included, reaches the controller: a node
of an interrupted speech gets a closed reply and produces nothing. Three private reads remain, all
through agent/livekit_internals.py (its docstring names them, the version they were checked against and
each fallback), because 1.8.9 has no public equivalent: which speech runs this node
(`current_speech_handle`; `session.current_speech` is still the previous speech while the LLM node
starts), the moment of the interrupt decision (`interrupt_future`, so the cascade and its cancel->silence
stamp happen then rather than when the reply task next wakes) and its reason (`interrupt_source`, for
the trace). Without them (logged once) the public flag and done callback still end every reply correctly.

Session options (docs/agent.md explains each): turn detection "vad", interruption mode "vad" with
`INTERRUPT_MIN_SPEECH_S`, `resume_false_interruption` from config (off by default), preemptive generation
off (a non-streaming STT gives no early transcript to use), `aec_warmup_duration` = `AEC_WARMUP_S` or None.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from livekit import rtc
from livekit.agents import (
    NOT_GIVEN,
    Agent,
    AgentSession,
    APIConnectOptions,
    ModelSettings,
    llm,
    stt,
    vad,
)
from livekit.agents.voice.agent_session import SessionConnectOptions

from agent import livekit_internals
from agent.config import AgentConfig
from agent.cut_notice import CutNotice
from agent.duplex import DuplexController
from agent.early_stt import EarlyTranscriber
from agent.engine_client import TTSBackend
from agent.llm import build_llm, history_for_request, llm_client, stream_with_continuation
from agent.output import FrameRecord, RtcAudioOutput
from agent.reply import Reply
from agent.stt import ObservedSTT, OmniSTT, STTObserver
from agent.tracing import TraceCollector
from agent.tts import QwenTTS, SynthesisHooks

if TYPE_CHECKING:
    from livekit.agents.voice import room_io

logger = logging.getLogger("agent.voice")


# -- LiveKit private state, only through agent/livekit_internals.py (see the module docstring for why) --
def _speech_of_node(agent: Agent) -> str | None:
    """The id of the speech whose task runs the calling node."""
    handle: Any = livekit_internals.current_speech_handle()
    if handle is None:
        try:
            handle = agent.session.current_speech
        except RuntimeError:
            handle = None
    return handle.id if handle is not None else None


_CAUSES = {"audio_activity": "vad", "user_turn": "user_turn", "programmatic": "api"}


def _interrupt_cause(handle: Any) -> str:
    """Why the framework interrupted `handle` (its first interrupt's `source`): vad | user_turn | api."""
    return _CAUSES.get(str(livekit_internals.interrupt_source(handle)), "interrupted")


GIL_SWITCH_INTERVAL_S = 0.0005


def tune_runtime(switch_interval_s: float = GIL_SWITCH_INTERVAL_S) -> None:
    """Process-wide latency settings; call once after the heavy imports/loads (worker prewarm, simulator).

    - GIL switch interval 0.5 ms (CPython's default is 5 ms): the engine's worker thread runs Python
      between kernels, and every loop hop between "packet ready" and "frame captured" could otherwise
      wait up to 5 ms for the GIL.
    - `gc.freeze()`: moves everything allocated so far (torch, models, livekit) out of the collector's
      reach. Measured on the simulator: full (gen 2) collections over that heap paused the event loop
      for 100-370 ms, the only source of >20 ms outliers in tts_first->publish.
    """
    import gc
    import sys

    sys.setswitchinterval(switch_interval_s)
    gc.collect()
    gc.freeze()


def release_free_memory() -> bool:
    """Hand the C heap's free pages back to the OS (glibc `malloc_trim(0)`); False where there is no glibc.

    Called when a call ends: a call's buffers (audio frames, events, transcripts) are freed then, but glibc keeps
    the freed pages, fragmented between live blocks, so a worker's RSS would stay at its busiest call's
    high-water mark for the rest of its life. The soak (`python -m agent.tools.stress --turns`) measures the effect.
    """
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # musl and other libcs have no malloc_trim
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    trim(0)
    return True


def _event_time(ev: stt.SpeechEvent) -> float:
    """perf_counter time at which the STT adapter created `ev` (its `created_at` is wall-clock)."""
    now_perf, now_wall = time.perf_counter(), time.time()
    return now_perf - min(max(0.0, now_wall - ev.created_at), 1.0)


class VoiceAgent(Agent):
    def __init__(self, call: Call) -> None:
        super().__init__(instructions=call.cfg.agent_instructions)
        self.call = call

    async def stt_node(
        self, audio: AsyncIterable[rtc.AudioFrame], model_settings: ModelSettings
    ) -> AsyncIterator[stt.SpeechEvent | str]:
        controller = self.call.controller
        async for ev in Agent.default.stt_node(self, audio, model_settings):
            if isinstance(ev, stt.SpeechEvent):
                if ev.type == stt.SpeechEventType.START_OF_SPEECH:
                    controller.on_user_speech_started(_event_time(ev))
                elif ev.type == stt.SpeechEventType.END_OF_SPEECH:
                    controller.on_user_turn_ended(_event_time(ev))
                elif ev.type == stt.SpeechEventType.FINAL_TRANSCRIPT:
                    controller.on_transcript(ev.alternatives[0].text if ev.alternatives else "")
            yield ev

    async def llm_node(
        self, chat_ctx: llm.ChatContext, tools: list[llm.Tool], model_settings: ModelSettings
    ) -> AsyncIterator[llm.ChatChunk | str]:
        call = self.call
        reply = call.controller.begin_reply(_speech_of_node(self))
        if reply.closed:
            return  # the speech was interrupted before this node started
        turn = reply.turn
        if turn is not None:
            turn.mark("llm_request")
        sent_text = False
        try:
            async for chunk in stream_with_continuation(
                call.llm,
                call.llm_continuation,
                chat_ctx=history_for_request(chat_ctx, call.cfg.llm_max_history_items),
                tools=tools,
                conn_options=call.session.conn_options.llm_conn_options,
                max_tokens=call.cfg.llm_max_tokens,
                on_stream=lambda s: reply.add_llm_stream(s.aclose),
            ):
                if chunk.delta is not None and chunk.delta.content:
                    if turn is not None:
                        turn.mark("llm_first_token")
                    sent_text = True
                yield chunk
                await asyncio.sleep(0)  # let the TTS side run between chunks
        except Exception as exc:
            if reply.interruption is not None:
                return  # closed by the cascade: not an error
            call.report_error(reply, "llm", exc)
            if not sent_text:
                if turn is not None:
                    turn.mark("llm_first_token")
                yield call.cfg.apology_text

    async def tts_node(self, text: AsyncIterable[str], model_settings: ModelSettings) -> AsyncIterator[rtc.AudioFrame]:
        call = self.call
        reply = call.controller.begin_reply(_speech_of_node(self))
        if reply.closed:
            return  # interrupted before this node started: not one frame
        turn = reply.turn

        def on_segment(segment: str) -> None:
            if turn is not None:
                turn.reply_chars += len(segment)
                turn.segments_sent += 1

        hooks = SynthesisHooks(
            on_first_text=(lambda t: turn.mark("tts_first_text", t)) if turn is not None else None,
            on_first_packet=(lambda t: turn.mark("tts_first_packet", t)) if turn is not None else None,
            on_segment=on_segment,
            on_task=reply.add_tts_task,
            on_error=lambda exc: call.report_error(reply, "tts", exc),
        )
        async for frame in call.tts.frames(text, reply_id=reply.reply_id, hooks=hooks):
            yield frame


def room_options(cfg: AgentConfig) -> room_io.RoomOptions:
    """The session's room I/O: our own audio output (RtcAudioOutput publishes the agent's track), the caller's
    audio in `INPUT_FRAME_MS` frames (LiveKit's 50 ms default delays the VAD's end of speech), and no close on
    the caller's disconnect: agent/callers.py decides which caller is heard and when the call is over."""
    from livekit.agents.voice import room_io

    audio_input = room_io.AudioInputOptions(frame_size_ms=cfg.input_frame_ms)
    return room_io.RoomOptions(audio_input=audio_input, audio_output=False, close_on_disconnect=False)


class Call:
    def __init__(
        self,
        cfg: AgentConfig,
        *,
        vad: vad.VAD,
        backend: TTSBackend,
        session_id: str | None = None,
        traces_dir: str | None = None,
        frame_observer: Callable[[FrameRecord], None] | None = None,
        aec_warmup_s: float | None = None,
    ) -> None:
        self.cfg = cfg
        self.session_id = session_id or f"call-{uuid.uuid4().hex[:8]}"
        self.collector = TraceCollector(self.session_id, cfg.traces_dir if traces_dir is None else traces_dir)
        self.controller = DuplexController(self.collector)
        self.output = RtcAudioOutput(
            queue_ms=cfg.audio_queue_ms,
            cut_silence_ms=cfg.audio_cut_silence_ms,
            pause_capable=cfg.resume_false_interruption,
            controller=self.controller,
            frame_observer=frame_observer,
        )
        self.controller.output = self.output
        self.cut_notice: CutNotice | None = None
        self.errors: list[str] = []
        controller = self.controller
        stt_observer = STTObserver(
            on_request=controller.on_stt_request, on_failure=self._stt_failed, on_result=controller.on_stt_result,
            on_language=lambda code: self.tts.follow_caller(code),  # the caller's language -> the replies' TTS
        )
        self.stt: OmniSTT | ObservedSTT
        if cfg.stt_base_url:
            self.stt = OmniSTT(
                base_url=cfg.stt_base_url, model=cfg.stt_model, api_key=cfg.llm_api_key, observer=stt_observer
            )
        else:  # embedded default (agent/local/): no STT server configured
            from agent.local.whisper_stt import WhisperSTT

            self.stt = WhisperSTT(observer=stt_observer)
        self.llm_client = llm_client(cfg)  # one pool for the answer and its continuation, closed with the call
        self.llm = build_llm(cfg, self.llm_client)
        self.llm_continuation = build_llm(cfg, self.llm_client, continuation=True) if cfg.enable_continuation else None
        self.tts = QwenTTS(
            backend,
            speaker=cfg.tts_speaker,
            language=cfg.tts_language,
            frame_ms=cfg.tts_frame_ms,
            text_input=cfg.tts_text_input,
        )
        self.agent = VoiceAgent(self)
        warmup = cfg.aec_warmup_s if aec_warmup_s is None else aec_warmup_s
        retry = dict(max_retry=cfg.api_max_retry, retry_interval=0.3)
        # the session's STT: the utterance goes to STT at the pause that may end the turn (agent/early_stt.py)
        early = cfg.stt_early_ms
        session_stt = self.stt if early is None else EarlyTranscriber(stt=self.stt, vad=vad, early_ms=early)
        self.session: AgentSession = AgentSession(
            stt=session_stt,
            vad=vad,
            llm=self.llm,
            tts=self.tts,
            turn_handling={
                "turn_detection": "vad",
                "endpointing": {"mode": "fixed", "min_delay": cfg.min_endpointing},
                "interruption": {
                    "enabled": True,
                    "mode": "vad",
                    "min_duration": cfg.interrupt_min_speech_s,
                    "resume_false_interruption": cfg.resume_false_interruption,
                    "false_interruption_timeout": cfg.false_interruption_timeout_s,
                },
                "preemptive_generation": {"enabled": False},
            },
            aec_warmup_duration=warmup if warmup and warmup > 0 else None,
            conn_options=SessionConnectOptions(
                stt_conn_options=APIConnectOptions(timeout=cfg.stt_timeout_s, **retry),
                llm_conn_options=APIConnectOptions(timeout=cfg.llm_timeout_s, **retry),
                tts_conn_options=APIConnectOptions(timeout=cfg.llm_timeout_s, max_retry=0),
            ),
        )
        self.session.on("speech_created", self._on_speech_created)
        self.session.on("user_state_changed", self._on_user_state)
        self._apology_pending = self._apology_owed = False

    # -- wiring ------------------------------------------------------------------------------
    def _on_speech_created(self, ev: Any) -> None:
        """Runs before any node of the speech (registered first, so before user handlers that may
        interrupt it): the controller knows the speech, its live interrupted flag and its end."""
        handle = ev.speech_handle
        controller = self.controller
        controller.on_speech_created(
            handle.id, is_interrupted=lambda: bool(handle.interrupted), cause=lambda: _interrupt_cause(handle)
        )
        handle.add_done_callback(lambda h: controller.on_speech_done(h.id, interrupted=bool(h.interrupted)))
        fut = livekit_internals.interrupt_future(handle)
        if fut is not None:
            fut.add_done_callback(lambda _f, key=handle.id: controller.on_speech_interrupted(key))

    def _stt_failed(self, exc: Exception) -> None:
        self.controller.after_stt_turn_opens(lambda: self._stt_failed_in_turn(exc))

    def _stt_failed_in_turn(self, exc: Exception) -> None:
        turn = self.collector.current
        turn_id = turn.turn_id if turn is not None else "-"
        line = f"stt: {type(exc).__name__}: {exc}"
        self.errors.append(f"{turn_id} {line}")
        logger.error("speech recognition failed [turn %s]: %s", turn_id, line)
        if turn is not None:
            turn.errors.append(line)
            turn.outcome = "error"
        self.controller.on_transcript("")
        self._say_apology()

    def report_error(self, reply: Reply, stage: str, exc: Exception) -> None:
        line = f"{stage}: {type(exc).__name__}: {exc}"
        self.errors.append(f"{reply.turn_id} {line}")
        logger.error("%s failed [turn %s]: %s", stage.upper(), reply.turn_id, line)
        if reply.turn is not None:
            reply.turn.errors.append(line)
            reply.turn.outcome = "error"

    @property
    def apology_pending(self) -> bool:
        """An apology was said and its speech is not done yet (a further failure meanwhile says no second one)."""
        return self._apology_pending

    def _say_apology(self) -> None:
        if self._apology_pending:
            return
        self._apology_pending = True
        if self.session.user_state == "speaking":
            # the session's own VAD lags the STT's (under CPU load) and would cut an apology said now, before its
            # first frame, with the failed turn's hangover inferences: say it once that VAD ends the speech too
            self._apology_owed = True
            return
        self._speak_apology()

    def _on_user_state(self, ev: Any) -> None:
        if self._apology_owed and ev.new_state != "speaking":
            self._apology_owed = False
            self._speak_apology()

    def _speak_apology(self) -> None:
        def done(_: Any) -> None:
            self._apology_pending = False

        try:
            handle = self.session.say(self.cfg.apology_text, add_to_chat_ctx=False)
            handle.add_done_callback(done)
        except RuntimeError as exc:  # session not running (closing)
            self._apology_pending = False
            logger.warning("cannot speak apology: %s", exc)

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self, *, room: rtc.Room | None = None, audio_input: Any = None) -> None:
        if audio_input is not None:
            self.session.input.audio = audio_input
        self.session.output.audio = self.output
        await self.output.warmup()
        if room is not None:
            self.cut_notice = CutNotice(room.local_participant)  # the page stops what WebRTC still holds
            self.output.on_cut = self.cut_notice
            track = rtc.LocalAudioTrack.create_audio_track("agent-voice", self.output.source)
            options = rtc.TrackPublishOptions(source=rtc.TrackSource.SOURCE_MICROPHONE)
            await room.local_participant.publish_track(track, options)
            await self.session.start(agent=self.agent, room=room, room_options=room_options(self.cfg))
        else:
            await self.session.start(agent=self.agent, record=False)

    async def aclose(self) -> None:
        self.controller.close()
        try:
            await self.session.aclose()
        finally:
            self.controller.close()  # again: a user turn that ended while the session was closing is written too
            await self.output.aclose()
            if self.cut_notice is not None:
                await self.cut_notice.aclose()
            await self.stt.aclose()
            await self.llm_client.close()
            release_free_memory()  # this call's buffers are garbage now; give their pages back


__all__ = ["Call", "VoiceAgent", "NOT_GIVEN"]
