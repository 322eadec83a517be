"""The lab: what drives, fakes and measures the voice agent and the engine. Nothing here ships or runs in a server.

- Lives at the top of a source checkout, beside the product packages; it is not in the installed package
  (pyproject's package list), so a worker deployment carries none of it. The product never imports it
  (tests/agent/test_layout.py); `python -m agent simulate|stress` start it as a process of its own.
- Measured results are data in `results/` at the checkout's root (results/README.md indexes them), never here.
- What lives here:
  - `fake_openai`: a real OpenAI-compatible HTTP server (chat completions + transcriptions) with scripted
    replies, timings and faults; the stand-in for vLLM in tests, the simulator and the stress run.
  - `simulate` (+ `sim_microphone`): a complete call without a LiveKit server (`python -m agent simulate`).
  - `stress` (+ `stress_instants`, `stress_report`, `process_probes`): barge-ins at random and at precise reply
    milestones, and the soak (`python -m agent stress`).
  - `callbench`: real browser calls through the local stack, measured where the person is.
  - `convbench`: scripted conversations played into real calls; turn-taking scored; many calls at once.
  - `capacity`: calls one worker holds. `faults`: worker-kill and media-loss drills.
  - `engine/`: the engine's diagnosis tools that are not the `python -m tts_engine bench` command.
"""
