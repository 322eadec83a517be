"""Run one duplex schedule on the real call (tests/agent/duplex_harness.py edges) and check the invariants.

A schedule is a list of user turns. Each turn scripts what the fake vLLM and the engine do for it (STT
fault, LLM fault, time to first token and per-token gaps, reply length, packet gaps and count, an engine
failure) and may cut the reply it causes: at the `nth` occurrence of a milestone of that reply
(speech_created, llm_request, llm_token, tts_segment, tts_packet, frame), `ticks` loop iterations later
(0 = inside the callback that reports the milestone, i.e. inside that await of the reply), by the public
API (`AgentSession.interrupt()`; `SpeechHandle.interrupt()` for a speech not yet queued), by VAD (the
next user utterance starts then) or by closing the session.

`check(...)` returns the invariant violations (empty = pass): the controller and LiveKit's agent state
agree once idle; no reply state outlives its reply; 0 frames of a reply captured after it was cut; 0
leaked tasks; 0 engine streams open once idle; every turn's trace has a truthful outcome.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from agent.output import FrameRecord
from agent.tracing import Outcome
from agent.turn.states import State
from agent.turn.words import OverlapKind
from agent.voice import Call
from lab.fake_openai import FakeOpenAIServer, Script
from tests.agent.duplex_harness import (
    EnergyVAD,
    FastSource,
    ScriptedBackend,
    ScriptedMic,
    StarvationClock,
    TTSPlan,
    fast_config,
    own_tasks,
)

MILESTONES = ("speech_created", "llm_request", "llm_token", "tts_segment", "tts_packet", "frame")
OUTCOMES = {o.value for o in Outcome} - {"open", "worker_lost"}
# A wait fails ("stuck") after SETTLE_S with no progress at all (no milestone, frame, state transition or turn),
# or after MAX_SETTLE_S in any case. A stuck call makes no progress; a starved process makes it slowly (on an
# overloaded host every one of a reply's paced frames waits for a core), which a flat budget misread as stuck.
# Time the whole process spent off the CPU (StarvationClock) does not count against SETTLE_S: nothing in it,
# the call or the harness, could have made progress then.
SETTLE_S = 4.0
MAX_SETTLE_S = 60.0
MIC_SETTLE_S = 0.2  # audio seconds of silence after which the EnergyVAD (60 ms hangover) has ended an utterance


@dataclass
class Cut:
    kind: str  # "api" | "vad" | "close"
    milestone: str
    nth: int = 1
    ticks: int = 0


@dataclass
class TurnPlan:
    speech_s: float = 0.12
    words: int = 4
    llm_ttft_s: float = 0.0
    token_delays_s: list[float] = field(default_factory=lambda: [0.0])
    stt_fault: str | None = None  # "500" | "empty"
    llm_fault: str | None = None  # "500" | "malformed"
    tts: TTSPlan = field(default_factory=TTSPlan)
    cut: Cut | None = None


@dataclass
class Outcome:
    violations: list[str] = field(default_factory=list)
    traces: list[dict[str, Any]] = field(default_factory=list)
    fired: list[tuple[int, str, float]] = field(default_factory=list)  # (turn, kind, perf_counter)
    wall_s: float = 0.0


def utterances_without_a_turn(call: Call) -> int:
    """Utterances that joined no new turn: said over a playing answer and judged a backchannel or a noise (read from
    the controller's utterances: an overlap may be judged after its answer's record was written), or said after a
    pause inside a turn not yet committed (the turn went on)."""
    collector = call.collector
    turns = [*collector._held, *([collector.current] if collector.current is not None else [])]
    open_turns = [t for t in turns if not t.finished]
    judged = sum(1 for u in call.controller.utterances
                 if u.overlap is not None and u.overlap.verdict in (OverlapKind.BACKCHANNEL, OverlapKind.EMPTY))
    pauses = sum(len(t.pauses) for t in open_turns) + sum(len(r["pauses"]) for r in collector.records)
    return judged + pauses


class ScheduleRunner:
    """One fake server and one engine backend for many schedules (one event loop)."""

    def __init__(self, server: FakeOpenAIServer, backend: ScriptedBackend, vad: EnergyVAD,
                 turn_handling: str = "ours") -> None:
        self.server, self.backend, self.vad = server, backend, vad
        self.turn_handling = turn_handling  # agent/voice.py turn_handling(): ours (answers prepared early) or vad
        self.starvation = StarvationClock()

    async def run(self, turns: list[TurnPlan], *, turn_handling: str | None = None, **config: Any) -> Outcome:
        t0 = time.perf_counter()
        out = Outcome()
        if turns and turns[-1].cut is not None and turns[-1].cut.kind == "vad":
            turns = [*turns, TurnPlan()]  # a VAD cut is the next utterance: there must be one
        before = set(asyncio.all_tasks())
        self.server.script = Script(
            transcripts=["" if t.stt_fault == "empty" else f"user turn {i + 1}" for i, t in enumerate(turns)],
            replies=[" ".join(f"w{i}x{k}." if k % 5 == 4 else f"w{i}x{k}" for k in range(t.words))
                     for i, t in enumerate(turns)],
        )
        frames: list[FrameRecord] = []
        cfg = fast_config(self.server.base_url, turn_handling=turn_handling or self.turn_handling, **config)
        call = Call(cfg, vad=self.vad, backend=self.backend,
                    session_id="prop", traces_dir=None, frame_observer=frames.append, aec_warmup_s=0.0)
        call.output.source = FastSource(speed=16.0)
        call.session.options.session_close_transcript_timeout = 0.01  # no user audio is pending at close
        mic = ScriptedMic(speed=8.0)
        handles: list[Any] = []
        state = {"turn": -1, "armed": None, "counts": {}, "next_started": False, "closing": None, "progress": 0}

        def fire(cut: Cut, turn: int) -> None:
            out.fired.append((turn, cut.kind, time.perf_counter()))
            if cut.kind == "api":
                call.session.interrupt()
                if handles and not handles[-1].interrupted and not handles[-1].done():
                    handles[-1].interrupt()  # created but not queued yet: session.interrupt() cannot see it
            elif cut.kind == "vad":
                if mic.speaking:
                    return  # the user is still talking: this would extend that utterance, not barge in
                state["next_started"] = True
                mic.speak(turns[turn + 1].speech_s)
            else:
                state["closing"] = asyncio.ensure_future(call.aclose())

        def milestone(name: str) -> None:
            state["progress"] += 1
            armed = state["armed"]
            if armed is None:
                return
            cut, turn = armed
            counts = state["counts"]
            if (name == "speech_created") == bool(counts.get("speech_created")):
                return  # milestones count from the reply's speech on; a second speech (an apology) does not
            counts[name] = counts.get(name, 0) + 1
            if name != cut.milestone or counts[name] != cut.nth:
                return
            state["armed"] = None

            def later(left: int) -> None:
                if left == 0:
                    fire(cut, turn)
                else:
                    asyncio.get_running_loop().call_soon(later, left - 1)

            later(cut.ticks)

        def on_speech(ev: Any) -> None:
            handles.append(ev.speech_handle)
            milestone("speech_created")

        call.session.on("speech_created", on_speech)
        self.server.observer = milestone
        self.backend.on_event = milestone
        frames_seen = frames.append

        def on_frame(rec: FrameRecord) -> None:
            frames_seen(rec)
            milestone("frame")

        call.output.frame_observer = on_frame

        def idle() -> bool:
            ctl = call.controller
            # the VAD has had the audio time to end the last utterance (EnergyVAD: 60 ms of silence) and did
            return (ctl.reply is None and ctl.state is State.LISTENING and mic.quiet_for(MIC_SETTLE_S)
                    and not ctl.utterances.in_progress and not ctl.awaiting_commit and not call.apology.pending
                    and call.session.agent_state == "listening" and call.session.current_speech is None
                    and call.output.source.queued_duration == 0 and self.backend.active_streams == 0)

        def progress() -> tuple[int, int, int, float]:
            queued = call.output.source.queued_duration  # drains as the paced playout goes on
            return state["progress"], len(call.controller.transitions), call.collector._count, queued

        async def until(cond: Any, what: str) -> bool:
            start = time.perf_counter()
            deadline, seen, lost = start + SETTLE_S, progress(), self.starvation.lost_s()
            while not cond():
                now, current = time.perf_counter(), progress()
                if current != seen and now - start < MAX_SETTLE_S:
                    deadline, seen = now + SETTLE_S, current
                if self.starvation.lost_s() != lost:  # the process was off the CPU: that time is not "no progress"
                    deadline += self.starvation.lost_s() - lost
                    lost = self.starvation.lost_s()
                if now > deadline or state["closing"] is not None:
                    if state["closing"] is None:
                        out.violations.append(f"stuck: {what} (controller {call.controller.state.value}, "
                                              f"reply {call.controller.reply is not None}, livekit "
                                              f"{call.session.agent_state}, engine {self.backend.active_streams}; "
                                              f"waited {now - start:.1f} s, {SETTLE_S:.0f} s without progress; "
                                              f"process off the CPU {self.starvation.lost_s():.1f} s in all)")
                    return False
                await asyncio.sleep(0.002)
            return True

        await call.start(audio_input=mic)
        try:
            for i, plan in enumerate(turns):
                if not state["next_started"] and not await until(idle, f"idle before turn {i + 1}"):
                    break
                state["armed"] = (plan.cut, i) if plan.cut is not None else None
                state["counts"] = {}
                self.server.script.update({
                    "stt_fault": "500" if plan.stt_fault == "500" else None, "llm_fault": plan.llm_fault,
                    "llm_ttft_s": plan.llm_ttft_s, "token_delays_s": plan.token_delays_s, "stt_latency_s": 0.0})
                self.backend.plan = plan.tts
                if not state["next_started"]:
                    mic.speak(plan.speech_s)
                state["next_started"] = False
                # each utterance said so far opened a turn or joined none (utterances_without_a_turn)
                if not await until(lambda n=i + 1: call.collector._count + utterances_without_a_turn(call) >= n,
                                   f"utterance {i + 1} placed"):
                    break
                if plan.cut is not None and plan.cut.kind == "vad" and i + 1 < len(turns):
                    await until(lambda: state["next_started"] or idle(), f"turn {i + 1} reply")
            if state["closing"] is None and await until(idle, "idle at the end"):
                self._check_idle(call, out)
        finally:
            mic.close()
            if state["closing"] is not None:
                await state["closing"]
            else:
                await call.aclose()
            self.server.observer = None
            self.backend.on_event = None
        await asyncio.sleep(0.01)
        leaked = own_tasks(before)
        if leaked:
            await asyncio.sleep(0.2)
            leaked = own_tasks(before)
        out.violations += [f"leaked task {t.get_name()} {t.get_coro()!r}"[:200] for t in leaked]
        if self.backend.active_streams:
            out.violations.append(f"{self.backend.active_streams} engine stream(s) open after close")
        # in turn order: a record is written when its turn closes, and a cut turn can close after the next one was
        # answered (its cancelled speech finishing later: 2 in 80 runs of a VAD cut at llm_request under `ours`)
        out.traces = sorted(call.collector.records, key=lambda t: t["turn_index"])
        if call.controller.illegal_transitions:
            out.violations.append(f"{call.controller.illegal_transitions} illegal state transition(s)")
        self._check_traces(call, out, frames, handles, closed=state["closing"] is not None)
        out.wall_s = time.perf_counter() - t0
        return out

    def _check_idle(self, call: Call, out: Outcome) -> None:
        ctl = call.controller
        if ctl.state is not State.LISTENING or call.session.agent_state != "listening":
            out.violations.append(f"state: controller {ctl.state.value}, livekit {call.session.agent_state}")
        if ctl.reply is not None:
            out.violations.append(f"reply {ctl.reply.reply_id} still active when idle")
        for speech in ctl.speeches:
            reply = speech.reply
            if reply is not None and not reply.done and reply.interruption is None:
                out.violations.append(f"reply {reply.reply_id} ({reply.turn_id}) outlived its speech")
        if self.backend.active_streams:
            out.violations.append(f"{self.backend.active_streams} engine stream(s) in use while idle")

    def _check_traces(self, call: Call, out: Outcome, frames: list[FrameRecord], handles: list[Any],
                      closed: bool) -> None:
        ctl = call.controller
        for reply, irq in ctl.interruptions:
            stale = [f for f in frames if f.reply_id == reply.reply_id and irq.audio_silenced is not None
                     and f.t_start > irq.audio_silenced]
            if stale or irq.stale_frames_after_cancel:
                out.violations.append(f"{len(stale)} frame(s) of {reply.turn_id} captured after its cut")
        for handle in handles:
            reply = ctl.replies.reply_by_key(handle.id) if hasattr(ctl, "replies") else None
            if handle.interrupted and reply is not None:
                late = [f for f in frames if f.reply_id == reply.reply_id and reply.interruption is not None
                        and f.t_start > reply.interruption.interrupt_detected]
                if late:
                    out.violations.append(f"{len(late)} frame(s) of {reply.turn_id} after the speech was interrupted")
                if reply.turn is not None and reply.turn.outcome != "interrupted":
                    out.violations.append(f"{reply.turn.turn_id}: speech interrupted, outcome {reply.turn.outcome}")
        if len(out.traces) != call.collector._count:
            out.violations.append(f"{call.collector._count} turns opened, {len(out.traces)} traced")
        heard = {f.reply_id for f in frames if f.reply_id}
        untraced = heard - {t["reply_id"] for t in out.traces if "first_frame_published" in t["points"]}
        if untraced:
            out.violations.append(f"{len(untraced)} of {len(heard)} replies reached the caller untraced")
        for rec in out.traces:
            tid, outcome, errors, irqs = rec["turn_id"], rec["outcome"], rec["errors"], rec["interruptions"]
            if outcome not in OUTCOMES:
                out.violations.append(f"{tid}: outcome {outcome!r}")
            if (outcome == "interrupted") != bool(irqs):
                out.violations.append(f"{tid}: outcome {outcome} with {len(irqs)} interruption record(s)")
            if outcome == "error" and not errors:
                out.violations.append(f"{tid}: outcome error with an empty error list")
            words_lost_after_a_pause = outcome in ("answered", "unanswered") and rec["user_text_chars"] and all(
                e.startswith("stt:") for e in errors)
            if errors and outcome not in ("error", "interrupted") and not words_lost_after_a_pause:
                out.violations.append(f"{tid}: outcome {outcome} with errors {errors}")
            if outcome == "unanswered" and (not rec["user_text_chars"] or "first_frame_published" in rec["points"]):
                out.violations.append(f"{tid}: unanswered with {rec['user_text_chars']} transcript chars")
            if outcome == "answered" and "first_frame_published" not in rec["points"]:
                out.violations.append(f"{tid}: answered without a published frame")
            if not closed and any(i["source"] == "session_closed" for i in irqs):
                out.violations.append(f"{tid}: cut by session_closed although the call was idle")
            points = rec["points"]
            if "first_frame_published" in points and "turn_committed" not in points and not errors:
                out.violations.append(f"{tid}: heard before its turn was committed")
            if "turn_committed" in points and "first_frame_published" in points and (
                    points["first_frame_published"] < points["turn_committed"]):
                out.violations.append(f"{tid}: first frame {points['first_frame_published']} before the commit "
                                      f"{points['turn_committed']}")
            if "llm_request" in points and "stt_done" in points and points["llm_request"] < points["stt_done"]:
                out.violations.append(f"{tid}: LLM asked at {points['llm_request']} before the transcript "
                                      f"({points['stt_done']})")
