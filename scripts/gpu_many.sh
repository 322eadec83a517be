#!/usr/bin/env bash
# Many calls through the real stack on one GPU host (issue 32): `python -m lab.convbench.many` with the
# LiveKit server, the token server, one worker with the GPU engine (0.6B random weights) and the LLM/STT stand-in
# at production-like times, callers over several processes, all on the device machine. Two device calls on one
# warm machine, because what the image lacks does not fit one call's 64 MiB (livekit-local-inference 35 MB,
# av 25 MB as tar.xz, livekit-server 26 MB as xz, livekit 12 MB, the rest 10 MB):
#
#   scripts/gpu_many.sh prep   # call 1: ASSETS/big (the local-inference wheel, av as tar.xz) into SITE; builds
#                              # the 0.6B random-weight checkpoint in CKPT; prints what the image has (curl, python)
#   scripts/gpu_many.sh run    # call 2, at once (the machine stays warm 30 s): ASSETS/rest (every other wheel,
#                              # livekit-server.xz, the calls script and its clips) into SITE and TOOLS_DIR, then
#                              # the many-calls run, all of it within BOUND_S
#
# ASSETS (default .carry_gpu) holds big/ and rest/ (scripts/gpu_many_assets.sh fills it here). Wheels are unzipped
# into SITE (/tmp/site, first on PYTHONPATH), not installed by pip: the livekit namespace is split over several
# wheels and pip --target would replace one part's folder with another's. The run: LEVELS (1,16,32,64) calls per
# level, TURNS (2: two questions, one barge-in) of the calls script, arrivals over WINDOW s (10), PROCS (4) caller
# processes, WORKERS (1) worker processes, spread over GPUS GPUs when set (one a GPU, round robin); ENGINE_SERVERS=1:
# one engine process per GPU that the workers share over HTTP instead of an engine in each worker. BOUND_S (420):
# the whole `run` part ends within that long (set it some 20 s inside the device call's limit): the many run gets
# what is left less RESERVE_S (45), then is interrupted, and the levels it finished are scored from the recorded
# calls (`many --rescore`: many_partial.json / .md) when it could not write many.json itself. It works in WORK
# (/tmp/gpu_many_work); OUT (default out/gpu_many) gets many.json and many.md (or many_partial.json and .md), many.log,
# machine_*.txt and many_out.tar.gz (the recorded calls, the stack's logs, traces and worker stats): at most 8
# files, as the device tool brings back. WARM_ENGINE=1 (prep): load the engine once in a process of its own
# session, to fill torch's compile caches before the worker loads; off by default: on an H200 it took 114 s
# and the run waited 96 s for it (results/convbench/h200_many_2026-11-28/README.md).
# SKIP_INSTALL=1 uses the interpreter's own packages and the local livekit-server (a check on a dev machine).
. "$(dirname "$0")/lib/help.sh" 2>/dev/null && show_help_if_asked "$0" "${1:-}"  # --help: the header, nothing run
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
ROOT=$here
while [ "$ROOT" != / ] && [ ! -f "$ROOT/scripts/start_all.sh" ]; do ROOT=$(dirname "$ROOT"); done
[ -f "$ROOT/scripts/start_all.sh" ] || { echo "gpu_many: no repository (scripts/start_all.sh) above $here" >&2; exit 2; }
cd "$ROOT" || exit 2

part=${1:?usage: scripts/gpu_many.sh prep|run}
ASSETS=${ASSETS:-$ROOT/.carry_gpu}
SITE=${SITE:-/tmp/site}
CKPT=${CKPT:-/tmp/ckpt-0.6b}
OUT=${OUT:-out/gpu_many}
WORK=${WORK:-/tmp/gpu_many_work}  # the run's own folder (many.py's OUT: stack/, timelines/); OUT gets the few files
PY=${PYTHON:-python}
mkdir -p "$OUT" "$SITE" "$WORK"
OUT=$(cd "$OUT" && pwd)
WORK=$(cd "$WORK" && pwd)
say() { printf '[gpu_many] %s %s\n' "$(date -u +%T)" "$*"; }

. "$ROOT/scripts/lib/wheels.sh"  # unpack_wheels DIR SITE PY

machine() {
  {
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    nproc
    "$PY" -V
    for c in curl setsid flock xz; do printf '%s: %s\n' "$c" "$(command -v "$c" || echo MISSING)"; done
    "$PY" -c 'import torch, aiohttp, numpy, onnxruntime; print("torch", torch.__version__, "aiohttp", aiohttp.__version__,
"numpy", numpy.__version__, "onnxruntime", onnxruntime.__version__)' 2>&1
  } >"$OUT/machine_$part.txt" 2>&1
  cat "$OUT/machine_$part.txt"
}

if [ "${SKIP_INSTALL:-0}" != 1 ]; then export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}; fi

case "$part" in
  prep)
    machine
    if [ "${SKIP_INSTALL:-0}" != 1 ]; then
      unpack_wheels "$ASSETS/big" "$SITE" "$PY" || { say "unpacking $ASSETS/big failed"; exit 1; }
      "$PY" -c 'import av, livekit.local_inference; print("av", av.__version__, "local_inference ok")' || exit 1
    fi
    t=$(date +%s)
    [ -f "$CKPT/config.json" ] || "$PY" -m tts_engine make-checkpoint --preset 0.6b --out "$CKPT" || exit 1
    say "checkpoint $CKPT ready ($(($(date +%s) - t)) s)"
    if [ "${WARM_ENGINE:-0}" = 1 ]; then  # the engine's compile pass fills torch's on-disk caches beyond this call
      TTS_DEEP_STREAM_MODEL_DIR=$CKPT setsid nohup "$PY" -c 'import time; t = time.monotonic()
from tts_engine import Engine, EngineConfig
c = EngineConfig.from_env(); e = Engine.load(c.model_dir, c)
print(f"warm-up: engine loaded in {time.monotonic() - t:.1f} s, capacity {e.capacity()}", flush=True); e.close()' \
        >/tmp/gpu_many_warm.log 2>&1 </dev/null &
      echo $! >/tmp/gpu_many_warm.pid
      say "engine warm-up started in its own session (log /tmp/gpu_many_warm.log)"
    fi
    ;;
  run)
    began=$(date +%s)  # BOUND_S counts from here: unpacking and the warm-up's wait are inside it
    machine
    if [ "${SKIP_INSTALL:-0}" != 1 ]; then
      [ -d "$SITE/livekit/local_inference" ] || { say "no $SITE/livekit/local_inference: run prep on this machine first"; exit 3; }
      export TOOLS_DIR=${TOOLS_DIR:-/tmp/tools}
      unpack_wheels "$ASSETS/rest" "$SITE" "$PY" || { say "unpacking $ASSETS/rest failed"; exit 1; }
      mkdir -p "$TOOLS_DIR/livekit-server-1.13.5"
      xz -dc "$ASSETS/rest/livekit-server.xz" >"$TOOLS_DIR/livekit-server-1.13.5/livekit-server" || exit 1
      chmod +x "$TOOLS_DIR/livekit-server-1.13.5/livekit-server"
    fi
    if ! command -v curl >/dev/null; then  # start_all's health probes: a stand-in for `curl -s -o F -m T -w FMT URL`
      mkdir -p /tmp/gpu_many_bin
      cat >/tmp/gpu_many_bin/curl <<'EOF'
#!/usr/bin/env python3
import sys, urllib.request, urllib.error
a, url, t = sys.argv[1:], None, 3.0
url = a[-1]
if "-m" in a: t = float(a[a.index("-m") + 1])
try:
    code = urllib.request.urlopen(url, timeout=t).status
except urllib.error.HTTPError as e:
    code = e.code
except Exception:
    print("000", end=""); sys.exit(7)
print(code, end="")
EOF
      chmod +x /tmp/gpu_many_bin/curl
      export PATH=/tmp/gpu_many_bin:$PATH
    fi
    "$PY" -c 'import livekit.rtc, livekit.agents, livekit.plugins.silero, livekit.plugins.openai, livekit.local_inference, av
import openai.lib.streaming.chat  # what the STT parses streams with (it imports jiter only there)
import agent.worker, token_server.app, lab.convbench.many; print("imports ok: livekit", livekit.rtc.__version__)' \
      2>&1 | tail -3 | tee -a "$OUT/machine_run.txt"
    if [ -f /tmp/gpu_many_warm.pid ]; then  # prep's engine warm-up holds GPU memory until it ends
      t=$(date +%s)
      while kill -0 "$(cat /tmp/gpu_many_warm.pid)" 2>/dev/null && (($(date +%s) - t < ${WARM_WAIT_S:-120})); do
        sleep 1
      done
      say "waited $(($(date +%s) - t)) s for the engine warm-up"
      tail -3 /tmp/gpu_many_warm.log | tee -a "$OUT/machine_run.txt"
    fi
    script=${SCRIPT:-$ASSETS/rest/corpus/calls/questions.json}
    tts=()
    [ "${SKIP_INSTALL:-0}" = 1 ] || tts=(--tts-model "$CKPT")
    # 64 callers share one address: the token server's per-client limit (30/min) would refuse most of them
    export TOKEN_RATE_LIMIT_PER_MIN=100000 AGENT_STANDBY=0
    left=$((${BOUND_S:=420} - ($(date +%s) - began) - ${RESERVE_S:=45}))  # RESERVE_S: stop, scoring, packing
    ((left >= 30)) || { say "only ${left} s of BOUND_S=$BOUND_S left for the calls: not started"; exit 1; }
    say "many: levels ${LEVELS:=1,16,32,64}, turns ${TURNS:=2}, window ${WINDOW:=10} s, ${PROCS:=4} caller processes, ${WORKERS:=1} worker(s) over ${GPUS:=0} GPU(s) (0: unset), engine servers ${ENGINE_SERVERS:-0}, ${left} s"
    timeout -s INT -k 15 "$left" "$PY" -m lab.convbench.many --calls "$LEVELS" --turns "$TURNS" \
      --arrival-window "$WINDOW" --caller-procs "$PROCS" --workers "$WORKERS" --gpus "$GPUS" --stand-in production \
      $([ "${ENGINE_SERVERS:-0}" = 1 ] && echo --engine-servers) \
      "${tts[@]}" --script "$script" \
      --out "$WORK/many" 2>&1 | tee "$OUT/many.log" | grep -E '^\[many\]|Error|Traceback|^\|' | tail -40
    rc=${PIPESTATUS[0]}
    say "many exited $rc"
    # an interrupted run leaves its services up: stop them through their pid files (their own sessions)
    RUN_DIR=$WORK/many/stack/run LOG_DIR=$WORK/many/stack/logs ENV_FILE=/dev/null bash scripts/start_all.sh stop \
      >/dev/null 2>&1 || true
    if [ ! -f "$WORK/many/many.json" ]; then  # cut short: score the levels whose calls were recorded
      "$PY" -m lab.convbench.many --rescore --out "$WORK/many" 2>&1 | tail -30
      for f in json md; do [ -f "$WORK/many/many_rescored.$f" ] && mv "$WORK/many/many_rescored.$f" "$WORK/many/many_partial.$f"; done
    fi
    for f in many.json many.md many_partial.json many_partial.md; do [ -f "$WORK/many/$f" ] && cp "$WORK/many/$f" "$OUT/"; done
    tar -C "$WORK/many" -czf "$OUT/many_out.tar.gz" --exclude='*.pid' --exclude='run' . 2>/dev/null
    ls -la "$OUT"
    exit "$rc"
    ;;
  *)
    echo "unknown part '$part': use prep or run" >&2
    exit 2
    ;;
esac
