"""Embedded defaults: what the worker uses on a machine where nothing is configured.

Production is vLLM (Qwen3-Omni) for STT and LLM, real Qwen3-TTS weights and a LiveKit deployment. When
one of those is not configured (its variable is empty), a small local stand-in takes its place behind the
same interface, so `scripts/demo.sh` gives a working call on a fresh machine:

| part    | configured by               | embedded default                                                  |
|---------|-----------------------------|-------------------------------------------------------------------|
| LiveKit | `LIVEKIT_URL`               | LiveKit's own server, built by setup, run by start_all (livekit)  |
| LLM     | `LLM_BASE_URL`              | llama.cpp's OpenAI server with SmolLM2-135M (`local_llm/`, a service) |
| STT     | `STT_BASE_URL` (else LLM's) | faster-whisper tiny.en in the worker process (`whisper_stt.py`)   |
| TTS     | `TTS_DEEP_STREAM_MODEL_DIR` | a random-weight checkpoint generated once (`defaults.py`; babbles) |

`defaults.py` holds the resolution rules; everything here ships in the worker (none of it is a test harness).
"""
