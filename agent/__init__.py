"""LiveKit Agents worker: Silero VAD, Omni STT, streaming LLM, embedded Qwen3-TTS, duplex cancel, traces.

Everything in this package except `tools/` ships in the worker. `local/` holds the embedded defaults that run
when a production service is not configured (faster-whisper STT, llama.cpp LLM server, a random-weight TTS
checkpoint). `tools/` drives, fakes and measures the worker (simulator, stress run, call benchmark, trace
review, the stand-in vLLM server); no worker module imports it. The agent uses the TTS engine only through
`tts_engine.Engine` (or its HTTP server in remote mode).
"""
