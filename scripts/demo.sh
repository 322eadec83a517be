#!/usr/bin/env bash
# "Start the stack" from a fresh checkout: set up (idempotent), load .env, check that everything the
# stack needs is there (weights, LiveKit, vLLM) and fail fast naming what is missing, then start the
# services with scripts/start_all.sh and print where the call page is.
#
# With LLM_LOCAL=1 (and/or TTS_STANDALONE=1) the local vLLM (and the TTS server) are started first,
# because preflight checks that they answer; they are left running when preflight fails, since a model
# load takes minutes (`scripts/start_all.sh stop` stops them).
# SKIP_SETUP=1 skips scripts/setup.sh (e.g. on a machine that is already set up and offline).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

say() { printf '[demo] %s\n' "$*"; }
die() { printf '[demo] ERROR: %s\n' "$*" >&2; exit 1; }

if [ "${SKIP_SETUP:-0}" != 1 ]; then
  say "setup (scripts/setup.sh)"
  bash scripts/setup.sh || die "setup failed (see above)"
fi
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || die "$PY not found; run scripts/setup.sh"

# .env is also read by start_all.sh and the Python entry points; variables already set win everywhere
ENV_FILE=${ENV_FILE:-$ROOT/.env}
if [ -f "$ENV_FILE" ]; then
  say "loading $ENV_FILE"
  # shellcheck source=scripts/lib/dotenv.sh
  . scripts/lib/dotenv.sh
  load_env_file "$ENV_FILE" || die "$ENV_FILE is malformed (see above)"
else
  say "no .env found: using the environment and defaults (docs/operations.md lists the variables)"
fi

# services that preflight expects to answer must be up before it runs
early=()
[ "${LLM_LOCAL:-0}" = 1 ] && early+=(llm)
[ "${TTS_STANDALONE:-0}" = 1 ] && early+=(tts)
if ((${#early[@]})); then
  say "starting ${early[*]} first (preflight checks that they answer)"
  bash scripts/start_all.sh start "${early[@]}" || die "could not start ${early[*]} (see above)"
fi

say "preflight ($PY -m agent preflight)"
if ! "$PY" -m agent preflight; then
  printf '[demo] ERROR: preflight found something missing (the MISSING lines above name it).\n' >&2
  printf '[demo] Fix it in .env (see docs/operations.md), then run scripts/demo.sh again.\n' >&2
  ((${#early[@]})) && printf '[demo] Left running: %s (scripts/start_all.sh stop)\n' "${early[*]}" >&2
  exit 1
fi

bash scripts/start_all.sh start || die "start failed (see above); logs are in logs/"
bash scripts/start_all.sh status || true
say "open http://127.0.0.1:${TOKEN_SERVER_PORT:-3000}/ in a browser and press Join"
say "stop everything with: scripts/start_all.sh stop"
