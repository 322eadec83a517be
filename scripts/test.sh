#!/usr/bin/env bash
# Set up if needed, then lint and run every test that works on a CPU (gpu tests skip without CUDA).
# Extra arguments go to pytest, e.g. `scripts/test.sh -m parity -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV=${VENV:-$PWD/.venv}
echo "[test] ruff check"
"$VENV/bin/ruff" check .
echo "[test] pytest"
set +e
"$VENV/bin/python" -m pytest -m "not slow" "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "[test] ERROR: pytest collected no tests; that is a failure, not a pass" >&2
  exit 1
fi
exit "$rc"
