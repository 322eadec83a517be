"""HTTP routes of `python -m tts_engine serve` beyond the native ones in server.py, each in its own module and
registered by `TTSServer.app()`: openai_speech.py (`POST /v1/audio/speech`, OpenAI-compatible) and ws.py
(`GET /tts/ws`, text in / PCM out over a WebSocket); encode.py holds the streaming audio encoders (PyAV)."""
