"""OpenAI-API clients for the STT and LLM servers (vLLM, llama.cpp, the test stand-in), cheap to build per call.

Contract: `openai_client(base_url=, api_key=, timeout=)` returns an `openai.AsyncOpenAI` with no SDK retries
(LiveKit's conn options retry) over an httpx2 pool that the caller owns and closes (`await client.close()`).
Every client of the process shares one TLS context, `tls_context()`, built once.

Why: an httpx client built with default verification loads the whole CA bundle, about 20 ms of CPU on a
2-core host, and does it on the event loop. The openai SDK and LiveKit's plugin each build their own, so
a new call (one STT and one LLM client) held up every other call on the worker, frame pacing included,
for ~40 ms, and much longer on a loaded host; it was a third of the CPU of a whole simulated call in the
duplex property run. The context is read-only once built, so sharing it across calls and job threads is
safe, and it is exactly httpx's default (certifi, or SSL_CERT_FILE/SSL_CERT_DIR when set).
"""

from __future__ import annotations

import functools
import ssl

import httpcore2
import httpx2  # the fork livekit-plugins-openai and openai 3.x are built on
import openai

# one call makes a request or two at a time; the pool only has to keep its connection warm between turns
LIMITS = httpx2.Limits(max_connections=8, max_keepalive_connections=4, keepalive_expiry=120)


@functools.cache
def tls_context() -> ssl.SSLContext:
    return httpcore2.default_ssl_context()


def openai_client(*, base_url: str, api_key: str, timeout: httpx2.Timeout | float) -> openai.AsyncOpenAI:
    http = httpx2.AsyncClient(verify=tls_context(), timeout=timeout, limits=LIMITS, follow_redirects=True)
    return openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout, http_client=http)


__all__ = ["openai_client", "tls_context"]
