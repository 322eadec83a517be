"""The TTS engine's HTTP face: `python -m tts_engine serve` (aiohttp), apart from the engine it serves.

- `app`: `TTSServer` and `start_server`, the routes it mounts and the order of its middleware.
- `routes/`: OpenAI `/v1/audio/speech`, OpenAI/vLLM-Omni discovery, the WebSocket, the audio encoders.
- `errors` (the one JSON error shape), `clients` (API key, per-client shares), `stream` (a stream's HTTP lifecycle,
  idle cut), `summaries`, `metrics`, `openapi`, `config` (host, port, key, limits), `cli` (standard library only,
  so `--help` answers before torch loads).
This package imports the engine; the engine never imports it. Nothing is re-exported here: importing the package
loads nothing heavy.
"""
