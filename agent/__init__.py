"""LiveKit Agents worker: Silero VAD, Omni STT, streaming LLM, embedded Qwen3-TTS, duplex cancel, traces.

The agent uses the TTS engine only through `tts_engine.Engine` (or its HTTP server in remote mode).
"""
