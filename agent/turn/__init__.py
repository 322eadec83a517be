"""Turn-taking: who holds the floor in a call, when the caller has finished, and what speech over the agent means.

One module per idea (docs/agent.md, "Turn-taking", says how they work together):
- `options`: every knob of turn-taking, one typed frozen object (`TurnOptions`), and the session options it gives
  LiveKit for each `TURN_HANDLING` mode.
- `controller`: `DuplexController`, the turn states and their transitions, driven by the session's events.
- `states`: the floor's states and the whole table of legal moves.
- `speeches`: the framework's speeches as the controller sees them (`Speech`), each with its reply.
- `reply_life`: `ReplyLife`, from the speech the framework creates to the last frame heard, or the cut.
- `overlaps`: speech over a playing answer: ducked, then judged a backchannel, a noise or a barge-in.
- `cascade`: the barge-in cut: the audio gate, the engine streams, the LLM streams, in that order.
- `reply`: one answer and what the cascade cancels for it. `cut_notice`: tells the page of a cut.
- `utterances`: one record per VAD speech, paired in order with its STT request and outcome.
- `end_of_turn`: has the caller finished (voice model + words), the wait it chooses.
- `words`: what a transcript says (finished or not; backchannel or request).
- `early_stt`: the words go to STT at the pause. `overlap_words`: speech over the agent transcribed as it goes on.
A candidate not in the live decision, Smart Turn v3.2 on the caller's audio, is scored offline in the lab
(lab/convbench/smart_turn.py, eot_offline.py; results/convbench/eot_offline_2026-12-02 says why it is not wired).
"""
