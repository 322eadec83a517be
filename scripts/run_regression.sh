#!/usr/bin/env bash
# Run the engine's regression gates:  scripts/run_regression.sh --mode fast|full [regression flags...]
#
# Output goes to output/regression/<timestamp>/ (summary.json, per-case WAVs and code dumps) and
# output/regression/latest points at it. The golden baseline is TTS_REGRESSION_BASELINE (env or .env)
# or --baseline PATH. The model is TTS_DEEP_STREAM_MODEL_DIR or --model DIR. Exit status: 0 all gates
# pass, 1 a gate failed, 2 configuration error.
. "$(dirname "$0")/lib/help.sh" && show_help_if_asked "$0" "${1:-}"  # --help: the header above, nothing started
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
if [ -f "$ROOT/scripts/lib/dotenv.sh" ]; then
  # shellcheck source=scripts/lib/dotenv.sh
  . "$ROOT/scripts/lib/dotenv.sh"
  load_env_file "${ENV_FILE:-$ROOT/.env}" || exit 2
fi
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python3; fi
fi
OUT_ROOT=${REGRESSION_OUT_ROOT:-output/regression}
OUT=$OUT_ROOT/$(date +%Y%m%d_%H%M%S)
mkdir -p "$OUT"
"$PYTHON" -m tts_engine regression --out "$OUT" "$@"
rc=$?
ln -sfn "$(basename "$OUT")" "$OUT_ROOT/latest"
echo "[run_regression] exit $rc; results in $OUT (also $OUT_ROOT/latest)"
exit $rc
