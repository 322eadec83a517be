"""The worker's defaults that the token server relies on too, defined once.

- `AGENT_HTTP_PORT`: the worker's health server (GET /, /worker, /health); the agent guard asks its `GET /worker`.
- `AGENT_LOAD_THRESHOLD`: the load LiveKit reads as full; the agent guard reads a worker's load against it.
Both are the defaults of the environment variables of the same names (agent/config.py, token_server/agent_guard.py).
"""

AGENT_HTTP_PORT = 8081
AGENT_LOAD_THRESHOLD = 0.9
