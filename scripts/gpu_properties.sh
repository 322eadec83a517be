#!/usr/bin/env bash
# The duplex property run (tests/agent/test_duplex_properties.py, issues 17 and 28) in many lanes on the device
# machine's CPU cores: the 100,000 schedules take hours on a 2-core box and minutes on 16 cores. The GPU is not
# used. Two device calls on one warm machine, like scripts/gpu_many.sh (whose assets it shares):
#
#   scripts/gpu_properties.sh prep   # call 1 (carry ASSETS/big): livekit-local-inference and av into SITE
#   scripts/gpu_properties.sh run    # call 2 (carry ASSETS/rest, ASSETS/test): the other wheels and pytest's, then
#                                    # LANES lanes, each `pytest test_duplex_properties.py --hypothesis-seed=N`
#
# ASSETS (default .carry_gpu; scripts/gpu_many_assets.sh fills it here, test/ included). Lane k runs seed SEED0+k
# (SEED0 301) with DUPLEX_SCHEDULES=SCHEDULES (3000) under nice, its progress file ("<count> <violations>
# <elapsed_s> <rss_mb>" every 100 schedules) and its pytest log in OUT (default out/gpu_properties). LANES
# defaults to the cores less one. BOUND_S (540): the lanes are interrupted after that long (a lane's progress file
# keeps what it ran). The last lines: per lane, its count and violations, and the total. SKIP_INSTALL=1 uses the
# interpreter's own packages (a check on a dev machine).
. "$(dirname "$0")/lib/help.sh" 2>/dev/null && show_help_if_asked "$0" "${1:-}"  # --help: the header, nothing run
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$here")
cd "$ROOT" || exit 2
part=${1:?usage: scripts/gpu_properties.sh prep|run}
ASSETS=${ASSETS:-$ROOT/.carry_gpu}
SITE=${SITE:-/tmp/site}
OUT=${OUT:-out/gpu_properties}
PY=${PYTHON:-python}
mkdir -p "$OUT" "$SITE"
OUT=$(cd "$OUT" && pwd)
say() { printf '[gpu_properties] %s %s\n' "$(date -u +%T)" "$*"; }
. "$here/lib/wheels.sh"  # unpack_wheels DIR SITE PY
if [ "${SKIP_INSTALL:-0}" != 1 ]; then export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}; fi

case "$part" in
  prep)
    [ "${SKIP_INSTALL:-0}" = 1 ] || unpack_wheels "$ASSETS/big" "$SITE" "$PY" || { say "unpacking $ASSETS/big failed"; exit 1; }
    "$PY" -c 'import av, livekit.local_inference; print("av", av.__version__, "local_inference ok")' || exit 1
    ;;
  run)
    began=$(date +%s)
    if [ "${SKIP_INSTALL:-0}" != 1 ]; then
      [ -d "$SITE/livekit/local_inference" ] || { say "no $SITE/livekit/local_inference: run prep on this machine first"; exit 3; }
      unpack_wheels "$ASSETS/rest" "$SITE" "$PY" && unpack_wheels "$ASSETS/test" "$SITE" "$PY" || { say "unpacking failed"; exit 1; }
    fi
    "$PY" -c 'import livekit.agents, hypothesis, pytest, agent.voice; print("imports ok: hypothesis", hypothesis.__version__)' \
      || exit 1
    lanes=${LANES:-$(($(nproc) - 1))}
    seed0=${SEED0:-301}
    bound=${BOUND_S:-540}
    left=$((bound - ($(date +%s) - began)))
    say "$lanes lanes, seeds $seed0..$((seed0 + lanes - 1)), ${SCHEDULES:=3000} schedules each, ${left} s, $(nproc) cores, $("$PY" -V)"
    pids=()
    for ((k = 0; k < lanes; k++)); do
      seed=$((seed0 + k))
      rm -f "$OUT/seed$seed.progress"
      DUPLEX_SCHEDULES=$SCHEDULES DUPLEX_PROGRESS=$OUT/seed$seed.progress timeout -s INT -k 20 "$left" \
        nice -n 10 "$PY" -m pytest -q -p no:cacheprovider tests/agent/test_duplex_properties.py \
        -k "keep_the_invariants or memory_flat" --timeout 0 --hypothesis-seed="$seed" >"$OUT/seed$seed.log" 2>&1 &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
    total=0 bad=0
    for ((k = 0; k < lanes; k++)); do
      seed=$((seed0 + k))
      last=$(tail -1 "$OUT/seed$seed.progress" 2>/dev/null || echo "0 0 0 0")
      read -r n v _ _ <<<"$last"
      total=$((total + n)) bad=$((bad + v))
      printf 'seed %d: %s schedules, %s violations; %s\n' "$seed" "$n" "$v" "$(tail -1 "$OUT/seed$seed.log" 2>/dev/null)"
    done
    say "total $total schedules, $bad violations, $(($(date +%s) - began)) s"
    ;;
  *) echo "usage: scripts/gpu_properties.sh prep|run" >&2; exit 2 ;;
esac
