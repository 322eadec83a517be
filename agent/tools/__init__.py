"""Tools that drive, fake and measure the voice agent: nothing here runs in the worker.

The worker (`agent/`, with its embedded local services in `agent/local/`) never imports this package;
tests/agent/test_layout.py checks the worker's import graph. What lives here:
- `fake_openai`: a real OpenAI-compatible HTTP server (chat completions + transcriptions) with scripted replies,
  timings and faults; the stand-in for vLLM in tests, the simulator and the stress run
  (`python -m agent.tools.fake_openai --port N`).
- `simulate`: a complete call without a LiveKit server (`python -m agent simulate ...`); `results/` holds
  committed simulator comparisons.
- `stress` (+ `stress_instants`): many calls, barge-ins at random and at precise reply milestones, soak
  (`python -m agent.tools.stress ...`).
- `callbench`: real calls through the local stack and a headless browser, measured where the person is
  (`python -m agent.tools.callbench ...`).
- `trace_review`: P50/P95 per trace segment, the slowest turns and a plot, from `traces/*.jsonl`
  (`python -m agent.tools.trace_review ...`), for operators reading production traces.
"""
