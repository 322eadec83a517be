"""Real calls, driven and measured: the local stack, a browser caller and `python -m lab.callbench`.

A test and measurement tool, not part of the worker: nothing in the worker imports it.
- `stack.LocalStack`: the whole stack through scripts/start_all.sh (local LiveKit server, llama.cpp LLM,
  token server + page, agent worker) on free loopback ports with its own run/log/trace folders.
- `speech.speech_wav`: espeak-ng speech padded with silence, the browser's fake microphone.
- `browser.BrowserCall`: Debian Chromium through Playwright on the real page, microphone from a WAV.
- `rtc_caller.RtcCaller`: a lighter caller, the LiveKit Python SDK publishing a WAV as a microphone.
- `__main__`: N browser turns and barge-ins -> JSON + markdown (voice-to-voice at the browser, the
  server-side breakdown from the traces, and the remainder that is transport + framework).
"""
