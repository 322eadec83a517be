#!/usr/bin/env bash
# Set up if needed, then lint, type-check and run every test that works on a CPU (gpu tests skip without CUDA):
#   scripts/test.sh [pytest arguments...]     e.g. `scripts/test.sh -m parity -x`, `scripts/test.sh tests/agent`
# On a fresh 2-core machine the whole run took 36 min (2026-12-03: setup 4 min, pytest 30 min; docs/operations.md,
# "Setup"); pytest prints its 25 slowest tests; long soak runs are `-m slow`. mypy checks the product packages
# ([tool.mypy] in pyproject.toml): ~1 min of one core without its cache (.mypy_cache, ~150 MB), a few seconds with it.
# Settings: VENV (default .venv). pytest's own options: `.venv/bin/python -m pytest --help`.
. "$(dirname "$0")/lib/help.sh" && show_help_if_asked "$0" "${1:-}"  # --help: the header above, nothing started
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV=${VENV:-$PWD/.venv}
echo "[test] ruff check"
"$VENV/bin/ruff" check .
echo "[test] mypy"
t0=$SECONDS
"$VENV/bin/python" -m mypy
echo "[test] mypy: clean in $((SECONDS - t0)) s"
echo "[test] pytest (the default run: not slow)"
t0=$SECONDS
set +e
"$VENV/bin/python" -m pytest -m "not slow" --durations=25 "$@"  # the slowest 25: where the run's time goes
rc=$?
set -e
echo "[test] pytest: exit $rc in $((SECONDS - t0)) s"
if [ "$rc" -eq 5 ]; then
  echo "[test] ERROR: pytest collected no tests; that is a failure, not a pass" >&2
  exit 1
fi
exit "$rc"
