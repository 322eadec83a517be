#!/usr/bin/env bash
# Profile one worker under the many-calls run on the GPU host (issue 41, "Profile first"). On the device machine,
# after `scripts/gpu_many.sh prep`, from the repository root:
#
#   bash PROF_ASSETS/gpu_profile.sh thread 4 280    # one THREAD worker, 4 calls, the whole part within 280 s
#   AGENT_NUM_IDLE_PROCESSES=8 bash PROF_ASSETS/gpu_profile.sh process 8 240
#
# PROF_ASSETS (default: this script's folder) holds this script, sitecustomize.py (the dispatch probe) and py-spy
# (py-spy.xz: the binary of the py_spy-0.4.3 manylinux x86_64 wheel, xz -9e; or the wheel itself). It runs
# `scripts/gpu_many.sh run` (LEVELS=N, WORKERS=1, ENGINE_SERVERS=1, the earlier runs' settings otherwise) with the
# probe on PYTHONPATH and DISPATCH_PROBE set, and beside it a watcher that finds the worker (RUN_DIR/agent.worker.pid)
# and its health port, then with py-spy 0.4.3, all --nonblocking (no pauses of the worker: a THREAD worker has over
# 100 threads at 4 calls):
#   start:  from the worker's registration, START_S (45) s: its main process with --idle at 50 Hz as speedscope
#           (samples in order: the offers and the job starts as a timeline), and on-CPU stacks as raw (of every
#           process of the worker under PROCESS: the job processes and the idle ones started in their place)
#   cpu / idle / gil: once LiveKit's active_jobs reaches TRIGGER (3/4 of N), HOLD_S (20) s each, at once, raw
#           (collapsed) stacks per thread (--subprocesses under PROCESS): on-CPU samples only; every sample (the
#           waits too); only the thread holding the GIL
#   dump:   `py-spy dump` of the worker (and its children under PROCESS) at the trigger and 8 s later, and the
#           process table (threads, CPU) then
# Everything (the many run's files, its many_out.tar.gz, the profiles, the probe's jsonl) is packed into
# $OUT/MODE.tar.gz: one file a part, as the device tool brings back at most 8.
set -uo pipefail
mode=${1:?usage: gpu_profile.sh thread|process N [BOUND_S]}
n=${2:?N calls}
bound=${3:-280}
here=$(cd "$(dirname "$0")" && pwd)
PROF_ASSETS=${PROF_ASSETS:-$here}
DEV_OUT=${OUT:-out/gpu_profile}
mkdir -p "$DEV_OUT"
W=/tmp/prof_$mode  # this part's own folders: a second part on the same machine sees no stale pid file
rm -rf "$W"
P=$W/prof
mkdir -p "$P" "$W/out"
say() { printf '[gpu_profile %s] %s %s\n' "$mode" "$(date -u +%T.%N | cut -c1-12)" "$*" | tee -a "$P/driver.log"; }

if [ ! -x /tmp/pyspy/py-spy ]; then
  mkdir -p /tmp/pyspy
  if [ -f "$PROF_ASSETS/py-spy.xz" ]; then  # the wheel's binary as xz: 2.0 MB instead of 2.9 (the 64 MiB a call)
    xz -dc "$PROF_ASSETS/py-spy.xz" >/tmp/pyspy/py-spy || exit 1
  else
    rm -rf /tmp/pyspy_whl && mkdir -p /tmp/pyspy_whl
    python3 -m zipfile -e "$(ls "$PROF_ASSETS"/py_spy-*.whl | head -1)" /tmp/pyspy_whl || exit 1
    cp /tmp/pyspy_whl/py_spy-*.data/scripts/py-spy /tmp/pyspy/py-spy
  fi
  chmod +x /tmp/pyspy/py-spy
fi
SPY=/tmp/pyspy/py-spy
$SPY --version | tee -a "$P/driver.log"

export DISPATCH_PROBE=$P/dispatch.jsonl
export PYTHONPATH=$PROF_ASSETS${PYTHONPATH:+:$PYTHONPATH}  # gpu_many puts SITE first; sitecustomize is found here
if [ "$mode" = process ]; then export AGENT_JOB_EXECUTOR=process; else export AGENT_JOB_EXECUTOR=thread; fi
export CKPT=${CKPT:-/tmp/ckpt-0.6b} LEVELS=$n TURNS=${TURNS:-2} WINDOW=${WINDOW:-10} PROCS=${PROCS:-6} WORKERS=1 \
  GPUS=${GPUS:-1} ENGINE_SERVERS=1 BOUND_S=$bound RESERVE_S=${RESERVE_S:-40} WORK=$W/work OUT=$W/out
say "many: AGENT_JOB_EXECUTOR=$AGENT_JOB_EXECUTOR AGENT_NUM_IDLE_PROCESSES=${AGENT_NUM_IDLE_PROCESSES:-unset}" \
  "LEVELS=$LEVELS TURNS=$TURNS WINDOW=$WINDOW PROCS=$PROCS WORKERS=1 GPUS=$GPUS ENGINE_SERVERS=1" \
  "BOUND_S=$BOUND_S RESERVE_S=$RESERVE_S"
bash scripts/gpu_many.sh run >"$P/gpu_many_run.log" 2>&1 &
many=$!

sub=()
[ "$mode" = process ] && sub=(--subprocesses)
pidfile=$W/work/many/stack/run/agent.worker.pid
agentlog=$W/work/many/stack/logs/agent.log
trigger=${TRIGGER:-$(((n * 3 + 3) / 4))}
wpid="" port=""
snap() {  # snap TAG: py-spy dump and the process table
  $SPY dump --pid "$wpid" --nonblocking "${sub[@]}" >"$P/dump_$1.txt" 2>&1
  ps -eo pid,ppid,nlwp,pcpu,rss,etimes,args --sort=-pcpu >"$P/ps_$1.txt" 2>&1
}
jobs_now() {  # LiveKit's active_jobs (a float in its JSON: "4.0"), -1 when the worker does not answer
  curl -s -m 2 "http://127.0.0.1:$port/worker" 2>/dev/null |
    python3 -c 'import json,sys; print(int(float(json.load(sys.stdin).get("active_jobs", 0))))' 2>/dev/null || echo -1
}
(
  while kill -0 "$many" 2>/dev/null; do  # the worker: its pid file and its registration
    if [ -s "$pidfile" ] && grep -q "registered worker" "$agentlog" 2>/dev/null; then
      wpid=$(awk '{print $1}' "$pidfile")
      port=$(tr '\0' '\n' <"/proc/$wpid/environ" 2>/dev/null | sed -n 's/^AGENT_HTTP_PORT=//p')
      [ -n "$port" ] && break
    fi
    sleep 0.2
  done
  [ -n "$wpid" ] || { say "no worker found"; exit 0; }
  say "worker pid $wpid, health port $port, registered; start profile ${START_S:=45} s"
  # the main process, every sample in order (speedscope keeps the order: a timeline); all processes, on-CPU
  $SPY record --pid "$wpid" --nonblocking --idle --threads --rate 50 --duration "$START_S" --format speedscope \
    -o "$P/start.speedscope.json" >"$P/pyspy_start.log" 2>&1 &
  $SPY record --pid "$wpid" --nonblocking --threads "${sub[@]}" --duration "$START_S" --format raw \
    -o "$P/start_cpu.txt" >"$P/pyspy_start_cpu.log" 2>&1 &
  ps -eo pid,ppid,nlwp,pcpu,rss,etimes,args --sort=-pcpu >"$P/ps_registered.txt" 2>&1
  last=-2
  while kill -0 "$many" 2>/dev/null; do
    j=$(jobs_now)
    [ "$j" != "$last" ] && say "active_jobs $j" && last=$j
    [ "$j" -ge "$trigger" ] 2>/dev/null && break
    sleep 0.25
  done
  kill -0 "$many" 2>/dev/null || exit 0
  say "trigger ($j >= $trigger): cpu, idle, gil for ${HOLD_S:=20} s"
  for kind in cpu idle gil; do
    flags=()
    [ "$kind" = idle ] && flags=(--idle)
    [ "$kind" = gil ] && flags=(--gil)
    $SPY record --pid "$wpid" --nonblocking --threads "${sub[@]}" "${flags[@]}" --duration "$HOLD_S" --format raw \
      -o "$P/$kind.txt" >"$P/pyspy_$kind.log" 2>&1 &
  done
  snap t0
  sleep 8
  snap t8
  say "active_jobs $(jobs_now) at t8"
  wait
  say "profiles written; active_jobs $(jobs_now)"
  while kill -0 "$many" 2>/dev/null; do
    j=$(jobs_now)
    [ "$j" != "$last" ] && say "active_jobs $j" && last=$j
    sleep 1
  done
) &
watcher=$!
wait "$many"
rc=$?
say "many part exited $rc"
kill "$watcher" 2>/dev/null
wait "$watcher" 2>/dev/null
cp "$agentlog" "$P/agent.log" 2>/dev/null
tar -C "$W" -czf "$DEV_OUT/$mode.tar.gz" prof out
ls -la "$DEV_OUT" "$P"
exit "$rc"
