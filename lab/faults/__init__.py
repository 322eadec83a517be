"""Fault drills on the real local stack (docs/operations.md, "Faults"): a worker killed mid-reply
(`worker_kill`), the caller's network cut mid-reply (`media_loss`), and with the caller in Chromium: LiveKit's server
restarted mid-call (`livekit_restart`), a tab closed and the next caller at once (`tab_closed`), the worker frozen
(`worker_freeze`), the token server down at Join (`token_down`), two people in one room (`two_callers`).
`python -m lab.faults --help`. Each drill module has `run` (its tries, `tries.repeat`), `summary` where it gives one,
and `table` (its markdown, `report.markdown`); `__main__` starts the stack, runs one and writes its report."""

# the drills' stack: the load then counts calls and streams only; two calls a worker (the call tests' figure,
# tests/call/conftest.py): a drill's subject is recovery, and a call still winding down must not hold the next back
STACK_ENV = {"LLM_MAX_TOKENS": "40", "AGENT_CPU_LIMIT": "off", "AGENT_MAX_SESSIONS": "2"}
