"""The conversation benchmark: scripted callers play conversation scripts into real calls and score turn-taking.

A test and measurement tool, not part of the worker: nothing in the worker imports it (docs/convbench.md).
- `script`: the documented JSON format (user turns with labelled pauses, backchannels, barge-ins and noises cued
  on the agent's speech), loaded and validated with errors naming the item and the field.
- `corpus`: `python -m lab.convbench.corpus --out DIR`, our own corpus rendered with espeak-ng and numpy.
- `caller.ScriptedCaller`: a LiveKit Python SDK caller that publishes in real time and records what it hears;
  `conductor.play_script` plays a script through any such line (the SDK caller, or the page in `page_line`).
- `score`: false cut-offs, end-of-turn delay, false interruptions and barge-ins from a recorded timeline.
- `__main__`: `python -m lab.convbench --corpus DIR --out DIR`; `many`: many calls at once (issue 32).
"""
