#!/usr/bin/env bash
# Start the standalone TTS server (python -m tts_engine serve) with the golden configuration, restart it
# when it dies, and keep a pid file.  Runs in the foreground (start_all.sh supervises it as a process group).
#
#   scripts/run_tts_server.sh [--pid-file PATH] [--log-file PATH] [serve flags...]
#   e.g. TTS_DEEP_STREAM_MODEL_DIR=/models/Qwen3-TTS-12Hz-0.6B-CustomVoice scripts/run_tts_server.sh --port 9000
#
# Golden configuration (each value applies only when the variable is not already set; env and .env win,
# serve flags win over both): packet 2 frames, first packet 1 frame, deterministic greedy, seed 42,
# CUDA graphs for talker, code predictor and decoder on.
# Restart policy: a crash restarts the server after a back-off (1 s doubling to 30 s, reset once it has
# stayed up 60 s). Exit status 2 from the server (bad configuration, missing checkpoint, port taken) is
# not retried: a restart would fail the same way. SIGTERM/SIGINT stop the server and this loop.
. "$(dirname "$0")/lib/help.sh" && show_help_if_asked "$0" "${1:-}"  # --help: the header above, nothing started
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

PID_FILE=run/tts_server.pid
LOG_FILE=
SERVE_ARGS=()
while [ $# -gt 0 ]; do
  case $1 in
    --pid-file) PID_FILE=$2; shift 2 ;;
    --log-file) LOG_FILE=$2; shift 2 ;;
    *) SERVE_ARGS+=("$1"); shift ;;
  esac
done

if [ -f "$ROOT/scripts/lib/dotenv.sh" ]; then
  # shellcheck source=scripts/lib/dotenv.sh
  . "$ROOT/scripts/lib/dotenv.sh"
  load_env_file "${ENV_FILE:-$ROOT/.env}" || exit 2
fi
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python3; fi
fi

export TTS_DEEP_STREAM_PACKET_TOKENS=${TTS_DEEP_STREAM_PACKET_TOKENS:-2}
export TTS_DEEP_STREAM_FIRST_PACKET_TOKENS=${TTS_DEEP_STREAM_FIRST_PACKET_TOKENS:-1}
export TTS_DEEP_STREAM_DETERMINISTIC=${TTS_DEEP_STREAM_DETERMINISTIC:-1}
export TTS_DEEP_STREAM_DETERMINISTIC_POLICY=${TTS_DEEP_STREAM_DETERMINISTIC_POLICY:-greedy}
export TTS_DEEP_STREAM_SEED=${TTS_DEEP_STREAM_SEED:-42}
export TTS_CODEGEN_CUDAGRAPH_TALKER=${TTS_CODEGEN_CUDAGRAPH_TALKER:-1}
export TTS_CODEGEN_CUDAGRAPH_CP=${TTS_CODEGEN_CUDAGRAPH_CP:-1}
export TTS_DECODER_CUDAGRAPH=${TTS_DECODER_CUDAGRAPH:-1}

mkdir -p "$(dirname "$PID_FILE")"
if [ -f "$PID_FILE" ]; then
  old=$(cut -d' ' -f1 "$PID_FILE" 2>/dev/null)
  if [ -n "$old" ] && kill -0 "$old" 2>/dev/null && [ "$old" != $$ ]; then
    echo "[run_tts_server] already running (pid $old, $PID_FILE)" >&2
    exit 1
  fi
fi
echo "$$" > "$PID_FILE"

child=
stopping=0
stop() {
  stopping=1
  if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then kill -TERM "$child" 2>/dev/null; wait "$child"; fi
  rm -f "$PID_FILE"
  exit 0
}
trap stop TERM INT

backoff=1
while :; do
  started=$(date +%s)
  if [ -n "$LOG_FILE" ]; then
    mkdir -p "$(dirname "$LOG_FILE")"
    "$PYTHON" -m tts_engine serve "${SERVE_ARGS[@]}" >>"$LOG_FILE" 2>&1 &
  else
    "$PYTHON" -m tts_engine serve "${SERVE_ARGS[@]}" &
  fi
  child=$!
  echo "$$ $child" > "$PID_FILE"
  wait "$child"
  rc=$?
  [ "$stopping" = 1 ] && break
  if [ "$rc" = 0 ]; then echo "[run_tts_server] server exited cleanly"; break; fi
  if [ "$rc" = 2 ]; then echo "[run_tts_server] server refused to start (exit 2: configuration); not restarting" >&2; rm -f "$PID_FILE"; exit 2; fi
  if [ $(( $(date +%s) - started )) -ge 60 ]; then backoff=1; fi
  echo "[run_tts_server] server died (exit $rc); restarting in ${backoff}s" >&2
  sleep "$backoff" & wait $!
  backoff=$(( backoff * 2 > 30 ? 30 : backoff * 2 ))
done
rm -f "$PID_FILE"
