"""The embedded LLM: llama.cpp's OpenAI-compatible server with SmolLM2-135M, a service of its own.

- `python -m local_llm` (`__main__.py`) serves it; scripts/start_all.sh runs it as the `local_llm` service when
  `LLM_BASE_URL` is empty. The worker talks to it over HTTP exactly as to vLLM, so a worker deployment with a real
  LLM installs nothing of it (xllamacpp is the `local` extra).
- `LOCAL_LLM_MODEL` (the model id it serves) and `LOCAL_LLM_PORT` (its default port) are defined here once; the
  worker's resolution of its embedded defaults (agent/local/defaults.py) reads them.
Importing this package is light: the server's own imports happen in `__main__`.
"""

LOCAL_LLM_MODEL = "smollm2-135m-instruct"
LOCAL_LLM_PORT = 8012  # LOCAL_LLM_PORT in the environment overrides it (the worker and start_all read the same)

__all__ = ["LOCAL_LLM_MODEL", "LOCAL_LLM_PORT"]
