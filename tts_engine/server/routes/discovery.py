"""`GET /v1/models` and `GET /v1/audio/voices`: what an OpenAI-compatible client asks before it speaks.

Contract:
- `GET /v1/models`: OpenAI's model list, `{"object": "list", "data": [{"id", "object": "model", "created",
  "owned_by"}]}`, with the one loaded checkpoint (its folder name, e.g. "Qwen3-TTS-12Hz-0.6B-CustomVoice"; `created` is
  when the server started). `POST /v1/audio/speech` serves any `model` name with it, as this ecosystem's servers do.
- `GET /v1/audio/voices`: vLLM-Omni's voice list, `{"voices": [speaker, ...], "uploaded_voices": []}` (the
  checkpoint's speakers, sorted; this server takes no uploaded voices). `GET /v1/speakers` stays, with the languages.
- Both answer errors (e.g. 401 without the API key) in OpenAI's shape (server_errors.OPENAI_PATHS).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web

MODELS_PATH = "/v1/models"
VOICES_PATH = "/v1/audio/voices"
OWNER = "tts_engine"
FALLBACK_MODEL_ID = "qwen3-tts"  # an engine built in code from a model object has no checkpoint folder


class Discovery:
    def __init__(self, server: Any) -> None:
        self.server = server  # tts_engine.server.TTSServer: engine, start time

    def register(self, app: web.Application) -> None:
        app.router.add_get(MODELS_PATH, self.models)
        app.router.add_get(VOICES_PATH, self.voices)

    @property
    def model_id(self) -> str:
        return Path(self.server.engine.config.model_dir or "").name or FALLBACK_MODEL_ID

    async def models(self, request: web.Request) -> web.Response:
        card = {"id": self.model_id, "object": "model", "created": self.server.started, "owned_by": OWNER}
        return web.json_response({"object": "list", "data": [card]})

    async def voices(self, request: web.Request) -> web.Response:
        return web.json_response({"voices": sorted(self.server.engine.speakers), "uploaded_voices": []})
