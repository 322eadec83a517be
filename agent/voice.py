"""One call: the AgentSession and everything wired into it (used by the worker and by the simulator).

- `Call(cfg, vad=, backend=)` builds the trace collector, the audio output (owns the AudioSource), the
  DuplexController over both, the STT (OmniSTT or the embedded whisper), the LLM (+ continuation), QwenTTS over the
  engine, the turn handling of `TURN_HANDLING` (agent/turn/options.py), and `VoiceAgent`, whose node overrides put
  the trace points and the cancel registry in the data path:
  - `stt_node` wraps the default (VAD + EarlyTranscriber): START/END_OF_SPEECH and the final transcript reach the
    controller (and the end-of-turn detector and OverlapWords, which also hear the caller's audio); a transcript
    the controller judges a backchannel or a noise over the agent's answer is dropped here, so the framework never
    answers it;
  - `on_user_turn_completed` marks the turn's commit (the agent's turn decision);
  - `llm_node` marks the answer's LLM points, registers its stream for the cascade, resumes a capped answer
    (agent/llm.py) and turns an LLM failure into a short spoken apology;
  - `tts_node` yields QwenTTS's exact 20 ms frames tagged with the speech id; the producer task is registered.
- Every speech is registered with the controller in the `speech_created` handler, before any of its nodes runs,
  with its public `interrupted` flag, `scheduled` flag, `interrupt()` and done callback; the moment of the
  framework's interrupt decision and its reason come through agent/livekit_internals.py (the only user of private
  LiveKit names).
- Process-wide tuning lives in common/process.py; the apology after a failed turn is `Apology`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from livekit import rtc
from livekit.agents import (
    Agent,
    AgentSession,
    APIConnectOptions,
    ModelSettings,
    SpeechCreatedEvent,
    UserStateChangedEvent,
    llm,
    stt,
    vad,
)
from livekit.agents.voice import room_io
from livekit.agents.voice.agent_session import SessionConnectOptions

from agent import livekit_internals
from agent.config import AgentConfig
from agent.engine_client import TTSBackend
from agent.llm import build_llm, history_for_request, llm_client, stream_with_continuation
from agent.local.whisper_stt import WhisperSTT
from agent.output import FrameRecord, RtcAudioOutput
from agent.stt import ObservedSTT, OmniSTT, STTObserver
from agent.tracing import TraceCollector, TurnTrace
from agent.tts import QwenTTS, SynthesisHooks
from agent.turn.controller import DuplexController
from agent.turn.cut_notice import CutNotice
from agent.turn.early_stt import EarlyTranscriber
from agent.turn.end_of_turn import EndOfTurn
from agent.turn.options import TurnMode, session_turn_handling
from agent.turn.overlap_words import OverlapWords
from agent.turn.reply import Reply
from agent.turn.states import State
from common.process import release_free_memory

if TYPE_CHECKING:
    from livekit.agents.voice import room_io

logger = logging.getLogger("agent.voice")

#: When the session closes, how long LiveKit waits for the last utterance's transcript after the audio is detached
#: (its default: 2 s). A call closes because its caller left, a LiveKit restart outlasted their return, or the worker
#: stops: nobody waits for an answer, and the 2 s kept the call slot taken (measured 2026-12-03: "input stream
#: detached" to "session closed" 2.0 s, the next caller of a one-call worker waiting on it). The cost: words said
#: in the last moment before hanging up may miss the trace.
SESSION_CLOSE_TRANSCRIPT_S = 0.2


def _speech_of_node(agent: Agent) -> str:
    """The id of the speech whose task runs the calling node."""
    handle: Any = livekit_internals.current_speech_handle()
    if handle is None:
        try:
            handle = agent.session.current_speech
        except RuntimeError:
            handle = None
    return handle.id if handle is not None else f"speech-{uuid.uuid4().hex[:8]}"


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
        controller, detector, words = self.call.controller, self.call.end_of_turn, self.call.overlap_words
        heard = audio
        taps = [tap.feed for tap in (detector, words) if tap is not None]
        if taps:

            async def heard_too() -> AsyncIterator[rtc.AudioFrame]:
                async for frame in audio:
                    for feed in taps:
                        feed(frame)
                    yield frame

            heard = heard_too()
        async for ev in Agent.default.stt_node(self, heard, model_settings):
            if isinstance(ev, stt.SpeechEvent):
                if ev.type == stt.SpeechEventType.START_OF_SPEECH:
                    controller.on_user_speech_started(_event_time(ev))
                    if detector is not None:
                        detector.on_speech_started()
                    if words is not None:
                        words.on_speech_started(overlapped=controller.state is State.OVERLAPPED)
                elif ev.type == stt.SpeechEventType.END_OF_SPEECH:
                    if detector is not None:
                        detector.on_speech_ended()
                    if words is not None:
                        words.on_speech_ended()
                    controller.on_user_speech_ended(_event_time(ev))
                elif ev.type == stt.SpeechEventType.FINAL_TRANSCRIPT:
                    text = ev.alternatives[0].text if ev.alternatives else ""
                    if not controller.on_transcript(text):
                        continue  # a backchannel or a noise over the agent: not a turn
            yield ev

    async def on_user_turn_completed(self, turn_ctx: llm.ChatContext, new_message: llm.ChatMessage) -> None:
        self.call.controller.on_turn_committed(text=new_message.text_content or "")

    async def llm_node(
        self, chat_ctx: llm.ChatContext, tools: list[llm.Tool], model_settings: ModelSettings
    ) -> AsyncIterator[llm.ChatChunk | str]:
        call = self.call
        reply = call.controller.replies.begin_reply(_speech_of_node(self))
        if reply.closed:
            return  # the speech was interrupted (or thrown away) before this node started
        reply.mark("llm_request", time.perf_counter())
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
                    reply.mark("llm_first_token", time.perf_counter())
                    sent_text = True
                yield chunk
                await asyncio.sleep(0)  # let the TTS side run between chunks
        except Exception as exc:  # noqa: BLE001 - reported on the reply; the caller hears the apology
            if reply.closed:
                return  # closed by the cascade: not an error
            call.report_error(reply, "llm", exc)
            if not sent_text:
                reply.mark("llm_first_token", time.perf_counter())
                yield call.cfg.apology_text

    async def tts_node(self, text: AsyncIterable[str], model_settings: ModelSettings) -> AsyncIterator[rtc.AudioFrame]:
        call = self.call
        reply = call.controller.replies.begin_reply(_speech_of_node(self))
        if reply.closed:
            return  # interrupted (or thrown away) before this node started: not one frame

        def on_segment(segment: str) -> None:
            reply.chars += len(segment)
            reply.segments += 1

        hooks = SynthesisHooks(
            on_first_text=lambda t: reply.mark("tts_first_text", t),
            on_first_packet=lambda t: reply.mark("tts_first_packet", t),
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
    audio_input = room_io.AudioInputOptions(frame_size_ms=cfg.input_frame_ms)
    return room_io.RoomOptions(audio_input=audio_input, audio_output=False, close_on_disconnect=False)


class Apology:
    """A short spoken apology after a failed turn, said once at a time, and only once the session's own VAD has
    ended the caller's speech too: the STT adapter's VAD (whose end of speech opened the failed turn) and the
    session's run apart and drift under load, and an apology said while the session's VAD still hears the turn
    would be cut by that VAD's next hangover inference before its first frame."""

    def __init__(self, session: AgentSession, text: str) -> None:
        self.session, self.text = session, text
        self.pending = False  # said (or owed) and its speech not done yet: a further failure says no second one
        self._owed = False

    def say(self) -> None:
        if self.pending:
            return
        self.pending = True
        if self.session.user_state == "speaking":
            self._owed = True
            return
        self._speak()

    def on_user_state(self, ev: UserStateChangedEvent) -> None:
        if self._owed and ev.new_state != "speaking":
            self._owed = False
            self._speak()

    def _speak(self) -> None:
        def done(_: Any) -> None:
            self.pending = False

        try:
            self.session.say(self.text, add_to_chat_ctx=False).add_done_callback(done)
        except RuntimeError as exc:  # session not running (closing)
            self.pending = False
            logger.warning("cannot speak apology: %s", exc)


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
        turn = cfg.turn
        self.session_id = session_id or f"call-{uuid.uuid4().hex[:8]}"
        self.collector = TraceCollector(self.session_id, cfg.traces_dir if traces_dir is None else traces_dir)
        self.output = RtcAudioOutput(
            queue_ms=cfg.audio_queue_ms,
            cut_silence_ms=cfg.audio_cut_silence_ms,
            pause_capable=turn.mode is TurnMode.LIVEKIT or turn.resume_false_interruption,
            duck_db=turn.overlap_duck_db,
            frame_observer=frame_observer,
        )
        ours = turn.mode is TurnMode.OURS
        self.controller = DuplexController(
            self.collector,
            output=self.output,
            judge_overlaps=ours,
            drop_early_answer=lambda: livekit_internals.drop_early_answer(self.session),
            on_turn_failed=self._turn_failed,
        )
        self.end_of_turn = (
            EndOfTurn(
                threshold=turn.eot_threshold,
                medium_s=turn.eot_medium_delay_s,
                voice_wait_s=turn.voice_wait_s,
                hangover_s=cfg.vad_silence_ms / 1000.0,
                on_decision=self.controller.on_turn_decision,
                words_current=self.controller.words_current,
            )
            if ours
            else None
        )
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
        retried = functools.partial(APIConnectOptions, max_retry=cfg.api_max_retry, retry_interval=0.3)
        # the session's STT: the utterance goes to STT at the pause that may end the turn (agent/turn/early_stt.py)
        early = cfg.stt_early_ms
        session_stt = self.stt if early is None else EarlyTranscriber(stt=self.stt, vad=vad, early_ms=early)
        self.session: AgentSession = AgentSession(
            stt=session_stt,
            vad=vad,
            llm=self.llm,
            tts=self.tts,
            turn_handling=session_turn_handling(turn, self.end_of_turn),
            aec_warmup_duration=warmup if warmup and warmup > 0 else None,
            session_close_transcript_timeout=SESSION_CLOSE_TRANSCRIPT_S,
            conn_options=SessionConnectOptions(
                stt_conn_options=retried(timeout=cfg.stt_timeout_s),
                llm_conn_options=retried(timeout=cfg.llm_timeout_s),
                tts_conn_options=APIConnectOptions(timeout=cfg.llm_timeout_s, max_retry=0),
            ),
        )
        self.apology = Apology(self.session, cfg.apology_text)
        # ours: speech over the answer is transcribed while it goes on; a barge-in cue cuts at once
        stt_options = APIConnectOptions(timeout=cfg.stt_timeout_s, max_retry=0)
        self.overlap_words = (
            OverlapWords(
                transcribe=lambda buffer: self.stt.attempt(buffer, conn_options=stt_options),
                interrupt=self._interrupt_for_words,
                still_overlapped=lambda: self.controller.state is State.OVERLAPPED,
            )
            if ours and cfg.turn.overlap_early_words
            else None
        )
        self.session.on("speech_created", self._on_speech_created)
        self.session.on("user_state_changed", self.apology.on_user_state)

    # -- events ------------------------------------------------------------------------------
    def _on_speech_created(self, ev: SpeechCreatedEvent) -> None:
        """Runs before any node of the speech (registered first, so before user handlers that may interrupt it):
        the controller knows the speech, its live flags, how to interrupt it, and its end."""
        handle = ev.speech_handle
        controller = self.controller

        def interrupt() -> None:
            if not (handle.interrupted or handle.done()):
                handle.interrupt()

        controller.replies.on_speech_created(
            handle.id,
            is_interrupted=lambda: bool(handle.interrupted),
            source=lambda: livekit_internals.interrupt_source(handle),
            is_scheduled=lambda: bool(handle.scheduled),
            interrupt=interrupt,
            said=ev.source == "say",
        )
        handle.add_done_callback(lambda h: controller.replies.on_speech_done(h.id, interrupted=bool(h.interrupted)))
        fut = livekit_internals.interrupt_future(handle)
        if fut is not None:
            key = handle.id
            fut.add_done_callback(lambda _f: controller.replies.on_speech_interrupted(key))

    def _interrupt_for_words(self) -> None:
        """A barge-in cue in the caller's words over the answer: the framework interrupts it, and the controller
        cuts it as any interruption of an overlapped answer (agent/turn/controller.py)."""
        try:
            done = self.session.interrupt()
        except RuntimeError as exc:  # not running, or a speech that may not be interrupted
            logger.warning("cannot interrupt for the caller's words: %s", exc)
            return
        done.add_done_callback(lambda f: None if f.cancelled() else f.exception())

    def _stt_failed(self, exc: Exception) -> None:
        self.controller.on_stt_failed(f"stt: {type(exc).__name__}: {exc}")

    def _turn_failed(self, turn: TurnTrace) -> None:
        line = turn.errors[-1] if turn.errors else "stt: failed"
        self.errors.append(f"{turn.turn_id} {line}")
        logger.error("speech recognition failed [turn %s]: %s", turn.turn_id, line)
        self.apology.say()

    def report_error(self, reply: Reply, stage: str, exc: Exception) -> None:
        line = f"{stage}: {type(exc).__name__}: {exc}"
        self.errors.append(f"{reply.turn_id} {line}")
        logger.error("%s failed [turn %s]: %s", stage.upper(), reply.turn_id, line)
        self.controller.replies.on_reply_error(reply, line)

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
            if self.end_of_turn is not None:
                await self.end_of_turn.aclose()
            if self.overlap_words is not None:
                await self.overlap_words.aclose()
            await self.stt.aclose()
            await self.llm_client.close()
            release_free_memory()  # this call's buffers are garbage now; give their pages back


__all__ = ["Apology", "Call", "VoiceAgent"]
