#!/usr/bin/env bash
# Run the LiveKit agent worker and restart it when it dies. Runs in the foreground; start_all.sh starts it as the
# `agent` service's process group (stop signals the whole group: the worker drains, this loop exits).
#
#   scripts/run_worker.sh [COMMAND...]        (default: $PYTHON -m agent start)
#
# When the worker exits on its own, or is killed, this loop:
#   1. logs why (its exit status or the signal that killed it, and how long it ran);
#   2. runs `python -m agent recover --pid PID`: the dead worker's open turns are closed in the traces as
#      `worker_lost` and its agents are taken out of their rooms, so the callers see the agent leave now (LiveKit
#      alone notices ~21 s later) and the token server's agent guard dispatches them a new agent;
#   3. restarts the worker: at once the first time, then after a back-off of RESTART_BACKOFF_S (1) doubling to
#      RESTART_BACKOFF_MAX_S (30); a worker that stayed up RESTART_RESET_S (20) starts the sequence again.
#   Step 2 runs beside step 3 (the worker takes seconds to load; the callers should not wait for it).
# Standby (AGENT_STANDBY=1, the default with the default command): once the worker has registered, a second
# process starts (`python -m agent standby`, agent/standby.py) that does the worker's slow imports and then waits;
# step 3 hands it the job (a FIFO write) instead of starting a cold process, and a new standby follows once it has
# registered. It holds no model and no GPU context until then; it costs the memory of an idle Python process with
# those modules imported. STANDBY_CMD (the supervisor appends `--fifo PATH`) replaces it for another COMMAND.
# Not restarted (this loop exits with the worker's status, so start_all reports a failed start): a worker that
# exits 0 (a clean stop), exits 2 (configuration: a restart fails the same way), or dies before it ever
# registered with LiveKit in this run (its output has no AGENT_READY_LINE, default "registered worker"; with
# AGENT_READY_LINE empty: before it ran RESTART_RESET_S).
# Environment: PYTHON, AGENT_READY_LINE, RESTART_BACKOFF_S, RESTART_BACKOFF_MAX_S, RESTART_RESET_S, AGENT_STANDBY,
# STANDBY_CMD, RECOVER_CMD (default: $PYTHON -m agent recover; empty: skip step 2), WORKER_PID_FILE (this loop writes
# the running worker's pid there; start_all: run/agent.worker.pid). The worker's output goes to this script's stdout
# (start_all: logs/agent.log), so a crashed worker's last lines stay in the same log.
. "$(dirname "$0")/lib/help.sh" && show_help_if_asked "$0" "${1:-}"  # --help: the header above, nothing started
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if [ -z "${PYTHON:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python3; fi
fi
STANDBY_CMD=${STANDBY_CMD-}
if (($# == 0)); then
  set -- "$PYTHON" -m agent start
  [ -n "$STANDBY_CMD" ] || STANDBY_CMD="$PYTHON -m agent standby"
fi
STANDBY=${AGENT_STANDBY:-1}
[ -n "$STANDBY_CMD" ] || STANDBY=0
READY_LINE=${AGENT_READY_LINE-registered worker}
BACKOFF0=${RESTART_BACKOFF_S:-1}
BACKOFF_MAX=${RESTART_BACKOFF_MAX_S:-30}
RESET_S=${RESTART_RESET_S:-20}
RECOVER_CMD=${RECOVER_CMD-$PYTHON -m agent recover}
for n in BACKOFF0 BACKOFF_MAX RESET_S; do
  [[ ${!n} =~ ^[1-9][0-9]*$ ]] || { echo "[run_worker] $n=${!n} is not a whole number of seconds >= 1" >&2; exit 2; }
done

say() { printf '[run_worker] %s %s\n' "$(date -Is)" "$*"; }

# the output file this loop writes to (start_all: the service log), to see whether a run registered
OUT=$(readlink "/proc/$$/fd/1" 2>/dev/null || true)
[ -f "$OUT" ] || OUT=
FIFO_DIR=$(mktemp -d "${TMPDIR:-/tmp}/run_worker.XXXXXX")

child=
standby=
standby_fifo=
stopping=0
cleanup() { rm -rf "$FIFO_DIR"; [ -n "${WORKER_PID_FILE:-}" ] && rm -f "$WORKER_PID_FILE"; }
trap cleanup EXIT
stop() {
  stopping=1
  # start_all signals the whole group, so the worker has its SIGTERM already; a lone `kill` of this loop passes it on
  [ -n "$standby" ] && kill -TERM "$standby" 2>/dev/null
  if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then kill -TERM "$child" 2>/dev/null; wait "$child"; fi
  exit 0
}
trap stop TERM INT

describe() {  # exit status -> words
  if (($1 > 128)); then
    local name
    name=$(kill -l "$(($1 - 128))" 2>/dev/null || echo "?")
    echo "killed by signal $(($1 - 128)) (SIG$name)"
  else
    echo "exit status $1"
  fi
}

registered_since() {  # did the output written since byte $1 hold the ready line?
  [ -n "$OUT" ] && [ -n "$READY_LINE" ] || return 1
  # grep reads it all (no -q): with -q it stops at the match, tail dies of SIGPIPE on a long log, and pipefail then
  # reads a registered worker as one that never registered (a worker killed after minutes was not restarted)
  tail -c "+$(($1 + 1))" "$OUT" 2>/dev/null | grep -F -- "$READY_LINE" >/dev/null
}

start_standby() {
  standby_fifo="$FIFO_DIR/standby.$SECONDS.$RANDOM"
  mkfifo "$standby_fifo" || { say "cannot make $standby_fifo; no standby" >&2; return; }
  # shellcheck disable=SC2086
  $STANDBY_CMD --fifo "$standby_fifo" &
  standby=$!
  say "standby worker started (pid $standby): it imports now and takes over when the worker dies"
}

take_standby() {  # hand the job to the standby; returns 1 (and forgets it) when there is none that answers
  local pid=$standby
  standby=
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  # the write blocks until the standby opens the FIFO: at once when its imports are done, later while it imports
  if timeout 60 bash -c 'echo go >"$1"' _ "$standby_fifo"; then
    child=$pid
    return 0
  fi
  say "the standby (pid $pid) did not take the job; starting a new worker" >&2
  kill -KILL "$pid" 2>/dev/null
  return 1
}

backoff=0  # the first restart is immediate
runs=0
while :; do
  runs=$((runs + 1))
  offset=0
  [ -n "$OUT" ] && offset=$(stat -c %s "$OUT" 2>/dev/null || echo 0)
  started=$SECONDS
  if ((runs > 1)) && take_standby; then
    say "the standby (pid $child) took over (start $runs)"
  else
    "$@" &
    child=$!
    ((runs > 1)) && say "worker started again (pid $child, start $runs)"
  fi
  [ -n "${WORKER_PID_FILE:-}" ] && echo "$child" >"$WORKER_PID_FILE"
  # once this worker has registered, a standby starts to import (not before: it would slow this start down)
  while [ "$STANDBY" = 1 ] && [ -z "$standby" ] && kill -0 "$child" 2>/dev/null; do
    if registered_since "$offset"; then start_standby; break; fi
    sleep 0.5 &
    wait $!
  done
  wait "$child"
  rc=$?
  [ "$stopping" = 1 ] && break
  up=$((SECONDS - started))
  why=$(describe "$rc")
  if [ "$rc" = 0 ] || [ "$rc" = 2 ]; then
    [ -n "$standby" ] && kill -TERM "$standby" 2>/dev/null
    if [ "$rc" = 0 ]; then say "worker exited cleanly after ${up}s; not restarting"; exit 0; fi
    say "worker refused to start (exit 2: configuration); not restarting" >&2
    exit 2
  fi
  ready=0
  if [ -n "$READY_LINE" ] && [ -n "$OUT" ]; then
    registered_since "$offset" && ready=1
  elif ((up >= RESET_S)); then
    ready=1
  fi
  if [ "$ready" = 0 ]; then
    [ -n "$standby" ] && kill -TERM "$standby" 2>/dev/null
    say "worker died before it registered with LiveKit ($why, after ${up}s); not restarting: a restart would fail the same way" >&2
    exit $((rc > 128 ? 1 : rc))
  fi
  say "worker (pid $child) died: $why after ${up}s up" >&2
  if [ -n "$RECOVER_CMD" ]; then
    # shellcheck disable=SC2086
    ($RECOVER_CMD --pid "$child" --reason "$why" || say "recovery failed (exit $?); LiveKit drops the dead agents itself later" >&2) &
  fi
  ((up >= RESET_S)) && backoff=0
  say "restarting the worker in ${backoff}s"
  if ((backoff > 0)); then
    sleep "$backoff" &
    wait $!
    [ "$stopping" = 1 ] && break
  fi
  backoff=$((backoff == 0 ? BACKOFF0 : (backoff * 2 > BACKOFF_MAX ? BACKOFF_MAX : backoff * 2)))
done
